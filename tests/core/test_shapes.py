"""``core/shapes.py``: an event holding structs is taken without decoding only when it reads back."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest

from agentledger.core.depth import MAX_DEPTH, too_deep
from agentledger.core.errors import UnrecordableError
from agentledger.core.events import ModelResponded, RunStarted, ToolReturned, ToolSpec, encode_event
from agentledger.core.limits import check_event, may_overflow
from agentledger.core.messages import Content, Message, Usage
from agentledger.core.shapes import IN_PLACE, compile_shape, free_value_fits

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


class _Scans:
    """``may_overflow`` that counts the texts it is asked about."""

    def __init__(self) -> None:
        self.texts = 0

    def __call__(self, data: bytes) -> bool:
        self.texts += 1
        return may_overflow(data)


_SCHEMA = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["n"],
}


def test_a_run_start_with_a_schema_is_taken_in_place() -> None:
    scans = _Scans()
    shape = compile_shape(RunStarted, scans)
    assert shape is not None
    tool = ToolSpec(name="ping", parameters=_SCHEMA)
    event = RunStarted(
        run_id="r", seq=0, at=1, agent_id="a", tools=(tool,), messages=(Message("user", "hi"),)
    )
    assert shape(event, encode_event(event)) is True
    assert scans.texts == 0  # walked value by value: the encoded text was not scanned
    wide = ToolSpec(name="ping", parameters={"properties": {"n": {"maximum": 2**70}}})
    event = RunStarted(run_id="r", seq=0, at=1, agent_id="a", tools=(wide,))
    assert shape(event, encode_event(event)) is False
    with pytest.raises(UnrecordableError, match="64-bit"):
        check_event(event)


def test_a_large_schema_is_taken_on_the_text() -> None:
    scans = _Scans()
    shape = compile_shape(RunStarted, scans)
    assert shape is not None
    properties: dict[str, Any] = {f"p{i}": {"type": "integer"} for i in range(IN_PLACE)}
    event = RunStarted(
        run_id="r",
        seq=0,
        at=1,
        agent_id="a",
        tools=(ToolSpec(name="t", parameters={"properties": properties}),),
    )
    assert shape(event, encode_event(event)) is True
    assert scans.texts == 1
    properties["p7"] = {"maximum": 2**64}
    assert shape(event, encode_event(event)) is False
    with pytest.raises(UnrecordableError, match="64-bit"):
        check_event(event)


class _SubDict(dict[str, Any]):
    """A subclass of dict: not taken for one."""


@pytest.mark.parametrize(
    ("value", "fits"),
    [
        ("text", True),
        (2**63 - 1, True),
        (2**63, False),
        (-(2**63) - 1, False),
        ([1, {"a": [2, None, 1.5, True]}], True),
        ((1, "x"), True),
        ({"a": {"b": [2**70]}}, False),
        ({"a": [[0] * IN_PLACE]}, None),  # too many values to walk: the text decides
        ({"a": b"bytes"}, None),  # a type JSON has no name for: encoded as text, decided there
        (_SubDict(a=1), None),
    ],
)
def test_a_free_value_is_walked_in_place_while_it_is_small(value: Any, fits: bool | None) -> None:
    assert free_value_fits(value) is fits


def test_a_walked_value_cannot_nest_too_deep() -> None:
    chain: Any = []
    for _ in range(IN_PLACE + 1):
        chain = [chain]
    assert free_value_fits(chain) is None  # past the budget
    chain = chain[0]
    assert free_value_fits(chain) is True
    # Inside the deepest place a shape follows, it is still within the limit.
    assert not too_deep(
        encode_event(_answer(message=Message("assistant", (Content("function_result", result=chain),))))
    )
    assert IN_PLACE + 2 * 8 + 1 < MAX_DEPTH


@pytest.mark.parametrize(
    "result", [{"rows": [{"id": 2**64}]}, {"rows": [{"id": i} for i in range(IN_PLACE)] + [2**64]}]
)
def test_a_tool_result_past_64_bits_is_refused_small_or_large(result: Any) -> None:
    event = ToolReturned(run_id="r", seq=3, at=1, call_id="c", name="t", result=result)
    with pytest.raises(UnrecordableError, match="64-bit"):
        check_event(event)
    fine = ToolReturned(run_id="r", seq=3, at=1, call_id="c", name="t", result={"rows": [{"id": 1}]})
    check_event(fine)


def test_a_type_the_compiler_does_not_follow_gets_no_shape() -> None:
    class Fixed(msgspec.Struct):
        pair: tuple[int, str]

    assert compile_shape(Fixed, may_overflow) is None
