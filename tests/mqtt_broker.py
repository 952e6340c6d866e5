"""The suite's broker: the product's local broker launcher (mosquitto, else embedded amqtt).

EDGEOPT_TEST_BROKER=amqtt forces the embedded one.
"""
from edgeopt.fleet.broker import MqttBroker, free_port, mosquitto_binary, start_broker

__all__ = ["MqttBroker", "free_port", "mosquitto_binary", "start_broker"]
