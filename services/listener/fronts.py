"""A listener process's MQTT listeners (TCP, TLS, WebSocket): the configuration's at
start, then stopped, restarted, added and deleted while the node runs, as VerneMQ's
``vmq-admin listener stop|restart|start|delete`` does.

The node's HTTP API keeps the wanted state in ``DATA_DIR/run/listeners.json``
(``services.common.runtime_file``): one row per listener of the node, its state
(``running`` or ``stopped``), where it came from (``config`` or ``runtime``), and how
many times a stop asked to end its sessions (``kill``). Each listener process opens and
closes its own sockets to match (with several processes, each binds with SO_REUSEPORT)
and ends the connections a listener accepted when a stop asks it to (MQTT 5: DISCONNECT
0x98, administrative action): clients then reconnect elsewhere, which is how an
operator drains a node. A stopped listener keeps its connections otherwise. As in
VerneMQ, the changes last until the node stops; a listener process the supervisor
restarts applies the file again.

:func:`plan` decides, pure; :class:`Fronts` carries the plan out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from services.common import log
from services.common.runtime_file import RuntimeFile
from services.listener.config import TcpListener

Key = tuple[str, str, int]  # (transport, host, port)
KINDS = {"tcp": "mqtt", "ssl": "mqtts", "ws": "mqttws", "wss": "mqttwss"}  # VerneMQ's types
TRANSPORTS = {v: k for k, v in KINDS.items()}
ALL_VERSIONS = frozenset({3, 4, 5})


def fronts_file(data_dir: str) -> RuntimeFile:
    """``DATA_DIR/run/listeners.json``: ``{"generation": N, "listeners": [row, ...]}``."""
    return RuntimeFile(data_dir, "listeners", "listeners")


class Front(Protocol):
    """One open listening socket (an ``asyncio.Server`` or a ``TlsServer``)."""

    async def close(self) -> None: ...


def key_of(lst: TcpListener) -> Key:
    return (lst.transport, lst.host, lst.port)


def row_of(lst: TcpListener, state: str = "running", source: str = "config") -> dict[str, Any]:
    """A listener as the runtime file (and ``listener show``) has it."""
    return {
        "type": KINDS[lst.transport],
        "name": lst.name,
        "address": lst.host,
        "port": lst.port,
        "mountpoint": lst.mountpoint,
        "max_conns": lst.max_connections,
        "proxy_protocol": lst.proxy_protocol,
        "protocols": ",".join(str(v) for v in sorted(lst.allowed_versions)),
        "status": state,
        "source": source,
        "kill": 0,
    }


def row_key(row: dict[str, Any]) -> Key:
    return (TRANSPORTS[row["type"]], str(row["address"]), int(row["port"]))


def listener_of(row: dict[str, Any], configured: dict[Key, TcpListener]) -> TcpListener:
    """The listener a row describes: the configuration's own (its TLS options, its
    protocol versions) or, for one started at run time, one with the defaults."""
    key = row_key(row)
    found = configured.get(key)
    if found is not None:
        return found
    return TcpListener(
        name=f"{row['address']}:{row['port']}",
        host=key[1],
        port=key[2],
        mountpoint=str(row.get("mountpoint", "")),
        allowed_versions=ALL_VERSIONS,
        max_connections=int(row.get("max_conns", 0)),
        buffer_size=0,
        proxy_protocol=bool(row.get("proxy_protocol", False)),
        transport=key[0],
    )


@dataclass(frozen=True, slots=True)
class Plan:
    """What a process does to match the rows: close, end the sessions of, open."""

    close: list[Key]
    kill: list[Key]
    open: list[dict[str, Any]]


def plan(rows: Iterable[dict[str, Any]], running: set[Key], killed: dict[Key, int]) -> Plan:
    """From the wanted ``rows``, what is ``running`` here, and the kill requests already
    carried out (``killed``, by listener)."""
    wanted = {row_key(r): r for r in rows}
    close = [k for k in sorted(running) if wanted.get(k, {}).get("status") != "running"]
    kill = [k for k, r in sorted(wanted.items()) if int(r.get("kill", 0)) > killed.get(k, 0)]
    after = running - set(close)
    start = [r for k, r in sorted(wanted.items()) if r["status"] == "running" and k not in after]
    return Plan(close, kill, start)


def change(rows: list[dict[str, Any]], op: str, args: dict[str, str]) -> list[dict[str, Any]] | str:
    """The rows after ``listener OP address=.. port=..`` (``stop`` with ``kill_sessions``,
    ``restart``, ``start`` with ``mountpoint``, ``websocket``, ``max_connections``,
    ``proxy_protocol``, ``delete``), or why it cannot be done."""
    address, port_text = args.get("address", ""), args.get("port", "")
    if not address or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return "address=IP and port=1..65535 are required"
    port = int(port_text)
    at = [i for i, r in enumerate(rows) if (r["address"], int(r["port"])) == (address, port)]
    out = [dict(r) for r in rows]
    if op == "start":
        if at:
            return f"{address}:{port} exists already (restart it, if it is stopped)"
        transport = "ws" if _flag(args.get("websocket", "")) else "tcp"
        lst = TcpListener(
            name=f"{address}:{port}",
            host=address,
            port=port,
            mountpoint=args.get("mountpoint", ""),
            allowed_versions=ALL_VERSIONS,
            max_connections=int(args.get("max_connections", "0") or 0),
            buffer_size=0,
            proxy_protocol=_flag(args.get("proxy_protocol", "")),
            transport=transport,
        )
        return [*out, row_of(lst, "running", "runtime")]
    if not at:
        return f"no listener on {address}:{port}"
    row = out[at[0]]
    if op == "stop":
        row["status"] = "stopped"
        if _flag(args.get("kill_sessions", "")):
            row["kill"] = int(row.get("kill", 0)) + 1
    elif op == "restart":
        if row["status"] == "running":
            return f"{address}:{port} is running"
        row["status"] = "running"
    elif op == "delete":
        if row["status"] == "running":
            return f"{address}:{port} is running: stop it first"
        del out[at[0]]
    else:
        return f"unknown operation {op!r}"
    return out


def _flag(value: str) -> bool:
    return value.lower() in ("1", "true", "on", "yes")


class Fronts:
    """The listening sockets of one listener process."""

    def __init__(
        self,
        configured: Iterable[TcpListener],
        open_front: Callable[[TcpListener], Awaitable[Front]],
        end_sessions: Callable[[TcpListener], int],
    ) -> None:
        self.configured = {key_of(lst): lst for lst in configured}
        self.open_front = open_front
        self.end_sessions = end_sessions
        self.running: dict[Key, Front] = {}
        self.killed: dict[Key, int] = {}

    async def start(self) -> None:
        """The configuration's listeners; a failure stops start-up (a port in use)."""
        for key, lst in self.configured.items():
            self.running[key] = await self.open_front(lst)

    async def apply(self, rows: list[dict[str, Any]]) -> None:
        """Match the runtime file's rows (``ternmq-admin listener ...``)."""
        todo = plan(rows, set(self.running), self.killed)
        wanted = {row_key(r): r for r in rows}
        for key in todo.close:
            await self.running.pop(key).close()
            _changed(key, "stopped")
        for key in todo.kill:
            self.killed[key] = int(wanted[key]["kill"])
            ended = self.end_sessions(listener_of(wanted[key], self.configured))
            _changed(key, "stopped", sessions=ended)
        for row in todo.open:
            key = row_key(row)
            try:
                self.running[key] = await self.open_front(listener_of(row, self.configured))
            except (OSError, ValueError) as exc:  # a port in use, a bad address
                _changed(key, "failed", reason=f"{type(exc).__name__}: {exc}")
                continue
            _changed(key, "running")

    def status(self) -> list[str]:
        """What listens here, for the HTTP API to check a change against."""
        return [f"{KINDS[k[0]]}://{k[1]}:{k[2]}" for k in sorted(self.running)]

    async def close(self) -> None:
        for front in self.running.values():
            await front.close()
        self.running.clear()


def _changed(key: Key, state: str, reason: str = "", sessions: int = 0) -> None:
    log.emit(
        "listener.changed",
        "warning" if state == "failed" else "info",
        address=f"{KINDS[key[0]]}://{key[1]}:{key[2]}",
        state=state,
        reason=reason,
        sessions=sessions,
    )
