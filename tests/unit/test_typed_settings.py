"""Typed settings are checked against the schema when built, not when first read."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass
from pathlib import Path
from typing import Literal

import pytest

from services.common.config import Config, Schema
from services.common.settings import Setting
from services.common.typed_settings import SettingsError, build, computed, fits, keys, setting
from services.gossip.config import GossipSettings
from services.msgstore.config import MsgstoreSettings
from services.node.schema import schema
from services.registry.config import NEVER, RegistrySettings

SCHEMA = Schema(
    [
        Setting("data_dir", "str", "./data", ""),
        Setting("x.size", "size", "4MB", ""),
        Setting("x.mode", "enum", "fast", "", choices=("fast", "safe")),
        Setting("x.ttl", "duration", "never", ""),
        Setting("x.name", "str", "n", ""),
        Setting("x.tcp.*", "address", "", ""),
    ]
)


def _never(value: float) -> float | None:
    return None if value < 0 else value


@dataclass(frozen=True, slots=True)
class Good:
    data_dir: Path = setting("data_dir", convert=Path)
    size: int = setting("x.size")
    mode: Literal["fast", "safe"] = setting("x.mode")
    ttl: float | None = setting("x.ttl", convert=_never)
    tcp: dict[str, str] = setting("x.tcp.*")


@dataclass(frozen=True, slots=True)
class Missing:
    size: int = setting("x.size")
    typo: int = setting("x.sise")


@dataclass(frozen=True, slots=True)
class WrongType:
    name: int = setting("x.name")
    size: str = setting("x.size")


def test_builds_typed_values_from_defaults_and_overrides() -> None:
    config = SCHEMA.empty().with_overrides({"x.ttl": "30s", "x.tcp.a": "127.0.0.1:1"})
    got = build(Good, config)
    assert got == Good(
        data_dir=Path("./data"),
        size=4 * 1024**2,
        mode="fast",
        ttl=30.0,
        tcp={"x.tcp.a": "127.0.0.1:1"},
    )
    assert build(Good, SCHEMA.empty()).ttl is None
    with pytest.raises(FrozenInstanceError):
        got.size = 1  # type: ignore[misc]
    assert keys(Good)["size"] == "x.size"


def test_a_key_missing_from_the_schema_fails_naming_field_and_key() -> None:
    with pytest.raises(SettingsError) as err:
        build(Missing, SCHEMA.empty())
    assert err.value.problems == ["typo: key 'x.sise' is not declared in the schema"]


def test_a_value_of_the_wrong_type_fails_naming_every_field() -> None:
    with pytest.raises(SettingsError) as err:
        build(WrongType, SCHEMA.empty())
    assert [p.split(":")[0] for p in err.value.problems] == ["name", "size"]
    assert "does not fit int" in err.value.problems[0]


def test_a_literal_field_refuses_a_value_outside_it() -> None:
    @dataclass(frozen=True, slots=True)
    class Narrow:
        mode: Literal["fast"] = setting("x.mode")

    with pytest.raises(SettingsError):
        build(Narrow, SCHEMA.empty().with_overrides({"x.mode": "safe"}))


def _sock(config: Config) -> str:
    return f"unix:{config['data_dir']}/run/x.sock"


@dataclass(frozen=True, slots=True)
class Computed:
    address: str = computed(_sock)
    broken: int = computed(lambda c: c["x.nope"])


def test_a_computed_field_is_checked_like_the_others() -> None:
    with pytest.raises(SettingsError) as err:
        build(Computed, SCHEMA.empty())
    assert len(err.value.problems) == 1 and err.value.problems[0].startswith("broken:")


def test_fits() -> None:
    assert fits(1, float) and not fits(True, int) and not fits(1.5, int)
    assert fits(("a", "b"), tuple[str, ...]) and not fits(("a", 1), tuple[str, ...])
    assert fits(None, float | None) and not fits("x", float | None)


@pytest.mark.parametrize("cls", [MsgstoreSettings, GossipSettings, RegistrySettings])
def test_each_service_builds_its_settings_from_the_default_schema(
    cls: type[MsgstoreSettings | GossipSettings | RegistrySettings],
) -> None:
    settings = build(cls, schema().empty())
    assert settings.data_dir == Path("./data")
    assert settings.address.startswith("unix:")


def test_service_settings_convert_as_the_services_expect() -> None:
    config = schema().empty()
    msgstore = build(MsgstoreSettings, config)
    assert (msgstore.fsync, msgstore.max_batch_delay) == ("always", 0.002)
    gossip = build(GossipSettings, config.with_overrides({"gossip.gc_interval": "0s"}))
    assert (gossip.tombstone_ttl_s, gossip.gc_interval_s) == (3600.0, 0.1)
    registry = build(RegistrySettings, config)
    assert registry.persistent_client_expiration == NEVER
    assert registry.max_online_len == 1000 + 20
    unlimited = build(
        RegistrySettings,
        config.with_overrides(
            {
                "max_online_messages": "-1",
                "max_offline_messages": "-1",
                "max_session_expiry_interval": "1h",
            }
        ),
    )
    assert (unlimited.max_online_len, unlimited.max_offline_messages) == (0, 0)
    assert unlimited.max_session_expiry_interval == 3600
