"""Where the register says a claimed session's queue is (``claims.holders_after``): the
next claim asks there, so a stale holder loses the session."""

from __future__ import annotations

from services.registry.cluster.claims import holders_after

A, B, C = "a@h", "b@h", "c@h"


def test_a_replicated_queue_records_the_replica_set_whatever_the_path() -> None:
    for path in ("new", "here", "handover_replicated", "failover", "handover_absent"):
        assert holders_after(path, (A, B, C), A) == (A, B, C)


def test_r1_a_session_that_starts_afresh_after_an_empty_handover_is_recorded_here() -> None:
    # The register named B as the holder (a claim there took effect, its CONNECT was
    # refused): B had nothing, so the session is new here and the register must say so.
    assert holders_after("handover_absent", (), A) == (A,)


def test_r1_other_paths_record_nothing_more() -> None:
    # A handover records the move itself; every other path's claim named this node.
    for path in ("new", "here", "released", "lost_attempt", "handover", "evicted", "owed"):
        assert holders_after(path, (), A) == ()
