"""A sans-IO parser for server-sent events (the ``text/event-stream`` format).

Theory of operation: bytes go in through ``SSEDecoder.feed`` in whatever pieces the network hands
over, and the events they complete come out; nothing here reads a socket or awaits. The parser
follows the WHATWG event-stream rules:

- bytes are decoded as UTF-8 incrementally, so a character split across two pieces is kept
  whole, and a leading byte-order mark is dropped;
- a line ends with CRLF, LF or CR; a CR at the very end of one piece may be the first half of a
  CRLF, so a LF that opens the next piece is then skipped rather than read as an empty line;
- ``field: value`` lines fill the event being built (one space after the colon is dropped),
  a line opening with ``:`` is a comment, an empty line dispatches the event, and a block
  without any ``data`` line dispatches nothing;
- the last event id persists from event to event until an ``id`` line changes it.

At the end of a stream an unfinished event is discarded; ``pending`` tells whether one was left,
which is how a caller recognises a stream cut off in the middle of an event.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

__all__ = ("SSEDecoder", "ServerSentEvent")

_LINE_END = re.compile(r"\r\n|\r|\n")
_BOM = "\ufeff"


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    """One dispatched event: its type, its data lines joined by LF, the last event id."""

    data: str
    event: str = "message"
    id: str = ""
    retry: int | None = None


class SSEDecoder:
    """Turns a byte stream into ``ServerSentEvent`` values; see the module docstring."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._started = False
        self._skip_lf = False
        self._partial = ""
        self._data: list[str] = []
        self._event = ""
        self._retry: int | None = None
        self._fields = False
        self.last_event_id = ""

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Take the next piece of the stream; return the events it completes, in order."""
        return self._feed_text(self._decoder.decode(chunk))

    @property
    def pending(self) -> bool:
        """Whether bytes or fields were received that do not yet make a complete event."""
        buffered, _ = self._decoder.getstate()
        return bool(self._partial or self._fields or buffered)

    def _feed_text(self, text: str) -> list[ServerSentEvent]:
        if not self._started and text:
            self._started = True
            text = text.removeprefix(_BOM)
        if self._skip_lf and text:
            self._skip_lf = False
            text = text.removeprefix("\n")
        if text.endswith("\r"):
            self._skip_lf = True
        *lines, rest = _LINE_END.split(text)
        if not lines:
            self._partial += rest
            return []
        lines[0] = self._partial + lines[0]
        self._partial = rest
        events = []
        for line in lines:
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        self._field(name, value)
        return None

    def _field(self, name: str, value: str) -> None:
        self._fields = True
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self.last_event_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)

    def _dispatch(self) -> ServerSentEvent | None:
        data, event, retry = self._data, self._event, self._retry
        self._data, self._event, self._retry, self._fields = [], "", None, False
        if not data:
            return None
        return ServerSentEvent("\n".join(data), event or "message", self.last_event_id, retry)
