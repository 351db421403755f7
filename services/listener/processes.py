"""Several listener processes per node (``listener.processes``), sharing the MQTT ports.

The kernel spreads connections over the processes (SO_REUSEPORT), so a subscriber and a
publisher of one node may sit in different processes. Each process is therefore its own
routing target: process 0 routes as its node does, process K > 0 as ``node/K``.
Subscription records, listener records and forwarded copies name that route, so a
sibling process is reached over the same forwarding path as another node, and with one
process nothing is renamed. What belongs to the node (its registration, its membership,
its log events) keeps the node's name.

The process index K also names the process's admin address, log file and supervised
child, so every one of them is found again after a restart. Pure: no I/O.
"""

from __future__ import annotations

MAX_PROCESSES = 64


def route_name(node: str, index: int) -> str:
    return node if index == 0 else f"{node}/{index}"


def node_of(route: str) -> str:
    """The node a route belongs to (node names have no ``/``)."""
    return route.partition("/")[0]


def on_node(route: str, node: str) -> bool:
    """Whether ``route`` is ``node`` or one of its listener processes."""
    return route == node or (route.startswith(node) and route[len(node) : len(node) + 1] == "/")


def child_name(index: int) -> str:
    """The supervised child's name, and the stem of its log file: ``listener``,
    ``listener-1``, …"""
    return "listener" if index == 0 else f"listener-{index}"


def admin_address(base: str, index: int) -> str:
    """Process ``index``'s admin address, derived from ``listener.admin_address``: a
    unix socket gets ``-K`` before its suffix, a TCP port is offset by K."""
    if index == 0:
        return base
    if base.startswith("unix:"):
        head, dot, suffix = base.rpartition(".")
        if not dot or "/" in suffix:
            return f"{base}-{index}"
        return f"{head}-{index}.{suffix}"
    host, _, port = base.rpartition(":")
    if not port.isdigit() or int(port) == 0:
        return base
    return f"{host}:{int(port) + index}"


def forward_address(base: str, index: int) -> str:
    """Where process ``index`` takes forwarded copies: ``cluster.forward_listen`` with a
    fixed port offset by K (port 0 stays 0: each process takes a free one, announced
    through gossip)."""
    return admin_address(base, index) if not base.startswith("unix:") else base
