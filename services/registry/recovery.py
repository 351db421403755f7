"""Start-up of the registry: the table rebuilt from disk, and what it no longer knows swept.

Why before serving: sessions that were online when the registry stopped are offline now,
and their directory records must say so before a new registration can write its own
(which this recovery would otherwise overwrite). Orphans — subscriptions and queues of
sessions the table does not hold — go too, or nobody would ever delete them.
"""

from __future__ import annotations

import asyncio

from services.common.session_key import SessionKey
from services.registry.backends import BackendError
from services.registry.records import subs_ops
from services.registry.registrar import Registrar
from services.registry.sessions import DeleteQueue, PublishSession, Session

RECOVERY_BATCH = 500  # directory records per gossip Put at start-up
SWEEP_PATIENCE = 60.0  # s a cluster member waits for a majority before its orphan sweep
SWEEP_POLL = 0.5  # s between two looks at the view meanwhile


async def recover(registrar: Registrar, sessions: list[Session], reserved: int) -> list[SessionKey]:
    """Rebuild the table from disk; sessions that were online are now offline.

    Their directory records are corrected before the registry serves, so a later
    registration's record cannot be overwritten by this one. Returns the orphan
    subscriptions a cluster member must check with the cluster before it drops them
    (:func:`sweep_orphan_subs`, once its cluster side runs).
    """
    registrar.reserved = reserved
    registrar.table.raise_epoch(reserved)
    recovered = registrar.table.load(sessions, registrar.clock())
    deferred = await _drop_orphan_subs(registrar)
    await _drop_orphan_queues(registrar)
    if not recovered:
        return deferred
    await registrar.committer.sync(*(s.key for s in recovered))
    persistent = [s for s in recovered if s.persistent]
    for start in range(0, len(persistent), RECOVERY_BATCH):
        ops = []
        for s in persistent[start : start + RECOVERY_BATCH]:
            ops.extend(registrar.directory_ops(PublishSession(s.key, s, drop_subs=False)))
        try:
            await registrar.backends.put_meta(ops)
        except BackendError:
            break  # logged; gossip is not up, each record is rewritten at its next change
    return deferred


async def _drop_orphan_subs(registrar: Registrar) -> list[SessionKey]:
    """Delete the subscriptions of this node's sessions that the table does not hold.

    Clean sessions are not on disk, so after a restart the table cannot end them; their
    connections are gone (or about to be dropped by their listeners), and a client id
    that registers again must start without them. Only keys this registry leads and
    whose record names this node are touched: other nodes' sessions are theirs.

    A member of a cluster returns them instead. There a record that names this node may
    be one its gossip has not yet seen overwritten: the session was handed over just
    before the restart, and its new owner's listener re-owns the subscriptions from this
    record. A delete written now would be the newest write, win everywhere, and leave
    the session subscribed to nothing; only the id's register can tell.
    """
    try:
        owners = await registrar.backends.subs_owners()
    except BackendError:
        return []  # logged; gossip is not up, the next restart tries again
    orphans = []
    for raw, node in owners.items():
        mountpoint, _, client_id = raw.decode().partition("\0")
        key = (mountpoint, client_id)
        if (
            node == registrar.settings.node
            and registrar.table.get(key) is None
            and registrar.leads(key)
        ):
            orphans.append(key)
    if len(registrar.cluster().members) > 1:
        return orphans
    for start in range(0, len(orphans), RECOVERY_BATCH):
        try:
            await registrar.backends.put_meta(subs_ops(orphans[start : start + RECOVERY_BATCH]))
        except BackendError:
            break  # logged
    return []


async def sweep_orphan_subs(
    registrar: Registrar, keys: list[SessionKey], patience: float = SWEEP_PATIENCE
) -> int:
    """The deferred half of :func:`_drop_orphan_subs`, for a cluster member: each key's
    subscriptions go once the register says they are this node's to drop
    (``claims.subscriptions_ours``); how many went. Waits (bounded) for a majority, as
    the check needs one: a key whose register cannot be read yet (the node has just
    started, its peers' addresses may not be known) is tried again, for ``patience``
    seconds; what still cannot be checked stays, for the next restart."""
    if registrar.claims is None or not keys:
        return 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    dropped = 0
    pending = list(keys)
    while pending:
        if registrar.cluster().serving:
            unknown = []
            for key in pending:
                async with registrar.locks.hold(key):
                    if registrar.table.get(key) is not None:
                        continue  # registered again meanwhile: its subscriptions are its own
                    ours = await registrar.subscriptions_ours(key, None, "restart_orphan")
                    if ours is None:
                        unknown.append(key)
                        continue
                    if not ours:
                        continue
                    try:
                        await registrar.directory.write(subs_ops([key]))
                    except BackendError:
                        return dropped  # logged; the next restart tries again
                    dropped += 1
            pending = unknown
        if not pending or loop.time() >= deadline:
            return dropped
        await asyncio.sleep(SWEEP_POLL)
    return dropped


async def _drop_orphan_queues(registrar: Registrar) -> None:
    """Delete the msgstore queues of sessions the table does not hold.

    A persistent registration opens its queue before its record is committed: a
    registry killed in between leaves a queue for an id it will not know, which nobody
    reads and, if the id only ever comes back clean, nobody deletes. Its client never
    got a CONNACK for it and never subscribed with it, so nothing acknowledged to it is
    lost. Deleted at its own epoch, if that is at or below the reserved one, which is
    above every epoch issued before the restart (a queue with a newer one, from a wiped
    registry, is refused and kept). Not at the reserved epoch itself: the copy's
    tombstone keeps the delete's epoch, and a primary elsewhere at a lower epoch that
    owns the session now (a failover while this node was down) would find this copy
    following a newer primary and step down, its queue no longer replicated. In a
    cluster too, this node's msgstore holds only the queues of sessions this node owned:
    one left behind by a handover that had not finished (its RELEASE never came) is
    swept with the rest; the entries the new owner copied live on there. A replica of a
    replicated queue whose primary is another node is that node's, and stays.
    """
    orphans: list[tuple[SessionKey, int]] = []
    try:
        async for page in registrar.backends.queue_pages():
            for queue in page:
                key = (queue.key.mountpoint, queue.key.client_id)
                if queue.replicas and queue.replicas[0] != registrar.settings.node:
                    continue  # a replica of another node's queue (DESIGN §4)
                if registrar.table.get(key) is None and registrar.leads(key):
                    orphans.append((key, min(queue.epoch, registrar.reserved)))
    except BackendError:
        return  # logged; the msgstore is not up, the next restart tries again
    for key, epoch in orphans:
        try:
            await registrar.backends.delete_queue(DeleteQueue(key, epoch, "orphan"))
        except BackendError as exc:
            if exc.code != "REFUSED":
                return  # logged, as above
