"""Fuzzing the edges: every input either works or fails with agentledger's own typed error.

Hypothesis drives five boundaries with hostile input: the log decoders of every store (JSONL
journal and directory, SQLite rows and pages, and the record codec PostgreSQL shares), the
model-output boundary of a run (what a chat client hands back, and what a tool returns), the
server-sent-events parser, and the OpenAI response parsers (whole answers and stream events).
The properties: nothing raises outside the error tree (``AgentLedgerError``), a log read back is
contiguous, a run's log always reads back, and the SSE parser gives the same events however the
bytes are split.

``AGENTLEDGER_FUZZ_EXAMPLES`` sets the examples per test (default 150: the whole file runs in
well under two minutes); docs/reliability.md records a longer run.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentledger import Agent, AgentLedgerError, ChatResponse, Content, Message, Usage, tool
from agentledger.adapters.chat._openai_chat import ChatStream, chat_response
from agentledger.adapters.chat._openai_responses import ResponsesStream, responses_response
from agentledger.adapters.chat._sse import ServerSentEvent, SSEDecoder
from agentledger.adapters.chat.scripted import Call, ScriptedChatClient
from agentledger.adapters.stores._codec import decode_records
from agentledger.adapters.stores.jsonl import JsonlEventStore
from agentledger.adapters.stores.sqlite import SqliteEventStore
from agentledger.core import decode_event, encode_event
from agentledger.core.events import Event, RunCompleted, RunFailed
from agentledger.errors import TornTailWarning
from agentledger.store import MemoryEventStore
from agentledger.testing import FixedClock, SequentialIds

EXAMPLES = int(os.environ.get("AGENTLEDGER_FUZZ_EXAMPLES", "150"))
fuzz = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def sample_log() -> list[Event]:
    @tool
    def lookup(city: str) -> dict[str, Any]:
        """Look a city up."""
        return {"city": city, "temp": 21.5, "tags": ["sunny", {"wind": 3}]}

    client = ScriptedChatClient([Call("lookup", {"city": "Lisbon"}), "It is sunny."])
    agent = Agent(client=client, tools=[lookup], clock=FixedClock(), ids=SequentialIds())
    return list(anyio.run(agent.run, "Weather?").events)


SAMPLE = [encode_event(event) for event in sample_log()]

# -- hostile values -------------------------------------------------------------------------------

texts = st.text() | st.sampled_from(["bad \ud800 text", "\udfff", "\x00", "\u2028", "a" * 5000])
integers = st.integers() | st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**40])
scalars = st.none() | st.booleans() | integers | st.floats() | texts
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
)


@st.composite
def deep(draw: st.DrawFn) -> Any:
    value: Any = draw(scalars)
    for _ in range(draw(st.integers(200, 1_200))):
        value = [value] if draw(st.booleans()) else {"k": value}
    return value


hostile = json_values | deep() | st.builds(object) | st.sampled_from([b"bytes", {1, 2}, (1, "a")])

# -- mutated records ------------------------------------------------------------------------------


@st.composite
def mutated_line(draw: st.DrawFn) -> bytes:
    line = bytearray(draw(st.sampled_from(SAMPLE)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "splice", "deep", "number"]))
        at = draw(st.integers(0, len(line)))
        if kind == "flip" and line:
            line[min(at, len(line) - 1)] = draw(st.integers(0, 255))
        elif kind == "insert":
            line[at:at] = draw(st.binary(max_size=12))
        elif kind == "delete":
            del line[at : at + draw(st.integers(1, 20))]
        elif kind == "splice":
            line[at:at] = draw(st.sampled_from([b"\\ud800", b'"\\u0000"', b"1e999", b"-0", b"[", b"}", b'"']))
        elif kind == "deep":
            depth = draw(st.integers(250, 3_000))
            line[at:at] = b"[" * depth + b"]" * depth
        else:
            line[at:at] = str(draw(integers)).encode()
    return bytes(line).replace(b"\n", b" ")


records = st.lists(mutated_line() | st.sampled_from(SAMPLE) | st.binary(max_size=64), min_size=1, max_size=8)


def contiguous(events: list[Event]) -> None:
    by_run: dict[str, list[int]] = {}
    for event in events:
        by_run.setdefault(event.run_id, []).append(event.seq)
    for seqs in by_run.values():
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))


def read_all(store: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TornTailWarning)
        try:
            for stream in store.streams_sync():
                contiguous(store.read_sync(stream))
        except AgentLedgerError:
            pass


# -- store decoders -------------------------------------------------------------------------------


@fuzz
@given(records, st.booleans())
def test_jsonl_journal_reads_any_bytes_or_says_where(lines: list[bytes], torn: bool) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "runs.jsonl"
        path.write_bytes(b"\n".join(lines) + (b"" if torn else b"\n"))
        read_all(JsonlEventStore(path))


@fuzz
@given(records, st.binary(max_size=40))
def test_jsonl_directory_reads_any_bytes_or_says_where(lines: list[bytes], catalog: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        runs = Path(directory) / "runs"
        runs.mkdir()
        (runs / "run_1.jsonl").write_bytes(b"\n".join(lines) + b"\n")
        (runs / "streams.index").write_bytes(b'"run_1"\n' + catalog + b"\n")
        read_all(JsonlEventStore(runs))


cells = st.none() | integers | st.floats() | st.text(max_size=8) | st.binary(max_size=8)


def sqlite_template() -> bytes:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "events.db"
        store = SqliteEventStore(path, synchronous="OFF")
        store.append_sync("run_1", sample_log(), 0)
        store.close()
        connection = sqlite3.connect(path, isolation_level=None)
        connection.execute("PRAGMA journal_mode = DELETE")
        connection.execute("DROP TRIGGER events_follow")
        connection.close()
        return path.read_bytes()


SQLITE_TEMPLATE = sqlite_template()


@fuzz
@given(records, cells, cells, st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=6))
def test_sqlite_reads_any_row_or_page_or_says_where(
    lines: list[bytes], seq: Any, last: Any, flips: list[tuple[int, int]]
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "events.db"
        path.write_bytes(SQLITE_TEMPLATE)
        connection = sqlite3.connect(path, isolation_level=None)
        connection.execute("PRAGMA synchronous = OFF")
        connection.execute("UPDATE events SET data = ?", (b"\n".join(lines),))
        with contextlib.suppress(sqlite3.IntegrityError, OverflowError):  # what the schema refuses
            connection.execute("UPDATE events SET seq = ?, last = ?", (seq, last))
        connection.close()
        data = bytearray(path.read_bytes())
        for offset, value in flips:
            if 100 <= offset < len(data):  # past the header: damaged pages, not another format
                data[offset] = value
        path.write_bytes(bytes(data))
        for read_only in (True, False):
            opened = SqliteEventStore(path, read_only=read_only, synchronous="OFF")
            try:
                read_all(opened)
            finally:
                opened.close()


@fuzz
@given(records)
def test_the_shared_record_codec_decodes_or_says_where(lines: list[bytes]) -> None:
    """What PostgreSQL rows (and every other store) go through."""
    try:
        events = decode_records(lines, lambda i: f"row {i}")
    except AgentLedgerError as exc:
        message = str(exc)
        events = []
    else:
        message = "row "
    assert message.startswith("row ")
    for event in events:
        assert encode_event(decode_event(encode_event(event))) == encode_event(event)


# -- the model-output boundary --------------------------------------------------------------------

contents = st.builds(
    Content,
    type=st.sampled_from(["text", "function_call", "function_result", "reasoning"]) | hostile,
    text=st.none() | texts | hostile,
    call_id=st.none() | st.sampled_from(["c1", "c2"]) | hostile,
    name=st.none() | st.just("echo") | hostile,
    arguments=st.none() | st.just('{"value": 1}') | texts | hostile,
    result=st.none() | hostile,
    approved=st.none() | st.booleans() | hostile,
)
usages = st.none() | st.builds(Usage, hostile | integers, hostile | integers, integers) | hostile


@st.composite
def responses(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 20)) == 0:
        return draw(hostile)  # not a ChatResponse at all
    messages = [Message("assistant", draw(st.lists(contents, max_size=3)))]
    fields: dict[str, Any] = {  # a client can hand over anything, whatever its annotations say
        "usage": draw(usages),
        "model": draw(st.none() | texts),
        "finish_reason": draw(st.none() | texts | hostile),
        "response_id": draw(st.none() | hostile),
    }
    return ChatResponse(messages, **fields)


def run_to_a_readable_log(script: list[Any], tools: list[Any]) -> None:
    store = MemoryEventStore()
    agent = Agent(
        client=ScriptedChatClient(script), tools=tools, store=store, clock=FixedClock(), ids=SequentialIds()
    )
    with contextlib.suppress(AgentLedgerError):
        anyio.run(agent.run, "go")
    events = store.read_nowait("run_1")
    contiguous(events)
    assert isinstance(events[-1], RunCompleted | RunFailed)
    for event in events:  # JSON has no inf or NaN: they are stored as null, and stay so
        stored = decode_event(encode_event(event))
        assert encode_event(decode_event(encode_event(stored))) == encode_event(stored)


@fuzz
@given(st.lists(responses(), min_size=1, max_size=3))
def test_any_model_output_ends_the_run_with_a_readable_log(script: list[Any]) -> None:
    @tool
    def echo(value: Any = None) -> Any:
        """Echo."""
        return value

    run_to_a_readable_log([*script, "done"], [echo])


@fuzz
@given(hostile, texts | hostile)
def test_any_tool_value_or_arguments_end_in_a_readable_log(value: Any, raw: Any) -> None:
    @tool
    def produce(value: Any = None) -> Any:
        """Produce."""
        return value

    arguments = raw if isinstance(raw, str) else msgspec.json.encode({"value": 1}).decode()
    returned: Callable[[Any], Any] = lambda _request: ChatResponse(  # noqa: E731
        Message("assistant", [Content.from_function_call("c1", "produce", arguments=arguments)])
    )

    @tool
    def hostile_value() -> Any:
        """Return the hostile value."""
        return value

    run_to_a_readable_log([returned, Call("hostile_value"), "done"], [produce, hostile_value])


# -- SSE and the OpenAI parsers -------------------------------------------------------------------


@fuzz
@given(st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=8))
def test_sse_parses_any_bytes_the_same_however_they_are_split(data: bytes, cuts: list[int]) -> None:
    whole = SSEDecoder()
    expected = whole.feed(data)
    pieces, start = [], 0
    for cut in sorted(cuts):
        pieces.append(data[start:cut])
        start = max(start, cut)
    pieces.append(data[start:])
    split = SSEDecoder()
    got = [event for piece in pieces for event in split.feed(piece)]
    assert got == expected
    assert whole.pending == split.pending


def json_bytes(value: Any) -> bytes:
    try:
        return msgspec.json.encode(value)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return b"{}"


answers = (
    st.binary(max_size=200)
    | json_values.map(json_bytes)
    | deep().map(json_bytes)
    | st.fixed_dictionaries(
        {"choices": st.lists(st.fixed_dictionaries({"message": json_values, "finish_reason": json_values}))},
        optional={"usage": json_values, "error": json_values, "id": json_values},
    ).map(json_bytes)
    | st.fixed_dictionaries(
        {"output": st.lists(json_values, max_size=3), "status": json_values},
        optional={"usage": json_values, "error": json_values, "incomplete_details": json_values},
    ).map(json_bytes)
)


@fuzz
@given(answers)
def test_the_openai_parsers_answer_or_raise_their_own_errors(payload: bytes) -> None:
    for parse in (chat_response, responses_response):
        with contextlib.suppress(AgentLedgerError):
            parse(payload, "m")


stream_events = st.lists(
    st.tuples(
        st.sampled_from(["message", "response.output_text.delta", "response.completed", "error"]), answers
    ),
    max_size=6,
)


@fuzz
@given(stream_events)
def test_the_openai_stream_readers_answer_or_raise_their_own_errors(events: list[tuple[str, bytes]]) -> None:
    for stream in (ChatStream("m"), ResponsesStream("m")):
        try:
            for name, data in events:
                stream.feed(ServerSentEvent(data.decode("utf-8", "replace"), name))
            stream.close()
        except AgentLedgerError:
            pass
