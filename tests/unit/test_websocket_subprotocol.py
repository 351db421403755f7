"""Which WebSocket subprotocol an MQTT client gets (``websocket.choose_subprotocol``)."""

from __future__ import annotations

from services.listener.websocket import choose_subprotocol


def test_mqtt_is_preferred_and_mqttv31_serves_mqtt_3_1_clients() -> None:
    assert choose_subprotocol(["mqtt"]) == "mqtt"
    assert choose_subprotocol(["mqttv3.1"]) == "mqttv3.1"
    assert choose_subprotocol(["mqttv3.1", "mqtt"]) == "mqtt"


def test_none_offered_is_accepted_without_one_and_only_others_is_refused() -> None:
    assert choose_subprotocol([]) is None
    assert choose_subprotocol(["chat", "wamp"]) == ""
