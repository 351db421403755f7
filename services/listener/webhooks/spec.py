"""What a webhook is sent and what its answer means, as VerneMQ's ``vmq_webhooks`` has it
(pure: no I/O).

Every hook is a ``POST`` with the header ``vernemq-hook: NAME`` and a JSON body; the
endpoint answers 200 with a JSON body. For the auth hooks:

- ``{"result": "ok"}`` allows, optionally with ``modifiers`` (a publish's ``topic``,
  ``payload``, ``retain``, ``qos``; a subscription's ``topics``; a register's session
  modifiers, :func:`register_modifiers`; on_auth_m5's ``reason_code`` and
  ``properties``);
- ``{"result": "next"}`` leaves the decision to the next endpoint of the hook, then to
  ternmq's own rules (password file, ACL, ``allow_anonymous``);
- ``{"result": {"error": …}}`` refuses.

Anything else (a status other than 200, a body that does not parse, no answer within
``webhooks.timeout``) refuses too: a hook that cannot be asked must not let a client in.
A ``cache-control: max-age=N`` header on an ``ok`` keeps the answer for N seconds, keyed
by the whole request body (a publish's without its payload), as VerneMQ does.

``on_deliver`` answers like an auth hook, but only its ``topic`` and ``payload``
modifiers count, and anything but ``ok`` delivers the message unchanged; the
notification hooks' answers are not read.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from typing import Any

CACHED_HOOKS = (
    "auth_on_register",
    "auth_on_register_m5",
    "auth_on_publish",
    "auth_on_publish_m5",
    "auth_on_subscribe",
    "auth_on_subscribe_m5",
)
AUTH_HOOKS = (*CACHED_HOOKS, "on_auth_m5")  # a connection's packets wait for these

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
    "on_offline_message",
    "on_deliver",
    "on_deliver_m5",
)
DELIVER_HOOKS = ("on_deliver", "on_deliver_m5")  # asked before a delivery; may rewrite it
ALL_HOOKS = (*AUTH_HOOKS, *NOTIFY_HOOKS)
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


# -- on_deliver, on_offline_message, on_auth_m5 -------------------------------------------
def deliver_body(
    mountpoint: str,
    client_id: str,
    username: str | None,
    topic: str,
    qos: int,
    payload: bytes,
    retain: bool,
    base64_payload: bool = True,
) -> dict[str, Any]:
    """``on_deliver``'s and ``on_deliver_m5``'s body: the subscriber, the QoS it gets the
    message at, and the message. VerneMQ sends ``properties`` to both forms."""
    return publish_body(5, mountpoint, client_id, username, topic, qos, payload, retain,
                        base64_payload)  # fmt: skip


def offline_message_body(
    mountpoint: str,
    client_id: str,
    qos: int,
    topic: str,
    payload: bytes,
    retain: bool,
    base64_payload: bool = True,
) -> dict[str, Any]:
    """``on_offline_message``'s body: the offline session and the message queued for it."""
    return {
        "mountpoint": mountpoint,
        "client_id": client_id,
        "qos": qos,
        "topic": topic,
        "payload": _payload(payload, base64_payload),
        "retain": retain,
    }


def deliver_modifiers(
    mods: dict[str, Any], base64_payload: bool
) -> tuple[str | None, bytes | None] | str:
    """An ``on_deliver`` answer's (topic, payload), None where unchanged; or why it cannot
    be applied. The _m5 form's ``properties`` is read by :mod:`.props`."""
    topic = mods.get("topic")
    if topic is not None and (not isinstance(topic, str) or not _valid_topic(topic)):
        return f"topic {topic!r} in an on_deliver modifier"
    payload = None
    if "payload" in mods:
        try:
            payload = payload_modifier(mods["payload"], base64_payload)
        except ValueError:
            return "the payload modifier is not base64"
    return topic, payload


def _valid_topic(topic: str) -> bool:
    return bool(topic) and "+" not in topic and "#" not in topic and "\0" not in topic


AUTH_METHOD = "p_authentication_method"  # VerneMQ's property names in JSON bodies
AUTH_DATA = "p_authentication_data"
CONTINUE_AUTHENTICATION = 0x18
RE_AUTHENTICATE = 0x19


def auth_m5_body(
    mountpoint: str, client_id: str, username: str | None, method: str, data: bytes | None
) -> dict[str, Any]:
    """``on_auth_m5``'s body: the CONNECT's Authentication Method and Data (base64)."""
    props: dict[str, Any] = {AUTH_METHOD: method}
    if data is not None:
        props[AUTH_DATA] = base64.b64encode(data).decode()
    return {
        "username": username,
        "mountpoint": mountpoint,
        "client_id": client_id,
        "properties": props,
    }


def auth_m5_answer(mods: dict[str, Any], method: str) -> int | str:
    """An ``ok`` answer's ``reason_code`` (0 success, 0x18 continue authentication), or
    why it is not one: VerneMQ needs both a reason code and the client's method back."""
    props = mods.get("properties")
    code = mods.get("reason_code")
    if not isinstance(props, dict) or props.get(AUTH_METHOD) != method:
        return f"on_auth_m5 must answer the authentication method {method!r}"
    if code not in (0, CONTINUE_AUTHENTICATION) or isinstance(code, bool):
        return f"on_auth_m5 reason_code {code!r} (0 or 24 expected)"
    return int(code)


def auth_m5_reply(mods: dict[str, Any], method: str) -> tuple[int, bytes | None] | str:
    """An ``ok`` answer's reason code and the Authentication Data for the client (base64
    in ``properties.p_authentication_data``, as VerneMQ's), or why they are not usable."""
    code = auth_m5_answer(mods, method)
    if isinstance(code, str):
        return code
    data = mods["properties"].get(AUTH_DATA)
    if data is None:
        return code, None
    try:
        return code, base64.b64decode(str(data), validate=True)
    except ValueError:
        return f"{AUTH_DATA} {data!r} is not base64"


# -- auth_on_register's session modifiers ---------------------------------------------------
# VerneMQ's modifier -> the SessionLimits field it sets, and a converter to its unit.
LIMIT_MODIFIERS: dict[str, tuple[str, float]] = {
    "max_message_size": ("max_message_size", 1.0),
    "max_inflight_messages": ("max_inflight_messages", 1.0),
    "max_online_messages": ("max_online_messages", 1.0),
    "retry_interval": ("retry_interval", 0.001),  # VerneMQ's is in milliseconds
}
# VerneMQ modifiers ternmq has no per-session counterpart for: accepted, not applied, and
# logged once per listener process (webhook.failed, "ignored").
IGNORED_REGISTER_MODIFIERS = (
    "allow_register",
    "allow_unsubscribe",
    "max_connection_lifetime",
    "max_message_rate",
    "shared_subscription_policy",
    "upgrade_qos",
    "max_offline_messages",
    "queue_type",
    "max_drain_time",
    "max_msgs_per_drain_step",
    "tcp_opts",
)


@dataclass(frozen=True, slots=True)
class RegisterModifiers:
    """What an ``auth_on_register`` ``ok`` changes about the session (None: unchanged)."""

    client_id: str | None = None
    mountpoint: str | None = None
    username: str | None = None
    clean: bool | None = None
    session_expiry: int | None = None  # _m5: properties.p_session_expiry_interval
    allow_publish: bool = True
    allow_subscribe: bool = True
    limits: tuple[tuple[str, float], ...] = ()  # (SessionLimits field, value)
    ignored: tuple[str, ...] = ()


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


def register_modifiers(mods: dict[str, Any]) -> RegisterModifiers | str:
    """An ``auth_on_register(_m5)`` answer's modifiers, or why they cannot be applied (an
    unknown modifier or a value of the wrong type refuses, as in VerneMQ)."""
    out: dict[str, Any] = {}
    limits: list[tuple[str, float]] = []
    ignored: list[str] = []
    for name, value in mods.items():
        if name in LIMIT_MODIFIERS:
            if not _number(value):
                return f"{name} must be a number, not {value!r}"
            field_name, unit = LIMIT_MODIFIERS[name]
            limits.append((field_name, value * unit if unit != 1.0 else int(value)))
        elif name in ("client_id", "mountpoint", "username"):
            if not isinstance(value, str):
                return f"{name} must be a string"
            out[name] = value
        elif name == "subscriber_id":
            if not isinstance(value, dict) or not all(
                isinstance(value.get(k), str) for k in ("client_id", "mountpoint")
            ):
                return "subscriber_id must be an object with client_id and mountpoint"
            out["client_id"], out["mountpoint"] = value["client_id"], value["mountpoint"]
        elif name in ("clean_session", "clean_start", "allow_publish", "allow_subscribe"):
            if not isinstance(value, bool):
                return f"{name} must be true or false"
            out["clean" if name.startswith("clean") else name] = value
        elif name == "properties":  # _m5: only the session expiry maps onto ternmq
            if not isinstance(value, dict):
                return "properties must be an object"
            expiry = value.get("p_session_expiry_interval")
            if expiry is not None:
                if not (_number(expiry) and expiry <= 0xFFFFFFFF):
                    return f"p_session_expiry_interval {expiry!r}"
                out["session_expiry"] = int(expiry)
            ignored += [f"properties.{k}" for k in value if k != "p_session_expiry_interval"]
        elif name in IGNORED_REGISTER_MODIFIERS:
            ignored.append(name)
        else:
            return f"unknown modifier {name!r}"
    if out.get("client_id") == "":
        return "client_id must not be empty"
    return RegisterModifiers(**out, limits=tuple(limits), ignored=tuple(ignored))


def qos_modifier(mods: dict[str, Any]) -> int | str | None:
    """An ``auth_on_publish`` answer's ``qos`` (None: unchanged), or why it is not one."""
    qos = mods.get("qos")
    if qos is None:
        return None
    if not _number(qos) or round(qos) > 2:
        return f"qos {qos!r} in a publish modifier"
    rounded: int = round(qos)
    return rounded


# -- runtime registration (ternmq-admin webhooks register) ----------------------------------
def check_registration(hook: str, endpoint: str) -> str:
    """Why ``hook``/``endpoint`` cannot be registered ("" when they can)."""
    if hook not in ALL_HOOKS:
        return f"unknown hook {hook!r} (one of: {', '.join(ALL_HOOKS)})"
    scheme, sep, rest = endpoint.partition("://")
    host = rest.split("/", 1)[0].rpartition("@")[2]
    if not sep or scheme not in ("http", "https") or not host or " " in endpoint:
        return f"invalid endpoint {endpoint!r} (an http:// or https:// URL)"
    port = host.rpartition("]")[2].rpartition(":")
    if port[1] and not (port[2].isdigit() and 0 < int(port[2]) < 65536):
        return f"invalid endpoint {endpoint!r} (bad port)"
    return ""
