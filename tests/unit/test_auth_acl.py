"""ACL files in vmq_acl syntax and the covering rule (services.listener.auth.acl)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.listener.auth.acl import Access, Acl, covers, parse_acl
from services.listener.auth.errors import AuthFileError
from services.listener.routing.topics import topic_matches

R, W = Access.READ, Access.WRITE

# The example of VerneMQ's documentation (seeds/004, "vmq_acl").
VERNEMQ_DOC_EXAMPLE = """\
# ACL for anonymous clients
topic bar
topic write foo
topic read all
# ACL for user 'john'
user john
topic foo
topic read baz
topic write all
"""


def allows(
    acl: Acl,
    access: Access,
    topic: str,
    *,
    client_id: str = "c1",
    username: str | None = None,
    mountpoint: str = "",
) -> bool:
    return acl.allows(access, topic, client_id=client_id, username=username, mountpoint=mountpoint)


# -- the documented example --------------------------------------------------------------


@pytest.mark.parametrize(
    ("username", "access", "topic", "expected"),
    [
        # "Anonymous users are allowed to publish & subscribe to topic bar, publish to
        # topic foo, subscribe to topic all."
        (None, W, "bar", True),
        (None, R, "bar", True),
        (None, W, "foo", True),
        (None, R, "foo", False),
        (None, R, "all", True),
        (None, W, "all", False),
        (None, R, "baz", False),
        # "User john is allowed to publish & subscribe to topic foo, subscribe to topic
        # baz, publish to topic all." -- plus the rules above, which apply to everyone.
        ("john", R, "foo", True),
        ("john", W, "foo", True),
        ("john", R, "baz", True),
        ("john", W, "baz", False),
        ("john", W, "all", True),
        ("john", R, "all", True),
        ("john", R, "bar", True),
        # another user gets only the everyone rules
        ("jane", R, "baz", False),
        ("jane", R, "foo", False),
        ("jane", W, "bar", True),
        (None, W, "bar/x", False),
    ],
)
def test_vernemq_documented_example(
    username: str | None, access: Access, topic: str, expected: bool
) -> None:
    acl = parse_acl(VERNEMQ_DOC_EXAMPLE, "vmq.acl")
    assert allows(acl, access, topic, username=username) is expected


def test_parsed_structure_of_the_example() -> None:
    acl = parse_acl(VERNEMQ_DOC_EXAMPLE, "vmq.acl")
    assert [(r.topic, r.access, r.line) for r in acl.everyone] == [
        ("bar", Access.READWRITE, 2),
        ("foo", W, 3),
        ("all", R, 4),
    ]
    assert [(r.topic, r.access) for r in acl.users["john"]] == [
        ("foo", Access.READWRITE),
        ("baz", R),
        ("all", W),
    ]
    assert acl.patterns == ()


def test_empty_acl_denies_everything() -> None:
    acl = parse_acl("# nothing\n\n", "f")
    assert not allows(acl, R, "a")
    assert not allows(acl, W, "a", username="john")


def test_user_sections_may_repeat_and_whitespace_is_trimmed() -> None:
    acl = parse_acl(
        "user  ann \n topic\tread a/b \nuser bob\ntopic c\nuser ann\ntopic write d e/f\n", "f"
    )
    assert allows(acl, R, "a/b", username="ann")
    assert not allows(acl, W, "a/b", username="ann")
    assert allows(acl, W, "d e/f", username="ann")  # topics may contain spaces
    assert allows(acl, R, "c", username="bob")
    assert not allows(acl, R, "c", username="ann")


def test_readwrite_is_both_and_a_lone_access_word_is_a_topic() -> None:
    acl = parse_acl("topic readwrite x\ntopic read\n", "f")
    assert allows(acl, R, "x") and allows(acl, W, "x")
    # As in vmq_acl, "topic read" with nothing after grants both on the topic "read".
    assert allows(acl, R, "read") and allows(acl, W, "read")


# -- wildcards ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "requested", "expected"),
    [
        ("sensor/+/data", "sensor/7/data", True),
        ("sensor/+/data", "sensor/+/data", True),
        ("sensor/+/data", "sensor/#", False),
        ("sensor/+/data", "sensor/7/data/x", False),
        ("sensor/#", "sensor", True),  # '#' includes the parent level [MQTT-4.7.1-2]
        ("sensor/#", "sensor/a/b/c", True),
        ("sensor/#", "sensor/+", True),
        ("sensor/#", "sensor/#", True),
        ("sensor/#", "+/a", False),
        ("a/+", "a/#", False),  # vmq_acl would allow this, granting a/b/c
        ("a/+", "a", False),
        ("+/+", "a/+", True),
        ("#", "a/b", True),
        ("#", "#", True),
        ("+/#", "#", True),
        ("+/+/#", "#", False),
        ("#", "$SYS/broker/load", False),  # [MQTT-4.7.2-1]
        ("+/broker/load", "$SYS/broker/load", False),
        ("$SYS/#", "$SYS/broker/load", True),
        ("a//b", "a//b", True),
        ("a//b", "a/b", False),
        ("a/+/b", "a//b", True),
    ],
)
def test_covering_rule(rule: str, requested: str, expected: bool) -> None:
    assert covers(rule.split("/"), requested.split("/")) is expected
    acl = parse_acl(f"topic {rule}\n", "f")
    assert allows(acl, R, requested) is expected


LEVELS = ["a", "b", "$s", ""]
WITNESS_LEVELS = [*LEVELS, "fresh"]


def _filters(max_levels: int) -> st.SearchStrategy[list[str]]:
    """Valid filters of at most ``max_levels`` levels over a tiny alphabet."""
    plain = st.lists(st.sampled_from([*LEVELS, "+"]), min_size=0, max_size=max_levels - 2)
    return st.builds(
        lambda body, hash_, first: [first, *body] + (["#"] if hash_ else []),
        plain,
        st.booleans(),
        st.sampled_from([*LEVELS, "+"]),
    ).filter(lambda f: f != [""]) | st.just(["#"])  # "" is no valid filter


def _topics(max_levels: int) -> list[str]:
    out = []
    for n in range(1, max_levels + 1):
        for levels in itertools.product(WITNESS_LEVELS, repeat=n):
            topic = "/".join(levels)
            if topic:  # an empty topic name is invalid
                out.append(topic)
    return out


TOPICS_UP_TO_4 = _topics(4)


@settings(max_examples=300, deadline=None)
@given(_filters(3), _filters(3))
def test_covers_is_exact_set_inclusion(acl: list[str], requested: list[str]) -> None:
    """covers(A, R) iff every topic R matches is matched by A (checked on all short topics)."""
    req, rule = "/".join(requested), "/".join(acl)
    assert max(len(acl), len(requested)) < 4
    witnesses = [t for t in TOPICS_UP_TO_4 if topic_matches(req, t) and not topic_matches(rule, t)]
    assert covers(acl, requested) is (not witnesses), witnesses[:3]


@settings(max_examples=300, deadline=None)
@given(_filters(4), st.lists(st.sampled_from(WITNESS_LEVELS), min_size=1, max_size=5))
def test_covers_a_topic_name_is_filter_matching(acl: list[str], levels: list[str]) -> None:
    topic = "/".join(levels)
    if topic:
        assert covers(acl, levels) is topic_matches("/".join(acl), topic)


# -- patterns ----------------------------------------------------------------------------

PATTERNS = """\
pattern write sensor/%u/data
pattern read devices/%c/#
pattern %m/%c/inbox
"""


def test_pattern_substitution_of_username_client_id_and_mountpoint() -> None:
    acl = parse_acl(PATTERNS, "f")
    assert allows(acl, W, "sensor/ann/data", username="ann")
    assert not allows(acl, R, "sensor/ann/data", username="ann")
    assert not allows(acl, W, "sensor/bob/data", username="ann")
    assert not allows(acl, W, "sensor/+/data", username="ann")
    assert allows(acl, R, "devices/dev-9/#", client_id="dev-9")
    assert allows(acl, R, "devices/dev-9/temp/1", client_id="dev-9")
    assert not allows(acl, R, "devices/dev-8/temp", client_id="dev-9")
    assert not allows(acl, R, "devices/#", client_id="dev-9")
    assert allows(acl, W, "tenant1/c7/inbox", client_id="c7", mountpoint="tenant1")
    assert allows(acl, R, "eu/t1/c7/inbox", client_id="c7", mountpoint="eu/t1")
    assert not allows(acl, W, "tenant2/c7/inbox", client_id="c7", mountpoint="tenant1")
    # no mountpoint: one empty level, as vmq_acl substitutes it
    assert allows(acl, W, "/c7/inbox", client_id="c7")
    assert not allows(acl, W, "c7/inbox", client_id="c7")


def test_patterns_apply_to_every_user_wherever_they_stand() -> None:
    acl = parse_acl("user ann\ntopic a\npattern read p/%u\nuser bob\n", "f")
    assert allows(acl, R, "p/bob", username="bob")
    assert allows(acl, R, "p/ann", username="ann")
    assert not allows(acl, R, "a", username="bob")


@pytest.mark.parametrize(
    ("client_id", "username", "mountpoint"),
    [
        ("c", None, ""),  # %u without a username
        ("c", "", ""),
        ("c", "+", ""),  # would turn the grant into a wildcard
        ("c", "#", ""),
        ("c", "a/b", ""),
        ("", "u", ""),
        ("+", "u", ""),
        ("c", "u", "m+"),
    ],
)
def test_patterns_do_not_apply_with_unusable_values(
    client_id: str, username: str | None, mountpoint: str
) -> None:
    acl = parse_acl("pattern x/%u/%c/%m/y\n", "f")
    for topic in (
        "x/+/+/+/y",
        "x/u/c//y",
        "x/a/b/c//y",
        f"x/{username}/{client_id}/{mountpoint}/y",
    ):
        assert not allows(
            acl, W, topic, client_id=client_id, username=username, mountpoint=mountpoint
        )
    assert allows(acl, W, "x/u/c/m/y", client_id="c", username="u", mountpoint="m")


def test_anonymous_clients_get_client_id_patterns() -> None:
    acl = parse_acl("pattern c/%c\npattern u/%u\n", "f")
    assert allows(acl, W, "c/me", client_id="me")
    assert not allows(acl, W, "u/me", client_id="me")


# -- errors ------------------------------------------------------------------------------


def test_every_bad_line_is_reported_with_its_number() -> None:
    text = "\n".join(
        [
            "# comment",  # 1
            "topic a/#/b",  # 2: '#' not last
            "topicc x",  # 3: unknown keyword
            "user",  # 4: no name
            "topic sensor/%u",  # 5: substitution only in patterns
            "pattern a/x%u",  # 6: not a whole level
            "topic deny a",  # 7: mosquitto's deny, never a grant
            "topic $share/g/a",  # 8
            "pattern",  # 9
            "topic ok/+",  # 10: fine
            "topic a+",  # 11
        ]
    )
    with pytest.raises(AuthFileError) as info:
        parse_acl(text, "/etc/ternmq.acl")
    assert [p.line for p in info.value.problems] == [2, 3, 4, 5, 6, 7, 8, 9, 11]
    message = str(info.value)
    assert "/etc/ternmq.acl:3: unknown keyword 'topicc'" in message
    assert "/etc/ternmq.acl:5: %u is substituted only in 'pattern' lines" in message
    assert "/etc/ternmq.acl:7: access 'deny' is not supported" in message


def test_crlf_and_trailing_whitespace() -> None:
    acl = parse_acl("user ann\r\ntopic read a/b  \r\n", "f")
    assert allows(acl, R, "a/b", username="ann")
