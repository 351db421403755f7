"""Value types shared by the routing modules: who subscribed, with what options, and what
a topic match yields.

Everything here is immutable (frozen, slotted) so the trie can build a value once, when a
subscription is added, and hand the very same object to every later ``match`` call: the
common case of a subscriber hit by exactly one filter then costs no allocation at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from services.common.session_key import SessionKey


@dataclass(frozen=True, slots=True)
class SubOptions:
    """One subscription's options as sent in SUBSCRIBE, plus where its session lives.

    ``sub_id`` is the MQTT 5 Subscription Identifier (None when absent). ``node`` is the
    route of the subscriber's session (its node, or ``node/K`` for one of the node's
    listener processes, see ``services.listener.processes``); routing returns it so the
    caller can forward a message there instead of delivering it locally. ``persistent``: that
    session outlives its connection, so a copy forwarded to it must be durable there
    before the publisher is acknowledged (I1).
    """

    qos: int
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0
    sub_id: int | None = None
    node: str = ""
    persistent: bool = False


@dataclass(slots=True, init=False)  # values by convention, not frozen: see MatchResult
class Match:
    """What one subscriber gets for one published topic, all its matching filters merged.

    When several of a client's subscriptions match, ternmq sends one copy, which MQTT 5
    allows [MQTT-3.3.4-2]; that copy stands for every one of them (extra copies, one per
    subscription [MQTT-3.3.4-5], would cost a write each and make clients deduplicate).
    Merge rules:

    - ``qos``: the maximum [MQTT-3.3.4-2] (the caller still caps it at the publish QoS);
    - ``sub_ids``: the identifier of every matching subscription that has one
      [MQTT-3.3.4-3] [MQTT-3.3.4-4], each value once, in no particular order (empty if
      none);
    - ``retain_as_published``: true if any matching subscription asked for it. A single
      copy cannot obey both [MQTT-3.3.1-12] (clear RETAIN) and [MQTT-3.3.1-13] (keep
      it) when the client's subscriptions disagree, so the opt-in wins: a client that
      asked for the original flag on a filter (a bridge re-retaining what it forwards)
      would lose information without it, while the RETAIN it then also sees through a
      filter without the option is true (the message was published retained). Without
      RETAIN on the publish there is nothing to decide: the copy has RETAIN 0;
    - ``node``: all of a subscriber's subscriptions name the node of its single session;
      if they disagree (a migration half-applied) the first matching one wins;
    - ``filters``: every matching filter, for tracing and ACL re-checks.

    No Local is not merged: ``SubscriptionTrie.match(..., publisher=)`` drops the
    publisher's own No Local subscriptions before merging [MQTT-3.8.3-3], so the copy a
    client gets of its own message has the QoS, identifiers and Retain As Published of
    its other matching subscriptions only. Shared subscriptions are not merged either:
    each is its own delivery (``MatchResult``).
    """

    sid: SessionKey
    qos: int
    node: str
    retain_as_published: bool
    sub_ids: tuple[int, ...]
    filters: tuple[str, ...]

    def __init__(
        self,
        sid: SessionKey,
        qos: int,
        node: str,
        retain_as_published: bool,
        sub_ids: tuple[int, ...],
        filters: tuple[str, ...],
    ) -> None:
        self.sid = sid
        self.qos = qos
        self.node = node
        self.retain_as_published = retain_as_published
        self.sub_ids = sub_ids
        self.filters = filters


class SharedMember(NamedTuple):
    """One member of a shared subscription group."""

    sid: SessionKey
    opts: SubOptions


class GroupToken:
    """Identity of a live shared group in a trie, and the group's round-robin cursor.

    Stable while the group exists (across member changes), so the cursor survives member
    changes and dies with the group (one trie, one picker per listener).
    """

    __slots__ = ("cursor",)

    def __init__(self) -> None:
        self.cursor = 0


@dataclass(frozen=True, slots=True)
class SharedGroupMatch:
    """A shared subscription ``$share/{group}/{filter}`` whose filter matched a topic.

    The message goes to one of ``members`` (see ``shared.SharedPicker``), which are in the
    order they joined. ``filter`` is the filter without the ``$share/{group}/`` prefix.
    """

    group: str
    filter: str
    members: tuple[SharedMember, ...]
    token: GroupToken = field(default_factory=GroupToken, compare=False, repr=False)

    @property
    def share_filter(self) -> str:
        """The filter as the client subscribed it."""
        return f"$share/{self.group}/{self.filter}"


# Made per publish (Match: per subscriber too), in the compiled build (setup.py): not
# frozen (a frozen dataclass sets each field through object.__setattr__) and with the
# __init__ written out (the one dataclasses generates stays interpreted, much dearer).
# Values by convention: nothing assigns to their fields.
@dataclass(slots=True, init=False)
class MatchResult:
    """All routing targets of one publish: one ``Match`` per subscriber through its normal
    (non-shared) subscriptions, and one ``SharedGroupMatch`` per matching shared group.

    A subscriber can appear in both lists and in several groups: each shared
    subscription is its own delivery, independent of the others.
    """

    normal: list[Match]
    shared: list[SharedGroupMatch]

    def __init__(self, normal: list[Match], shared: list[SharedGroupMatch]) -> None:
        self.normal = normal
        self.shared = shared
