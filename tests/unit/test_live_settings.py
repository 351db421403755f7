"""``ternmq-admin set``: which keys may change while the node runs, how a value is
checked, and what a process makes of the node's file of values set so far."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.common import live_settings, log
from services.common.config import load
from services.common.runtime_file import Watcher
from services.node.schema import schema


@pytest.fixture
def config():  # type: ignore[no-untyped-def]
    return load(schema(), None, {"max_client_id_size": "64"})


def test_a_runtime_key_is_set_over_what_was_set_before(config) -> None:  # type: ignore[no-untyped-def]
    first = live_settings.change(config, {}, ["max_client_id_size=45"])
    assert first == {"max_client_id_size": "45"}
    second = live_settings.change(config, first, ["retry_interval = 30s", "max_client_id_size=20"])
    assert second == {"max_client_id_size": "20", "retry_interval": "30s"}
    assert config.with_overrides(second)["retry_interval"] == 30.0


def test_what_cannot_change_is_refused_with_every_reason_at_once(config) -> None:  # type: ignore[no-untyped-def]
    why = live_settings.change(
        config,
        {"max_client_id_size": "45"},
        ["nodename=x@y", "max_client_id_siz=5", "max_client_id_size=lots", "oops"],
    )
    assert isinstance(why, str)
    assert "nodename cannot be changed while the node runs" in why
    assert "did you mean 'max_client_id_size'" in why
    assert "max_client_id_size" in why and "lots" in why
    assert "expected KEY=VALUE, got 'oops'" in why
    out_of_range = live_settings.change(config, {}, ["max_client_id_size=0"])
    assert isinstance(out_of_range, str) and "max_client_id_size" in out_of_range


def test_every_runtime_key_is_one_a_running_process_reads() -> None:
    """A key marked runtime that nothing applies would be a promise broken in silence:
    each must be in the list the docstring of ``live_settings`` names."""
    runtime = {s.key for s in schema().settings if s.runtime}
    assert runtime == {
        "log.level",
        "log.message_events",
        "max_message_size",
        "max_inflight_messages",
        "max_online_messages",
        "max_offline_messages",
        "retry_interval",
        "shared_subscription_policy",
        "max_client_id_size",
        "allow_empty_client_id",
        "max_keepalive",
    }
    doc = live_settings.__doc__ or ""
    for key in runtime - {"allow_empty_client_id", "max_keepalive"}:
        assert f"``{key}``" in doc, key


def test_a_process_applies_the_file_from_its_configuration_each_time(
    config,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    live = live_settings.LiveSettings(config)
    seen: list[object] = []
    file = live_settings.runtime_file(str(tmp_path))
    watcher = Watcher(file, live.apply, "settings.runtime")
    level = log._state.level
    try:
        file.save(1, {"max_client_id_size": "45", "log.level": "error"})
        assert watcher.check()
        assert live.current["max_client_id_size"] == 45 and log._state.level == 40
        live.on_change(lambda c: seen.append(c["max_client_id_size"]))
        assert seen == [45]  # a part that starts after a change hears it at once
        file.save(2, {"log.level": "info"})  # max_client_id_size set back: the file's again
        assert watcher.check()
        assert live.current["max_client_id_size"] == 64 and seen == [45, 64]
        assert log._state.level == 20
        assert file.applied(os.getpid()) == 2
    finally:
        log._state.level = level


def test_an_admin_api_on_a_wildcard_address_is_announced_at_the_nodes_host() -> None:
    from services.node.http_api import advertised

    assert advertised("127.0.0.1:8888", "n1@10.0.0.5") == "127.0.0.1:8888"
    assert advertised("0.0.0.0:8888", "n1@10.0.0.5") == "10.0.0.5:8888"
    assert advertised("[::]:8888", "n1@fd00::5") == "[fd00::5]:8888"


def test_a_hand_edited_file_with_a_bad_value_is_logged_and_changes_nothing(
    config,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    live = live_settings.LiveSettings(config)
    file = live_settings.runtime_file(str(tmp_path))
    watcher = Watcher(file, live.apply, "settings.runtime")
    file.save(1, {"max_client_id_size": "lots"})
    assert not watcher.check()
    assert live.current["max_client_id_size"] == 64 and file.applied(os.getpid()) == 0
