"""The node's view: the members, which of them are up, and whether that is a majority.

Theory of operation
-------------------
The member list (``members``) says who counts; the failure detector (``detector``) says
who answers. The view joins the two, and every decision of the node's services reads it
(DESIGN §4): a member that is down keeps its vote, so ``has_majority`` is *strictly more
than half of the members* up, never a majority of the nodes that happen to be up. A node
alone in a one-member cluster is its own majority. A node that is not a member (it left,
or has not joined yet) has no vote and is never up in its own view; the rule is the
registry's (``leadership.View``) to the letter, and such a node leads nothing there, as
its name is on no ring.

``diff(old, new)`` turns two successive views into the events the log contract names
(``services/common/events.py``): ``node.joined`` / ``node.left`` when the member list
changes, ``node.up`` / ``node.down`` when a member's reachability does, and
``netsplit.detected`` / ``netsplit.healed`` when this node loses or regains a majority.
The shell logs them in order and adds ``duration_s`` to ``netsplit.healed`` (it knows
when the split began; the view has no clock).

Worked example, members a b c seen from a::

    v1 = View("a", {"a", "b", "c"}, up={"a", "b", "c"})    # has_majority
    v2 = View("a", {"a", "b", "c"}, up={"a"})              # b and c down: 1 of 3
    diff(v1, v2) == [node.down b, node.down c, netsplit.detected (unreachable b c)]
    v3 = View("a", {"a", "b", "c"}, up={"a", "c"})         # 2 of 3 again
    diff(v2, v3) == [node.up c, netsplit.healed]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from services.gossip.membership import members as ml
from services.gossip.membership.members import MemberList

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class View:
    """What ``self_node`` knows of the cluster: its members, and those of them it reaches."""

    self_node: str
    members: frozenset[str]
    up: frozenset[str]

    @property
    def down(self) -> frozenset[str]:
        return self.members - self.up

    @property
    def has_majority(self) -> bool:
        """Strictly more than half of the *members* are up (down ones keep their vote)."""
        return 2 * len(self.up & self.members) > len(self.members)


def make_view(self_node: str, member_list: MemberList, up: Iterable[str]) -> View:
    """The view from the member list and the detector's ``up`` set (which may still name
    nodes that just left, or miss ones that just joined: both are normal races)."""
    members = ml.members(member_list)
    live = frozenset(up) & members
    if self_node in members:
        live |= {self_node}  # a node always reaches itself
    return View(self_node, members, live)


def to_leadership(view: View, make: Callable[[str, frozenset[str], frozenset[str]], T]) -> T:
    """The registry's view: pass ``services.registry.leadership.View`` as ``make``.

    The constructor comes in as a parameter because a service never imports another
    (``tests/unit/test_purity.py``); the gossip shell, which feeds the registry, does.
    """
    return make(view.self_node, view.members, view.up)


@dataclass(frozen=True, slots=True)
class Event:
    """One line for the event log: its ``name`` and the fields of its schema."""

    name: str
    fields: dict[str, object] = field(default_factory=dict)


def diff(old: View, new: View) -> list[Event]:
    """The events that lead from ``old`` to ``new``, in a stable order (sorted by node).

    Laws: ``diff(v, v) == []``; a member is reported up or down only when it stays a
    member (a new member that is up gets ``node.joined`` then ``node.up``; a leaving one
    only ``node.left``); netsplit events follow ``has_majority`` exactly.
    """
    events: list[Event] = []
    for node in sorted(new.members - old.members):
        events.append(Event("node.joined", {"peer": node}))
    for node in sorted(old.members - new.members):
        events.append(Event("node.left", {"peer": node}))
    for node in sorted(new.members):
        before = node in old.up and node in old.members  # a new member counts as down
        if node in new.up and not before:
            events.append(Event("node.up", {"peer": node}))
        elif before and node not in new.up:
            events.append(Event("node.down", {"peer": node}))
    members = len(new.members)
    if old.has_majority and not new.has_majority:
        unreachable = sorted(new.down)
        events.append(Event("netsplit.detected", {"unreachable": unreachable, "members": members}))
    elif new.has_majority and not old.has_majority:
        events.append(Event("netsplit.healed", {"members": members}))
    return events
