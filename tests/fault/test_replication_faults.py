"""The randomized fault test of replicated offline queues, short enough for CI: 3 nodes,
R = 3, W = 2, publishers and persistent QoS 1/QoS 2 subscribers spread over the nodes, and
at least 30 faults (SIGKILL, SIGSTOP, a node's cluster link cut; one node at a time, then
back). Every acknowledged publish must reach every subscriber of
its topic, in publish order, with duplicates only where QoS 1 allows them
(``tests/fault/checker.py`` says exactly what counts), and once quiet every queue's
copies must agree. ``python -m tests.fault.run`` runs the same thing for longer.

The faults are a function of the seed (``TERNMQ_FAULT_SEED``, default below); a failure
names it and the directory holding the nodes' logs, the history and the evidence.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.fault.audit_check import audit_run, compare
from tests.fault.harness import KINDS, Options, Result, run, schedule
from tests.fault.incident import tell

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.fault,
    pytest.mark.timeout(600),
]

SEED = int(os.environ.get("TERNMQ_FAULT_SEED", "20261126"))
EVENTS = 30
CI_KINDS = KINDS  # kill, pause, partition, and the asymmetric bridge and oneway
KNOWN_DUPLICATES = {"duplicate_qos2", "duplicate_without_dup"}


def test_the_schedule_is_a_function_of_the_seed() -> None:
    assert schedule(SEED, EVENTS) == schedule(SEED, EVENTS)
    assert schedule(SEED, EVENTS) != schedule(SEED + 1, EVENTS)
    assert {f.kind for f in schedule(SEED, EVENTS)} == set(KINDS)
    faults = schedule(SEED, EVENTS, CI_KINDS)
    assert {f.kind for f in faults} == set(CI_KINDS)
    assert {f.node for f in faults} == {1, 2, 3}


@pytest.fixture(scope="module")
def fault_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Options, Result]:
    """One run serves both checks: the clients' view, then the logs' (the ETL)."""
    opts = Options(
        base_dir=tmp_path_factory.mktemp("fault") / "fault",
        seed=SEED,
        events=EVENTS,
        kinds=CI_KINDS,
        hold=(1.0, 3.0),
        gap=(0.3, 1.0),
        max_seconds=420.0,  # a bound for a slow machine; the test then fails on EVENTS
    )
    return opts, run(opts)


def _where(opts: Options) -> str:
    return f"seed {SEED} (TERNMQ_FAULT_SEED={SEED}), files in {opts.base_dir}"


def test_acknowledged_messages_survive_random_faults(
    fault_run: tuple[Options, Result],
) -> None:
    opts, result = fault_run
    text = json.dumps(result.summary(limit=10), indent=1)
    where = _where(opts)
    errors, clean, faults = result.errors, result.report.ok, len(result.faults)
    assert not errors, f"{where}: the harness failed:\n{text}"
    counts = result.report.counts()
    if not clean and set(k for k, n in counts.items() if n) <= KNOWN_DUPLICATES:
        # Known and open: a forwarded copy appended twice in a row after a one-way cut
        # (docs/fault-testing.md). Nothing is lost: only this may pass as expected.
        pytest.xfail(f"{where}: only the known duplicates of a resent copy:\n{text}")
    story = tell(result.history, result.report.violations, opts.base_dir)
    assert clean, f"{where}: the checker found violations:\n{text}\n{story}"
    assert not result.diverged, f"{where}: copies of a queue differ once quiet:\n{text}"
    assert faults >= EVENTS, f"{where}: only {faults} faults:\n{text}"
    assert result.report.acked > 0 and result.report.deliveries > 0, text


@pytest.mark.spark
def test_the_delivery_audit_agrees_with_the_checker(
    fault_run: tuple[Options, Result],
) -> None:
    """S22: the ETL's delivery audit, over the nodes' own logs of the same run, must
    agree with what the clients saw (``audit_check.compare`` says how far the two models
    determine each other)."""
    opts, result = fault_run
    if result.errors:
        pytest.fail(f"{_where(opts)}: the harness failed, so there is no run to audit")
    audit = audit_run(opts.base_dir, history=result.history)
    mismatches = compare(result.history, audit, result.report)
    text = json.dumps({"audit": audit, "checker": result.report.summary()}, indent=1)
    assert not mismatches, (
        f"{_where(opts)}: the delivery audit disagrees with the checker: {mismatches}\n{text}"
    )
    assert audit["expected"] > 0 and audit["delivered"] > 0, text
