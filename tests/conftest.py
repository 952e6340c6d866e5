"""Fixtures shared by the whole suite."""
from __future__ import annotations

import signal

import pytest

import model_files
from harness import Closing
from mqtt_broker import MqttBroker


def pytest_configure(config):
    """SIGTERM (a CI job's timeout, `kill`) stops the suite as Ctrl-C does: pytest prints its summary."""
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


@pytest.fixture
def mqtt_broker(tmp_path_factory):
    """A real MQTT broker on a free port: `.host`, `.port`, `.kind`, `.stop()` / `.start()` (same port)."""
    broker = MqttBroker(tmp_path_factory.mktemp("broker"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def closing():
    """Append what the test starts (harness.AgentProcess, Threaded, a listener: anything with close()); each is
    closed, last first, when the test ends, whatever happened."""
    started = Closing()
    try:
        yield started
    finally:
        started.close()


@pytest.fixture(scope="session")
def matmul_weights():
    return model_files.MATMUL_WEIGHTS


@pytest.fixture(scope="session")
def dynamic_onnx(tmp_path_factory):
    """MatMul+Relu ONNX model with a dynamic batch axis: x [N, 16] -> y [N, 8]."""
    return model_files.save_matmul_relu(tmp_path_factory.mktemp("models") / "dynamic.onnx", "N")


@pytest.fixture(scope="session")
def fixed_onnx(tmp_path_factory):
    """The same model with its batch fixed at 1."""
    return model_files.save_matmul_relu(tmp_path_factory.mktemp("models") / "fixed.onnx", 1)


@pytest.fixture(scope="session")
def int8_tflite(tmp_path_factory):
    """(path, float torch module, example input) of a CNN quantized to int8 with int8 input/output."""
    return model_files.save_int8_cnn_tflite(tmp_path_factory.mktemp("models") / "cnn_int8.tflite")


@pytest.fixture(scope="session")
def dynamic_batch_tflite(tmp_path_factory):
    return model_files.save_dynamic_batch_tflite(tmp_path_factory.mktemp("models") / "conv_dynamic.tflite")
