"""The ``ternmq`` command: a whole node, one service alone, the config, the logs, the ETL.

Every command loads the whole node's schema, so a service started alone
(``python -m services.NAME``, which comes through here too) reads the same
``node.conf`` as it would under ``ternmq start``.
"""

from __future__ import annotations

import faulthandler
import functools
import importlib
import sys
from pathlib import Path
from typing import Any

import click

from services.common.config import ConfigError, load
from services.node.schema import checked, schema

EXIT_CONFIG = 2


def _overrides(sets: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--set")
        out[key.strip()] = value
    return out


def load_config(path: str | None, sets: tuple[str, ...] = ()) -> Any:
    """Load and validate, or exit with status 2 naming the file, line and reason."""
    try:
        return checked(load(schema(), path, _overrides(sets)))
    except ConfigError as exc:
        click.echo(f"ternmq: invalid configuration:\n{exc}", err=True)
        sys.exit(EXIT_CONFIG)


def run_service(name: str, config: Any, process: int = 0) -> int:
    from services.common.service import run
    from services.listener.processes import child_name

    server = importlib.import_module(f"services.{name}.server")
    if name == "listener":
        serve = functools.partial(server.serve, index=process)
        return run(name, config, serve, child_name(process))
    return run(name, config, server.serve)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """ternmq: a distributed MQTT broker."""


@cli.command()
@click.argument("name", type=click.Choice(["listener", "registry", "gossip", "msgstore"]))
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a key.")
@click.option(
    "--process",
    type=click.IntRange(0, None),
    default=0,
    show_default=True,
    help="listener only: which of listener.processes this is.",
)
def service(name: str, config_path: str | None, sets: tuple[str, ...], process: int) -> None:
    """Run one service of a node in the foreground."""
    if process and name != "listener":
        raise click.UsageError("--process applies to the listener only")
    sys.exit(run_service(name, load_config(config_path, sets), process))


@cli.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="ternmq.conf (defaults apply to every key it does not set).",
)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a key.")
def start(config_path: str | None, sets: tuple[str, ...]) -> None:
    """Run a node (all four services) in the foreground."""
    from services.node.start import start_node

    sys.exit(start_node(load_config(config_path, sets)))


@cli.group("dev-cluster", invoke_without_command=True)
@click.option("--nodes", "count", type=click.IntRange(1, 20), default=3, show_default=True)
@click.option("--base-dir", type=click.Path(file_okay=False), default=None)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="A key for every node.")
@click.pass_context
def dev_cluster(
    ctx: click.Context, count: int, base_dir: str | None, sets: tuple[str, ...]
) -> None:
    """Start N local nodes, joined, in the background (node k: MQTT 10003+50k, HTTP
    10008+50k); `dev-cluster stop --base-dir DIR` stops them."""
    if ctx.invoked_subcommand is not None:
        return
    if base_dir is None:
        raise click.UsageError("--base-dir is required")
    from services.node import dev_cluster as dc

    load_config(None, sets)  # a bad --set stops here (exit 2), before any node starts
    problem = dc.start(Path(base_dir), count, _overrides(sets))
    for d in dc.nodes(Path(base_dir), count):
        click.echo(
            f"{d.name}  mqtt 127.0.0.1:{d.mqtt_port}  http 127.0.0.1:{d.http_port}  "
            f"pid {dc.running_pid(d) or '-'}  {d.dir}"
        )
    if problem:
        click.echo(f"ternmq dev-cluster: not ready: {problem}", err=True)
        sys.exit(1)


@dev_cluster.command("stop")
@click.option("--base-dir", type=click.Path(file_okay=False), required=True)
def dev_cluster_stop(base_dir: str) -> None:
    """Stop every node of a dev cluster (SIGTERM, then SIGKILL of stragglers)."""
    from services.node import dev_cluster as dc

    stopped = dc.stop(Path(base_dir))
    click.echo(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")


@cli.group()
def config() -> None:
    """Inspect the configuration schema."""


@config.command("defaults")
def config_defaults() -> None:
    """Print the commented default ternmq.conf."""
    from services.common.config import render_default_conf

    click.echo(render_default_conf(schema()), nl=False)


@config.command("check")
@click.argument("path", type=click.Path(dir_okay=False))
def config_check(path: str) -> None:
    """Validate a ternmq.conf; exit 2 naming every bad line."""
    cfg = load_config(path)
    click.echo(f"{path}: ok ({len(cfg.explicit())} keys set)")


@cli.group("log")
def log_group() -> None:
    """The event logs."""


@log_group.command("convert")
@click.option(
    "--logs",
    type=click.Path(file_okay=False, exists=True),
    required=True,
    help="A node's log_dir.",
)
def log_convert(logs: str) -> None:
    """Write the events a node killed hard left in LOGS/spool into its .jsonl files.

    A node converts them itself when it starts again; this is for the logs of one that
    will not (before `ternmq etl run`). Run it on the node's machine: a spool whose writer
    still runs is left alone."""
    from services.common.logspool import convert_leftovers

    written = convert_leftovers(Path(logs))
    if not written:
        click.echo(f"{logs}: nothing left in a spool")
    for service, lines in written.items():
        click.echo(f"{service}: {lines} lines written to {Path(logs) / (service + '.jsonl')}")


def _add_etl() -> None:
    try:
        from spark_pipeline.cli import etl
    except ImportError:  # the ETL extra (pyspark) is not installed
        return
    cli.add_command(etl)


_add_etl()


def service_main(name: str) -> int:
    """``python -m services.NAME --config FILE [--set K=V]``."""
    faulthandler.enable()
    return int(cli.main(["service", name, *sys.argv[1:]], standalone_mode=False) or 0)


def main() -> None:
    # A crash in native code (grpc, uvloop, lmdb) prints the Python stack of every
    # thread to stderr, which is the node's console output, before the process dies.
    faulthandler.enable()
    cli()


if __name__ == "__main__":
    main()
