"""Factories that are not what ``--agent`` needs."""

from __future__ import annotations

from agentledger import Agent


async def async_factory() -> Agent:
    raise AssertionError("never awaited")


def exits() -> Agent:
    raise SystemExit(3)
