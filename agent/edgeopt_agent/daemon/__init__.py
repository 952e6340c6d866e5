"""The on-device daemon `edgeopt-agent`: MQTT session, disk-backed outbox and inbox, job worker.

Entry points: `edgeopt-agent` / `python -m edgeopt_agent.daemon` (cli.main), or in Python
`Agent(build_config({...})).run(stop_event)`.
"""
from __future__ import annotations

from .agent import Agent
from .config import AgentConfig, BrokerSettings, build_config

__all__ = ["Agent", "AgentConfig", "BrokerSettings", "build_config"]
