"""The floor: what one event-sourced run of scenarios (a), (b) and (c) costs in the least code,
timed beside agentledger and agent-framework-core in process CPU time.

Theory of operation. ``FloorRunner`` does the work agentledger does for a run, organised the same
way and nothing more: msgspec events (tagged, frozen, untracked by the cycle collector); a
recorder that stamps each input event with ``run_id``, ``seq`` and ``at``, encodes it once and
checks it as the log does (no deeper than ``MAX_DEPTH``, no integer past 64 bits, and it must
decode back) and feeds it to a machine; a machine that looks the pair (phase, event type) up in a
transition table, checks ``seq``, folds the event into a transcript (one tool message a batch,
its results in the order of the calls) and answers with the events it derives and the commands
the driver carries out next; a driver that runs those commands; and an in-memory store appended
to, with its expected version, before each model call and each batch of calls and at the end.

The checks are agentledger's, each named where the floor makes it. A model call offers the
specs of the tools ``ModelCalled`` lists; the client's answer (its own response type) becomes
the recorded message; a response whose calls lack an id or repeat one, or call a tool not
offered, is refused. A tool call's argument text is decoded to the tool's parameter type
(``n: int``) before ``ToolCalled`` is recorded and the tool runs; the machine takes a
``ToolCalled`` or ``ToolReturned`` only for a call the open batch awaits. Where agentledger
records a refusal as an event (``ArgumentsRejected``, ``ToolNotFound``, a failed model call) the
floor raises: the benchmark runs never take those paths, and the checks are what they cost.

A run writes exactly the events agentledger's run of the same scenario writes: 4 for (a), 44 for
(b), 106 for (c) (``RunStarted``, a ``ModelCalled`` and ``ModelResponded`` per model call, a
``ToolCalled`` and ``ToolReturned`` per tool call, ``RunCompleted``), with agentledger's fields in
its order and with its defaults, so that the two write the same bytes but for ids and times (the
run's settings and library version in ``RunStarted``, the message count of each ``ModelCalled``,
the run's response in ``RunCompleted``; run ids of the same form), and the scripted model
answers with a fresh response on every call, as the other two benchmarks' clients do
(``benchmarks/_scenarios.py``).

Timing is interleaved as in ``bench_overhead``: each round times one batch per runner (floor,
agentledger, the reference), the order rotating between rounds, each batch on a fresh runner after
``gc.collect()``. A batch is timed in process CPU time (``time.process_time_ns``), which moves
much less than the wall clock when other work shares the machine. The figure per runner is the
median over rounds of the CPU time per run; the ratios divide a runner's median by the floor's,
and the per-round ratio divides two batches of the same round.

Run ``python -m benchmarks.bench_floor`` (``--help`` for options). Without agent-framework-core
installed (``pip install -e '.[bench]'``) the reference is left out and the output says so.
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import gc
import itertools
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from ._ledger import LedgerRunner, __version__
from ._scenarios import PROMPT, SCENARIOS, TOOL_NAME, Counter, Runner, Scenario, Step
from .bench_overhead import INSTALL_HINT, PEER, _scenario_keys, _us, environment, peer_factory, verify

__all__ = ("FLOOR", "FloorRunner", "main")

FLOOR = "floor"
LEDGER = "agentledger"

# -- events -------------------------------------------------------------------------------------


# The fields of agentledger's records, in its order and with its defaults: a run writes the same
# bytes (ids and times aside) and reads the same fields back.


class Content(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    type: str
    text: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    result: Any = None
    exception: str | None = None
    approved: bool | None = None
    reason: str | None = None


class Message(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    role: str
    contents: tuple[Content, ...] = ()
    author_name: str | None = None


class ToolSpec(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=dict)
    approval_mode: str = "never_require"
    origin: str = ""


class Config(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    max_iterations: int = 40
    max_consecutive_errors: int = 3
    max_function_calls: int | None = None
    detailed_errors: bool = False
    sequential_tools: bool = False
    terminate_on_unknown_calls: bool = False
    max_input_tokens: int | None = None
    max_cost: float | None = None


class Usage(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None


class PingArguments(msgspec.Struct, gc=False):
    """The ping tool's parameters (``n: int``) as a type, made once as agentledger's tool makes it."""

    n: int


class Response(msgspec.Struct, frozen=True, gc=False):
    """What the scripted client answers with: its own type, not the recorded message."""

    messages: tuple[Message, ...]
    model: str


class Event(msgspec.Struct, frozen=True, kw_only=True, tag=True, omit_defaults=True, gc=False):
    run_id: str
    seq: int
    at: int


class RunStarted(Event, frozen=True, kw_only=True):
    agent_id: str
    agent_name: str | None = None
    instructions: str | None = None
    messages: tuple[Message, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    function_invocation_kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    client_kwargs_keys: tuple[str, ...] = ()
    session_id: str | None = None
    history_length: int = 0
    config: Config = msgspec.field(default_factory=Config)
    parent_run_id: str | None = None
    parent_call_id: str | None = None
    session_history: bool = True
    provider_name: str = ""
    schema_version: int = 1
    library_version: str = ""
    run_option_keys: tuple[str, ...] | None = None
    run_tool_names: tuple[str, ...] = ()
    middleware: tuple[str, ...] | None = None
    calls_in_model_order: bool = False
    run_instructions: str | None = None
    context_providers: tuple[str, ...] = ()


class ModelCalled(Event, frozen=True, kw_only=True):
    iteration: int
    tools: tuple[str, ...] = ()
    tool_choice: str | dict[str, Any] | None = None
    message_count: int = 0
    conversation_id: str | None = None
    held: int = 0


class ModelResponded(Event, frozen=True, kw_only=True):
    iteration: int
    message: Message
    usage: Usage | None = None
    finish_reason: str | None = None
    model: str | None = None
    response_id: str | None = None
    conversation_id: str | None = None
    cost: float | None = None


class ToolCalled(Event, frozen=True, kw_only=True):
    call_id: str
    name: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)


class ToolReturned(Event, frozen=True, kw_only=True):
    call_id: str
    name: str
    result: Any = None
    overridden_by: str | None = None
    tool_result: Any = None


class RunCompleted(Event, frozen=True, kw_only=True):
    messages: tuple[Message, ...] = ()
    text: str = ""
    usage: Usage = msgspec.field(default_factory=Usage)
    reason: str = "completed"


AnyEvent = RunStarted | ModelCalled | ModelResponded | ToolCalled | ToolReturned | RunCompleted
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(AnyEvent).decode
MAX_DEPTH = 256
_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))  # a digit: "0", else " "
_RUN_19 = b" " + b"0" * 19


def _wide(data: bytes) -> bool:
    """limits.may_overflow: a number that could be an integer past 64 bits (20 digits, or 19
    starting with a 9). Digits inside a string can give a false alarm, never a miss."""
    digits = b" " + data.translate(_DIGITS)  # digits[i + 1] stands for data[i]
    if b"0" * 20 in digits:
        return True
    start = digits.find(_RUN_19)
    while start >= 0:
        if data[start] == 0x39:
            return True
        start = digits.find(_RUN_19, start + 20)
    return False


_ping_arguments = msgspec.json.Decoder(PingArguments, strict=False).decode

# -- commands and the machine -------------------------------------------------------------------


class Phase(enum.Enum):
    NEW = "new"
    AWAITING_MODEL = "awaiting_model"
    RUNNING_TOOLS = "running_tools"
    DONE = "done"


class CallModel(msgspec.Struct, frozen=True, gc=False):
    iteration: int
    tools: tuple[str, ...]


class InvokeTools(msgspec.Struct, frozen=True, gc=False):
    calls: tuple[Content, ...]


class Finish(msgspec.Struct, frozen=True, gc=False):
    text: str


Command = CallModel | InvokeTools | Finish


class Machine:
    """The (phase, event type) table, ``seq`` checks, the transcript, derived events and commands."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.phase = Phase.NEW
        self.next_seq = 0
        self.iteration = 0
        self.tools: tuple[str, ...] = ()
        self.transcript: list[Message] = []
        self.input_count = 0  # the run's input: the transcript's first messages
        self.batch: tuple[str | None, ...] = ()
        self.open: frozenset[str | None] = frozenset()
        self.results: dict[str | None, Content] = {}

    def handle(self, event: AnyEvent) -> tuple[list[AnyEvent], list[Command]]:
        handler = _TABLE.get((self.phase, type(event)))
        if handler is None or event.seq != self.next_seq or event.run_id != self.run_id:
            raise RuntimeError(f"{type(event).__name__} (seq {event.seq}) refused in phase {self.phase}")
        self.next_seq += 1
        out: list[AnyEvent] = [event]
        commands: list[Command] = []
        handler(self, event, out, commands)
        return out, commands

    def _derive(self, cls: type[AnyEvent], at: int, **fields: Any) -> Any:
        event = cls(run_id=self.run_id, seq=self.next_seq, at=at, **fields)
        self.next_seq += 1
        return event

    def _call_model(self, at: int, out: list[AnyEvent], commands: list[Command]) -> None:
        self.iteration += 1
        count = len(self.transcript)  # RunMachine._call_model: the messages the model is sent
        fields = {"iteration": self.iteration, "tools": self.tools, "message_count": count}
        called = self._derive(ModelCalled, at, **fields)
        out.append(called)
        self.phase = Phase.AWAITING_MODEL
        commands.append(CallModel(self.iteration, self.tools))

    def _started(self, event: RunStarted, out: list[AnyEvent], commands: list[Command]) -> None:
        self.tools = tuple(spec.name for spec in event.tools)
        self.transcript.extend(event.messages)
        self.input_count = len(event.messages)
        self._call_model(event.at, out, commands)

    def _responded(self, event: ModelResponded, out: list[AnyEvent], commands: list[Command]) -> None:
        self.transcript.append(event.message)
        calls = tuple(c for c in event.message.contents if c.type == "function_call")
        if not calls:
            text = "".join(c.text or "" for c in event.message.contents if c.type == "text")
            # RunCompleted keeps the run's response: every message after its input.
            response = tuple(self.transcript[self.input_count :])
            out.append(self._derive(RunCompleted, event.at, messages=response, text=text))
            self.phase = Phase.DONE
            commands.append(Finish(text))
            return
        self.batch = tuple(c.call_id for c in calls)
        self.open = frozenset(self.batch)
        # RunMachine._check_answer (messages.malformed_calls): every call has an id, none twice.
        if None in self.open or "" in self.open or len(self.open) != len(self.batch):
            raise RuntimeError(f"ModelResponded (seq {event.seq}) cannot carry such calls")
        # RunMachine._on_model_responded: a call of a tool not offered is not run.
        if any(c.name not in self.tools for c in calls):
            raise RuntimeError(f"ModelResponded (seq {event.seq}) calls a tool not offered")
        self.results = {}
        self.phase = Phase.RUNNING_TOOLS
        commands.append(InvokeTools(calls))

    def _awaited(self, event: ToolCalled | ToolReturned, *_: Any) -> None:
        # RunMachine._check_call (Transcript.awaits): a call the open batch awaits a result of.
        if event.call_id not in self.open or event.call_id in self.results:
            raise RuntimeError(f"call {event.call_id!r} is not awaiting a result in this batch")

    def _returned(self, event: ToolReturned, out: list[AnyEvent], commands: list[Command]) -> None:
        self._awaited(event)
        result = Content("function_result", call_id=event.call_id, result=event.result)
        self.results[event.call_id] = result
        if len(self.results) == len(self.batch):  # Transcript._close_if_whole: one message a batch
            self.transcript.append(Message("tool", tuple(map(self.results.__getitem__, self.batch))))
            self._call_model(event.at, out, commands)


_TABLE: dict[tuple[Phase, type[Any]], Callable[..., None]] = {
    (Phase.NEW, RunStarted): Machine._started,
    (Phase.AWAITING_MODEL, ModelResponded): Machine._responded,
    (Phase.RUNNING_TOOLS, ToolCalled): Machine._awaited,
    (Phase.RUNNING_TOOLS, ToolReturned): Machine._returned,
}

# -- recorder, store, model and driver ----------------------------------------------------------


class MemoryStore:
    def __init__(self) -> None:
        self.streams: dict[str, list[AnyEvent]] = {}

    def append(self, stream: str, events: Sequence[AnyEvent], expected_version: int) -> int:
        log = self.streams.setdefault(stream, [])
        if len(log) != expected_version:
            raise RuntimeError(f"{stream}: expected version {expected_version}, found {len(log)}")
        log.extend(events)
        return len(log)


class Recorder:
    """Stamps input events, checks each once as the log does and feeds it to the machine."""

    def __init__(self, machine: Machine, clock: Callable[[], int]) -> None:
        self.machine = machine
        self.clock = clock
        self.log: list[AnyEvent] = []
        self.commands: list[Command] = []

    def record(self, cls: type[AnyEvent], **fields: Any) -> None:
        event = cls(run_id=self.machine.run_id, seq=self.machine.next_seq, at=self.clock(), **fields)
        data = _encode(event)
        # limits.check_event (_check_json, may_overflow): no deeper than MAX_DEPTH, no integer
        # past 64 bits (on an alarm agentledger measures exactly; the floor refuses).
        deep = len(data) > 2 * MAX_DEPTH and data.count(b"[") + data.count(b"{") > MAX_DEPTH
        if deep or _wide(data):
            raise RuntimeError(f"{cls.__name__} cannot be recorded")
        _decode(data)  # the gate: it must read back (raises if not)
        events, commands = self.machine.handle(event)
        self.log.extend(events)
        self.commands.extend(commands)


_call_ids = itertools.count(1)
_run_ids = itertools.count(1)
_RUN_BASE = os.urandom(6).hex()  # run ids as agentledger makes them: a random prefix, a counter


class FloorRunner:
    """The floor for one scenario (see the module docstring)."""

    framework = FLOOR

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.counter = Counter()
        self.reset()

    def reset(self) -> None:
        self.store = MemoryStore()
        self.position = 0
        self.specs = (
            ToolSpec(
                TOOL_NAME,
                "Answer a ping.",
                {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
            ),
        )
        self.by_name = {spec.name: spec for spec in self.specs}
        self.config = Config()

    async def ping(self, n: int) -> str:
        self.counter.tool_calls += 1
        return "ok"

    async def model(self, transcript: Sequence[Message], tools: Sequence[ToolSpec]) -> Response:
        step: Step = self.scenario.steps[self.position]
        self.position = (self.position + 1) % len(self.scenario.steps)
        self.counter.model_calls += 1
        if isinstance(step, str):
            return Response((Message("assistant", (Content("text", text=step),)),), "bench-1")
        calls = (
            Content("function_call", call_id=f"call_{next(_call_ids)}", name=n, arguments=a) for n, a in step
        )
        return Response((Message("assistant", tuple(calls)),), "bench-1")

    async def call(self, recorder: Recorder, call: Content) -> None:
        # FunctionTool.arguments_from: the arguments decoded to the tool's parameter type.
        arguments = {"n": _ping_arguments(call.arguments or "{}").n}
        recorder.record(ToolCalled, call_id=call.call_id, name=call.name, arguments=arguments)
        result = await self.ping(**arguments)
        recorder.record(ToolReturned, call_id=call.call_id, name=call.name, result=result)

    async def run(self) -> str:
        run_id = f"run_{_RUN_BASE}{next(_run_ids):06x}"
        machine = Machine(run_id)
        recorder = Recorder(machine, time.time_ns)
        prompt = Message("user", (Content("text", text=PROMPT),))
        recorder.record(
            RunStarted,
            agent_id="bench",
            agent_name="bench",
            instructions="Answer briefly.",
            messages=(prompt,),
            tools=self.specs,
            config=self.config,
            provider_name="bench",
            library_version=__version__,
            run_option_keys=(),
            middleware=(),
            calls_in_model_order=True,
        )
        stored = 0
        while True:
            command = recorder.commands.pop(0)
            stored = self.store.append(run_id, recorder.log[stored:], stored)
            if isinstance(command, CallModel):
                # model_step.call_model: the tools offered are the specs of the names ModelCalled lists.
                response = await self.model(machine.transcript, [self.by_name[n] for n in command.tools])
                # model_step._responded (_contents): the client's response as the recorded message.
                if not isinstance(response, Response):
                    raise TypeError(f"the client returned {type(response).__name__}, not a Response")
                contents = tuple(c for m in response.messages for c in m.contents)
                message = Message("assistant", contents)
                recorder.record(
                    ModelResponded, iteration=command.iteration, message=message, model=response.model
                )
            elif isinstance(command, InvokeTools):
                if len(command.calls) == 1:
                    await self.call(recorder, command.calls[0])
                else:
                    await asyncio.gather(*(self.call(recorder, call) for call in command.calls))
            else:
                self.store.append(run_id, recorder.log[stored:], stored)
                return command.text

    def events(self) -> int:
        """Events the store holds (checked against agentledger's count per run)."""
        return sum(map(len, self.store.streams.values()))


# -- timing -------------------------------------------------------------------------------------


async def cpu_batch(runner: Runner, runs: int) -> float:
    """CPU microseconds per run over ``runs`` runs of a fresh runner."""
    runner.reset()
    gc.collect()
    start = time.process_time_ns()
    for _ in range(runs):
        await runner.run()
    return (time.process_time_ns() - start) / runs / 1e3


async def sized(runner: Runner, runs: int, target_ms: float) -> int:
    """Run ``runs`` times untimed; returns the batch size that takes about ``target_ms`` of CPU."""
    start = time.process_time_ns()
    for _ in range(runs):
        await runner.run()
    per_run_us = (time.process_time_ns() - start) / max(runs, 1) / 1e3
    return max(3, round(target_ms * 1e3 / max(per_run_us, 0.1)))


async def ledger_events_per_run(scenario: Scenario) -> int:
    runner = LedgerRunner(scenario)
    await runner.run()
    return await runner.retained_events()


async def time_scenario(
    scenario: Scenario, makers: dict[str, Callable[[Scenario], Runner]], args: argparse.Namespace
) -> dict[str, Any]:
    runners = {name: make(scenario) for name, make in makers.items()}
    for runner in runners.values():
        await verify(runner, scenario)
    floor = runners[FLOOR]
    assert isinstance(floor, FloorRunner)
    floor.reset()
    await floor.run()
    events = {FLOOR: floor.events(), LEDGER: await ledger_events_per_run(scenario)}
    if events[FLOOR] != events[LEDGER]:
        raise SystemExit(f"scenario {scenario.key}: the floor writes {events[FLOOR]} events a run, "
                         f"agentledger {events[LEDGER]}")  # fmt: skip
    sizes = {name: await sized(r, args.warmup, args.batch_ms) for name, r in runners.items()}
    samples: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    for round_ in range(args.rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(await cpu_batch(runners[name], sizes[name]))
    result: dict[str, Any] = {
        "scenario": scenario.key,
        "title": scenario.title,
        "events_per_run": events[FLOOR],
    }
    for name, values in samples.items():
        result[name] = {
            "median_us": statistics.median(values),
            "batch_runs": sizes[name],
            "rounds": len(values),
        }
        if name != FLOOR:
            per_round = [v / f for v, f in zip(values, samples[FLOOR], strict=True)]
            q1, median, q3 = statistics.quantiles(per_round, n=4)
            result[name]["ratio"] = result[name]["median_us"] / result[FLOOR]["median_us"]
            result[name]["paired_ratio"] = {"median": median, "q1": q1, "q3": q3}
    return result


def table(results: Sequence[dict[str, Any]], names: Sequence[str]) -> str:
    head = ["scenario", "events a run", *(f"{n} (median CPU)" for n in names)]
    head += [f"{n} / floor: ratio (per-round median, middle half)" for n in names if n != FLOOR]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [f"({r['scenario']}) {r['title']}", str(r["events_per_run"])]
        cells += [_us(r[n]["median_us"]) for n in names]
        for n in names:
            if n != FLOOR:
                p = r[n]["paired_ratio"]
                cells.append(
                    f"**{r[n]['ratio']:.1f}x** ({p['median']:.1f}x, {p['q1']:.1f}x to {p['q3']:.1f}x)"
                )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_floor", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--scenarios", type=_scenario_keys, default="abc", help="which of a, b, c to time (default: abc)"
    )
    parser.add_argument("--rounds", type=int, default=30, help="timed batches per runner (default: 30)")
    parser.add_argument("--warmup", type=int, default=200, help="untimed runs first (default: 200)")
    parser.add_argument("--batch-ms", type=float, default=50.0, help="target batch CPU time (default: 50)")
    parser.add_argument("--ledger-only", action="store_true", help="do not time agent-framework-core")
    parser.add_argument("--json", metavar="PATH", help="also write every figure to PATH as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 2 or args.warmup < 1:
        parser.error("--rounds needs at least 2; --warmup at least 1")
    return args


async def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    makers: dict[str, Callable[[Scenario], Runner]] = {FLOOR: FloorRunner, LEDGER: LedgerRunner}
    peer = None if args.ledger_only else peer_factory("standard")
    if peer is not None:
        makers[PEER] = peer
    elif not args.ledger_only:
        print(INSTALL_HINT)
    report: dict[str, Any] = {"environment": environment(), "settings": vars(args)}
    report["timing"] = [await time_scenario(SCENARIOS[key], makers, args) for key in args.scenarios]
    print("\n" + table(report["timing"], list(makers)), flush=True)
    return report


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    for name, value in environment().items():
        print(f"{name:22} {value}")
    report = asyncio.run(benchmark(args))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)


if __name__ == "__main__":
    main()
