"""Settings changed while the node runs: ``ternmq-admin set KEY=VALUE``, as VerneMQ's
``vmq-admin set``.

Only keys the schema marks ``runtime`` may change (:func:`change` refuses the rest, with
the reason): those a running process can take without a restart. The node's HTTP API
keeps the values set so far in ``DATA_DIR/run/settings.json``
(``services.common.runtime_file``); every service process watches it
(:func:`watch`, from ``service.run``) and applies it over its configuration. What a
change reaches:

* ``log.level`` and ``log.message_events``: every process, at once;
* the session limits (``max_client_id_size``, ``max_message_size``,
  ``max_inflight_messages``, ``max_online_messages``, ``retry_interval``, ...): the
  connections made after it, as each CONNECT takes its listener's limits then;
* ``max_offline_messages``: the sessions registered after it;
* ``shared_subscription_policy``: the next message routed to a shared group.

As in VerneMQ, the values last until the node stops: a node start removes the file and
``ternmq.conf`` applies again.
"""

from __future__ import annotations

from collections.abc import Callable

from services.common import log
from services.common.config import Config, ConfigError
from services.common.runtime_file import RuntimeFile, Watcher
from services.common.settings import SettingError

Values = dict[str, str]  # key -> the value as written after ``KEY=``


def runtime_file(data_dir: str) -> RuntimeFile:
    """``DATA_DIR/run/settings.json``: ``{"generation": N, "values": {KEY: VALUE}}``."""
    return RuntimeFile(data_dir, "settings", "values")


def change(config: Config, current: Values, pairs: list[str]) -> Values | str:
    """The run-time values after ``pairs`` (``KEY=VALUE`` each) are set over ``current``,
    or why they cannot be: every problem at once, as the configuration file's are."""
    schema = config.schema
    new = dict(current)
    problems = []
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not key:
            problems.append(f"expected KEY=VALUE, got {pair!r}")
            continue
        setting = schema.lookup(key)
        if setting is None:
            hint = schema.suggest(key)
            problems.append(f"unknown key {key!r}" + (f" (did you mean {hint!r}?)" if hint else ""))
        elif not setting.runtime:
            problems.append(f"{key} cannot be changed while the node runs: set it in ternmq.conf")
        else:
            try:
                setting.parse(raw)
            except SettingError as exc:
                problems.append(f"{key}: {exc}")
            new[key] = raw
    return "; ".join(problems) if problems else new


class LiveSettings:
    """One process's configuration: the file's as it started, with the values set since.
    Parts that read a runtime key after start-up subscribe with :meth:`on_change`."""

    def __init__(self, config: Config) -> None:
        self.base = config
        self.current = config
        self.values: Values = {}
        self._listeners: list[Callable[[Config], None]] = []

    def apply(self, values: Values) -> None:
        """The file's values (all of them, not a difference): from the base again."""
        try:
            current = self.base.with_overrides({str(k): str(v) for k, v in values.items()})
        except ConfigError as exc:  # a hand-edited file: the watcher logs it, keeps going
            raise ValueError(str(exc)) from exc
        self.values, self.current = dict(values), current
        log.set_level(str(current["log.level"]))
        log.set_message_events(bool(current["log.message_events"]))
        for fn in self._listeners:
            fn(current)

    def on_change(self, fn: Callable[[Config], None]) -> None:
        """Call ``fn`` with the whole configuration after each change (and now, if
        values were set before this part started)."""
        self._listeners.append(fn)
        if self.values:
            fn(self.current)


_live: LiveSettings | None = None


def watch(config: Config) -> Watcher:
    """This process's :class:`LiveSettings` (see :func:`live`), applied from the node's
    file now and watched while the event loop runs."""
    global _live
    _live = LiveSettings(config)
    watcher = Watcher(runtime_file(str(config["data_dir"])), _live.apply, "settings.runtime")
    watcher.check()
    watcher.start()
    return watcher


def live() -> LiveSettings | None:
    """The process's live settings, once :func:`watch` has run (None in tools and
    tests that run a service's parts alone)."""
    return _live
