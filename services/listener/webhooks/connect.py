"""A CONNECT's webhooks: ``on_auth_m5`` for an MQTT 5 client that names an
Authentication Method, then ``auth_on_register(_m5)``, whose ``ok`` may change the
session (VerneMQ's register modifiers).

``on_auth_m5`` (enhanced authentication, MQTT 5 §4.12): the CONNECT's method and data,
and later each AUTH's, go to the hook (:func:`enhanced_auth`, :func:`auth_round`). Its
verdict is an ``AuthAnswer`` the session takes (``session.handle_auth``): an ``ok``
with the client's method and ``reason_code`` 0 accepts, 24 (0x18) continues the
exchange with the answer's ``p_authentication_data`` sent in an AUTH; an error, a
failure or an answer that cannot be applied refuses (0x87); ``next`` leaves it to
ternmq, which speaks no method (None: 0x8C). After an accepting answer to a CONNECT,
``auth_on_register_m5``, when registered, still decides.

The register modifiers are applied before the session sees the CONNECT: the client id,
mountpoint, user name and clean flag on the packet and session; ``max_message_size``,
``max_inflight_messages``, ``max_online_messages`` and ``retry_interval`` (VerneMQ's
milliseconds) on this session's limits; ``allow_publish`` / ``allow_subscribe`` false
refuse those for the connection; an _m5 ``p_session_expiry_interval`` on the CONNECT.
The rest (``spec.IGNORED_REGISTER_MODIFIERS``) are accepted and logged once.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from services.listener.mqtt.codes import ReasonCode
from services.listener.mqtt.types import Auth, Connect
from services.listener.session.handle_auth import AuthAnswer
from services.listener.webhooks.client import Webhooks
from services.listener.webhooks.spec import (
    RegisterModifiers,
    auth_m5_body,
    auth_m5_reply,
    hook_name,
    register_body,
    register_modifiers,
)

REFUSED = int(ReasonCode.NOT_AUTHORIZED)


def wants_auth(hooks: Webhooks, pkt: Connect) -> bool:
    """Whether the CONNECT asks ``on_auth_m5``."""
    return (
        pkt.protocol_version == 5
        and pkt.properties.authentication_method is not None
        and hooks.has("on_auth_m5")
    )


async def enhanced_auth(hooks: Webhooks, pkt: Connect, s: Any) -> AuthAnswer | None:
    """``on_auth_m5``'s verdict on a CONNECT with an Authentication Method."""
    method = pkt.properties.authentication_method
    assert method is not None
    data = pkt.properties.authentication_data
    body = auth_m5_body(s.mountpoint, pkt.client_id, pkt.username, method, data)
    return await _ask(hooks, body, method)


async def auth_round(
    hooks: Webhooks, pkt: Auth, s: Any, connect: Connect | None
) -> AuthAnswer | None:
    """``on_auth_m5``'s verdict on an AUTH: the CONNECT's exchange going on (``connect``
    held until it succeeds) or a re-authentication of the connected client ``s``."""
    method = pkt.properties.authentication_method
    assert method is not None
    who = s if connect is None else connect
    data = pkt.properties.authentication_data
    body = auth_m5_body(s.mountpoint, who.client_id, who.username, method, data)
    return await _ask(hooks, body, method)


async def _ask(hooks: Webhooks, body: dict[str, Any], method: str) -> AuthAnswer | None:
    d = await hooks.ask("on_auth_m5", body)
    if d.result == "next":
        return None
    if d.result != "ok":
        return AuthAnswer(REFUSED, reason=d.reason or "refused by on_auth_m5")
    reply = auth_m5_reply(d.modifiers, method)
    if isinstance(reply, str):
        hooks.invalid("on_auth_m5", reply)
        return AuthAnswer(REFUSED, reason=reply)
    code, data = reply
    return AuthAnswer(code, data)


async def register(hooks: Webhooks, pkt: Connect, s: Any, peer: str) -> tuple[
    int | None, RegisterModifiers | None
]:  # fmt: skip
    """``auth_on_register(_m5)``'s verdict (0, a reason code, or None for ``next``) and
    the modifiers it applied to ``pkt`` and the session ``s``."""
    hook = hook_name("auth_on_register", pkt.protocol_version)
    body = register_body(
        pkt.protocol_version, peer, s.mountpoint, pkt.client_id, pkt.username, pkt.password,
        pkt.clean_start,
    )  # fmt: skip
    d = await hooks.ask(hook, body)
    if d.result == "next":
        return None, None
    if d.result != "ok":
        return REFUSED, None
    if not d.modifiers:
        return 0, None
    mods = register_modifiers(d.modifiers)
    if isinstance(mods, str):
        hooks.invalid(hook, mods)
        return REFUSED, None
    apply(hooks, hook, mods, pkt, s)
    return 0, mods


def apply(hooks: Webhooks, hook: str, mods: RegisterModifiers, pkt: Connect, s: Any) -> None:
    """Rewrite the CONNECT and the session's limits before the session handles it."""
    for name in mods.ignored:
        hooks.ignored(hook, name, "ternmq has no per-session counterpart")
    if mods.client_id is not None:
        pkt.client_id = mods.client_id
    if mods.username is not None:
        pkt.username = mods.username
    if mods.clean is not None:
        pkt.clean_start = mods.clean
    if mods.mountpoint is not None:
        s.mountpoint = mods.mountpoint
    if mods.session_expiry is not None and pkt.protocol_version == 5:
        pkt.properties = replace(pkt.properties, session_expiry_interval=mods.session_expiry)
    if mods.limits:
        limits = replace(s.limits, **dict(mods.limits))
        s.limits = limits
        s.outbound.limits = limits
        s.outbound.window = limits.inflight_window
