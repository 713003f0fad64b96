"""``collector_paused``: the cycle collector is off inside, back on after the last block ends,
and left alone when the application turned it off; a large pause's containers end in the oldest
generation, an application's frozen objects stay frozen, and cycles are still collected."""

from __future__ import annotations

import gc
import sys
import sysconfig
import threading
from collections.abc import Iterator

import pytest

from agentledger.core.collector import PROMOTE_AT, PROMOTE_BUDGET, collector_paused
from agentledger.core.events import RunStarted
from agentledger.core.projections import Views


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    """Each test starts with the collector on and leaves it as it found it (a test that turns
    it off must not leave every later test in the session without it)."""
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
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


def _young() -> set[int]:
    return {id(o) for o in gc.get_objects(generation=0)}


def _oldest() -> set[int]:
    return {id(o) for o in gc.get_objects(generation=2)}


# Where the end of a large pause moves its containers (the collector module says why only there).
SPLICES = sys.version_info < (3, 14) and not sysconfig.get_config_var("Py_GIL_DISABLED")


def test_the_build_check_agrees_with_sysconfig() -> None:
    """The collector tells a free-threaded build by its ABI flags (sysconfig imports threading)."""
    assert (sys.version_info < (3, 14) and "t" not in getattr(sys, "abiflags", "")) == SPLICES


def test_a_large_pause_moves_its_containers_to_the_oldest_generation_unless_objects_are_frozen() -> None:
    gc.collect()
    moves = SPLICES and gc.get_freeze_count() == 0  # CPython 3.12 keeps its static types' tuples frozen
    frozen = gc.get_freeze_count()
    with collector_paused():
        made = [[index] for index in range(2 * PROMOTE_AT)]  # each a tracked container
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen  # nothing is left frozen, nothing frozen is released
    oldest = _oldest()  # (without the move a young collection may run first: it moves them one generation)
    if moves:
        assert all(id(item) in oldest for item in made)
    else:
        assert not any(id(item) in oldest for item in made)


@pytest.mark.skipif(not SPLICES or gc.get_freeze_count() != 0, reason="no move is done here")
def test_past_the_budget_pauses_end_as_before_until_a_full_collection() -> None:
    gc.collect()
    each = 2 * PROMOTE_AT
    moving, made = 0, [[0]]
    while id(made[0]) in _oldest() or not moving:  # each pause within the budget moves its containers
        del made  # (freed inside the next pause, they would take from its count of new containers)
        with collector_paused():
            made = [[index] for index in range(each)]
        moving += 1
        assert moving <= PROMOTE_BUDGET // each + 2
    assert moving - 1 >= PROMOTE_BUDGET // each  # the budget, then one pause left to the young collections
    del made
    gc.collect()  # a full collection opens a new budget
    with collector_paused():
        made = [[index] for index in range(each)]
    assert id(made[0]) in _oldest()


def test_a_small_pause_leaves_its_containers_young() -> None:
    gc.collect()
    with collector_paused():
        made = [[index] for index in range(100)]
    young = _young()
    assert all(id(item) in young for item in made)
    oldest = _oldest()
    assert not any(id(item) in oldest for item in made)


@pytest.mark.skipif(
    not SPLICES or gc.get_freeze_count() != 0, reason="the interpreter keeps objects frozen of its own"
)
def test_the_applications_frozen_objects_stay_frozen() -> None:
    gc.collect()
    kept = [[index] for index in range(10)]
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collector_paused():
            made = [[index] for index in range(2 * PROMOTE_AT)]
        assert gc.get_freeze_count() == frozen  # not undone by the end of the pause
        oldest = _oldest()  # (a young collection may run first: it moves them one generation only)
        assert not any(id(item) in oldest for item in made)  # so nothing was moved either
    finally:
        gc.unfreeze()
    assert kept


def test_a_cycle_made_in_a_large_pause_is_still_collected() -> None:
    gc.collect()
    finalized: list[int] = []

    class Node:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            finalized.append(1)

    with collector_paused():
        made = [[index] for index in range(2 * PROMOTE_AT)]
        Node()  # unreachable at once, kept alive only by its own cycle
    gc.collect()  # a full collection finds it wherever the pause's end put it
    assert finalized == [1]
    assert made
