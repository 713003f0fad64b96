"""The root of the error tree and the one error the core raises (see ``agentledger.errors``)."""

from __future__ import annotations

__all__ = ("AgentLedgerError", "TransitionError", "UnrecordableError")


class AgentLedgerError(Exception):
    """The base of every error agentledger raises."""


class TransitionError(AgentLedgerError):
    """An input the run machine does not accept in its current phase; the state is unchanged."""

    def __init__(self, message: str, *, run_id: str = "", seq: int | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.seq = seq


class UnrecordableError(AgentLedgerError, ValueError):
    """A value the log could not give back as it was: text that is not UTF-8, nesting deeper
    than ``MAX_DEPTH``, an integer outside 64 bits, or a value of the wrong type for its field.

    Nothing is recorded for it: the run records a failure instead (an error result for a tool's
    value, ``ModelFailed`` for a model's answer), so its log stays readable and contiguous.
    """
