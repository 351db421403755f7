"""Topic filter matching, its regex twin, and the expect file parser (pure)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from spark_pipeline.expect import ExpectError, load_expectations, parse_expectations
from spark_pipeline.topics import FilterError, filter_regex, matches, validate_filter

CASES = [
    ("a/b", "a/b", True),
    ("a/b", "a/c", False),
    ("a/+", "a/b", True),
    ("a/+", "a/", True),
    ("a/+", "a/b/c", False),
    ("a/+", "a", False),
    ("+/+", "/x", True),
    ("a/#", "a", True),
    ("a/#", "a/b/c", True),
    ("a/#", "ab", False),
    ("#", "x/y", True),
    ("#", "$SYS/x", False),
    ("+/x", "$SYS/x", False),
    ("$SYS/#", "$SYS/x", True),
    ("a.b/(c)", "a.b/(c)", True),
    ("a.b/(c)", "aXb/(c)", False),
    ("sport/+/player1", "sport/tennis/player1", True),
    ("sport/+/player1", "sport/tennis/x/player1", False),
]


@pytest.mark.parametrize(("flt", "topic", "want"), CASES)
def test_matches_and_regex_agree_with_the_spec(flt: str, topic: str, want: bool) -> None:
    assert matches(flt, topic) is want
    assert (re.search(filter_regex(flt), topic) is not None) is want


@pytest.mark.parametrize("bad", ["", "a/#/b", "a/b#", "a/+b", "$share/g/a/#"])
def test_invalid_filters_are_refused(bad: str) -> None:
    with pytest.raises(FilterError):
        validate_filter(bad)


_level = st.sampled_from(["a", "b", "", "$x", "c.d"])
_topic = st.lists(_level, min_size=1, max_size=4).map("/".join)
_flevel = st.sampled_from(["a", "b", "", "+", "$x", "c.d"])


@st.composite
def _filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(_flevel, min_size=1, max_size=4))
    if draw(st.booleans()):
        levels.append("#")
    text = "/".join(levels)
    assume(text != "")
    return text


@given(_filters(), _topic)
def test_regex_equals_matcher(flt: str, topic: str) -> None:
    assert (re.search(filter_regex(flt), topic) is not None) == matches(flt, topic)


def test_expect_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "expect.json"
    path.write_text(
        json.dumps(
            [
                {"subscriber": "s1", "topic_filter": "a/#", "from": None},
                {"subscriber": "s2", "topic_filter": "+/b", "from": "2026-11-22T07:05:00Z"},
            ]
        )
    )
    got = load_expectations(path)
    assert [(e.subscriber, e.topic_filter) for e in got] == [("s1", "a/#"), ("s2", "+/b")]
    assert got[0].since is None
    assert got[1].since is not None and got[1].since.isoformat() == "2026-11-22T07:05:00+00:00"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"subscriber": "s"}, "JSON list"),
        ([{"subscriber": "", "topic_filter": "a"}], "entry 0: 'subscriber'"),
        ([{"subscriber": "s", "topic_filter": "a/#/b"}], "entry 0: '#'"),
        ([{"subscriber": "s", "topic_filter": "a", "from": "yesterday"}], "bad 'from'"),
        ([{"subscriber": "s", "topic_filter": "a", "qos": 1}], "unknown keys"),
    ],
)
def test_bad_expect_entries_are_named(data: object, message: str) -> None:
    with pytest.raises(ExpectError, match=message):
        parse_expectations(data)
