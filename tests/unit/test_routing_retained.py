"""RetainedStore: storage, filter matching with the MQTT rules, pruning."""

from __future__ import annotations

import pytest

from services.listener.routing import RetainedStore

TOPICS = [
    "sport",
    "sport/tennis/player1",
    "sport/tennis/player1/ranking",
    "sport/tennis/player1/score/wimbledon",
    "sport/tennis/player2",
    "sport/",
    "/finance",
    "$SYS/monitor/Clients",
    "$SYS",
    "a//b",
]


@pytest.fixture
def store() -> RetainedStore[str]:
    s: RetainedStore[str] = RetainedStore()
    for t in TOPICS:
        s.set("", t, f"msg:{t}")
    return s


def topics_for(store: RetainedStore[str], topic_filter: str, mountpoint: str = "") -> set[str]:
    found = store.match(mountpoint, topic_filter)
    assert all(msg == f"msg:{topic}" for topic, msg in found)
    assert len(found) == len({t for t, _ in found})
    return {t for t, _ in found}


@pytest.mark.parametrize(
    ("topic_filter", "expected"),
    [
        (
            "sport/tennis/player1/#",
            {
                "sport/tennis/player1",
                "sport/tennis/player1/ranking",
                "sport/tennis/player1/score/wimbledon",
            },
        ),
        ("sport/tennis/+", {"sport/tennis/player1", "sport/tennis/player2"}),
        ("sport/+", {"sport/"}),
        ("sport", {"sport"}),
        ("+", {"sport"}),
        ("+/+", {"sport/", "/finance"}),
        ("/+", {"/finance"}),
        ("a/+/b", {"a//b"}),
        ("#", set(TOPICS) - {"$SYS/monitor/Clients", "$SYS"}),
        ("+/monitor/Clients", set()),
        ("$SYS/#", {"$SYS/monitor/Clients", "$SYS"}),
        ("$SYS/monitor/+", {"$SYS/monitor/Clients"}),
        ("nothing/#", set()),
        ("sport/tennis/player3", set()),
    ],
)
def test_match(store: RetainedStore[str], topic_filter: str, expected: set[str]) -> None:
    assert topics_for(store, topic_filter) == expected


def test_set_get_replace_clear_len(store: RetainedStore[str]) -> None:
    assert len(store) == len(TOPICS)
    assert store.get("", "sport") == "msg:sport"
    assert store.get("", "sport/tennis") is None  # an inner node, nothing retained
    assert store.get("", "nope/x") is None
    store.set("", "sport", "new")
    assert len(store) == len(TOPICS)
    assert store.get("", "sport") == "new"
    assert store.clear("", "sport") is True
    assert store.clear("", "sport") is False
    assert store.clear("", "sport/tennis") is False
    assert store.clear("other", "sport/tennis/player1") is False
    assert store.get("", "sport") is None
    assert len(store) == len(TOPICS) - 1
    # children of a cleared topic stay
    assert "sport/tennis/player2" in topics_for(store, "sport/#")


def test_iteration_lists_everything(store: RetainedStore[str]) -> None:
    store.set("m", "sport", "other")
    items = sorted(store)
    assert items == sorted([("", t, f"msg:{t}") for t in TOPICS] + [("m", "sport", "other")])


def test_mountpoints_are_separate() -> None:
    s: RetainedStore[int] = RetainedStore()
    s.set("m1", "t", 1)
    s.set("", "t", 0)
    assert s.match("m1", "#") == [("t", 1)]
    assert s.match("", "t") == [("t", 0)]
    assert s.match("m2", "#") == []
    assert s.get("m2", "t") is None


def test_clear_prunes_empty_nodes() -> None:
    s: RetainedStore[int] = RetainedStore()
    s.set("", "keep", 0)
    for i, t in enumerate(["a/b/c", "a/b", "a//", "$SYS/x", "a/b/c/d/e"]):
        s.set("", t, i)
    for t in ["a/b/c/d/e", "a/b", "$SYS/x", "a//", "a/b/c"]:
        assert s.clear("", t)
    root = s._roots[""]
    assert list(root.children) == ["keep"]
    assert root.children["keep"].children == {}
    s.clear("", "keep")
    assert s._roots == {}
    assert len(s) == 0


def test_generic_message_type_and_large_prefix_query() -> None:
    s: RetainedStore[tuple[int, bytes]] = RetainedStore()
    for i in range(2_000):
        s.set("", f"dev/{i % 20}/{i}", (i, b"x"))
    got = s.match("", "dev/7/#")
    assert sorted(i for _, (i, _) in got) == list(range(7, 2_000, 20))
