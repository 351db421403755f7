"""Counters and gauges, rendered in the Prometheus text format.

Each service keeps its own :class:`MetricsRegistry` and serves its samples over the Admin RPC;
the node's ``/metrics`` gathers all of them. Hot paths hold a :class:`Counter` child and
call ``inc`` — a dict lookup is done once, when the child is made, not per message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass(slots=True)
class Child:
    value: float = 0.0

    def inc(self, n: float = 1.0) -> None:
        self.value += n

    def set(self, v: float) -> None:
        self.value = v


@dataclass(slots=True)
class Metric:
    name: str
    help: str
    kind: str  # counter | gauge
    label_names: tuple[str, ...] = ()
    children: dict[tuple[str, ...], Child] = field(default_factory=dict)
    fn: Callable[[], float] | None = None

    def labels(self, *values: str) -> Child:
        child = self.children.get(values)
        if child is None:
            if len(values) != len(self.label_names):
                raise ValueError(f"{self.name} takes labels {self.label_names}")
            child = self.children[values] = Child()
        return child

    def inc(self, n: float = 1.0) -> None:
        self.labels().inc(n)

    def set(self, v: float) -> None:
        self.labels().set(v)


@dataclass(frozen=True, slots=True)
class SampleValue:
    name: str
    labels: dict[str, str]
    value: float
    kind: str
    help: str


class MetricsRegistry:
    def __init__(self, prefix: str = "ternmq_") -> None:
        self.prefix = prefix
        self._metrics: dict[str, Metric] = {}

    def _add(
        self,
        name: str,
        help: str,
        kind: str,
        labels: Iterable[str],
        fn: Callable[[], float] | None = None,
    ) -> Metric:
        full = self.prefix + name
        existing = self._metrics.get(full)
        if existing is not None:
            return existing
        metric = Metric(full, help, kind, tuple(labels), fn=fn)
        self._metrics[full] = metric
        return metric

    def counter(self, name: str, help: str, labels: Iterable[str] = ()) -> Metric:
        return self._add(name, help, "counter", labels)

    def gauge(
        self,
        name: str,
        help: str,
        labels: Iterable[str] = (),
        fn: Callable[[], float] | None = None,
    ) -> Metric:
        return self._add(name, help, "gauge", labels, fn)

    def samples(self) -> list[SampleValue]:
        out = []
        for m in self._metrics.values():
            if m.fn is not None:
                out.append(SampleValue(m.name, {}, float(m.fn()), m.kind, m.help))
                continue
            if not m.children and not m.label_names:
                m.labels()
            for values, child in m.children.items():
                out.append(
                    SampleValue(
                        m.name,
                        dict(zip(m.label_names, values, strict=True)),
                        child.value,
                        m.kind,
                        m.help,
                    )
                )
        return out


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_prometheus(samples: Iterable[SampleValue]) -> str:
    """Text exposition format 0.0.4; samples of one name are grouped under one HELP/TYPE."""
    by_name: dict[str, list[SampleValue]] = {}
    for s in samples:
        by_name.setdefault(s.name, []).append(s)
    lines = []
    for name, group in sorted(by_name.items()):
        lines.append(f"# HELP {name} {group[0].help}")
        lines.append(f"# TYPE {name} {group[0].kind}")
        for s in group:
            label = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(s.labels.items()))
            value = repr(s.value) if s.value != int(s.value) else str(int(s.value))
            lines.append(f"{name}{{{label}}} {value}" if label else f"{name} {value}")
    return "\n".join(lines) + "\n"
