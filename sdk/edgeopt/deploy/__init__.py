"""Deploy: send a converted model to devices over MQTT, signed, in resumable chunks.

    from edgeopt.deploy import deploy
    rows = deploy("out", broker="127.0.0.1:1883", profile="rpi5", wait=True)

`edgeopt.deploy.keys.init_keys()` makes the Ed25519 key pair (`edgeopt keys init`).
"""
from __future__ import annotations

from .api import DEFAULT_BROKER, broker_settings, deploy, signing_key
from .keys import KeyPair, SigningKey, init_keys
from .rollout import DeviceProgress

__all__ = ["deploy", "broker_settings", "signing_key", "init_keys", "KeyPair", "SigningKey", "DeviceProgress",
           "DEFAULT_BROKER"]
