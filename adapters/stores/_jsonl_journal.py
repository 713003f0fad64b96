"""The journal layout of ``JsonlEventStore``: every stream in one file of JSON lines.

A line's stream is its event's ``run_id``. The store keeps an index of the lines of each stream,
brought up to date at each operation by reading only the ``run_id`` of lines appended since (one
decoding call when all is well); a fresh store reading a stream whose lines open and close the
file decodes every line's event at once and indexes the file from those. A group of appends is
checked in queue order and written with one write and one sync. ``read_many`` reads whole
streams under one lock and, when they are most of the file (rebuilding every run of a journal),
decodes the file in one call.
"""

from __future__ import annotations

import itertools
import operator
from array import array
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import msgspec

from agentledger.core.depth import MAX_DEPTH, too_deep
from agentledger.core.events import Event
from agentledger.errors import ConflictError, LogCorruptError
from agentledger.listing import RunQuery

from ._codec import EXPECTED, check_sequence, decode_block, decode_records
from ._group import Append
from ._lines import LineFile, OpenLineFile
from ._listing import Edges, Listing, summaries

__all__ = ("Journal",)


class _Envelope(msgspec.Struct):
    run_id: str


_envelope = msgspec.json.Decoder(_Envelope)


class Journal:
    """Every stream in one file; each line's stream is its event's ``run_id``."""

    def __init__(self, path: Path, fsync: bool, read_only: bool) -> None:
        self.file = LineFile(path, fsync=fsync, read_only=read_only)
        self.index: dict[str, array[int]] = {}  # stream -> its line numbers
        self.indexed = 0
        self.generation = 0

    def check(self, stream: str, events: Sequence[Event]) -> Sequence[Event]:
        for event in events:
            if event.run_id != stream:
                raise ValueError(
                    f"a journal files each event under its run_id; {event.run_id!r} cannot go in {stream!r}"
                )
        return events

    def commit(self, group: list[Append[bytes]]) -> None:
        """The group's batches as one write and one sync; each append checked in queue order."""
        writing = any(append.records for append in group)
        accepted: list[Append[bytes]] = []
        # The directory is made only when the file cannot be created without it: a commit makes
        # one system call fewer than if it looked for the directory first. Each call lets go of
        # the GIL, and taking it back from a busy event loop thread can take a switch interval.
        with self.file.locked(create=writing, parents=writing) as handle:
            index = self._refresh(handle) if handle is not None else {}
            versions: dict[str, int] = {}
            records: list[bytes] = []
            for append in group:
                version = versions.get(append.stream)
                if version is None:
                    numbers = index.get(append.stream)
                    version = len(numbers) if numbers is not None else 0
                if version != append.expected:
                    append.fail(ConflictError(append.stream, append.expected, version))
                    continue
                versions[append.stream] = version + len(append.records)
                accepted.append(append)
                records.extend(append.records)
            if handle is not None and records:
                first = self.file.count
                handle.append(records)
                for append in accepted:
                    stop = first + len(append.records)
                    self.index.setdefault(append.stream, array("q")).extend(range(first, stop))
                    first = stop
                self.indexed = self.file.count
        for append in accepted:
            append.succeed()

    def close(self) -> None:
        """Nothing to release."""

    def read(self, stream: str, after: int) -> list[Event]:
        with self.file.locked(create=False, decoding=True) as handle:
            whole = self._decode_whole(handle, stream) if handle is not None else None
            numbers = self._refresh(handle).get(stream) if handle is not None else None
            if whole is not None and numbers is not None:
                return self._pick(whole, numbers, stream, after)
            selected = numbers[max(after + 1, 0) :] if numbers is not None else None  # a copy
            if handle is None or not selected:
                return []
            first, stop = selected[0], selected[-1] + 1
            data: bytes | list[bytes]
            shallow = False
            if stop - first == len(selected):
                data, shallow = handle.checked(first, stop)
            else:
                data = handle.lines(selected)

        def where(index: int) -> str:
            return f"{self.file.path}:{selected[index] + 1}"

        if isinstance(data, bytes):
            events = decode_block(data, len(selected), where, shallow=shallow)
        else:
            events = decode_records(data, where)
        return check_sequence(events, stream, max(after + 1, 0), where)

    def read_many(self, streams: Sequence[str]) -> dict[str, list[Event]] | None:
        """Whole streams under one lock, decoded in one call when they are most of the file
        (rebuilding every run of a journal); ``None`` when reading them one by one is better."""
        with self.file.locked(create=False) as handle:
            if handle is None:
                return {stream: [] for stream in streams}
            index = self._refresh(handle)
            wanted = sum(len(index.get(stream, ())) for stream in set(streams))
            if wanted * 2 < self.file.count:
                return None
            count = self.file.count
            data = handle.block(0, count)
            numbers = {stream: index.get(stream, array("q")) for stream in streams}

        path = self.file.path
        try:
            events = decode_block(data, count, lambda number: f"{path}:{number + 1}")
        except LogCorruptError:  # perhaps in a stream not asked for: read them one by one
            return None
        result: dict[str, list[Event]] = {}
        for stream, lines in numbers.items():
            if lines and lines[-1] + 1 - lines[0] == len(lines):  # one batch, or batches in a row
                mine = events[lines[0] : lines[-1] + 1]
            else:
                mine = list(map(events.__getitem__, lines))
            result[stream] = check_sequence(mine, stream, 0, _line_of(path, lines))
        return result

    def list_runs(self, query: RunQuery) -> Listing:
        """Each stream's first and last lines, found with the index, newest stream first."""
        with self.file.locked(create=False) as handle:
            if handle is None:
                return Listing([], [])
            index = self._refresh(handle)
            path = self.file.path

            def edges(stream: str) -> Edges:
                numbers = index[stream]
                wanted = [numbers[0]] if len(numbers) == 1 else [numbers[0], numbers[-1]]
                records = [handle.lines([number])[0] for number in wanted]
                return Edges(stream, records, lambda i: f"{path}:{wanted[i] + 1}")

            return summaries(map(edges, reversed(list(index))), query)

    def streams(self) -> list[str]:
        with self.file.locked(create=False) as handle:
            return list(self._refresh(handle)) if handle is not None else []

    def _decode_whole(self, handle: OpenLineFile, stream: str) -> list[Event] | None:
        """Every line's event, when a store that has indexed nothing yet reads a stream whose
        lines open and close the file (most likely all of it, a run's own journal): the index is
        then made from the events' run ids, and the pass that finds each line's run id first is
        saved (the decoding then happens under the file's lock, as indexing does). ``None``
        otherwise, or when a line does not decode as an event: the lines are then indexed and
        read as usual, which finds and names what is wrong as before."""
        if self.generation != self.file.generation:
            self.index, self.indexed, self.generation = {}, 0, self.file.generation
        count = self.file.count
        if self.indexed or not count:
            return None
        data, shallow = handle.checked(0, count)  # read just now: no index of the lines needed
        first, last = data[: data.find(b"\n")], data[data.rfind(b"\n", 0, len(data) - 1) + 1 : -1]
        try:
            edges = {_envelope.decode(line).run_id for line in (first, last)}
        except (msgspec.DecodeError, RecursionError, ValueError):
            return None
        if edges != {stream}:
            return None
        try:
            events = decode_block(data, count, str, shallow=shallow)
        except LogCorruptError:
            return None
        self._add(map(_run_id, events))
        return events

    def _pick(self, events: list[Event], numbers: array[int], stream: str, after: int) -> list[Event]:
        """``read``'s answer from every line's event (``_decode_whole``): the stream's, checked."""
        first = max(after + 1, 0)
        selected = numbers[first:]
        if not selected:
            return []
        if selected[-1] + 1 - selected[0] == len(selected):
            mine = events[selected[0] : selected[-1] + 1]
        else:
            mine = list(map(events.__getitem__, selected))
        return check_sequence(mine, stream, first, _line_of(self.file.path, selected))

    def _refresh(self, handle: OpenLineFile) -> dict[str, array[int]]:
        """Index the lines appended since the last operation, all or none of them."""
        if self.generation != self.file.generation:
            self.index, self.indexed, self.generation = {}, 0, self.file.generation
        if self.indexed == self.file.count:
            return self.index
        self._add(map(_run_id, self._envelopes(handle)))
        return self.index

    def _add(self, run_ids: Iterable[str]) -> None:
        """Index the lines from ``indexed`` on, whose streams are ``run_ids``."""
        # Appends write a stream's lines together: one group of consecutive lines per batch.
        new: dict[str, list[range]] = {}
        number = self.indexed
        for run_id, group in itertools.groupby(run_ids):
            size = len(list(group))
            new.setdefault(run_id, []).append(range(number, number + size))
            number += size
        for run_id, ranges in new.items():
            numbers = self.index.setdefault(run_id, array("q"))
            for lines in ranges:
                numbers.extend(lines)
        self.indexed = self.file.count

    def _envelopes(self, handle: OpenLineFile) -> list[_Envelope]:
        """The ``run_id`` of every line not indexed yet, in one decoding call when all is well."""
        first, count = self.indexed, self.file.count
        try:
            envelopes = _envelope.decode_lines(handle.block(first, count))
        except (msgspec.DecodeError, RecursionError, ValueError):
            envelopes = []
        if len(envelopes) == count - first:
            return envelopes
        envelopes = []  # find the line that does not decode
        for number, line in enumerate(handle.lines(range(first, count)), first):
            try:
                if too_deep(line):
                    raise msgspec.DecodeError(f"the record is nested deeper than {MAX_DEPTH} levels")
                envelopes.append(_envelope.decode(line))
            except (msgspec.DecodeError, RecursionError, ValueError) as exc:  # ValueError: not UTF-8
                raise LogCorruptError(f"{EXPECTED}; {exc}", where=f"{self.file.path}:{number + 1}") from exc
        return envelopes


_run_id = operator.attrgetter("run_id")


def _line_of(path: Path, lines: array[int]) -> Callable[[int], str]:
    """Where the ``i``-th of a stream's events is in a journal."""
    return lambda index: f"{path}:{lines[index] + 1}"
