"""The synthetic generator and the plain Python audit, without Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_pipeline.expect import parse_expectations
from spark_pipeline.extract import find_log_files
from spark_pipeline.reference import audit_logs, parse_line, ts_micros
from spark_pipeline.rotating import RotatingWriter
from spark_pipeline.synthetic import SynthConfig, Truth, generate

FAULTY = SynthConfig(
    events=6_000,
    lose=0.02,
    duplicate=0.02,
    reorder=0.02,
    refuse=0.03,
    corrupt=4,
    rotate_bytes=60_000,
)


@pytest.fixture(scope="module")
def faulty_logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Truth]:
    out = tmp_path_factory.mktemp("faulty")
    return out, generate(FAULTY, out)


def test_rotating_writer_shifts_old_files_up(tmp_path: Path) -> None:
    w = RotatingWriter(tmp_path / "x.jsonl", limit=10)
    for i in range(4):
        w.write(f"line{i:05d}\n")
    w.close()
    names = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert names == {
        "x.jsonl": "line00003\n",
        "x.jsonl.1": "line00002\n",
        "x.jsonl.2": "line00001\n",
        "x.jsonl.3": "line00000\n",
    }
    assert [p.name for p in find_log_files(tmp_path)] == [
        "x.jsonl.3",
        "x.jsonl.2",
        "x.jsonl.1",
        "x.jsonl",
    ]


def test_generated_logs_are_rotated_and_in_time_order(faulty_logs: tuple[Path, Truth]) -> None:
    out, truth = faulty_logs
    files = find_log_files(out)
    assert {p.parent.parent.name for p in files} == {"dev1", "dev2", "dev3"}
    assert any(p.name.endswith(".jsonl.1") for p in files)
    good = 0
    for chain in {p.with_name(p.name.split(".jsonl")[0] + ".jsonl") for p in files}:
        last = 0
        for path in [p for p in files if str(p).startswith(str(chain))]:
            for line in path.read_text().splitlines():
                parsed = parse_line(line)
                if parsed is not None:
                    assert parsed[0] >= last, f"{path} goes back in time"
                    last, good = parsed[0], good + 1
    assert good == truth.events
    assert abs(truth.events - FAULTY.events) < 50
    assert truth.lost and truth.duplicated and truth.reordered and truth.refused


def test_generation_is_deterministic(tmp_path: Path) -> None:
    cfg = SynthConfig(events=800, lose=0.05, seed=7)
    a, b = generate(cfg, tmp_path / "a"), generate(cfg, tmp_path / "b")
    assert a == b
    for pa in find_log_files(tmp_path / "a"):
        pb = tmp_path / "b" / pa.relative_to(tmp_path / "a")
        assert pa.read_bytes() == pb.read_bytes()


def test_reference_audit_finds_exactly_the_injected_faults(
    faulty_logs: tuple[Path, Truth],
) -> None:
    out, truth = faulty_logs
    got = audit_logs(out, parse_expectations(truth.expect))
    assert (got["lost"], got["duplicated"], got["out_of_order"]) == (
        truth.lost,
        truth.duplicated,
        truth.reordered,
    )
    assert got["refused"] == truth.refused_pairs > 0
    assert got["corrupt_lines"] == truth.corrupt_lines == 4
    assert got["unexpected"] == got["orphans"] == got["unacked"] == 0


def test_reference_without_expect_misses_only_edge_losses(
    faulty_logs: tuple[Path, Truth],
) -> None:
    out, truth = faulty_logs
    got = audit_logs(out)
    assert got["duplicated"] == truth.duplicated
    assert got["out_of_order"] == truth.reordered
    assert truth.lost - 10 <= got["lost"] <= truth.lost


def _write(path: Path, records: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_reference_worked_example(tmp_path: Path) -> None:
    def pub(i: int) -> dict[str, object]:
        return {
            "ts": f"2026-11-22T07:05:0{i}Z",
            "event": "message.published",
            "msg_id": f"m{i}",
            "client_id": "P",
            "topic": "t",
            "qos": 1,
        }

    def dl(i: int, s: int) -> dict[str, object]:
        return {
            "ts": f"2026-11-22T07:06:{s:02d}Z",
            "event": "message.delivered",
            "msg_id": f"m{i}",
            "client_id": "S",
            "qos": 1,
        }

    _write(
        tmp_path / "listener.jsonl",
        [pub(i) for i in range(1, 6)] + [dl(1, 1), dl(3, 2), dl(2, 3), dl(5, 4), dl(5, 5)],
    )
    got = audit_logs(tmp_path)
    assert (got["expected"], got["lost"], got["duplicated"], got["out_of_order"]) == (5, 1, 1, 1)
    assert got["refused"] == 0


def test_reference_does_not_count_refused_messages_lost(tmp_path: Path) -> None:
    """m2 refused and never delivered, m3 refused and delivered: neither is lost."""

    def rec(event: str, i: int, s: int, client: str, **more: object) -> dict[str, object]:
        return {
            "ts": f"2026-11-22T07:05:{s:02d}Z",
            "event": event,
            "msg_id": f"m{i}",
            "client_id": client,
            "qos": 1,
            **more,
        }

    records = [rec("message.published", i, i, "P", topic="t") for i in range(1, 6)]
    records += [
        rec("message.refused", 2, 6, "P", topic="t", reason_code=0x80, reason="store_error"),
        rec("message.refused", 3, 7, "P", topic="t", reason_code=0x83, reason="netsplit"),
    ]
    records += [rec("message.delivered", i, 10 + i, "S") for i in (1, 3, 5)]
    _write(tmp_path / "listener.jsonl", records)
    got = audit_logs(tmp_path)
    assert (got["pairs"], got["expected"], got["lost"], got["refused"]) == (5, 5, 1, 2)
    assert got["unexpected"] == 0


def test_ts_parsing() -> None:
    assert ts_micros("1970-01-01T00:00:01.000002Z") == 1_000_002
    assert ts_micros("1970-01-01T00:00:01") == 1_000_000
    assert ts_micros("nope") is None
    assert parse_line('{"ts":"1970-01-01T00:00:00Z","event":"x","qos":"1"}') is None
    assert parse_line('{"ts":"1970-01-01T00:00:00Z","event":"x","qos":true}') is None
    assert parse_line('{"ts":"1970-01-01T00:00:00Z","ev') is None
