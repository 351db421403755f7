"""Reading ``ternmq.conf``: ``key = value`` lines, ``#`` comments, every error at once.

The parser checks each line against the schema (``services.node.schema``) and
collects *all* problems — unknown keys with a "did you mean", bad values, duplicates —
each with the file and line, before failing, so an operator fixes a file in one pass.
The result is a frozen :class:`Config`, loaded once and passed in explicitly.

Overrides (``--set KEY=VALUE``, environment from the supervisor) are parsed by the same
code, reported with the source ``<override>``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from services.common.settings import Setting, SettingError, Value


@dataclass(frozen=True, slots=True)
class Problem:
    source: str
    line: int
    reason: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{where}: {self.reason}"


class ConfigError(Exception):
    """The configuration is invalid; ``problems`` lists every reason with its location."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class Config(Mapping[str, Value]):
    """Typed, immutable configuration: explicit values over schema defaults."""

    __slots__ = ("_explicit", "_schema", "_values", "source")

    def __init__(self, schema: Schema, values: dict[str, Value], source: str) -> None:
        self._schema = schema
        self._explicit = MappingProxyType(dict(values))
        merged = {s.key: s.parse(s.default) for s in schema.settings if not s.pattern}
        merged.update(values)
        self._values = MappingProxyType(merged)
        self.source = source

    def __getitem__(self, key: str) -> Value:
        return self._values[key]

    @property
    def schema(self) -> Schema:
        return self._schema

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def explicit(self) -> Mapping[str, Value]:
        """Only the keys the file or overrides set (what a child process must inherit)."""
        return self._explicit

    def matching(self, pattern: str) -> dict[str, Value]:
        """Values of keys matching a pattern key such as ``listener.tcp.*``."""
        probe = Setting(pattern, "str", "", "")
        return {k: v for k, v in self._values.items() if probe.matches(k)}

    def with_overrides(self, overrides: Mapping[str, str]) -> Config:
        values = dict(self._explicit)
        problems: list[Problem] = []
        for key, raw in overrides.items():
            _apply(self._schema, key, raw, "<override>", 0, values, problems)
        if problems:
            raise ConfigError(problems)
        return Config(self._schema, values, self.source)

    def to_lines(self) -> list[str]:
        """``key = value`` lines of the explicit values, parseable by :func:`parse_text`."""
        out = []
        for key, value in sorted(self._explicit.items()):
            setting = self._schema.lookup(key)
            assert setting is not None
            out.append(f"{key} = {self._schema.render(setting, value)}")
        return out


class Schema:
    """All declared settings, looked up by exact key first, then by pattern."""

    def __init__(self, settings: Iterable[Setting]) -> None:
        self.settings = tuple(settings)
        self._exact = {s.key: s for s in self.settings if not s.pattern}
        self._patterns = [s for s in self.settings if s.pattern]
        if len(self._exact) + len(self._patterns) != len(self.settings):
            seen: set[str] = set()
            dups = [s.key for s in self.settings if s.key in seen or seen.add(s.key)]  # type: ignore[func-returns-value]
            raise ValueError(f"settings declared twice: {dups}")

    def lookup(self, key: str) -> Setting | None:
        found = self._exact.get(key)
        if found is not None:
            return found
        for setting in self._patterns:
            if setting.matches(key):
                return setting
        return None

    def suggest(self, key: str) -> str | None:
        names = list(self._exact) + [s.key for s in self._patterns]
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
        return close[0] if close else None

    @staticmethod
    def render(setting: Setting, value: Value) -> str:
        from services.common.settings import render_value

        return render_value(setting.kind, value)

    def empty(self) -> Config:
        return Config(self, {}, "<defaults>")


def _apply(
    schema: Schema,
    key: str,
    raw: str,
    source: str,
    lineno: int,
    values: dict[str, Value],
    problems: list[Problem],
) -> None:
    setting = schema.lookup(key)
    if setting is None:
        hint = schema.suggest(key)
        reason = f"unknown key {key!r}" + (f" (did you mean {hint!r}?)" if hint else "")
        problems.append(Problem(source, lineno, reason))
        return
    try:
        values[key] = setting.parse(raw)
    except SettingError as exc:
        problems.append(Problem(source, lineno, f"{key}: {exc}"))


def parse_text(schema: Schema, text: str, source: str = "<string>") -> Config:
    values: dict[str, Value] = {}
    problems: list[Problem] = []
    first_line: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, raw = stripped.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.append(Problem(source, lineno, f"expected 'key = value', got {stripped!r}"))
            continue
        if key in first_line:
            problems.append(
                Problem(source, lineno, f"{key} is set twice (first on line {first_line[key]})")
            )
            continue
        first_line[key] = lineno
        _apply(schema, key, raw, source, lineno, values, problems)
    if problems:
        raise ConfigError(problems)
    return Config(schema, values, source)


def load(schema: Schema, path: str | Path | None, overrides: Mapping[str, str] = {}) -> Config:
    """Read a file (or only defaults when ``path`` is None) and apply overrides."""
    if path is None:
        config = schema.empty()
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError([Problem(str(path), 0, f"cannot read: {exc.strerror}")]) from None
        except UnicodeDecodeError as exc:
            raise ConfigError([Problem(str(path), 0, f"not UTF-8: {exc.reason}")]) from None
        config = parse_text(schema, text, str(path))
    return config.with_overrides(overrides) if overrides else config


def render_default_conf(schema: Schema) -> str:
    """The commented default ``ternmq.conf``, generated from the declarations."""
    out = [
        "# ternmq.conf — generated from the settings schema (`ternmq config defaults`).",
        "# Every key is shown with its default, commented out. Uncomment to change it.",
        "",
    ]
    for setting in schema.settings:
        for doc_line in setting.doc.strip().splitlines():
            out.append(f"## {doc_line.strip()}")
        if setting.choices:
            out.append(f"## one of: {', '.join(setting.choices)}")
        out.append(f"## type: {setting.kind}")
        out.append(f"# {setting.key} = {setting.default}")
        out.append("")
    return "\n".join(out)
