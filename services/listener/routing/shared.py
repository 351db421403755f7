"""Choosing the one member of a shared subscription group that gets a message.

Theory of operation
-------------------
``SubscriptionTrie.match`` returns each matching shared group once, with all its
members; ``SharedPicker.pick`` chooses one member per message in two steps, following
VerneMQ's ``vmq_shared_subscriptions`` (config key ``shared_subscription_policy``):

1. The policy narrows the candidates by node:

   - ``prefer_local`` (default): the members whose session lives on this node (in any
     of its listener processes) if there is at least one, else all members;
   - ``local_only``: the local members only; none means the message is dropped for this
     group (``pick`` returns None);
   - ``random`` and ``round_robin``: all members.

2. Among the candidates, online members win over offline ones (an offline member of a
   persistent session still gets the message queued when nobody is online). The choice
   is uniform at random, except for ``round_robin``, which takes the next online member
   after the previous pick, cyclically in join order.

As in VerneMQ, under ``prefer_local`` an offline local member is chosen before an online
remote one (VerneMQ's ``prefer_online_before_local`` policy is not offered). What
"online" means is the caller's ``is_online``: the router counts a member on another node
as online, since whether it is connected is its node's to know, and that node queues
the copy if it is not.

If delivering to the chosen member fails, call ``pick`` again with the failed members in
``exclude``: they are treated as absent from the group.

Randomness comes from the injected ``random.Random`` so tests are reproducible. The
round-robin cursor of a group lives on the group's ``GroupToken``: it survives member
changes and disappears with the group. Cost per pick is linear in group size.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Sequence
from enum import StrEnum

from services.common.session_key import SessionKey
from services.listener.processes import on_node
from services.listener.routing.model import (
    GroupToken,
    SharedGroupMatch,
    SharedMember,
)


class SharedPolicy(StrEnum):
    """Values of ``shared_subscription_policy``."""

    PREFER_LOCAL = "prefer_local"
    LOCAL_ONLY = "local_only"
    RANDOM = "random"
    ROUND_ROBIN = "round_robin"


class SharedPicker:
    """Picks the member of a shared group that receives one message."""

    __slots__ = ("_local_node", "_policy", "_rng")

    def __init__(self, policy: SharedPolicy, local_node: str, rng: random.Random) -> None:
        self._policy = policy
        self._local_node = local_node
        self._rng = rng

    @property
    def policy(self) -> SharedPolicy:
        return self._policy

    def set_policy(self, policy: SharedPolicy) -> None:
        """``ternmq-admin set shared_subscription_policy=...``: from the next pick on."""
        self._policy = policy

    def pick(
        self,
        group: SharedGroupMatch,
        is_online: Callable[[SharedMember], bool],
        exclude: Collection[SessionKey] = (),
    ) -> SharedMember | None:
        """The member to deliver to, or None when the policy leaves no candidate."""
        members: Sequence[SharedMember] = group.members
        if exclude:
            members = [m for m in members if m.sid not in exclude]
        policy = self._policy
        if policy is SharedPolicy.PREFER_LOCAL or policy is SharedPolicy.LOCAL_ONLY:
            here = self._local_node
            local = [m for m in members if m.opts.node == here or on_node(m.opts.node, here)]
            if local or policy is SharedPolicy.LOCAL_ONLY:
                members = local
        if not members:
            return None
        if policy is SharedPolicy.ROUND_ROBIN:
            return self._next(group.token, members, is_online)
        online = [m for m in members if is_online(m)]
        return self._rng.choice(online or members)

    def _next(
        self,
        token: GroupToken,
        members: Sequence[SharedMember],
        is_online: Callable[[SharedMember], bool],
    ) -> SharedMember:
        """The first online member at or after the cursor (else the one at the cursor)."""
        n = len(members)
        start = token.cursor % n
        for k in range(n):
            m = members[(start + k) % n]
            if is_online(m):
                token.cursor = (start + k + 1) % n
                return m
        token.cursor = (start + 1) % n
        return members[start]
