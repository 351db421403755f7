"""Typed settings: each service reads a frozen dataclass, built once from the schema.

Why: a key looked up by string (``config["msgstore.fsync"]``) is checked only when that
line runs, and its value is ``Any`` to the type checker. A settings class names every key
the service reads in one place; :func:`build` checks each against the schema and each
value against the field's type at start-up, so a typo or a schema change fails the
service before it serves, and the rest of the code reads attributes that mypy checks.

A field declares its key with :func:`setting`; ``convert`` turns the parsed value into
the field's type (``Path``, "never" as ``None`` …), and the *converted* value is what must
fit the annotation. A key with ``*`` (``listener.tcp.*``) gives a ``dict`` of every key
that matches it. Values derived from several keys are properties of the class, or, when
a shared resolver already computes them from a ``Config`` (a service's address, where
``auto`` depends on ``data_dir``), fields declared with :func:`computed`.

Usage::

    @dataclass(frozen=True, slots=True)
    class MsgstoreSettings:
        data_dir: Path = setting("data_dir", convert=Path)
        fsync: Literal["always", "interval", "never"] = setting("msgstore.fsync")
        map_size: int = setting("msgstore.map_size")

        address: str = computed(lambda c: service_address(c, "msgstore"))

    settings = build(MsgstoreSettings, config)  # SettingsError names every bad field

Tests that need other values build from ``config.with_overrides({...})`` or construct
the dataclass directly with keyword arguments.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from services.common.config import Config
from services.common.settings import Value

T = TypeVar("T")

_KEY = "ternmq.key"
_CONVERT = "ternmq.convert"
_COMPUTE = "ternmq.compute"


class SettingsError(Exception):
    """A settings class does not fit the schema; ``problems`` names each field."""

    def __init__(self, cls: type, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{cls.__name__}: " + "; ".join(problems))


def setting(key: str, *, convert: Callable[[Any], Any] | None = None) -> Any:
    """A dataclass field read from the configuration key ``key``.

    Typed ``Any`` so that ``name: int = setting("...")`` type-checks; :func:`build`
    always passes every field, so the absent default never shows.
    """
    return dataclasses.field(metadata={_KEY: key, _CONVERT: convert})


def computed(compute: Callable[[Config], Any]) -> Any:
    """A dataclass field whose value ``compute`` derives from the whole configuration.

    For a value that shared code already resolves from several keys; a settings class
    must not use it to look a key up by string (that is what :func:`setting` is for).
    """
    return dataclasses.field(metadata={_COMPUTE: compute})


def keys(cls: type) -> dict[str, str]:
    """Field name -> configuration key, for every field declared with :func:`setting`."""
    return {f.name: f.metadata[_KEY] for f in dataclasses.fields(cls) if _KEY in f.metadata}


def build(cls: type[T], config: Config) -> T:
    """An instance of ``cls`` with every field read from ``config``.

    Raises :class:`SettingsError` listing every field whose key the schema does not
    declare, whose conversion fails, or whose value does not fit its annotation.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    problems: list[str] = []
    for f in dataclasses.fields(cls):
        if _COMPUTE in f.metadata:
            key = "(computed)"
            try:
                value = f.metadata[_COMPUTE](config)
            except (KeyError, TypeError, ValueError) as exc:
                problems.append(f"{f.name}: cannot compute it: {exc!r}")
                continue
        elif _KEY in f.metadata:
            key = f.metadata[_KEY]
            raw = _lookup(config, key)
            if raw is _MISSING:
                problems.append(f"{f.name}: key {key!r} is not declared in the schema")
                continue
            convert = f.metadata[_CONVERT]
            try:
                value = raw if convert is None else convert(raw)
            except (TypeError, ValueError) as exc:
                problems.append(f"{f.name}: cannot convert {key} = {raw!r}: {exc}")
                continue
        else:
            problems.append(f"field {f.name} declares no key (use setting(...))")
            continue
        if not fits(value, hints[f.name]):
            problems.append(
                f"{f.name}: {key} gives {type(value).__name__} {value!r}, "
                f"which does not fit {_show(hints[f.name])}"
            )
            continue
        values[f.name] = value
    if problems:
        raise SettingsError(cls, problems)
    return cls(**values)


_MISSING: Any = object()


def _lookup(config: Config, key: str) -> Value:
    if "*" not in key:
        return config.get(key, _MISSING)
    # A pattern has no value of its own; the schema must declare the pattern itself.
    # Config keeps its schema private, and only this check needs it.
    if config._schema.lookup(key) is None:
        return _MISSING
    return config.matching(key)


def fits(value: object, tp: Any) -> bool:
    """Whether ``value`` is of type ``tp``: classes, unions, ``Literal``, ``tuple[...]``,
    ``dict``/``Mapping``; ``bool`` is not an ``int`` here, an ``int`` is a ``float``."""
    if tp is Any or tp is object:
        return True
    if tp is None or tp is type(None):
        return value is None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return any(fits(value, a) for a in args)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(fits(v, args[0]) for v in value)
        return len(args) == len(value) and all(fits(v, a) for v, a in zip(value, args, strict=True))
    if origin in (dict, Mapping, typing.Mapping):
        if not isinstance(value, Mapping):
            return False
        key_t, value_t = args or (Any, Any)
        return all(fits(k, key_t) and fits(v, value_t) for k, v in value.items())
    if origin is not None:
        return isinstance(value, origin)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(tp, type) and isinstance(value, tp)


def _show(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")
