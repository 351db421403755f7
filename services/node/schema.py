"""The whole settings schema: node-wide keys declared here, service keys in each service.

A node runs every service from one ``ternmq.conf``, so each service parses the whole
schema: a key it does not read is still a key, not a typo. Order matters only for the
rendered default conf: node keys first, then each service.
"""

from __future__ import annotations

from functools import cache

from services.common.config import Config, ConfigError, Problem, Schema
from services.common.settings import Setting
from services.gossip.config import SETTINGS as GOSSIP
from services.listener.config import SETTINGS as LISTENER
from services.listener.config import ssl_listeners, ws_listeners
from services.listener.tls import build_context
from services.msgstore.config import SETTINGS as MSGSTORE
from services.msgstore.config import quorum_problem
from services.registry.config import SETTINGS as REGISTRY

NODE_SETTINGS: list[Setting] = [
    Setting(
        "nodename",
        "str",
        "ternmq@127.0.0.1",
        "This node's name in the cluster; must be unique and stable across restarts.",
    ),
    Setting(
        "distributed_cookie",
        "str",
        "ternmq",
        "Shared secret that cluster members present to each other.",
    ),
    Setting(
        "data_dir",
        "str",
        "./data",
        "Directory for the message store, metadata and runtime sockets.",
    ),
    Setting(
        "log_dir",
        "str",
        "./data/log",
        "Directory for the JSON-lines event logs (<service>.jsonl, rotated).",
    ),
    Setting(
        "log.level",
        "enum",
        "info",
        "Lowest level written to the logs.",
        choices=("debug", "info", "warning", "error"),
        runtime=True,
    ),
    Setting(
        "log.console",
        "enum",
        "on",
        "Human-readable log on stderr: on, off, or json (the JSON lines there too).",
        choices=("on", "off", "json"),
    ),
    Setting(
        "log.message_events",
        "bool",
        "on",
        "Log message.published/delivered/acked/queued per QoS>=1 message "
        "(what the ETL's delivery audit needs). Off saves CPU on busy nodes.",
        runtime=True,
    ),
    Setting(
        "log.message_events_qos0",
        "bool",
        "off",
        "Also log per-message events for QoS 0 messages (costly at high rates).",
    ),
    Setting(
        "log.spool",
        "bool",
        "on",
        "The listener and msgstore hand their events, unformatted, to a helper process that "
        "writes the JSON lines (log_dir/spool/ holds them meanwhile), so formatting the "
        "per-message events costs them nothing. Off: each service formats and writes its own.",
    ),
    Setting(
        "service_lanes",
        "bool",
        "on",
        "The hot calls between this node's services (CONNECTs to the registry, writes and "
        "reads of the msgstore, metadata writes to gossip) use plain unix sockets beside "
        "their gRPC sockets, at a fraction of gRPC's CPU. Off: gRPC only.",
    ),
    Setting("log.rotate_size", "size", "100MB", "Rotate a service's log file at this size."),
    Setting("log.rotate_keep", "int", "10", "How many rotated log files to keep.", minimum=1),
    Setting(
        "listener.http.default",
        "address",
        "127.0.0.1:8888",
        "HTTP endpoint for /health, /status, /metrics and the admin API ('off' disables).",
    ),
    Setting(
        "registry.address",
        "address",
        "auto",
        "gRPC address of this node's registry service (auto: a unix socket in data_dir).",
    ),
    Setting(
        "gossip.address",
        "address",
        "auto",
        "gRPC address of this node's gossip service (auto: a unix socket in data_dir).",
    ),
    Setting(
        "msgstore.address",
        "address",
        "auto",
        "gRPC address of this node's msgstore service (auto: a unix socket in data_dir).",
    ),
    Setting(
        "listener.admin_address",
        "address",
        "auto",
        "gRPC address of the listener's admin service (auto: a unix socket in data_dir).",
    ),
    Setting(
        "supervisor.max_restarts",
        "int",
        "10",
        "A child restarted this many times within supervisor.restart_window stops the node.",
        minimum=1,
    ),
    Setting(
        "supervisor.restart_window",
        "duration",
        "60s",
        "Window over which child restarts are counted.",
    ),
    Setting(
        "supervisor.shutdown_timeout",
        "duration",
        "8s",
        "After SIGTERM, children still running after this are killed.",
    ),
]


@cache
def schema() -> Schema:
    return Schema([*NODE_SETTINGS, *LISTENER, *REGISTRY, *GOSSIP, *MSGSTORE])


def checked(config: Config) -> Config:
    """``config``, or ConfigError for keys that are each valid but do not go together."""
    r, w = config.get("msgstore.replication_factor"), config.get("msgstore.write_quorum")
    assert isinstance(r, int) and isinstance(w, int)
    problem = quorum_problem(r, w)
    if problem:
        raise ConfigError([Problem(config.source, 0, problem)])
    problems = []
    for lst in [*ssl_listeners(config), *ws_listeners(config)]:
        if lst.tls is None:
            continue
        try:
            build_context(lst.name, lst.tls, lst.transport)  # read as the listener will
        except OSError as exc:
            problems.append(Problem(config.source, 0, str(exc)))
    if problems:
        raise ConfigError(problems)
    return config
