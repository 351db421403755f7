"""Webhooks registered at run time (``ternmq-admin webhooks register|deregister``): how
the node's HTTP API hands them to every listener process of the node.

The node's list of webhooks lives in one file, ``DATA_DIR/run/webhooks.json``
(``services.common.runtime_file``): the configured ones plus those registered since,
minus those deregistered, with a *generation* that each change increments. Each
listener process swaps its endpoints when it changes, and answers with
``run/webhooks.applied-PID``, which the HTTP API waits for before it says done.

As in VerneMQ, a registration lasts until the node stops: a node start removes the file,
and the configuration's webhooks apply again. A listener process that the supervisor
restarts reads the file, so it keeps the node's current registrations.

Worked example: config has ``auth_on_register -> http://a``; ``register
hook=on_deliver endpoint=http://b`` writes generation 1 with both; every listener
process answers ``applied-PID = 1``; ``deregister hook=auth_on_register
endpoint=http://a`` writes generation 2 with only ``on_deliver``.
"""

from __future__ import annotations

from typing import Any

from services.common.config import Config
from services.common.runtime_file import RuntimeFile
from services.listener.webhooks.spec import check_registration


def runtime_file(config: Config) -> RuntimeFile:
    """``DATA_DIR/run/webhooks.json``: ``{"generation": N, "endpoints": [...]}``."""
    return RuntimeFile(str(config["data_dir"]), "webhooks", "endpoints")


def change(
    current: list[dict[str, Any]], op: str, hook: str, endpoint: str, base64_payload: bool = True
) -> list[dict[str, Any]] | str:
    """The endpoint list after ``register`` or ``deregister``, or why it cannot be done
    (VerneMQ's ``already_registered`` / ``not_found``). A new endpoint goes last: the
    endpoints of a hook are asked oldest first."""
    why = check_registration(hook, endpoint)
    if why:
        return why
    present = any(e["hook"] == hook and e["endpoint"] == endpoint for e in current)
    if op == "register":
        if present:
            return f"already_registered: {hook} {endpoint}"
        entry = {"hook": hook, "endpoint": endpoint, "base64_payload": base64_payload}
        return [*current, {**entry, "name": "", "source": "runtime"}]
    if not present:
        return f"not_found: {hook} {endpoint}"
    return [e for e in current if not (e["hook"] == hook and e["endpoint"] == endpoint)]
