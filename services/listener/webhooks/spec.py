"""What a webhook is sent and what its answer means, as VerneMQ's ``vmq_webhooks`` has it
(pure: no I/O).

Every hook is a ``POST`` with the header ``vernemq-hook: NAME`` and a JSON body; the
endpoint answers 200 with a JSON body. For the auth hooks:

- ``{"result": "ok"}`` allows, optionally with ``modifiers`` (a publish's ``topic``,
  ``payload``, ``retain``; a subscription's ``topics``);
- ``{"result": "next"}`` leaves the decision to the next endpoint of the hook, then to
  ternmq's own rules (password file, ACL, ``allow_anonymous``);
- ``{"result": {"error": …}}`` refuses.

Anything else (a status other than 200, a body that does not parse, no answer within
``webhooks.timeout``) refuses too: a hook that cannot be asked must not let a client in.
A ``cache-control: max-age=N`` header on an ``ok`` keeps the answer for N seconds, keyed
by the whole request body (a publish's without its payload), as VerneMQ does.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from typing import Any

AUTH_HOOKS = (
    "auth_on_register",
    "auth_on_register_m5",
    "auth_on_publish",
    "auth_on_publish_m5",
    "auth_on_subscribe",
    "auth_on_subscribe_m5",
)

NOTIFY_HOOKS = (
    "on_register",
    "on_register_m5",
    "on_client_wakeup",
    "on_publish",
    "on_publish_m5",
    "on_subscribe",
    "on_subscribe_m5",
    "on_unsubscribe",
    "on_unsubscribe_m5",
    "on_client_offline",
    "on_client_gone",
)
REFUSED_QOS = (128, 135)  # a subscription's qos that refuses it (3.1.1's and 5.0's)
_MAX_AGE = re.compile(r"max-age\s*=\s*(\d+)")


@dataclass(frozen=True, slots=True)
class Decision:
    """One endpoint's answer: ``ok``, ``next`` or ``error`` (then ``reason`` says why)."""

    result: str
    modifiers: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    max_age: int = 0  # seconds an ``ok`` may be cached


NEXT = Decision("next")


def hook_name(base: str, proto_ver: int) -> str:
    """The hook a client of ``proto_ver`` calls: MQTT 5 clients have the ``_m5`` ones."""
    return f"{base}_m5" if proto_ver == 5 else base


def _payload(payload: bytes, base64_payload: bool) -> str:
    if base64_payload:
        return base64.b64encode(payload).decode()
    return payload.decode("utf-8", "replace")


def register_body(
    proto_ver: int,
    peer: str,
    mountpoint: str,
    client_id: str,
    username: str | None,
    password: bytes | None,
    clean: bool,
) -> dict[str, Any]:
    body = registered_body(proto_ver, peer, mountpoint, client_id, username)
    body["password"] = password.decode("utf-8", "replace") if password is not None else None
    body["clean_start" if proto_ver == 5 else "clean_session"] = clean
    return body


def registered_body(
    proto_ver: int, peer: str, mountpoint: str, client_id: str, username: str | None
) -> dict[str, Any]:
    """``on_register``'s body; ``auth_on_register``'s adds the password and clean flag."""
    host, _, port = peer.rpartition(":")
    body: dict[str, Any] = {
        "peer_addr": host.strip("[]"),
        "peer_port": int(port) if port.isdigit() else 0,
        "mountpoint": mountpoint,
        "client_id": client_id,
        "username": username,
    }
    if proto_ver == 5:
        body["properties"] = {}
    return body


def publish_body(
    proto_ver: int,
    mountpoint: str,
    client_id: str,
    username: str | None,
    topic: str,
    qos: int,
    payload: bytes,
    retain: bool,
    base64_payload: bool = True,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "username": username,
        "client_id": client_id,
        "mountpoint": mountpoint,
        "qos": qos,
        "topic": topic,
        "payload": _payload(payload, base64_payload),
        "retain": retain,
    }
    if proto_ver == 5:
        body["properties"] = {}
    return body


def subscribe_body(
    proto_ver: int,
    mountpoint: str,
    client_id: str,
    username: str | None,
    topics: list[tuple[str, int]],
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "username": username,
        "client_id": client_id,
        "mountpoint": mountpoint,
        "topics": [{"topic": t, "qos": q} for t, q in topics],
    }
    if proto_ver == 5:
        body["properties"] = {}
    return body


def cache_key(hook: str, body: dict[str, Any]) -> str:
    """What an answer is cached under: the request, without a publish's payload."""
    kept = {k: v for k, v in body.items() if k != "payload"}
    return hook + "\0" + json.dumps(kept, sort_keys=True, separators=(",", ":"))


def parse_reply(status: int, cache_control: str | None, raw: bytes) -> Decision:
    """An endpoint's HTTP answer as a decision."""
    if status != 200:
        return Decision("error", reason=f"HTTP {status}")
    try:
        body = json.loads(raw)
    except ValueError:
        return Decision("error", reason="the answer is not JSON")
    if not isinstance(body, dict):
        return Decision("error", reason="the answer is not a JSON object")
    result = body.get("result")
    if result == "next":
        return NEXT
    if isinstance(result, dict) and "error" in result:
        return Decision("error", reason=str(result["error"]))
    if result != "ok":
        return Decision("error", reason=f"unknown result {result!r}")
    modifiers = body.get("modifiers") or {}
    if "topics" in body and "topics" not in modifiers:
        modifiers = {**modifiers, "topics": body["topics"]}  # 3.1.1 subscribe rewrite
    if not isinstance(modifiers, dict):
        return Decision("error", reason="modifiers is not a JSON object")
    match = _MAX_AGE.search(cache_control or "")
    return Decision("ok", modifiers, max_age=int(match.group(1)) if match else 0)


def payload_modifier(value: Any, base64_payload: bool) -> bytes:
    """A ``payload`` modifier's bytes (base64 when the hook's payloads are)."""
    text = str(value)
    if base64_payload:
        return base64.b64decode(text)
    return text.encode()


def subscribe_modifier(value: Any, count: int) -> list[tuple[str, int]] | str:
    """A subscription rewrite: one (filter, qos) per requested filter, or why not. The
    SUBACK answers each filter the client sent, so a rewrite must keep their number."""
    if not isinstance(value, list) or len(value) != count:
        return f"a topics modifier must list {count} topics"
    out = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("topic"), str):
            return "a topics modifier lists objects with a topic"
        qos = item.get("qos", 0)
        if not isinstance(qos, int) or not (0 <= qos <= 2 or qos in REFUSED_QOS):
            return f"qos {qos!r} in a topics modifier"
        out.append((item["topic"], qos))
    return out
