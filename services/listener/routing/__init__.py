"""Local routing for the listener: the subscription trie, retained messages and shared
subscription picking. Pure modules: no I/O, no clock."""

from __future__ import annotations

from services.listener.routing.model import (
    GroupToken,
    Match,
    MatchResult,
    SharedGroupMatch,
    SharedMember,
    SubOptions,
)
from services.listener.routing.retained import RetainedStore
from services.listener.routing.shared import SharedPicker, SharedPolicy
from services.listener.routing.topics import topic_matches
from services.listener.routing.trie import SubscriptionTrie

__all__ = [
    "GroupToken",
    "Match",
    "MatchResult",
    "RetainedStore",
    "SharedGroupMatch",
    "SharedMember",
    "SharedPicker",
    "SharedPolicy",
    "SubOptions",
    "SubscriptionTrie",
    "topic_matches",
]
