"""Fixtures shared by the whole suite."""
from __future__ import annotations

import pytest

from mqtt_broker import MqttBroker


@pytest.fixture
def mqtt_broker(tmp_path_factory):
    """A real MQTT broker on a free port: `.host`, `.port`, `.kind`, `.stop()` / `.start()` (same port)."""
    broker = MqttBroker(tmp_path_factory.mktemp("broker"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
