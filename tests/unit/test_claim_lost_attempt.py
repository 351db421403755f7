"""A claim retried after a round whose outcome it never learned finds its own earlier
attempt as the previous value; the owner before that attempt must still be told (found
by a 3-node CONNECT race that left two live sessions of one id)."""

from __future__ import annotations

from services.registry.cluster.claims import lost_attempt, superseded_here
from services.registry.quorum.register import DELETED, ONLINE, Claim, Entry, Release

A, B = "a@h", "b@h"


def test_a_retry_that_finds_its_own_attempt_is_told_so() -> None:
    owner_a = Claim(A, (A,)).apply(None)
    attempt = Claim(B, (B,)).apply(owner_a)  # took effect; B's round reported Failed
    assert attempt is not None and attempt.owner == B
    retry = Claim(B, (B,)).apply(attempt)
    assert retry is not None and retry.epoch == attempt.epoch + 1
    # B's table never held the attempt's epoch: A, the real previous owner, is unknown
    assert lost_attempt(attempt, B, None)
    assert lost_attempt(attempt, B, attempt.epoch - 5)


def test_the_nodes_own_session_is_not_a_lost_attempt() -> None:
    mine = Entry(B, 7, (B,), ONLINE)
    assert not lost_attempt(mine, B, 7)  # a reconnect on the node that holds it


def test_another_owner_or_a_tombstone_is_not_a_lost_attempt() -> None:
    theirs = Entry(A, 7, (A,), ONLINE)
    assert not lost_attempt(theirs, B, None)
    released = Release(7).apply(Entry(B, 7, (B,), ONLINE))
    assert released is not None and released.state == DELETED
    assert not lost_attempt(released, B, None)


def test_an_attempt_made_over_the_local_session_leaves_it_the_ids() -> None:
    # B's session at epoch e; the first round of B's next claim took effect unseen;
    # the retry reads that attempt, which superseded B's own entry
    mine = Claim(B, (B,), persistent=True).apply(Claim(A, (A,)).apply(None))
    assert mine is not None
    attempt = Claim(B, (B,), persistent=True, floor=mine.epoch + 5).apply(mine)
    assert attempt is not None
    assert lost_attempt(attempt, B, mine.epoch)
    assert superseded_here(attempt, mine.epoch)  # whatever the floor made of its epoch


def test_an_attempt_over_another_owner_leaves_the_local_copy_stale() -> None:
    mine = Claim(B, (B,), persistent=True).apply(None)
    assert mine is not None
    theirs = Claim(A, (A,)).apply(mine)  # A took the id while B's copy stayed
    attempt = Claim(B, (B,)).apply(theirs)
    assert attempt is not None and lost_attempt(attempt, B, mine.epoch)
    assert not superseded_here(attempt, mine.epoch)
    assert not superseded_here(attempt, None)
