"""JsonlEventStore: events as JSON lines, one event per line, exactly as ``encode_event`` writes it.

Two layouts, chosen by the path:

* a path ending in ``.jsonl`` (or an existing file) is one *journal* holding every stream, in
  append order; a line's stream is its event's ``run_id`` (so ``append`` refuses events whose
  ``run_id`` is not the stream's name) and streams are listed in order of first appearance.
* any other path is a *directory* with one file per stream, ``<name>.jsonl`` (the name
  percent-encoded where it is not a safe file name), plus ``streams.index``, the stream names in
  creation order, one JSON string per line.

Every file is an append-only ``LineFile`` (see ``_lines``): an exclusive ``flock`` serialises
writers across threads and processes, which makes the version check and the write one atomic
step; a torn last record is cut off with a ``TornTailWarning``; a record that does not decode
raises ``LogCorruptError`` naming the file and line. Lines are counted, not parsed, until they
are read, except in a journal, where each new line's ``run_id`` is read to index it (the journal
layout is ``_jsonl_journal.Journal``). With ``read_only``, files are opened for reading under a
shared lock and a torn last record is reported but left in place.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, unquote

import anyio
import msgspec

from agentledger.core.collector import collector_paused
from agentledger.core.events import Event
from agentledger.errors import ConflictError, LogCorruptError, StoreError
from agentledger.listing import RunQuery, RunSummary

from ._codec import check_sequence, decode_block, encode_records
from ._group import Append, appending
from ._jsonl_journal import Journal
from ._lines import LineFile, OpenLineFile, TornTailWarning, edge_lines, make_directory
from ._listing import Edges, Listing, report, summaries
from ._threaded import ThreadedStore

__all__ = ("JsonlEventStore", "TornTailWarning")

_SUFFIX = ".jsonl"
_CATALOG = "streams.index"
_MAX_NAME = 250
_FILES_PER_ROUND = 128
"""Files a directory store holds open and locked at once while committing a group."""
_SYNC_THREADS = 8
"""Threads syncing a group's files together."""


class JsonlEventStore(ThreadedStore):
    """An ``EventStore`` in JSON-lines files; see the module docstring for the two layouts.

    ``fsync=True`` (the default) makes each append durable before it returns: it survives a
    power loss, not only a crash of the process. ``fsync=False`` leaves flushing to the OS.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True, read_only: bool = False) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.read_only = read_only
        if self.path.suffix == _SUFFIX or self.path.is_file():
            self._layout: Journal | _Directory = Journal(self.path, fsync, read_only)
        else:
            self._layout = _Directory(self.path, fsync, read_only)

    @property
    def layout(self) -> str:
        """``"journal"`` (one file) or ``"directory"`` (one file per stream)."""
        return "journal" if isinstance(self._layout, Journal) else "directory"

    def prepare(self, stream: str, events: Sequence[Event], expected_version: int) -> Append[bytes]:
        self._check_open()
        if self.read_only:
            raise StoreError(f"{self.path}: opened read-only; appending to {stream!r} is refused")
        records = encode_records(self._layout.check(stream, events))
        return Append(stream, records, expected_version)

    def commit_group(self, group: list[Append[bytes]]) -> None:
        """Every append of the group written, then made durable, with as few syncs as the layout allows."""
        self._check_open()
        with self._os_errors(appending(group)):
            self._layout.commit(group)

    def close(self) -> None:
        """Release the store's worker threads; later calls raise ``StoreError``."""
        super().close()
        self._layout.close()

    def read_sync(self, stream: str, after: int = -1) -> list[Event]:
        self._check_open()
        with self._os_errors(f"reading {stream!r}"):
            return self._layout.read(stream, after)

    def read_many_sync(self, streams: Sequence[str]) -> dict[str, list[Event]]:
        self._check_open()
        if isinstance(self._layout, Journal):
            with self._os_errors("reading streams"):
                many = self._layout.read_many(streams)
            if many is not None:
                return many
            return super().read_many_sync(streams)
        with self._os_errors("reading streams"), collector_paused():
            return self._layout.read_many(streams)

    def streams_sync(self) -> list[str]:
        self._check_open()
        with self._os_errors("listing streams"):
            return self._layout.streams()

    async def list_runs(self, query: RunQuery) -> list[RunSummary]:
        """Run summaries, newest first, from each stream's first and last lines (``SupportsRunListing``)."""
        self._check_open()
        return report(await anyio.to_thread.run_sync(self._list_runs_sync, query))

    def _list_runs_sync(self, query: RunQuery) -> Listing:
        self._check_open()
        with self._os_errors("listing runs"):
            return self._layout.list_runs(query)

    @contextmanager
    def _os_errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise StoreError(f"{self.path}: {doing} failed: {exc}") from exc

    def __repr__(self) -> str:
        return f"JsonlEventStore({str(self.path)!r}, layout={self.layout!r})"


class _Directory:
    """One file per stream, and a catalog of stream names in creation order."""

    def __init__(self, path: Path, fsync: bool, read_only: bool) -> None:
        self.path = path
        self.fsync = fsync
        self.read_only = read_only
        self.catalog = LineFile(path / _CATALOG, fsync=fsync, read_only=read_only)
        self.catalogued: dict[str, None] = {}  # an ordered set
        self.catalog_indexed = 0
        self.catalog_generation = 0
        self.files: dict[str, LineFile] = {}
        self._files_lock = threading.Lock()
        self._syncers: ThreadPoolExecutor | None = None

    def check(self, stream: str, events: Sequence[Event]) -> Sequence[Event]:
        _file_name(stream)  # refuse a name that cannot be a file name before any work
        return events

    def _file(self, stream: str) -> LineFile:
        with self._files_lock:
            file = self.files.get(stream)
            if file is None:
                path = self.path / _file_name(stream)
                file = self.files[stream] = LineFile(path, fsync=self.fsync, read_only=self.read_only)
            return file

    def commit(self, group: list[Append[bytes]]) -> None:
        """Each stream's batches as one write to its file, then every file synced at once.

        Files are locked in the order of their names (so two writers never wait for each other
        in a circle), at most ``_FILES_PER_ROUND`` at a time; each round is durable, and its
        appends settled, before the next starts.
        """
        new = [a.stream for a in group if a.expected == 0 and a.records and a.stream not in self.catalogued]
        if new:
            self._catalogue(new)
        by_stream: dict[str, list[Append[bytes]]] = {}
        for append in group:
            by_stream.setdefault(append.stream, []).append(append)
        names = sorted(by_stream, key=_file_name)
        for start in range(0, len(names), _FILES_PER_ROUND):
            self._commit_round([by_stream[name] for name in names[start : start + _FILES_PER_ROUND]])

    def _commit_round(self, queues: list[list[Append[bytes]]]) -> None:
        accepted: list[Append[bytes]] = []
        with contextlib.ExitStack() as stack:
            writes: list[tuple[OpenLineFile, list[bytes]]] = []
            for queue in queues:
                stream = queue[0].stream
                file = self._file(stream)
                create = any(append.expected == 0 and append.records for append in queue)
                handle = stack.enter_context(file.locked(create=create))
                version = file.count if handle is not None else 0
                records: list[bytes] = []
                for append in queue:
                    if append.expected != version:
                        append.fail(ConflictError(stream, append.expected, version))
                        continue
                    version += len(append.records)
                    records.extend(append.records)
                    accepted.append(append)
                if handle is not None and records:
                    writes.append((handle, records))
            self._write(writes)
        for append in accepted:
            append.succeed()

    def _write(self, writes: list[tuple[OpenLineFile, list[bytes]]]) -> None:
        written: list[OpenLineFile] = []
        try:
            for handle, records in writes:
                handle.write(records)
                written.append(handle)
            self._sync(written)
        except BaseException:
            for handle in written:
                handle.take_back()
            raise
        for handle, records in writes:
            handle.index(records)

    def _sync(self, handles: list[OpenLineFile]) -> None:
        """Sync the files together: the file system commits concurrent syncs in one journal flush."""
        if len(handles) < 2 or not self.fsync:
            for handle in handles:
                handle.sync()
            return
        with self._files_lock:
            if self._syncers is None:
                self._syncers = ThreadPoolExecutor(_SYNC_THREADS, thread_name_prefix="agentledger-fsync")
            syncers = self._syncers
        for _ in syncers.map(OpenLineFile.sync, handles):
            pass

    def close(self) -> None:
        with self._files_lock:
            syncers, self._syncers = self._syncers, None
        if syncers is not None:
            syncers.shutdown(wait=True)

    def read(self, stream: str, after: int) -> list[Event]:
        try:
            file = self._file(stream)
        except ValueError:
            return []  # no stream can have that name
        return _read_file(file, stream, max(after + 1, 0))

    def read_many(self, streams: Sequence[str]) -> dict[str, list[Event]]:
        """Every stream of ``streams``, whole: each file read and checked as ``read`` does it, in
        one loop (the files looked up under one lock)."""
        files: dict[str, LineFile | None] = {}
        with self._files_lock:
            known = self.files
            for stream in streams:
                file = known.get(stream)
                if file is None:
                    try:
                        path = self.path / _file_name(stream)
                    except ValueError:
                        files[stream] = None  # no stream can have that name
                        continue
                    file = known[stream] = LineFile(path, fsync=self.fsync, read_only=self.read_only)
                files[stream] = file
        return {
            stream: _read_file(file, stream, 0) if file is not None else [] for stream, file in files.items()
        }

    def streams(self) -> list[str]:
        if not self.path.is_dir():
            return []
        with self.catalog.locked(create=False) as handle:
            if handle is not None:
                self._refresh_catalog(handle)
        sizes = _log_sizes(self.path)  # one directory scan, not a stat per stream
        names = [n for n in self.catalogued if sizes.pop(_file_name(n), 0) > 0]
        found = sorted(f for f, size in sizes.items() if size > 0)
        return names + [unquote(f[: -len(_SUFFIX)]) for f in found]

    def list_runs(self, query: RunQuery) -> Listing:
        """Each stream's first and last lines, newest stream first, read without the lines between."""
        return summaries(map(self._edges, reversed(self.streams())), query)

    def _edges(self, stream: str) -> Edges | None:
        path = self.path / _file_name(stream)
        found = edge_lines(path)
        if found is None:
            return None
        first, last = found

        def where(index: int) -> str:
            return f"{path}:1" if index == 0 else f"{path}: last line"

        return Edges(stream, [first] if first == last else [first, last], where)

    def _catalogue(self, streams: list[str]) -> None:
        """Add ``streams`` to the catalog, in order, unless another writer already did."""
        make_directory(self.path, fsync=self.fsync)
        with self.catalog.locked(create=True) as handle:
            assert handle is not None
            self._refresh_catalog(handle)
            missing = list(dict.fromkeys(name for name in streams if name not in self.catalogued))
            if missing:
                handle.append([msgspec.json.encode(name) for name in missing])
                self.catalogued.update(dict.fromkeys(missing))
                self.catalog_indexed = self.catalog.count

    def _refresh_catalog(self, handle: OpenLineFile) -> None:
        if self.catalog_generation != self.catalog.generation:
            self.catalogued, self.catalog_indexed = {}, 0
            self.catalog_generation = self.catalog.generation
        known = self.catalog_indexed
        names: list[str] = []
        for number, line in enumerate(handle.lines(range(known, self.catalog.count)), known + 1):
            where = f"{self.catalog.path}:{number}"
            try:
                name = msgspec.json.decode(line, type=str)
                _file_name(name)
            except (msgspec.DecodeError, UnicodeDecodeError) as exc:
                raise LogCorruptError(f"expected a stream name as a JSON string; {exc}", where=where) from exc
            except ValueError as exc:  # empty, too long
                raise LogCorruptError(f"expected a stream name; {exc}", where=where) from exc
            names.append(name)
        self.catalogued.update(dict.fromkeys(names))
        self.catalog_indexed = self.catalog.count


def _read_file(file: LineFile, stream: str, first: int) -> list[Event]:
    """The events of ``stream`` from seq ``first`` on, in ``file``: decoded and checked."""
    data, count, shallow = file.read_from(first)
    if not count:
        return []
    where = lambda i: f"{file.path}:{first + i + 1}"  # noqa: E731 - used twice
    return check_sequence(decode_block(data, count, where, shallow=shallow), stream, first, where)


@functools.lru_cache(maxsize=1 << 14)
def _file_name(stream: str) -> str:
    """The file of ``stream``: percent-encoded, never hidden, never a path."""
    if not stream:
        raise ValueError("a stream stored in a directory needs a non-empty name")
    name = quote(stream, safe="")
    if name.startswith("."):
        name = "%2E" + name[1:]
    if len(name) > _MAX_NAME:
        raise ValueError(f"stream name {stream[:40]!r}... is too long for a file name")
    return name + _SUFFIX


def _log_sizes(directory: Path) -> dict[str, int]:
    """The size of every stream file in ``directory``, by file name."""
    sizes: dict[str, int] = {}
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.endswith(_SUFFIX):
                try:
                    sizes[entry.name] = entry.stat().st_size
                except FileNotFoundError:  # removed meanwhile
                    continue
    return sizes
