"""Settings of the listener service, under VerneMQ's ``vernemq.conf`` names.

``listener.tcp.NAME = host:port`` declares a TCP listener (``default`` exists unless set
to ``off``); per-listener options are ``listener.tcp.NAME.OPTION``, falling back to the
``listener.tcp.OPTION`` value, then to ``listener.OPTION``. ``listener.ssl.NAME`` declares
a TLS listener (none by default), with the same options plus the certificate ones
(``cafile``, ``certfile``, ``keyfile``, ``require_certificate``, …), resolved the same
way under ``listener.ssl``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from services.common.config import Config
from services.common.settings import Setting
from services.common.typed_settings import setting
from services.listener.processes import MAX_PROCESSES
from services.listener.webhooks.spec import ALL_HOOKS

UNLIMITED = 0
TLS_VERSIONS_CHOICES = ("tlsv1.2", "tlsv1.3")


def _transport_settings(transport: str) -> list[Setting]:
    """The keys of one more transport (``ssl``, ``ws``, ``wss``): its listeners, the
    options every listener has, and for ``ssl`` and ``wss`` the certificate ones."""
    p = f"listener.{transport}"
    what = {"ssl": "TLS", "ws": "WebSocket", "wss": "WebSocket over TLS"}[transport]
    port = {"ssl": 8883, "ws": 8080, "wss": 8443}[transport]
    out = [
        Setting(
            f"{p}.*",
            "address",
            "",
            f"{what} listeners: {p}.NAME = host:port (none by default; VerneMQ uses {port}).",
        ),
        Setting(
            f"{p}.allowed_protocol_versions",
            "list",
            "3,4,5",
            f"MQTT protocol levels accepted on {what} listeners.",
        ),
        Setting(f"{p}.*.allowed_protocol_versions", "list", "3,4,5", "Per-listener levels."),
        Setting(f"{p}.*.mountpoint", "str", "", "Per-listener mountpoint."),
        Setting(f"{p}.*.max_connections", "int", "0", "Per-listener limit.", minimum=0),
        Setting(
            f"{p}.proxy_protocol",
            "bool",
            "off",
            "Every connection starts with a PROXY header, in plain text"
            + (" before the TLS handshake." if transport != "ws" else "."),
        ),
        Setting(f"{p}.*.proxy_protocol", "bool", "off", "Per-listener PROXY protocol."),
    ]
    if transport == "ws":
        return out
    return [
        *out,
        Setting(
            f"{p}.certfile",
            "str",
            "",
            "PEM file with the server's certificate (and its chain). Required; a missing or "
            "unreadable file stops start-up, naming it.",
        ),
        Setting(f"{p}.*.certfile", "str", "", "Per-listener certificate file."),
        Setting(f"{p}.keyfile", "str", "", "PEM file with the certificate's private key."),
        Setting(f"{p}.*.keyfile", "str", "", "Per-listener private key file."),
        Setting(
            f"{p}.cafile",
            "str",
            "",
            "PEM file of the CA certificates client certificates are checked against.",
        ),
        Setting(f"{p}.*.cafile", "str", "", "Per-listener CA file."),
        Setting(
            f"{p}.require_certificate",
            "bool",
            "off",
            "Clients must present a certificate that the cafile's CAs signed; one without, "
            "untrusted, expired or revoked is refused during the handshake (client.rejected).",
        ),
        Setting(f"{p}.*.require_certificate", "bool", "off", "Per-listener option."),
        Setting(
            f"{p}.use_identity_as_username",
            "bool",
            "off",
            "With require_certificate: the client certificate's CN becomes the MQTT username "
            "and the certificate is the authentication (the password file is not consulted "
            "for it, as in Mosquitto); ACLs apply to that username.",
        ),
        Setting(f"{p}.*.use_identity_as_username", "bool", "off", "Per-listener option."),
        Setting(
            f"{p}.tls_version",
            "enum",
            "tlsv1.2",
            "The lowest TLS version accepted.",
            choices=TLS_VERSIONS_CHOICES,
        ),
        Setting(
            f"{p}.*.tls_version",
            "enum",
            "tlsv1.2",
            "Per-listener lowest TLS version.",
            choices=TLS_VERSIONS_CHOICES,
        ),
        Setting(
            f"{p}.ciphers",
            "str",
            "",
            "OpenSSL cipher list for TLS 1.2 connections (empty: OpenSSL's defaults). "
            "TLS 1.3 suites are OpenSSL's.",
        ),
        Setting(f"{p}.*.ciphers", "str", "", "Per-listener cipher list."),
        Setting(
            f"{p}.crlfile",
            "str",
            "",
            "PEM certificate revocation list: a client certificate it lists is refused.",
        ),
        Setting(f"{p}.*.crlfile", "str", "", "Per-listener CRL file."),
        Setting(
            f"{p}.handshake_timeout",
            "duration",
            "10s",
            "A connection that has not completed its TLS handshake by then is closed.",
        ),
        Setting(f"{p}.*.handshake_timeout", "duration", "10s", "Per-listener option."),
    ]


SETTINGS: list[Setting] = [
    # -- listeners -------------------------------------------------------------------
    Setting(
        "listener.tcp.default",
        "address",
        "127.0.0.1:1883",
        "The default MQTT TCP listener ('off' to disable).",
    ),
    Setting("listener.tcp.*", "address", "", "More TCP listeners: listener.tcp.NAME = host:port."),
    Setting(
        "listener.tcp.allowed_protocol_versions",
        "list",
        "3,4,5",
        "MQTT protocol levels accepted on TCP listeners: 3 = 3.1, 4 = 3.1.1, 5 = 5.0.",
    ),
    Setting(
        "listener.tcp.*.allowed_protocol_versions", "list", "3,4,5", "Per-listener protocol levels."
    ),
    Setting(
        "listener.mountpoint",
        "str",
        "",
        "Mountpoint (topic namespace) for listeners that set none. Empty = none.",
    ),
    Setting("listener.tcp.*.mountpoint", "str", "", "Per-listener mountpoint."),
    Setting(
        "listener.max_connections",
        "int",
        "0",
        "Most concurrent connections per listener and listener process (0 = unlimited); "
        "past it a new connection is closed before its CONNECT is read, counted in "
        "ternmq_connections_refused_total and logged as client.rejected.",
        minimum=0,
    ),
    Setting(
        "listener.tcp.*.max_connections", "int", "0", "Per-listener connection limit.", minimum=0
    ),
    Setting(
        "listener.tcp.proxy_protocol",
        "bool",
        "off",
        "Every connection starts with a PROXY protocol v1 or v2 header (HAProxy, AWS NLB): "
        "its source address becomes the client's peer; a connection without one is closed.",
    ),
    Setting("listener.tcp.*.proxy_protocol", "bool", "off", "Per-listener PROXY protocol."),
    *_transport_settings("ssl"),
    *_transport_settings("ws"),
    *_transport_settings("wss"),
    Setting(
        "listener.tcp.buffer_sizes",
        "size",
        "0",
        "Send and receive buffer size of every accepted TCP socket, set on the listening "
        "socket (0 = the OS default, which grows as needed).",
    ),
    Setting(
        "listener.reuse_port",
        "bool",
        "on",
        "Bind with SO_REUSEPORT so several listener processes can share a port "
        "(always on with listener.processes > 1).",
    ),
    Setting(
        "listener.processes",
        "int",
        "1",
        "Listener processes of this node, sharing its MQTT ports (SO_REUSEPORT; the kernel "
        "spreads connections over them). They route to each other as nodes do; process K "
        "> 0 logs to listener-K.jsonl and takes listener.admin_address with -K (a unix "
        "socket) or +K (a port).",
        minimum=1,
        maximum=MAX_PROCESSES,
    ),
    # -- authentication ----------------------------------------------------------------
    Setting(
        "allow_anonymous",
        "bool",
        "on",
        "Accept clients without a username. With off, a password file must list them.",
    ),
    Setting("plugins.ternmq_passwd", "bool", "off", "Check usernames against a password file."),
    Setting(
        "ternmq_passwd.password_file",
        "str",
        "./ternmq.passwd",
        "Password file written by ternmq-passwd.",
    ),
    Setting(
        "ternmq_passwd.password_reload_interval",
        "duration",
        "10s",
        "How often the password file is checked for changes (0 = never).",
    ),
    Setting("plugins.ternmq_acl", "bool", "off", "Check topics against an ACL file."),
    # -- webhooks (VerneMQ's vmq_webhooks) ----------------------------------------------
    Setting(
        "webhooks.*.hook",
        "enum",
        "",
        "A webhook: the hook it serves. Auth hooks (auth_on_register, auth_on_publish, "
        "auth_on_subscribe, on_auth_m5) decide; on_deliver may rewrite a delivery; "
        "notification hooks (on_register, on_client_wakeup, on_publish, on_subscribe, "
        "on_unsubscribe, on_client_offline, on_client_gone, on_offline_message) are told. "
        "_m5 forms serve MQTT 5 clients. ternmq-admin webhooks register adds more until "
        "the node stops.",
        choices=ALL_HOOKS,
    ),
    Setting("webhooks.*.endpoint", "str", "", "The webhook's URL (POST, JSON)."),
    Setting(
        "webhooks.*.base64_payload",
        "bool",
        "on",
        "Publish payloads go to the webhook base64-encoded (VerneMQ's default), and a "
        "payload modifier comes back so.",
    ),
    Setting(
        "webhooks.timeout",
        "duration",
        "5s",
        "A webhook that has not answered by then refuses (0x87, or 3.1.1's not "
        "authorised) and is logged as webhook.failed.",
    ),
    Setting(
        "webhooks.pool_max_connections",
        "int",
        "100",
        "HTTP connections open to the webhook endpoints at most, per listener process.",
        minimum=1,
    ),
    Setting(
        "webhooks.pool_timeout",
        "duration",
        "60s",
        "An idle connection to an endpoint is closed after this.",
    ),
    Setting(
        "ternmq_acl.acl_reload_interval",
        "duration",
        "10s",
        "How often the ACL file is checked for changes (0 = never).",
    ),
    Setting("ternmq_acl.acl_file", "str", "./ternmq.acl", "ACL file (VerneMQ's vmq_acl syntax)."),
    # -- session limits --------------------------------------------------------------
    Setting(
        "max_client_id_size",
        "int",
        "100",
        "Longest client id accepted (bytes); longer ones get 0x85 / return code 2.",
        minimum=1,
        maximum=65535,
        runtime=True,
    ),
    Setting(
        "allow_empty_client_id",
        "bool",
        "on",
        "Assign an id to clients that send an empty one (3.1.1 needs clean session).",
        runtime=True,
    ),
    Setting(
        "max_message_size",
        "size",
        "0",
        "Largest PUBLISH payload accepted (bytes, 0 = unlimited); bigger ones are refused "
        "and the connection closed (v5: 0x95).",
        runtime=True,
    ),
    Setting(
        "max_packet_size",
        "size",
        "268435455",
        "Largest MQTT packet accepted on a connection (v5 Maximum Packet Size).",
        minimum=16,
        maximum=268435455,
    ),
    Setting(
        "max_inflight_messages",
        "int",
        "20",
        "Unacknowledged QoS 1/2 messages per session towards a client (0 = unlimited).",
        minimum=0,
        maximum=65535,
        runtime=True,
    ),
    Setting(
        "receive_max_broker",
        "int",
        "100",
        "MQTT 5 Receive Maximum the broker announces to clients.",
        minimum=1,
        maximum=65535,
    ),
    Setting(
        "max_online_messages",
        "int",
        "1000",
        "Messages buffered for an online session beyond the inflight window before new "
        "ones are dropped (-1 = unlimited).",
        minimum=-1,
        runtime=True,
    ),
    Setting(
        "max_offline_messages",
        "int",
        "1000",
        "Messages kept for an offline persistent session before new ones are dropped "
        "(-1 = unlimited).",
        minimum=-1,
        runtime=True,
    ),
    Setting(
        "retry_interval",
        "duration",
        "20s",
        "Resend an unacknowledged QoS 1/2 message after this long (DUP set).",
        runtime=True,
    ),
    Setting(
        "persistent_client_expiration",
        "duration",
        "never",
        "Delete offline persistent 3.1/3.1.1 sessions after this long (never = keep).",
    ),
    Setting(
        "max_session_expiry_interval",
        "duration",
        "never",
        "Cap on the MQTT 5 session expiry a client may ask for.",
    ),
    Setting(
        "queue_deliver_mode",
        "enum",
        "fanout",
        "With allow_multiple_sessions: fanout delivers to every session, balance to one.",
        choices=("fanout", "balance"),
    ),
    Setting(
        "allow_multiple_sessions",
        "enum",
        "off",
        "Not supported: a client id always has one live session (takeover), so only off "
        "is accepted.",
        choices=("off",),
    ),
    Setting(
        "keepalive_factor",
        "float",
        "1.5",
        "A client silent for keepalive x this factor is disconnected.",
        minimum=1.0,
    ),
    Setting(
        "max_keepalive",
        "int",
        "65535",
        "Largest keepalive accepted; MQTT 5 clients above it get Server Keep Alive.",
        minimum=0,
        maximum=65535,
        runtime=True,
    ),
    Setting(
        "connect_timeout",
        "duration",
        "10s",
        "A connection that sends no complete CONNECT within this is closed.",
    ),
    Setting(
        "upgrade_outgoing_qos",
        "bool",
        "off",
        "Deliver with the subscription's QoS even when the publish QoS is lower.",
    ),
    Setting(
        "topic_alias_max_client",
        "int",
        "100",
        "MQTT 5 Topic Alias Maximum the broker accepts from clients (0 = none).",
        minimum=0,
        maximum=65535,
    ),
    Setting(
        "topic_alias_max_broker",
        "int",
        "100",
        "Most topic aliases the broker uses towards a client (bounded by the client's).",
        minimum=0,
        maximum=65535,
    ),
    Setting(
        "shared_subscription_policy",
        "enum",
        "prefer_local",
        "Which member of a shared subscription group receives a message.",
        choices=("prefer_local", "local_only", "random", "round_robin"),
        runtime=True,
    ),
    Setting("retain_available", "bool", "on", "Accept retained messages."),
    Setting("wildcard_subscription_available", "bool", "on", "Accept + and # in filters."),
    Setting("shared_subscription_available", "bool", "on", "Accept $share subscriptions."),
    Setting("max_qos", "int", "2", "Highest QoS accepted from publishers.", minimum=0, maximum=2),
    Setting(
        "max_pending_bytes",
        "size",
        "4MB",
        "Bytes written to a client's socket but not yet sent before the broker stops "
        "reading its own queue for it (slow consumer protection).",
        minimum=65536,
    ),
    # -- netsplits (effective in a cluster) -----------------------------------------
    Setting(
        "allow_register_during_netsplit",
        "bool",
        "off",
        "Accept CONNECT on the minority side of a partition.",
    ),
    Setting(
        "allow_publish_during_netsplit",
        "bool",
        "off",
        "Accept PUBLISH on the minority side of a partition. Off: 5.0 publishers hear "
        "PUBACK/PUBREC 0x83; a 3.1/3.1.1 QoS 1/2 publisher is closed unacknowledged (it "
        "resends); QoS 0 is dropped (message.dropped, reason netsplit).",
    ),
    Setting(
        "allow_subscribe_during_netsplit",
        "bool",
        "off",
        "Accept SUBSCRIBE on the minority side of a partition. Off: SUBACK 0x83 (5.0) or "
        "0x80 (3.1.1) for every filter.",
    ),
    Setting(
        "allow_unsubscribe_during_netsplit",
        "bool",
        "off",
        "Accept UNSUBSCRIBE on the minority side of a partition. Off: UNSUBACK 0x83 "
        "(5.0); a 3.1/3.1.1 client, whose UNSUBACK cannot refuse, is closed.",
    ),
    # -- $SYS --------------------------------------------------------------------------
    Setting(
        "systree_enabled",
        "bool",
        "on",
        "Publish every service's metrics as QoS 0 messages under $SYS/<nodename>/ (e.g. "
        "ternmq_messages_published_total{qos=1} as $SYS/<nodename>/messages/published/"
        "total/qos/1), as VerneMQ's systree does.",
    ),
    Setting(
        "systree_interval", "duration", "20s", "How often the $SYS messages go out (0 = never)."
    ),
    # -- forwarding between nodes ------------------------------------------------------
    Setting(
        "cluster.forward_listen",
        "address",
        "127.0.0.1:0",
        "Where this node's listener takes the messages other nodes forward to its sessions "
        "(host:port; every call must prove distributed_cookie). Port 0 takes a free port, "
        "which the cluster learns through gossip; on real hosts set a fixed one.",
    ),
    Setting(
        "cluster.forward_timeout",
        "duration",
        "10s",
        "How long a message for a session on another node may wait for that node's "
        "listener to take it. Past it the copy is dropped (message.dropped, reason "
        "node_unreachable) and a QoS 1/2 publisher gets 0x80 instead of success.",
    ),
    Setting(
        "cluster.forward_queue",
        "int",
        "100000",
        "Most copies waiting for one other node; past it new copies for that node are "
        "dropped (reason forward_queue_full).",
        minimum=1,
    ),
]

_OPTION_NAMES = {
    "allowed_protocol_versions",
    "mountpoint",
    "max_connections",
    "proxy_protocol",
    "buffer_sizes",
}
TLS_OPTIONS = (
    "cafile",
    "certfile",
    "keyfile",
    "require_certificate",
    "use_identity_as_username",
    "tls_version",
    "ciphers",
    "crlfile",
    "handshake_timeout",
)


@dataclass(frozen=True, slots=True)
class TcpListener:
    name: str
    host: str
    port: int
    mountpoint: str
    allowed_versions: frozenset[int]
    max_connections: int
    buffer_size: int
    proxy_protocol: bool = False
    tls: TlsOptions | None = None  # a TLS listener's certificates and rules
    transport: str = "tcp"  # tcp, ssl, ws or wss


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """A TLS listener's ``listener.ssl.*`` options, as VerneMQ names them."""

    certfile: str
    keyfile: str
    cafile: str = ""
    require_certificate: bool = False
    use_identity_as_username: bool = False
    tls_version: str = "tlsv1.2"  # the lowest version accepted
    ciphers: str = ""  # OpenSSL cipher list for TLS 1.2 ("" = OpenSSL's defaults)
    crlfile: str = ""
    handshake_timeout: float = 10.0


@dataclass(frozen=True, slots=True)
class ListenerSettings:
    """What the listener process reads beyond its sessions' limits (``SessionLimits``)
    and its TCP listeners (``tcp_listeners``); built with ``typed_settings.build``."""

    nodename: str = setting("nodename")
    max_online_messages: int = setting("max_online_messages")
    max_offline_messages: int = setting("max_offline_messages")
    upgrade_outgoing_qos: bool = setting("upgrade_outgoing_qos")
    shared_subscription_policy: Literal["prefer_local", "local_only", "random", "round_robin"] = (
        setting("shared_subscription_policy")
    )
    max_pending_bytes: int = setting("max_pending_bytes")
    reuse_port: bool = setting("listener.reuse_port")
    processes: int = setting("listener.processes")
    passwd_enabled: bool = setting("plugins.ternmq_passwd")
    password_reload_interval: float = setting("ternmq_passwd.password_reload_interval")
    acl_reload_interval: float = setting("ternmq_acl.acl_reload_interval")
    systree_enabled: bool = setting("systree_enabled")
    systree_interval: float = setting("systree_interval")
    cookie: str = setting("distributed_cookie")
    allow_publish_during_netsplit: bool = setting("allow_publish_during_netsplit")
    allow_subscribe_during_netsplit: bool = setting("allow_subscribe_during_netsplit")
    allow_unsubscribe_during_netsplit: bool = setting("allow_unsubscribe_during_netsplit")
    forward_listen: str = setting("cluster.forward_listen")
    forward_timeout: float = setting("cluster.forward_timeout")
    forward_queue: int = setting("cluster.forward_queue")

    @property
    def auth_reload_interval(self) -> float:
        """How often the auth files are checked (0: never): the shorter of the two."""
        intervals = [i for i in (self.password_reload_interval, self.acl_reload_interval) if i]
        return min(intervals) if intervals else 0.0


def tcp_listeners(config: Config) -> list[TcpListener]:
    """The configured TCP listeners with their options resolved."""
    return _listeners(config, "tcp")


def ssl_listeners(config: Config) -> list[TcpListener]:
    """The configured TLS listeners (``listener.ssl.NAME``) with their options resolved."""
    return _listeners(config, "ssl")


def ws_listeners(config: Config) -> list[TcpListener]:
    """The configured WebSocket listeners, plain (``listener.ws.NAME``) and over TLS
    (``listener.wss.NAME``), with their options resolved."""
    return _listeners(config, "ws") + _listeners(config, "wss")


def _listeners(config: Config, transport: str) -> list[TcpListener]:
    out = []
    for key, value in sorted(config.matching(f"listener.{transport}.*").items()):
        name = key.split(".")[2]
        if name in _OPTION_NAMES or name in TLS_OPTIONS or value in ("off", ""):
            continue
        host, _, port = value.rpartition(":")

        def opt(option: str, name: str = name) -> Any:
            specific = config.explicit().get(f"listener.{transport}.{name}.{option}")
            if specific is not None:
                return specific
            if option in ("mountpoint", "max_connections"):
                return config[f"listener.{option}"]
            return config[f"listener.{transport}.{option}"]

        tls = None
        if transport in ("ssl", "wss"):
            tls = TlsOptions(
                certfile=opt("certfile"),
                keyfile=opt("keyfile"),
                cafile=opt("cafile"),
                require_certificate=opt("require_certificate"),
                use_identity_as_username=opt("use_identity_as_username"),
                tls_version=opt("tls_version"),
                ciphers=opt("ciphers"),
                crlfile=opt("crlfile"),
                handshake_timeout=opt("handshake_timeout"),
            )
        out.append(
            TcpListener(
                name=name,
                host=host.strip("[]"),
                port=int(port),
                mountpoint=opt("mountpoint"),
                allowed_versions=frozenset(int(v) for v in opt("allowed_protocol_versions")),
                max_connections=opt("max_connections"),
                buffer_size=config["listener.tcp.buffer_sizes"],
                proxy_protocol=opt("proxy_protocol"),
                tls=tls,
                transport=transport,
            )
        )
    return out
