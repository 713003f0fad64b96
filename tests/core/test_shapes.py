"""``core/shapes.py``: an event holding structs is taken without decoding only when it reads back."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest

from agentledger.core.errors import UnrecordableError
from agentledger.core.events import ModelResponded, RunStarted, ToolSpec, encode_event
from agentledger.core.limits import check_event, may_overflow
from agentledger.core.messages import Content, Message, Usage
from agentledger.core.shapes import compile_shape

_decode = msgspec.json.Decoder(ModelResponded).decode
_shape = compile_shape(ModelResponded, may_overflow)


def _answer(**fields: Any) -> ModelResponded:
    values: dict[str, Any] = {
        "run_id": "r",
        "seq": 2,
        "at": 1,
        "iteration": 1,
        "message": Message("assistant", "hi"),
    }
    values.update(fields)
    return ModelResponded(**values)


def _reads_back(event: ModelResponded) -> bool:
    data = encode_event(event)
    try:
        decoded = _decode(data)
    except msgspec.DecodeError:
        return False
    return not may_overflow(data) or decoded == event


def test_a_plain_answer_is_taken_by_its_shape() -> None:
    assert _shape is not None
    event = _answer(usage=Usage(1, 2, 3), model="m", cost=0.5)
    assert _shape(event, encode_event(event)) is True


@pytest.mark.parametrize(
    "event",
    [
        _answer(message=Message("assistant", (Content("text", text=5),))),  # type: ignore[arg-type]
        _answer(iteration=True),
        _answer(iteration=2**64),
        _answer(usage=Usage(1.5, 1, 2)),  # type: ignore[arg-type]
        _answer(usage=Usage(2**70, 1, 2)),
        _answer(message=Message("assistant", (Content("function_result", result=[2**70]),))),
        _answer(message=Message("assistant", (Content("function_result", result={"n": 2**70}),))),
        _answer(model=b"m"),
    ],
)
def test_a_value_that_may_not_read_back_is_not_taken_by_its_shape(event: ModelResponded) -> None:
    assert _shape is not None
    assert _shape(event, encode_event(event)) is False


@pytest.mark.parametrize(
    "event",
    [
        _answer(message=Message("assistant", (Content("text", text=5),))),  # type: ignore[arg-type]
        _answer(usage=Usage(1.5, 1, 2)),  # type: ignore[arg-type]
        _answer(usage=Usage(2**70, 1, 2)),
        _answer(message=Message("assistant", (Content("function_result", result=[[2**70]]),))),
    ],
)
def test_the_gate_still_refuses_what_would_not_read_back(event: ModelResponded) -> None:
    with pytest.raises(UnrecordableError):
        check_event(event)


def test_a_deep_free_value_is_measured_on_the_text() -> None:
    deep: Any = "leaf"
    for _ in range(300):
        deep = [deep]
    event = _answer(message=Message("assistant", (Content("function_result", result=deep),)))
    with pytest.raises(UnrecordableError, match="deeper"):
        check_event(event)


def test_whatever_the_shape_takes_reads_back() -> None:
    values: list[Any] = [
        "t",
        0,
        -1,
        2**63 - 1,
        2**63,
        -(2**63) - 1,
        1.5,
        math.nan,
        True,
        None,
        [1],
        {"a": 2**64},
        b"x",
    ]
    taken = 0
    for value in values:
        for field in ("text", "call_id", "result", "approved", "reason"):
            event = _answer(message=Message("assistant", (Content("text", **{field: value}),)))
            try:
                data = encode_event(event)
            except (TypeError, msgspec.EncodeError):
                continue
            assert _shape is not None
            if _shape(event, data):
                taken += 1
                assert _reads_back(event), (field, value)
        for field in ("iteration", "model", "cost"):
            event = _answer(**{field: value})
            data = encode_event(event)
            assert _shape is not None
            if _shape(event, data):
                taken += 1
                assert _reads_back(event), (field, value)
    assert taken > 10  # the check took many of them: it is not refusing everything


def test_a_run_start_with_a_schema_is_taken_on_the_text() -> None:
    shape = compile_shape(RunStarted, may_overflow)
    assert shape is not None
    tool = ToolSpec(name="ping", parameters={"type": "object", "properties": {"n": {"type": "integer"}}})
    event = RunStarted(
        run_id="r", seq=0, at=1, agent_id="a", tools=(tool,), messages=(Message("user", "hi"),)
    )
    assert shape(event, encode_event(event)) is True
    wide = ToolSpec(name="ping", parameters={"properties": {"n": {"maximum": 2**70}}})
    event = RunStarted(run_id="r", seq=0, at=1, agent_id="a", tools=(wide,))
    assert shape(event, encode_event(event)) is False


def test_a_type_the_compiler_does_not_follow_gets_no_shape() -> None:
    class Fixed(msgspec.Struct):
        pair: tuple[int, str]

    assert compile_shape(Fixed, may_overflow) is None
