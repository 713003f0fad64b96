"""Messages and contents: the values that flow between the run, the model and the tools.

They are frozen msgspec Structs so that events can embed them directly and a log decodes back
into the very same values. ``Message("user", ["hi"])`` accepts plain strings for text contents.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

import msgspec

__all__ = ("Content", "ContentType", "Message", "MessageView", "Usage", "malformed_calls", "result_text")

ContentType = Literal[
    "text",
    "function_call",
    "function_result",
    "function_approval_request",
    "function_approval_response",
]


class Content(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One item of a message: text, a function call, a function result, or an approval."""

    type: str
    """One of ``ContentType``'s values for what agentledger acts on; other kinds (a model's
    reasoning, say) are kept as the client reported them."""
    text: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    result: Any = None
    exception: str | None = None
    approved: bool | None = None
    reason: str | None = None
    """An approval response's reason, as the person gave it (recorded on ``ApprovalResolved``)."""

    @classmethod
    def from_text(cls, text: str) -> Content:
        return cls("text", text=text)

    @classmethod
    def from_function_call(
        cls, call_id: str, name: str, *, arguments: str | dict[str, Any] | None = None
    ) -> Content:
        """A call the model asked for; ``arguments`` is kept as the raw JSON text."""
        raw = arguments if arguments is None or isinstance(arguments, str) else _dumps(arguments)
        return cls("function_call", call_id=call_id, name=name, arguments=raw)

    @classmethod
    def from_function_result(
        cls, call_id: str, *, result: Any = None, exception: str | None = None
    ) -> Content:
        return cls("function_result", call_id=call_id, result=result, exception=exception)

    @classmethod
    def from_approval_response(cls, call_id: str, *, approved: bool, reason: str | None = None) -> Content:
        """The caller's answer to an approval request for ``call_id``, with an optional ``reason``
        (kept in the log on ``ApprovalResolved``; the model is told only approved or rejected)."""
        return cls("function_approval_response", call_id=call_id, approved=approved, reason=reason)

    def to_approval_response(self, approved: bool, *, reason: str | None = None) -> Content:
        """Answer this approval request (``type == "function_approval_request"``)."""
        if self.type != "function_approval_request" or self.call_id is None:
            raise ValueError("only an approval request can be answered")
        return Content.from_approval_response(self.call_id, approved=approved, reason=reason)


class Message(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """A chat message: a role and its contents (strings become text contents)."""

    role: str
    contents: tuple[Content, ...] = ()
    author_name: str | None = None

    if TYPE_CHECKING:  # strings and any sequence are accepted, and normalised in __post_init__

        def __init__(
            self,
            role: str,
            contents: Sequence[Content | str] | Content | str = (),
            author_name: str | None = None,
        ) -> None: ...

    def __post_init__(self) -> None:
        contents: Sequence[Any] = self.contents
        # Decoding always gives a tuple of Content (this runs for every message a log decodes).
        if type(contents) is tuple:
            for content in contents:
                if type(content) is not Content:
                    break
            else:
                return
        if isinstance(contents, str | Content):
            contents = (contents,)
        msgspec.structs.force_setattr(self, "contents", tuple(_content(c) for c in contents))

    @property
    def text(self) -> str:
        """The text contents joined by spaces."""
        contents = self.contents
        if len(contents) == 1:  # the common case, without a generator
            only = contents[0]
            return (only.text or "") if only.type == "text" else ""
        return " ".join(c.text for c in contents if c.type == "text" and c.text)

    @property
    def function_calls(self) -> tuple[Content, ...]:
        contents = self.contents
        if len(contents) == 1:  # the common answer, one call or one text: no generator
            return contents if contents[0].type == "function_call" else ()
        return tuple(c for c in contents if c.type == "function_call")


class Usage(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """Token counts reported by the model.

    ``input_tokens`` counts every input token, cached ones included; ``cache_read_tokens`` and
    ``cache_write_tokens`` say how many of them the provider read from its prompt cache or wrote
    to it, and ``reasoning_tokens`` how many of ``output_tokens`` were reasoning. Those three are
    None when the provider did not report them (never a guessed zero)."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None

    def __add__(self, other: Usage) -> Usage:
        """The sum, each count at most ``2**63 - 1`` (what a log and OpenTelemetry hold); a count
        neither side reported stays None."""
        return Usage(
            input_tokens=min(self.input_tokens + other.input_tokens, _INT64_MAX),
            output_tokens=min(self.output_tokens + other.output_tokens, _INT64_MAX),
            total_tokens=min(self.total_tokens + other.total_tokens, _INT64_MAX),
            cache_read_tokens=_add(self.cache_read_tokens, other.cache_read_tokens),
            cache_write_tokens=_add(self.cache_write_tokens, other.cache_write_tokens),
            reasoning_tokens=_add(self.reasoning_tokens, other.reasoning_tokens),
        )


def _add(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a + b, _INT64_MAX)


_INT64_MAX = 2**63 - 1


class MessageView(Sequence[Message]):
    """A read-only window on a conversation: ``head`` (a tuple, the history) followed by
    ``body[start:stop]`` (the run's messages so far). Made in O(1), so handing a model call its
    messages costs nothing that grows with the conversation; iterating or indexing reads the
    messages in place. The run only appends to ``body`` past ``stop``, so a view never changes."""

    __slots__ = ("_body", "_head", "_len", "_start", "_stop")

    def __init__(
        self, head: tuple[Message, ...], body: list[Message], start: int = 0, stop: int | None = None
    ) -> None:
        self._head = head
        self._body = body
        self._start = start
        self._stop = len(body) if stop is None else stop
        self._len = len(head) + self._stop - start

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...
    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        if isinstance(index, slice):
            return tuple(self)[index]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("message index out of range")
        head = len(self._head)
        return self._head[index] if index < head else self._body[self._start + index - head]

    def __iter__(self) -> Iterator[Message]:
        yield from self._head
        yield from itertools.islice(self._body, self._start, self._stop)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(other) == self._len and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MessageView({list(self)!r})"


def _content(item: Any) -> Content:
    if isinstance(item, Content):
        return item
    if isinstance(item, str):
        return Content("text", text=item)
    if isinstance(item, dict):
        return msgspec.convert(item, Content)
    raise TypeError(f"a message content must be a Content, a str or a dict, not {type(item).__name__}")


_encoder = msgspec.json.Encoder(order="deterministic")


def _dumps(value: Any) -> str:
    return _encoder.encode(value).decode()


def result_text(value: Any) -> str:
    """What the model sees for a tool result: a str verbatim, any other value as JSON."""
    if isinstance(value, str):
        return value
    return _dumps(value)


def malformed_calls(contents: Sequence[Content]) -> str | None:
    """Why a model answer's function calls cannot be run (one has no call id, or two share one),
    or None. A step records such an answer as a failed model call; the machine refuses a
    ``ModelResponded`` that carries one, so a log is checked against the same rule."""
    if len(contents) == 1:  # the common answer: one text, or one call
        only = contents[0]
        return "a function call has no call id" if only.type == "function_call" and not only.call_id else None
    seen: set[str] = set()
    for content in contents:
        if content.type != "function_call":
            continue
        if not content.call_id:
            return "a function call has no call id"
        if content.call_id in seen:
            return f"call id {content.call_id!r} appears twice in one response"
        seen.add(content.call_id)
    return None
