"""A message's MQTT 5 properties in webhook JSON (``services.listener.webhooks.props``):
what a hook is shown reads back as the same properties, a modifier replaces only what it
names, and one that cannot be applied says why and changes nothing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.listener.mqtt.types import NO_PROPERTIES, Properties
from services.listener.webhooks import props

_text = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)))
_topic = _text.filter(lambda t: t and "+" not in t and "#" not in t)

message_properties = st.builds(
    Properties,
    payload_format_indicator=st.none() | st.sampled_from([0, 1]),
    message_expiry_interval=st.none() | st.integers(0, 0xFFFFFFFF),
    content_type=st.none() | _text,
    response_topic=st.none() | _topic,
    correlation_data=st.none() | _text.map(str.encode),
    user_properties=st.lists(st.tuples(_text, _text), max_size=4).map(tuple),
)


@given(message_properties, st.booleans())
def test_what_a_hook_is_shown_reads_back_as_the_same_properties(p: Properties, b64: bool) -> None:
    applied = props.apply(NO_PROPERTIES, props.encode(p, b64), b64)
    assert not isinstance(applied, str)
    assert applied == (p, [])


def test_a_modifier_replaces_what_it_names_and_null_removes() -> None:
    before = Properties(content_type="a", response_topic="r/1", user_properties=(("k", "v"),))
    mods = {"p_content_type": "b", "p_user_property": None, "p_topic_alias": 3}
    applied = props.apply(before, mods, b64=False)
    assert applied == (Properties(content_type="b", response_topic="r/1"), ["p_topic_alias"])


def test_a_modifier_that_cannot_be_applied_says_why() -> None:
    cases = {
        "p_payload_format_indicator": "binary",
        "p_message_expiry_interval": -1,
        "p_response_topic": "a/#",
        "p_content_type": 7,
        "p_user_property": [{"key": "not base64!", "val": "eA=="}],
    }
    for name, value in cases.items():
        why = props.apply(NO_PROPERTIES, {name: value}, b64=True)
        assert isinstance(why, str) and why.startswith(name), (name, why)
    assert props.apply(NO_PROPERTIES, ["not", "an", "object"], b64=True) == (
        "properties must be an object"
    )
