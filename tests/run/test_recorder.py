"""``run/recorder.py``: where a run's events go in this process. Outside a step a record goes to
the owner at once, inside one to its step; what the log could not give back is refused before it
is kept; sinks are told of each kept event and never decide it; the session's live state and a
sharing caller follow the writes as they are kept."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import pytest

from agentledger import AgentSession
from agentledger.core import (
    Event,
    RunCompleted,
    RunFailed,
    RunMachine,
    RunStarted,
    RunTerminated,
    SessionUpdated,
    TransitionError,
)
from agentledger.core.errors import UnrecordableError
from agentledger.core.events import RunConfig, StateChange, ToolSpec
from agentledger.run import RunRecorder, Sinks, capture_sinks, watching

RUN = "run-1"
TOOLS = (ToolSpec(name="t"),)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


def _started(sinks: Sequence[object] = (), **recorder: object) -> RunRecorder:
    rec = RunRecorder(RunMachine(), RUN, Clock(), list(sinks), **recorder)  # type: ignore[arg-type]
    rec.record(RunStarted, agent_id="a", tools=TOOLS, config=RunConfig())
    return rec


def _write(key: str, value: object, session_id: str = "s") -> dict[str, object]:
    return {"session_id": session_id, "by": "tool", "changes": (StateChange(key, "set", value),)}


def test_a_record_outside_any_step_is_kept_and_numbered_at_once() -> None:
    recorder = _started()
    event = recorder.record(SessionUpdated, **_write("k", 1))
    assert recorder.log[-1] is event
    assert [e.seq for e in recorder.log] == [0, 1]


def test_a_record_inside_a_step_waits_in_the_step_until_the_owner_feeds_it() -> None:
    recorder = _started()
    step = recorder.step()
    with recorder.into(step):
        recorder.record(SessionUpdated, **_write("k", 1))
    assert len(recorder.log) == 1
    assert len(step.events) == 1
    recorder.record(SessionUpdated, **_write("after", 2))  # outside the block: to the owner again
    recorder.feed(step)
    assert [e.changes[0].key for e in recorder.log[1:] if isinstance(e, SessionUpdated)] == ["after", "k"]


def test_a_run_recorder_holds_what_other_threads_record() -> None:
    """In this process, a record from a worker thread (a sync tool's) into its call's step is
    held in the step; one from a thread outside any step is held for the owner, which feeds it
    before anything else; once the run has ended such a record is refused. The owner never
    feeds from two threads."""
    recorder = RunRecorder(RunMachine(), RUN, Clock(), [])
    recorder.record(RunStarted, agent_id="a", tools=TOOLS, config=RunConfig())
    step = recorder.step(live=True)
    errors: list[BaseException] = []

    def in_thread(into_step: bool) -> None:
        try:
            if into_step:
                with recorder.into(step):
                    recorder.record(SessionUpdated, session_id="s", by="worker", changes=())
            else:
                recorder.record(SessionUpdated, session_id="s", by="stray", changes=())
        except TransitionError as exc:
            errors.append(exc)

    for into_step in (True, False):
        worker = threading.Thread(target=in_thread, args=(into_step,))
        worker.start()
        worker.join()
    assert len(recorder.log) == 1
    assert [getattr(e, "by", None) for e in step.events] == ["worker"]
    recorder.feed(step)
    assert [getattr(e, "by", None) for e in recorder.log[1:]] == ["stray", "worker"]
    assert errors == []
    assert recorder.fail("Cancelled", "stop")
    worker = threading.Thread(target=in_thread, args=(False,))
    worker.start()
    worker.join()
    assert len(errors) == 1
    assert "after the step ended" in str(errors[0])


def test_a_thread_recording_into_a_run_that_ended_is_refused() -> None:
    recorder = _started()
    assert recorder.fail("Cancelled", "stop")
    errors: list[BaseException] = []

    def stray() -> None:
        try:
            recorder.record(SessionUpdated, session_id="s", by="stray", changes=())
        except TransitionError as exc:
            errors.append(exc)

    worker = threading.Thread(target=stray)
    worker.start()
    worker.join()
    assert len(errors) == 1
    assert "after the run ended" in str(errors[0])
    assert type(recorder.log[-1]) is RunFailed


def test_a_record_the_log_could_not_give_back_is_refused_and_seq_does_not_skip() -> None:
    recorder = _started()
    with pytest.raises(UnrecordableError):
        recorder.record(SessionUpdated, **_write("k", 2**64))
    assert len(recorder.log) == 1
    assert recorder.record(SessionUpdated, **_write("k", 1)).seq == 1


def _ended_by_middleware() -> RunRecorder:
    """A run agent middleware ended before its loop: the machine waits for how it finished."""
    recorder = _started()
    recorder.record(RunTerminated, iteration=0, reason="no", by="agent_middleware", leaves_history=True)
    recorder.take_finish()
    return recorder


def test_an_answer_given_in_the_runs_place_is_recorded_as_its_end() -> None:
    recorder = _ended_by_middleware()
    recorder.finish(text="Answered.")
    end = recorder.log[-1]
    assert isinstance(end, RunCompleted)
    assert (end.text, end.reason) == ("Answered.", "terminated")


def test_an_answer_given_in_the_runs_place_that_cannot_be_recorded_leaves_the_run_open() -> None:
    recorder = _ended_by_middleware()
    before = list(recorder.log)
    with pytest.raises(UnrecordableError):
        recorder.finish(text="bad \ud800 text")  # a lone surrogate is no UTF-8
    assert recorder.machine.is_open
    assert recorder.log == before
    recorder.finish(text="Answered.")  # and the run can still end properly
    assert type(recorder.log[-1]) is RunCompleted


def test_failing_records_run_failed_once_with_credentials_hidden() -> None:
    recorder = _started()
    assert recorder.fail("ValueError", "call failed: Authorization: Bearer abc.def.ghi")
    failed = recorder.log[-1]
    assert isinstance(failed, RunFailed)
    assert failed.error_type == "ValueError"
    assert "abc.def.ghi" not in failed.message
    assert "[redacted]" in failed.message
    assert not recorder.fail("ValueError", "again")  # the run has ended: nothing more
    assert recorder.log[-1] is failed


def test_every_sink_sees_every_kept_event_and_a_failing_one_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[Event] = []

    def broken(event: Event) -> None:
        raise RuntimeError("sink down")

    with caplog.at_level(logging.ERROR, logger="agentledger.sinks"):
        recorder = _started([broken, seen.append])
        recorder.record(SessionUpdated, **_write("k", 1))
    assert seen == recorder.log
    assert recorder.sink_failures == 2  # counted every time
    assert len([r for r in caplog.records if "sink down" in str(r.exc_info)]) == 1  # logged once


def test_sinks_alone_are_isolated_from_one_another() -> None:
    told: list[tuple[str, int]] = []
    sinks = Sinks(
        RUN, [lambda e: told.append(("first", e.seq)), _raise, lambda e: told.append(("third", e.seq))]
    )
    events = [RunStarted(run_id=RUN, seq=seq, at=1, agent_id="a") for seq in (0, 1)]
    sinks(events)
    assert told == [("first", 0), ("first", 1), ("third", 0), ("third", 1)]
    assert sinks.failures == 2


def _raise(event: Event) -> None:
    raise ValueError("no")


def test_runs_started_while_watching_hand_their_events_to_the_watcher() -> None:
    watched: list[Event] = []
    with watching(watched.append):
        inside = _started()
        assert capture_sinks.get() == (watched.append,)
    outside = _started()
    assert capture_sinks.get() == ()
    outside.record(SessionUpdated, **_write("k", 1))
    inside.record(SessionUpdated, **_write("k", 2))  # a run started inside keeps its watcher
    assert watched == inside.log


def test_the_sessions_live_state_follows_its_writes_as_they_are_kept() -> None:
    session = AgentSession("s")
    recorder = _started(session=session)
    step = recorder.step()
    with recorder.into(step):
        recorder.record(SessionUpdated, **_write("room", "sea"))
    assert "room" not in session.state  # held in its step: not kept yet
    recorder.feed(step)
    assert session.state["room"] == "sea"
    recorder.record(SessionUpdated, **_write("room", "other", session_id="another session"))
    assert session.state["room"] == "sea"  # another session's write is not this one's


def test_a_caller_sharing_the_session_is_given_each_write_with_where_it_was_kept() -> None:
    copies: list[tuple[str, tuple[StateChange, ...], tuple[str, int] | None]] = []

    def parent(by: str, changes: tuple[StateChange, ...], origin: tuple[str, int] | None = None) -> None:
        copies.append((by, changes, origin))

    recorder = _started(session=AgentSession("s"), parent=parent)
    kept = recorder.record(SessionUpdated, **_write("room", "sea"))
    relayed = recorder.record(SessionUpdated, **_write("x", 1), origin_run_id="grandchild", origin_seq=7)
    assert isinstance(kept, SessionUpdated)
    assert isinstance(relayed, SessionUpdated)
    assert copies == [
        (f"{RUN}/tool", kept.changes, (RUN, kept.seq)),
        (f"{RUN}/tool", relayed.changes, ("grandchild", 7)),
    ]


def test_no_caller_is_told_of_writes_without_a_session() -> None:
    copies: list[object] = []
    recorder = _started(parent=lambda *args: copies.append(args))
    recorder.record(SessionUpdated, **_write("room", "sea"))
    assert copies == []
