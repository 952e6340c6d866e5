"""Bounded fuzzing of the collector's message parsing: hostile payloads and topics are rejected with a
reason, never with an exception, and whatever is accepted or rejected can be stored as text."""
from __future__ import annotations

import json
import random

import pytest
from hostile_payloads import hostile_payloads, oversized

from edgeopt.fleet import messages
from fleet_simulator import SimulatedDevice
from edgeopt_agent import wire
from edgeopt_agent.message_signing import DeviceKey
from edgeopt_agent.values import finite

DEVICE = "rpi-01"
BOARD_KEY = DeviceKey.generate()


def templates():
    device = SimulatedDevice(DEVICE, profile="rpi4", key=BOARD_KEY)
    published = [device.status(), device.telemetry(), device.telemetry(temperature_c=71.5, power_w=4.2),
                 device.result("job-1", p50_ms=4.0, meta={"model": "digits", "format": "onnx", "precision": "int8"}),
                 device.result("job-2", ok=False)]
    return [(message.topic, json.loads(message.payload)) for message in published]


def storable(text):
    """Text a database column takes: UTF-8 encodable, no NUL."""
    return text is None or (isinstance(text, str) and "\x00" not in text and text.encode("utf-8") is not None)


def check(label, topic, payload):
    parsed = messages.parse(topic, payload)  # must not raise
    if isinstance(parsed, messages.Rejection):
        assert parsed.reason and parsed.detail, label
        for text in (parsed.topic, parsed.reason, parsed.detail, parsed.excerpt, parsed.device_id, parsed.message_id):
            assert storable(text), (label, text)
        return parsed.reason
    assert isinstance(parsed, messages.DeviceMessage), label
    json.dumps(parsed.row, allow_nan=False)  # the row holds no NaN or infinity either
    for value in parsed.row.values():
        if isinstance(value, str):
            assert storable(value), (label, value)
        elif isinstance(value, int) and not isinstance(value, bool):
            assert -messages.MAX_INT64 - 1 <= value <= messages.MAX_INT64, (label, value)
    return "accepted"


def unsigned(document):
    """What a signature covers: the envelope without `sig`, NaN and infinity as null."""
    return finite({k: v for k, v in document.items() if k != "sig"})


def signed_by_the_board(payload):
    """The hostile payload as the board itself would send it (signed), when it is a JSON object at all:
    so the checks behind the signature are fuzzed too."""
    try:
        return BOARD_KEY.sign_payload(payload) if isinstance(json.loads(payload), dict) else None
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


@pytest.mark.parametrize("count, seed", [(300, 11), pytest.param(3000, 12, marks=pytest.mark.slow)])
def test_hostile_payloads_are_rejected_with_a_reason(count, seed):
    rng = random.Random(seed)
    outcomes, as_sent = {}, {}
    for topic, template in templates():
        cases = list(hostile_payloads(rng, template, count))
        cases.append(("oversized", oversized(template, topic)))
        for label, payload in cases:
            outcome = check(f"{topic} {label}", topic, payload)
            as_sent[outcome] = as_sent.get(outcome, 0) + 1
            if outcome == "accepted":  # someone's copy passes only when it says what the board signed
                assert unsigned(json.loads(payload)) == unsigned(template), label
            signed = signed_by_the_board(payload)
            if signed is not None:
                outcome = check(f"{topic} {label} (signed)", topic, signed)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert as_sent.get("signature_invalid", 0) > 0, as_sent
    assert outcomes.get("malformed_message", 0) > 0 and outcomes.get("invalid_body", 0) > 0, outcomes
    assert outcomes.get("oversized", 0) >= len(templates()), outcomes
    # The untouched templates still go through: the parser rejects what is wrong, not everything.
    assert all(check("template", topic, json.dumps(t).encode()) == "accepted" for topic, t in templates())


def test_hostile_topics_are_rejected_with_a_reason():
    rng = random.Random(13)
    _, payload = templates()[1]
    raw = json.dumps(payload).encode()
    topics = ["", "/", "#", "+", "edgeopt", "edgeopt/v1", "edgeopt/v1/+/telemetry", "edgeopt/v1/#",
              f"edgeopt/v1/{DEVICE}", f"edgeopt/v1/{DEVICE}/telemetry/extra", f"edgeopt/v2/{DEVICE}/telemetry",
              f"edgeopt/v1/{DEVICE}/jobs", f"edgeopt/v1/{DEVICE}/chunks", "edgeopt/v1/../telemetry",
              "edgeopt/v1/\x00/telemetry", "edgeopt/v1/\ud800/telemetry", "edgeopt/v1/" + "a" * 70 + "/telemetry",
              f"edgeopt/v1/{DEVICE.upper()}/telemetry", f"edgeopt/v1/{DEVICE}/TELEMETRY"]
    alphabet = "ab/+#\x00\u00e9\ud800 ."
    topics += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(200)]
    reasons = {check(repr(topic), topic, raw) for topic in topics}
    assert "accepted" not in reasons
    assert {"invalid_topic", "unexpected_topic", "wrong_device"} <= reasons, reasons
    assert check("the right topic", wire.telemetry_topic(DEVICE), raw) == "accepted"
