"""``ternmq-admin``: the operator's view of a running node, over its HTTP admin API.

Tables are drawn the way ``vmq-admin`` draws them; ``--json`` prints the API's JSON for
scripts. Exit status: 0 ok, 1 the node answered with an error, 3 the node is unreachable.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, NoReturn
from urllib.parse import urlencode

import click

EXIT_ERROR = 1
EXIT_UNREACHABLE = 3


def render_table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    """A ``+---+`` table like vmq-admin's; empty input gives just the header."""
    if columns is None:
        columns = list(rows[0]) if rows else []
    if not columns:
        return "(nothing to show)\n"
    cells = [[_cell(row.get(c, "")) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    sep = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(values: list[str]) -> str:
        return "|" + "|".join(f" {v:<{w}} " for v, w in zip(values, widths, strict=True)) + "|"

    out = [sep, line(columns), sep, *(line(r) for r in cells), sep]
    return "\n".join(out) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


class Node:
    def __init__(self, address: str) -> None:
        self.base = address if address.startswith("http") else f"http://{address}"

    def get(self, path: str, **query: Any) -> Any:
        try:
            with urllib.request.urlopen(_url(self.base, path, query), timeout=10) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            self._failed(exc)
        except (urllib.error.URLError, OSError) as exc:
            self._unreachable(exc)

    def stream(self, path: str, **query: Any) -> Iterator[str]:
        """The lines of a streamed answer, as they come."""
        try:
            with urllib.request.urlopen(_url(self.base, path, query), timeout=None) as resp:
                for raw in resp:
                    yield raw.decode("utf-8", errors="replace").rstrip("\n")
        except urllib.error.HTTPError as exc:
            self._failed(exc)
        except (urllib.error.URLError, OSError) as exc:
            self._unreachable(exc)

    @staticmethod
    def _failed(exc: urllib.error.HTTPError) -> NoReturn:
        body = exc.read().decode(errors="replace")
        try:
            message = json.loads(body).get("error", body)
        except ValueError:
            message = body
        click.echo(f"ternmq-admin: {message}", err=True)
        sys.exit(EXIT_ERROR)

    def _unreachable(self, exc: Exception) -> NoReturn:
        click.echo(f"ternmq-admin: node {self.base} unreachable: {exc}", err=True)
        sys.exit(EXIT_UNREACHABLE)


def _url(base: str, path: str, query: dict[str, Any]) -> str:
    params = urlencode(
        [
            (k, v)
            for k, vs in query.items()
            if vs is not None
            for v in (vs if isinstance(vs, list | tuple) else [vs])
        ]
    )
    return f"{base}{path}" + (f"?{params}" if params else "")


def _emit(ctx: click.Context, data: Any, columns: list[str] | None = None) -> None:
    if ctx.obj["json"]:
        click.echo(json.dumps(data, indent=1, default=str))
    elif isinstance(data, list):
        click.echo(render_table(data, columns), nl=False)
    else:
        click.echo(render_table([data], columns), nl=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--node",
    default="127.0.0.1:8888",
    show_default=True,
    help="HTTP address of the node (listener.http.default).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.pass_context
def cli(ctx: click.Context, node: str, as_json: bool) -> None:
    """Administer a ternmq node."""
    ctx.obj = {"node": Node(node), "json": as_json}


@cli.group()
def cluster() -> None:
    """Cluster membership."""


@cluster.command("show")
@click.pass_context
def cluster_show(ctx: click.Context) -> None:
    """List the cluster's members: state (up, down, leaving), address, majority flag."""
    rows = ctx.obj["node"].get("/api/v1/cluster/show")
    _emit(
        ctx,
        [
            {
                "Node": r["node"],
                "Running": str(r["running"]).lower(),
                "State": r["state"],
                "Address": r["address"],
                "Majority": str(r["majority"]).lower(),
            }
            for r in rows
        ]
        if not ctx.obj["json"]
        else rows,
    )


def _named(arg: str, key: str, what: str) -> str:
    """The value of a VerneMQ-style ``key=value`` argument (usage error otherwise)."""
    name, sep, value = arg.partition("=")
    if name != key or not sep or not value:
        raise click.UsageError(f"expected {key}={what}")
    return value


@cluster.command("join")
@click.argument("discovery_node", metavar="discovery-node=HOST:PORT")
@click.pass_context
def cluster_join(ctx: click.Context, discovery_node: str) -> None:
    """Join the cluster of the member whose inter-node address is HOST:PORT."""
    seed = _named(discovery_node, "discovery-node", "HOST:PORT")
    result = ctx.obj["node"].get("/api/v1/cluster/join", **{"discovery-node": seed})
    _emit(
        ctx,
        result if ctx.obj["json"] else {"Joined": "true", "Members": ", ".join(result["members"])},
    )


@cluster.command("leave")
@click.argument("node", metavar="node=NODENAME")
@click.pass_context
def cluster_leave(ctx: click.Context, node: str) -> None:
    """Remove a member that is down from the cluster (it stops counting in majorities)."""
    name = _named(node, "node", "NODENAME")
    result = ctx.obj["node"].get("/api/v1/cluster/leave", node=name)
    _emit(
        ctx,
        result if ctx.obj["json"] else {"Left": name, "Members": ", ".join(result["members"])},
    )


@cli.group()
def session() -> None:
    """Sessions."""


@session.command("show")
@click.option("--client_id", "--client-id", "client_id", default="", help="Only this client.")
@click.option("--local", is_flag=True, help="Only the sessions this node owns.")
@click.pass_context
def session_show(ctx: click.Context, client_id: str, local: bool) -> None:
    """List sessions (online and offline persistent ones) of every member of the cluster,
    each client id once, with the node that owns it."""
    rows = ctx.obj["node"].get(
        "/api/v1/session/show", client_id=client_id or None, local="1" if local else None
    )
    _emit(
        ctx,
        rows,
        [
            "client_id",
            "mountpoint",
            "user",
            "peer",
            "protocol",
            "online",
            "persistent",
            "node",
            "epoch",
            "replicas",
        ],
    )


@cli.group()
def retain() -> None:
    """Retained messages."""


@retain.command("show")
@click.option("--topic", default=None, help="Only topics matching this filter.")
@click.option("--payload", is_flag=True, help="Show payloads.")
@click.pass_context
def retain_show(ctx: click.Context, topic: str | None, payload: bool) -> None:
    """List retained messages."""
    rows = ctx.obj["node"].get("/api/v1/retain/show", topic=topic, payload="1" if payload else None)
    cols = ["topic", "mountpoint", "qos", "size"] + (["payload"] if payload else [])
    _emit(ctx, rows, cols)


@cli.group()
def listener() -> None:
    """MQTT listeners."""


@listener.command("show")
@click.pass_context
def listener_show(ctx: click.Context) -> None:
    """List listeners and their state."""
    _emit(
        ctx,
        ctx.obj["node"].get("/api/v1/listener/show"),
        ["type", "status", "name", "address", "port", "mountpoint", "max_conns", "protocols"],
    )


def _key_values(
    args: tuple[str, ...], allowed: tuple[str, ...], rename: Callable[[str], str] = str
) -> dict[str, str]:
    """VerneMQ-style ``key=value`` arguments, each of ``allowed`` at most once (a usage
    error otherwise); ``rename`` maps a spelling to its key first."""
    out: dict[str, str] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        key = rename(key)
        if not sep or key not in allowed or key in out:
            raise click.UsageError(f"unexpected argument {arg!r}")
        out[key] = value
    return out


def _where(args: tuple[str, ...]) -> dict[str, str]:
    """``address=IP port=PORT``, as ``vmq-admin listener`` takes them."""
    out = _key_values(args, ("address", "port"))
    if set(out) != {"address", "port"}:
        raise click.UsageError("expected address=IP port=PORT")
    return out


def _listener_op(ctx: click.Context, op: str, query: dict[str, Any]) -> None:
    ctx.obj["node"].get(f"/api/v1/listener/{op}", **query)
    click.echo("Done")


_WHERE = click.argument("args", nargs=-1, metavar="address=IP port=PORT")


@listener.command("stop")
@_WHERE
@click.option("-k", "--kill_sessions", "kill", is_flag=True, help="End its connections too.")
@click.pass_context
def listener_stop(ctx: click.Context, args: tuple[str, ...], kill: bool) -> None:
    """Stop accepting connections on a listener (its connections stay, unless -k),
    until 'restart' or the node's next start."""
    _listener_op(ctx, "stop", {**_where(args), "kill_sessions": "1" if kill else None})


@listener.command("restart")
@_WHERE
@click.pass_context
def listener_restart(ctx: click.Context, args: tuple[str, ...]) -> None:
    """Accept connections again on a stopped listener."""
    _listener_op(ctx, "restart", _where(args))


@listener.command("start")
@_WHERE
@click.option("--mountpoint", default="", help="The mountpoint of its sessions.")
@click.option("--websocket", is_flag=True, help="MQTT over WebSocket (path /mqtt).")
@click.option("--max_connections", default=0, help="At most this many connections (0: no cap).")
@click.option("--proxy_protocol", is_flag=True, help="Expect a PROXY protocol header.")
@click.option("--nr_of_acceptors", default=0, help="Accepted for VerneMQ's scripts; unused.")
@click.pass_context
def listener_start(
    ctx: click.Context,
    args: tuple[str, ...],
    mountpoint: str,
    websocket: bool,
    max_connections: int,
    proxy_protocol: bool,
    nr_of_acceptors: int,
) -> None:
    """Start a new MQTT (or, with --websocket, WebSocket) listener until the node
    stops; every listener process of the node listens on it."""
    query = {
        **_where(args),
        "mountpoint": mountpoint,
        "websocket": "1" if websocket else None,
        "max_connections": max_connections,
        "proxy_protocol": "1" if proxy_protocol else None,
    }
    _listener_op(ctx, "start", query)


@listener.command("delete")
@_WHERE
@click.pass_context
def listener_delete(ctx: click.Context, args: tuple[str, ...]) -> None:
    """Remove a stopped listener until the node's next start."""
    _listener_op(ctx, "delete", _where(args))


@cli.group()
def webhooks() -> None:
    """Webhooks (VerneMQ's vmq_webhooks)."""


@webhooks.command("show")
@click.pass_context
def webhooks_show(ctx: click.Context) -> None:
    """List the webhooks: hook, endpoint, name, and whether the configuration or a
    ``register`` made them."""
    _emit(
        ctx,
        ctx.obj["node"].get("/api/v1/webhooks/show"),
        ["hook", "endpoint", "name", "base64_payload", "source"],
    )


def _webhook_args(args: tuple[str, ...], flags: dict[str, str | None]) -> dict[str, str]:
    """``hook=NAME endpoint=URL [base64_payload=true|false]`` (VerneMQ's ``vmq-admin
    webhooks register`` also takes ``--base64payload=…``: both are accepted)."""
    out = _key_values(
        args,
        ("hook", "endpoint", "base64_payload"),
        lambda key: key.lstrip("-").replace("base64payload", "base64_payload"),
    )
    out.update({k: v for k, v in flags.items() if v is not None})
    missing = [k for k in ("hook", "endpoint") if not out.get(k)]
    if missing:
        raise click.UsageError(f"expected {' '.join(f'{k}=…' for k in missing)}")
    return out


@webhooks.command("register")
@click.argument("args", nargs=-1, metavar="hook=NAME endpoint=URL [base64_payload=true|false]")
@click.option("--base64payload", "b64", default=None, help="true|false (VerneMQ's flag).")
@click.pass_context
def webhooks_register(ctx: click.Context, args: tuple[str, ...], b64: str | None) -> None:
    """Register an endpoint for a hook on every listener process of the node, until the
    node stops (as in VerneMQ, the configuration's webhooks apply again after a
    restart)."""
    query = _webhook_args(args, {"base64_payload": b64})
    ctx.obj["node"].get("/api/v1/webhooks/register", **query)
    click.echo("Done")


@webhooks.command("deregister")
@click.argument("args", nargs=-1, metavar="hook=NAME endpoint=URL")
@click.pass_context
def webhooks_deregister(ctx: click.Context, args: tuple[str, ...]) -> None:
    """Deregister an endpoint of a hook (a configured one too, until the node stops)."""
    query = _webhook_args(args, {})
    if "base64_payload" in query:
        raise click.UsageError("deregister takes hook=NAME endpoint=URL only")
    ctx.obj["node"].get("/api/v1/webhooks/deregister", **query)
    click.echo("Done")


@cli.group()
def metrics() -> None:
    """Metrics."""


@metrics.command("show")
@click.pass_context
def metrics_show(ctx: click.Context) -> None:
    """Print every metric of the node."""
    rows = ctx.obj["node"].get("/api/v1/metrics/show")
    if ctx.obj["json"]:
        _emit(ctx, rows)
        return
    for r in sorted(rows, key=lambda r: (r["name"], sorted(r["labels"].items()))):
        labels = ",".join(f"{k}={v}" for k, v in sorted(r["labels"].items()))
        value = int(r["value"]) if float(r["value"]).is_integer() else r["value"]
        click.echo(f"{r['kind']}.{r['name']}{'{' + labels + '}' if labels else ''} = {value}")


@cli.command("show")
@click.argument("keys", nargs=-1, required=True)
@click.option("--all", "everywhere", is_flag=True, help="One row per node of the cluster.")
@click.pass_context
def show(ctx: click.Context, keys: tuple[str, ...], everywhere: bool) -> None:
    """Show configuration values, as the node runs with them ('set' included)."""
    data = ctx.obj["node"].get("/api/v1/show", key=list(keys), all="1" if everywhere else None)
    if ctx.obj["json"]:
        _emit(ctx, data)
    elif everywhere:
        errors = any("error" in row for row in data)
        _emit(ctx, data, ["node", *keys, *(["error"] if errors else [])])
    else:
        _emit(ctx, [{"key": k, "value": v} for k, v in data.items()])


@cli.command("set")
@click.argument("pairs", nargs=-1, required=True, metavar="KEY=VALUE...")
@click.option("--all", "everywhere", is_flag=True, help="On every node of the cluster.")
@click.pass_context
def set_values(ctx: click.Context, pairs: tuple[str, ...], everywhere: bool) -> None:
    """Change settings while the node runs, until it stops (ternmq.conf applies again
    at the next start). Only some keys may change: the answer names any that may not."""
    data = ctx.obj["node"].get("/api/v1/set", set=list(pairs), all="1" if everywhere else None)
    if ctx.obj["json"]:
        _emit(ctx, data)
        return
    rows = [{"node": data["node"], "key": k, "value": v} for k, v in data["values"].items()]
    _emit(ctx, rows, ["node", "key", "value"])
    for node, answer in sorted(data.get("nodes", {}).items()):
        click.echo(f"{node}: {answer}")


@cli.group()
def trace() -> None:
    """Live traces."""


@trace.command("client")
@click.argument("arg", metavar="client-id=ID")
@click.option("--mountpoint", default="", help="The client's mountpoint.")
@click.option("--rate-max", default=10, show_default=True, help="Lines per interval, at most.")
@click.option("--rate-interval", default=100, show_default=True, help="The interval, in ms.")
@click.option("--payload-limit", default=200, show_default=True, help="Payload bytes shown.")
@click.option(
    "--duration", default=0, show_default=True, help="Seconds to trace (0: until Ctrl-C)."
)
@click.pass_context
def trace_client(
    ctx: click.Context,
    arg: str,
    mountpoint: str,
    rate_max: int,
    rate_interval: int,
    payload_limit: int,
    duration: int,
) -> None:
    """What one client sends and receives on this node, live, as 'vmq-admin trace
    client': MQTT RECV is from the client, MQTT SEND to it. Lines over the rate limit
    are dropped and counted; passwords are never shown."""
    client_id = _named(arg, "client-id", "ID")
    query = {
        "client_id": client_id,
        "mountpoint": mountpoint,
        "rate_max": rate_max,
        "rate_interval_ms": rate_interval,
        "payload_limit": payload_limit,
        "seconds": duration,
    }
    try:
        for line in ctx.obj["node"].stream("/api/v1/trace/client", **query):
            click.echo(line)
    except KeyboardInterrupt:
        pass


@cli.group()
def plugin() -> None:
    """Plugins."""


@plugin.command("show")
@click.pass_context
def plugin_show(ctx: click.Context) -> None:
    """List plugins and whether they are enabled."""
    _emit(ctx, ctx.obj["node"].get("/api/v1/plugin/show"))


def main() -> None:
    cli()
