"""The view: majority over members (a down member keeps its vote), the conversion to the
registry's view, and the events ``diff`` reports; then views built from a simulated
cluster through a netsplit and its heal."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.gossip.membership import members as ml
from services.gossip.membership.timing import netsplit_bound
from services.gossip.membership.view import Event, View, diff, make_view, to_leadership
from services.registry import leadership
from tests.unit.membership_sim import Sim

ABC = frozenset({"a", "b", "c"})


def test_worked_example_from_the_docstring() -> None:
    v1 = View("a", ABC, up=ABC)
    v2 = View("a", ABC, up=frozenset({"a"}))
    assert v1.has_majority and not v2.has_majority
    assert diff(v1, v2) == [
        Event("node.down", {"peer": "b"}),
        Event("node.down", {"peer": "c"}),
        Event("netsplit.detected", {"unreachable": ["b", "c"], "members": 3}),
    ]
    v3 = View("a", ABC, up=frozenset({"a", "c"}))
    assert diff(v2, v3) == [
        Event("node.up", {"peer": "c"}),
        Event("netsplit.healed", {"members": 3}),
    ]


def test_a_down_member_keeps_its_vote() -> None:
    three = make_view("a", ml.merge_all(ml.single(x) for x in "abc"), ["a", "b"])
    assert three.has_majority  # 2 of 3
    four = make_view("a", ml.join(ml.merge_all(ml.single(x) for x in "abc"), "d"), ["a", "b"])
    assert not four.has_majority  # 2 of 4: d is down, it still votes
    assert four.down == {"c", "d"}


def test_make_view_keeps_to_members_and_always_counts_itself() -> None:
    m = ml.merge_all(ml.single(x) for x in "abc")
    v = make_view("a", ml.finish_leave(m, "c"), ["b", "c", "zz"])
    assert v.members == {"a", "b"} and v.up == {"a", "b"}
    assert make_view("a", ml.single("a"), []).has_majority  # alone is a majority of one
    outsider = make_view("z", m, ["a", "b", "z"])
    assert "z" not in outsider.up and outsider.members == {"a", "b", "c"}  # no vote
    assert outsider.has_majority == to_leadership(outsider, leadership.View).has_majority


names = st.sampled_from("abcdefg")
views = st.builds(
    lambda me, members, up: View(me, frozenset(members) | {me}, frozenset(up) & (members | {me})),
    names,
    st.frozensets(names),
    st.frozensets(names),
)


@given(views)
def test_majority_counts_members_and_agrees_with_the_registry(v: View) -> None:
    assert v.has_majority == (2 * len(v.up) > len(v.members))
    reg = to_leadership(v, leadership.View)
    assert reg == leadership.View(v.self_node, v.members, v.up)
    assert reg.has_majority == v.has_majority


@given(views, st.sampled_from("hij"))
def test_adding_a_down_member_never_creates_a_majority(v: View, extra: str) -> None:
    bigger = View(v.self_node, v.members | {extra}, v.up)
    assert bigger.has_majority <= v.has_majority


@settings(max_examples=300)
@given(st.sampled_from("abc"), st.frozensets(names), st.frozensets(names), st.data())
def test_diff_reports_exactly_the_changes(
    me: str, m1: frozenset[str], m2: frozenset[str], data: st.DataObject
) -> None:
    old_members, new_members = m1 | {me}, m2 | {me}
    old = View(me, old_members, data.draw(st.frozensets(st.sampled_from(sorted(old_members)))))
    new = View(me, new_members, data.draw(st.frozensets(st.sampled_from(sorted(new_members)))))
    events = diff(old, new)
    assert diff(old, old) == [] and diff(new, new) == []
    by_name: dict[str, set[str]] = {}
    for e in events:
        if "peer" in e.fields:
            assert isinstance(e.fields["peer"], str)
            by_name.setdefault(e.name, set()).add(e.fields["peer"])
    stayed = old.members & new.members
    assert by_name.get("node.joined", set()) == new.members - old.members
    assert by_name.get("node.left", set()) == old.members - new.members
    assert by_name.get("node.down", set()) == (old.up & stayed) - new.up
    assert by_name.get("node.up", set()) == new.up - (old.up & stayed)
    names_ = [e.name for e in events]
    assert ("netsplit.detected" in names_) == (old.has_majority and not new.has_majority)
    assert ("netsplit.healed" in names_) == (new.has_majority and not old.has_majority)


def test_views_through_a_netsplit_and_its_heal() -> None:
    """Five nodes split 2 | 3: the two lose their majority, the three keep it (the two
    are down, not gone: still 5 members); after the heal every view is whole again."""
    sim = Sim(5, seed=11)
    members = ml.merge_all(ml.single(x) for x in sim.names)
    sim.settle()
    before = {x: make_view(x, members, sim.up(x)) for x in sim.names}
    minority, majority = ["n0", "n1"], ["n2", "n3", "n4"]
    sim.split(minority, majority)
    sim.run(netsplit_bound(sim.config, 5))
    during = {x: make_view(x, members, sim.up(x)) for x in sim.names}
    for x in minority:
        assert not during[x].has_majority and during[x].members == before[x].members
        names_ = [e.name for e in diff(before[x], during[x])]
        assert names_ == ["node.down"] * 3 + ["netsplit.detected"]
    for x in majority:
        assert during[x].has_majority and during[x].down == set(minority)
        assert [e.name for e in diff(before[x], during[x])] == ["node.down"] * 2
    sim.heal()
    sim.settle()
    after = {x: make_view(x, members, sim.up(x)) for x in sim.names}
    assert all(v.up == v.members for v in after.values())
    assert diff(during["n0"], after["n0"])[-1] == Event("netsplit.healed", {"members": 5})
