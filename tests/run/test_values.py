"""``run/values.py``: ``to_recorded``, the one conversion of a value into what a log records."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import enum
import uuid
from typing import Any

import msgspec
import pydantic

from agentledger.run import to_recorded


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Moment(msgspec.Struct):
    at: datetime.date


class Room(pydantic.BaseModel):
    name: str
    booked: datetime.datetime
    tags: set[str] = set()


def test_plain_values_are_kept_as_they_are() -> None:
    for value in ("text", 3, 2.5, True, None):
        assert to_recorded(value) is value


def test_containers_become_json_ready_builtins_with_text_keys() -> None:
    assert to_recorded({1: [1, 2], "b": {2.5: [3]}}) == {"1": [1, 2], "b": {"2.5": [3]}}
    assert to_recorded({"x": frozenset({1})}) == {"x": [1]}


def test_utf8_bytes_are_their_text_and_other_bytes_base64() -> None:
    assert to_recorded(b"caf\xc3\xa9") == "café"
    assert to_recorded(bytearray(b"plain")) == "plain"
    assert to_recorded(b"\xff\x00") == base64.b64encode(b"\xff\x00").decode()
    assert to_recorded({"file": b"abc"}) == {"file": "YWJj"}  # nested bytes follow msgspec's rule: base64


def test_structs_dataclasses_enums_and_dates_follow_msgspecs_rules() -> None:
    assert to_recorded(Point(1, 2)) == {"x": 1, "y": 2}
    assert to_recorded(Colour.RED) == "red"
    assert to_recorded(Moment(datetime.date(2026, 1, 2))) == {"at": "2026-01-02"}
    ident = uuid.UUID(int=1)
    assert to_recorded([ident]) == [str(ident)]


def test_a_pydantic_model_is_its_json_mode_dump_at_any_depth() -> None:
    room = Room(name="sea", booked=datetime.datetime(2026, 1, 2, 3, 4, 5), tags={"quiet"})
    expected = {"name": "sea", "booked": "2026-01-02T03:04:05", "tags": ["quiet"]}
    assert to_recorded(room) == expected
    assert to_recorded({"rooms": [room]}) == {"rooms": [expected]}


def test_a_value_with_no_json_form_is_its_str() -> None:
    class Opaque:
        def __str__(self) -> str:
            return "opaque!"

    assert to_recorded(Opaque()) == "opaque!"
    nested = {"a": [Opaque()]}
    assert to_recorded(nested) == str(nested)  # the whole value as text, not a dict around the leaf


def test_a_look_alike_of_a_pydantic_model_is_not_dumped() -> None:
    """Only a class with ``model_fields`` counts as a model: another ``model_dump`` is not called."""

    class LookAlike:
        called = False

        def model_dump(self, **_: Any) -> dict[str, Any]:
            LookAlike.called = True
            return {"leaked": True}

        def __str__(self) -> str:
            return "look-alike"

    assert to_recorded(LookAlike()) == "look-alike"
    assert not LookAlike.called


def test_a_value_nested_past_any_reader_becomes_text() -> None:
    looped: list[Any] = []
    looped.append(looped)
    assert to_recorded(looped) == "[[...]]"


def test_a_value_whose_text_is_unreadable_too_is_named_by_its_type() -> None:
    class Deep:
        def __str__(self) -> str:
            raise RecursionError

    assert to_recorded(Deep()) == "<Deep>"
