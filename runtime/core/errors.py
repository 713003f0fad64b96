"""The root of the error tree and the one error the core raises (see ``agentledger.errors``)."""

from __future__ import annotations

__all__ = ("AgentLedgerError", "TransitionError")


class AgentLedgerError(Exception):
    """The base of every error agentledger raises."""


class TransitionError(AgentLedgerError):
    """An input the run machine does not accept in its current phase; the state is unchanged."""

    def __init__(self, message: str, *, run_id: str = "", seq: int | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.seq = seq
