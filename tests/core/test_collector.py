"""``collector_paused``: the cycle collector is off inside, back on after the last block ends,
and left alone when the application turned it off."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from agentledger.core import Views, collector_paused
from agentledger.core.events import RunStarted


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_nested_blocks_share_one_pause() -> None:
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block still holds the pause
    assert gc.isenabled()


def test_a_block_that_raises_ends_its_pause() -> None:
    with pytest.raises(KeyError), collector_paused():
        raise KeyError("x")
    assert gc.isenabled()


def test_blocks_in_two_threads_end_the_pause_when_the_last_ends() -> None:
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with collector_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with collector_paused():
        thread.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # the other thread's block is still running
    release.set()
    thread.join(10)
    assert gc.isenabled()


def test_a_collector_the_application_turned_off_stays_off() -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()
    Views.from_events([RunStarted(run_id="r", seq=0, at=0, agent_id="a")])
    assert not gc.isenabled()


def test_a_fold_leaves_the_collector_on() -> None:
    views = Views.from_events([RunStarted(run_id="r", seq=0, at=0, agent_id="a")])
    assert views.transcript.messages == []
    assert gc.isenabled()
