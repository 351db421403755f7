"""The event catalogue: every structured log event ternmq emits, with its fields.

This module is a contract with ``spark_pipeline/``: the ETL declares an explicit Spark
schema per event from it and a test checks both agree, and another test fails when a
service logs an event or a field that is not listed here. Adding a field is a minor
schema change (bump ``SCHEMA_VERSION``'s minor part); renaming or removing one is major.

Every line also carries the envelope fields in ``ENVELOPE``. Field types are the JSON
types the writer emits: ``str``, ``int`` (64-bit), ``float``, ``bool``, or ``list[str]``.
Timestamps are UTC ISO-8601 strings with microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

SCHEMA_VERSION: Final = "1.0"

FieldTypes = dict[str, str]

ENVELOPE: Final[FieldTypes] = {
    "ts": "str",
    "level": "str",
    "node": "str",
    "service": "str",
    "event": "str",
    "schema": "str",
}


@dataclass(frozen=True, slots=True)
class EventSpec:
    """One event: its name, its fields and what it means."""

    name: str
    fields: FieldTypes
    doc: str


def _e(name: str, doc: str, **fields: str) -> EventSpec:
    return EventSpec(name, dict(fields), doc)


_SPECS: Final = [
    # -- service lifecycle -------------------------------------------------------
    _e("service.started", "A service process is up and serving.", address="str", pid="int"),
    _e("service.stopping", "A service began a graceful shutdown.", reason="str"),
    _e(
        "service.crashed",
        "The supervisor saw a child exit unexpectedly.",
        child="str",
        exit_code="int",
        restarts="int",
    ),
    _e("service.restarted", "The supervisor restarted a child.", child="str", pid="int"),
    _e(
        "listener.changed",
        "An MQTT listener was started, stopped or failed to start while the node ran "
        "(ternmq-admin listener): address is type://host:port; sessions, how many "
        "connections a stop with kill_sessions ended.",
        address="str",
        state="str",
        reason="str",
        sessions="int",
    ),
    _e("config.loaded", "Configuration was read.", path="str", keys="int"),
    _e("auth.reloaded", "The password or ACL file changed and was read again."),
    # -- connections and sessions ------------------------------------------------
    _e(
        "client.connected",
        "CONNACK with success sent.",
        client_id="str",
        mountpoint="str",
        peer="str",
        proto_ver="int",
        clean_start="bool",
        session_present="bool",
        keepalive="int",
        session_expiry="int",
        username="str",
        listener="str",
    ),
    _e(
        "client.disconnected",
        "A client connection ended.",
        client_id="str",
        mountpoint="str",
        peer="str",
        reason="str",
        reason_code="int",
        duration_s="float",
    ),
    _e(
        "client.rejected",
        "A connection was refused: its CONNECT, or before one (max_connections, a "
        "missing PROXY header, a failed TLS handshake: client_id empty, reason says which).",
        client_id="str",
        peer="str",
        reason="str",
        reason_code="int",
        proto_ver="int",
    ),
    _e(
        "webhook.failed",
        "A webhook endpoint could not be asked (timeout, connection error, a status other "
        "than 200, an answer that is not JSON, modifiers that cannot be applied). For an "
        "auth hook the client was refused; for on_deliver the message went unchanged; a "
        "modifier ternmq does not apply is reported once per process, and nobody refused.",
        hook="str",
        endpoint="str",
        reason="str",
    ),
    _e(
        "session.takeover",
        "A new connection took over a client id's session.",
        client_id="str",
        mountpoint="str",
        old_node="str",
        new_node="str",
        epoch="int",
    ),
    _e(
        "session.takeover_unanswered",
        "A takeover went ahead without the old connection's Disconnected (no Watch stream, "
        "or none within registry.takeover_timeout): that connection may deliver a moment longer.",
        client_id="str",
        mountpoint="str",
        listener_id="str",
        epoch="int",
        reason="str",
        waited_s="float",
    ),
    _e(
        "session.claim_refused",
        "A CONNECT's claim of its client id in the cluster's session directory was "
        "refused (the client gets 0x88 / server unavailable and retries): why. The "
        "claim may still have taken effect in the register; the retry finds it.",
        client_id="str",
        mountpoint="str",
        reason="str",
    ),
    _e(
        "session.claimed",
        "This node won a client id's register for a CONNECT (debug): what the register "
        "held before and how the session came here (path: new, here, released, "
        "lost_attempt, lost_attempt_failover, handover, handover_replicated, "
        "handover_absent, kept, reclaimed, failover, failover_absent, evicted, owed).",
        client_id="str",
        mountpoint="str",
        epoch="int",
        previous_owner="str",
        previous_epoch="int",
        previous_state="str",
        holders="list[str]",
        path="str",
    ),
    _e(
        "session.subscriptions_dropped",
        "The registry deleted the subscriptions of a session its table no longer holds "
        "(debug; reason: unknown_connection, a connection that ended after its session "
        "was lost with a restart; restart_orphan, the start-up sweep of a cluster member).",
        client_id="str",
        mountpoint="str",
        epoch="int",
        reason="str",
    ),
    _e(
        "session.subscriptions_kept",
        "The registry kept the subscriptions of a session its table no longer holds, as "
        "the id's register names another owner or cannot be read (debug; reasons as "
        "session.subscriptions_dropped): the session moved to another node, whose "
        "listener re-owns them.",
        client_id="str",
        mountpoint="str",
        epoch="int",
        reason="str",
    ),
    _e(
        "session.handover",
        "This node handed a client id's session to the node its client reconnected to "
        "(the connection here was closed; a resumed session's queue goes with it).",
        client_id="str",
        mountpoint="str",
        old_node="str",
        new_node="str",
        epoch="int",
    ),
    _e(
        "session.merged",
        "A tentative session of this client id, registered on the minority side of a "
        "partition, lost to the session here; its queued messages were appended to this "
        "session's queue.",
        client_id="str",
        mountpoint="str",
        from_node="str",
        messages="int",
    ),
    _e(
        "session.handover_incomplete",
        "A session moved here, but what reached the old node's queue after the handover "
        "began could not be fetched; it stays on that node.",
        client_id="str",
        reason="str",
    ),
    _e(
        "session.evicted_via",
        "This node took a client id's session while it could not reach the node serving "
        "the old connection (an asymmetric cut); another member passed the eviction on, "
        "and the old connection was ended there (``reason`` empty) or already superseded.",
        client_id="str",
        mountpoint="str",
        epoch="int",
        node="str",
        via="str",
        reason="str",
    ),
    _e(
        "session.reclaimed",
        "A client resumed, on this node, a persistent session this node had handed over "
        "to a claim that failed before it released it: the queue, still here and whole, "
        "is the session's again (``epoch``: the queue's, ``last_seq``: its last message "
        "when it was handed over).",
        client_id="str",
        mountpoint="str",
        epoch="int",
        last_seq="int",
    ),
    _e(
        "session.release_failed",
        "The session directory entry of an ended session was not tombstoned (no majority); "
        "the next claim of the client id supersedes it.",
        client_id="str",
        epoch="int",
    ),
    _e(
        "registry.catch_up",
        "The registry's acceptor had no votes on disk (a new node, or one that lost its "
        "disk) and catches up from the other members before it votes: waiting for enough "
        "of them to answer, or done with the number of client ids it learned.",
        state="str",
        keys="int",
        reason="str",
    ),
    _e(
        "session.expired",
        "A persistent session expired and was deleted.",
        client_id="str",
        mountpoint="str",
        reason="str",
    ),
    _e(
        "protocol.error",
        "A client broke the protocol; it was disconnected.",
        client_id="str",
        peer="str",
        reason="str",
        reason_code="int",
    ),
    _e(
        "auth.failed",
        "Authentication or authorisation failed.",
        client_id="str",
        peer="str",
        username="str",
        action="str",
        topic="str",
        reason="str",
    ),
    # -- messages -----------------------------------------------------------------
    _e(
        "message.published",
        "A PUBLISH was accepted from a client.",
        msg_id="str",
        client_id="str",
        topic="str",
        qos="int",
        retain="bool",
        size="int",
        mountpoint="str",
    ),
    _e(
        "message.delivered",
        "A PUBLISH was written to a subscriber.",
        msg_id="str",
        client_id="str",
        topic="str",
        qos="int",
        dup="bool",
        latency_us="int",
        publisher="str",
        seq="int",
    ),
    _e(
        "message.acked",
        "A subscriber acknowledged a QoS 1/2 delivery (PUBACK/PUBCOMP).",
        msg_id="str",
        client_id="str",
        qos="int",
        latency_us="int",
    ),
    _e(
        "message.queued",
        "A message was appended to a session queue.",
        msg_id="str",
        client_id="str",
        mountpoint="str",
        seq="int",
        epoch="int",
        qos="int",
    ),
    _e(
        "forward.rerouted",
        "Sessions moved off another node while copies for them waited for it (a failover "
        "while that node is down): the copies no stream had carried went where the "
        "sessions are now, in their order, instead of expiring (cluster.forward_timeout).",
        from_node="str",
        copies="int",
    ),
    _e(
        "shared.redelivered",
        "A shared subscription group's member lost a QoS >= 1 copy before acknowledging "
        "it (its session ended, its node went down or could not take it): the copy went "
        "to another member of the group (``to``), or to none when none was left.",
        msg_id="str",
        share="str",
        client_id="str",
        to="str",
        reason="str",
    ),
    _e(
        "message.dropped",
        "A message was not delivered to one session, on purpose.",
        msg_id="str",
        client_id="str",
        topic="str",
        qos="int",
        reason="str",
    ),
    _e(
        "message.refused",
        "A QoS >= 1 publish was answered with a failure reason code (reason_code, 0x80 or "
        "above): a copy could not be made durable, or this node refuses publishes in a "
        "netsplit. The publisher keeps the message and sends it again; nothing was "
        "acknowledged. Logged when message events are on, as message.published is.",
        msg_id="str",
        client_id="str",
        topic="str",
        qos="int",
        reason_code="int",
        reason="str",
    ),
    _e(
        "message.expired",
        "A message's expiry interval passed before delivery.",
        msg_id="str",
        client_id="str",
        topic="str",
    ),
    _e(
        "retain.updated",
        "A retained message was set or cleared.",
        topic="str",
        size="int",
        cleared="bool",
    ),
    # -- queues and store ---------------------------------------------------------
    _e(
        "queue.created",
        "A session queue was created.",
        client_id="str",
        mountpoint="str",
        epoch="int",
    ),
    _e(
        "queue.deleted",
        "A session queue was removed.",
        client_id="str",
        mountpoint="str",
        reason="str",
    ),
    _e(
        "queue.migrated",
        "A queue moved to another node.",
        client_id="str",
        mountpoint="str",
        from_node="str",
        to_node="str",
        messages="int",
        epoch="int",
    ),
    _e(
        "queue.failover",
        "A replicated queue's primary changed without it (msgstore.replication_factor > 1). "
        "state done: this node (to_node) became the primary at epoch, starting from the copy "
        "on from_node, which held up to committed_seq; refused: too few copies answered (the "
        "CONNECT was refused); superseded: a failover elsewhere fenced this primary.",
        client_id="str",
        mountpoint="str",
        from_node="str",
        to_node="str",
        committed_seq="int",
        epoch="int",
        state="str",
        reason="str",
    ),
    _e(
        "queue.replicated",
        "A replicated queue's primary: state started when it began feeding a replica set "
        "(after an Open at a new epoch or with new replicas); late when appends were not on "
        "msgstore.write_quorum copies within msgstore.failover_timeout (their publishers "
        "were refused); superseded when appends reached this node's copy after a newer "
        "primary took the queue (refused too: the copy is fenced); unled when appends or "
        "QoS 2 marks reached a copy the store holds as replicated that no primary on this "
        "node leads (refused: they would be on that copy alone).",
        client_id="str",
        mountpoint="str",
        epoch="int",
        replicas="list[str]",
        state="str",
        reason="str",
    ),
    _e(
        "queue.rereplicated",
        "A member that joined a replicated queue's replica set (in place of one that went "
        "down, or back after being down itself) caught up with the primary: it holds the "
        "queue up to upto, so the queue is on msgstore.replication_factor copies again.",
        client_id="str",
        mountpoint="str",
        replica="str",
        epoch="int",
        upto="int",
    ),
    _e(
        "store.commit",
        "A group commit was written (sampled).",
        entries="int",
        bytes="int",
        fsync_us="int",
    ),
    _e("store.error", "The store could not complete an operation.", op="str", reason="str"),
    _e(
        "internal.error",
        "Code failed unexpectedly (a bug, not the disk or a peer); the callers of that "
        "operation got an error and the service goes on.",
        op="str",
        reason="str",
    ),
    # -- cluster ------------------------------------------------------------------
    _e(
        "listener.lost",
        "A listener process stopped watching the registry and did not come back: the "
        "sessions it held online were ended (clean ones deleted, persistent ones offline).",
        listener_id="str",
        sessions="int",
    ),
    _e("node.up", "A cluster member became reachable.", peer="str"),
    _e("node.down", "A cluster member stopped answering.", peer="str"),
    _e("node.joined", "A member joined the cluster.", peer="str"),
    _e("node.left", "A member left the cluster.", peer="str"),
    _e(
        "cluster.refused",
        "An inter-node call was refused: it did not prove distributed_cookie. The cluster "
        "is left unchanged.",
        peer="str",
        address="str",
        method="str",
        reason="str",
    ),
    _e(
        "netsplit.detected",
        "This node no longer sees a majority of the members (it refuses CONNECT unless "
        "allow_register_during_netsplit; /health answers 503).",
        unreachable="list[str]",
        members="int",
    ),
    _e(
        "netsplit.healed",
        "This node sees a majority of the members again; duration_s since it lost it.",
        duration_s="float",
        members="int",
    ),
    _e(
        "rpc.failed",
        "An inter-service RPC failed.",
        target="str",
        method="str",
        code="str",
        reason="str",
    ),
]

EVENTS: Final[dict[str, EventSpec]] = {spec.name: spec for spec in _SPECS}


def fields_of(event: str) -> FieldTypes:
    """All fields a line of ``event`` may carry, envelope included."""
    return {**ENVELOPE, **EVENTS[event].fields}


def unknown_fields(event: str, fields: dict[str, object]) -> list[str]:
    """Fields that the catalogue does not list for ``event`` (empty when conformant)."""
    if event not in EVENTS:
        return [f"<unknown event {event!r}>"]
    allowed = fields_of(event)
    return sorted(k for k in fields if k not in allowed)
