"""Append-only files of newline-terminated records, shared between threads and processes.

Theory of operation. A ``LineFile`` remembers how far into its file it has looked (``end``, always
just after a line end), how many whole lines lie before that (``count``) and, once an operation
needs them (a read from the middle of a file), where each of them starts. Every operation opens the
file, takes an exclusive ``flock`` on it (other processes, and other ``LineFile`` objects of this
process) while holding a ``threading.Lock`` (other threads using this object), and first catches
up: it reads whatever other writers appended since ``end``.

Writers hold the lock for the whole of a write, so bytes after the last line end can only be a
record torn by a writer that died mid-write (a crash, ``kill -9``, power loss). They are cut off
the file, and a ``TornTailWarning`` says where and how much. A batch of records goes out in one
``write`` call and, unless the store was told otherwise, reaches the disk (``fdatasync``) before
the lock is released; a crash can still leave a prefix of a batch (whole records), never a torn
record that a later operation would read.

The file is reopened for every operation, so a store with thousands of streams keeps no
descriptors open, and a file replaced or truncated by something else is noticed (its inode or
size no longer matches) and read again from the start.
"""

from __future__ import annotations

import itertools
import os
import threading
from array import array
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from agentledger.core.depth import MAX_DEPTH
from agentledger.errors import LogCorruptError, TornTailWarning
from agentledger.logs import warn

try:
    import fcntl
except ImportError as exc:  # pragma: no cover - Windows
    raise ImportError("JSONL event stores need POSIX file locks (fcntl); use SqliteEventStore here") from exc

__all__ = (
    "LineFile",
    "OpenLineFile",
    "TornTailWarning",
    "edge_lines",
    "fsync_directory",
    "make_directory",
    "write_all",
)

_sync = getattr(os, "fdatasync", os.fsync)
_READ_CHUNK = 1 << 30
_EDGE_CHUNK = 1 << 13
# The translate ``too_deep`` makes: openers kept (as "["), line ends kept, every other byte gone.
# Its line ends count the lines, and a block whose translation holds no run of MAX_DEPTH + 1
# openers has no line nested deeper than MAX_DEPTH (each line's openers are consecutive in it).
_OPENERS_ONLY = bytes.maketrans(b"{", b"[")
_NOT_OPENERS = bytes(b for b in range(256) if b not in b"[{\n")
_TOO_MANY = b"[" * (MAX_DEPTH + 1)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` (``os.write`` may write fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_directory(path: Path) -> None:
    """Make a new directory entry in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_directory(path: Path, *, fsync: bool) -> None:
    """Create ``path`` and missing parents; with ``fsync``, make the new entries durable."""
    if path.is_dir():
        return
    make_directory(path.parent, fsync=fsync)
    try:
        path.mkdir()
    except FileExistsError:
        return
    if fsync:
        fsync_directory(path.parent)


def edge_lines(path: Path) -> tuple[bytes, bytes] | None:
    """The first and last whole lines of ``path`` (the same line when it holds one), read under a
    shared lock without reading what lies between; ``None`` for a missing file or one without a
    whole line. Bytes after the last line end (a torn record) are left out."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        size = os.fstat(fd).st_size
        head = b""
        while len(head) < size and b"\n" not in head:
            part = os.pread(fd, _EDGE_CHUNK, len(head))
            if not part:
                break
            head += part
        if b"\n" not in head:
            return None
        first = head[: head.index(b"\n")]
        tail, end = b"", size
        while end > 0 and tail.count(b"\n") < 2:  # the last line end, and the one before it
            start = max(end - _EDGE_CHUNK, 0)
            tail = os.pread(fd, end - start, start) + tail
            end = start
        tail = tail[: tail.rindex(b"\n")]  # up to the last line end
        return first, tail[tail.rfind(b"\n") + 1 :]
    finally:
        os.close(fd)


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    parts = []
    while size > 0:
        part = os.pread(fd, min(size, _READ_CHUNK), offset)
        if not part:
            break
        parts.append(part)
        size -= len(part)
        offset += len(part)
    return b"".join(parts)


class LineFile:
    """One append-only file of records, one per line; see the module docstring."""

    __slots__ = (
        "_identity",
        "_indexed_end",
        "_lock",
        "count",
        "end",
        "fsync",
        "generation",
        "path",
        "read_only",
        "starts",
        "torn",
    )

    def __init__(self, path: Path, *, fsync: bool = True, read_only: bool = False) -> None:
        self.path = path
        self.fsync = fsync
        self.read_only = read_only  # opened for reading, locked shared; a torn record is left as is
        self.torn = 0  # the file size at which a torn record was last reported (read-only)
        self.starts = array("q")  # where each of the first len(starts) whole lines starts
        self.count = 0  # how many whole lines the file held at the last operation
        self.end = 0  # every byte before this is whole lines
        self._indexed_end = 0  # where the first line not in ``starts`` starts
        self.generation = 0  # bumped when the file had to be read again from the start
        self._identity: tuple[int, int] | None = None
        self._lock = threading.Lock()

    @contextmanager
    def locked(
        self, *, create: bool, decoding: bool = False, parents: bool = False
    ) -> Iterator[OpenLineFile | None]:
        """Open, lock and catch up; ``None`` when the file is missing and ``create`` is false.
        ``decoding``: the operation will decode what it reads now (see ``catch_up``). ``parents``:
        a file created where its directory is missing gets the directory (``make_directory``)."""
        with self._lock:
            fd = self._open(create, parents)
            if fd is None:
                yield None
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_SH if self.read_only else fcntl.LOCK_EX)
                handle = OpenLineFile(self, fd)
                handle.catch_up(decoding)
                yield handle
            finally:
                os.close(fd)  # also releases the flock

    def read_from(self, first: int) -> tuple[bytes, int, bool]:
        """Lines ``first`` on (0-based) as stored, each with its line end, how many, and whether
        they are known to nest no deeper than ``MAX_DEPTH`` (``OpenLineFile.checked``): one
        operation, as ``locked`` makes it (open, lock, catch up, read, close) without a context
        manager's generator, for reads of many short files. ``(b"", 0, True)`` for a missing file."""
        with self._lock:
            fd = self._open(False)
            if fd is None:
                return b"", 0, True
            try:
                fcntl.flock(fd, fcntl.LOCK_SH if self.read_only else fcntl.LOCK_EX)
                handle = OpenLineFile(self, fd)
                handle.catch_up(True)
                count = self.count
                if first >= count:
                    return b"", 0, True
                data, shallow = handle.checked(first, count)
                return data, count - first, shallow
            finally:
                os.close(fd)  # also releases the flock

    def _open(self, create: bool, parents: bool = False) -> int | None:
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
        if self.read_only:
            try:
                return os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return None
        try:
            return os.open(self.path, flags)
        except FileNotFoundError:
            if not create:
                return None
        try:
            fd = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return os.open(self.path, flags)
        except FileNotFoundError:  # no directory to create the file in
            if not parents:
                raise
            make_directory(self.path.parent, fsync=self.fsync)
            return self._open(create)
        if self.fsync:
            try:
                fsync_directory(self.path.parent)
            except BaseException:
                os.close(fd)
                raise
        return fd


class OpenLineFile:
    """A ``LineFile`` opened and locked for one operation.

    The bytes ``catch_up`` read (whole lines from ``seen_at``) are kept for the operation, so a
    read of lines among them (a fresh store reading a file for the first time) does not read
    the file again.
    """

    __slots__ = ("fd", "file", "seen", "seen_at", "seen_shallow")

    def __init__(self, file: LineFile, fd: int) -> None:
        self.file = file
        self.fd = fd
        self.seen = b""
        self.seen_at = 0
        self.seen_shallow = False  # no line of ``seen`` nests deeper than MAX_DEPTH

    def catch_up(self, decoding: bool = False) -> None:
        """Count the lines other writers appended; cut off a torn last record.

        With ``decoding`` (the operation decodes what it reads now) the lines are counted in the
        translate ``too_deep`` makes, which also tells whether any of them nests too deep, so the
        decoding need not check again; otherwise with ``bytes.count``, which costs about half.
        Where the lines start is found only when a read needs it (``index_lines``).
        """
        file, stat = self.file, os.fstat(self.fd)
        identity = (stat.st_dev, stat.st_ino)
        if identity != file._identity or stat.st_size < file.end:
            file._identity = identity
            file.starts, file.count, file.end, file._indexed_end = array("q"), 0, 0, 0
            file.generation += 1
        if stat.st_size == file.end:
            return
        start = file.end
        data = _pread_all(self.fd, stat.st_size - start, start)
        whole = data.rfind(b"\n") + 1
        if decoding:  # a torn tail's openers, if any, only make the answer "not known"
            kept = data.translate(_OPENERS_ONLY, _NOT_OPENERS)
            file.count += kept.count(b"\n")
            self.seen_shallow = kept.find(_TOO_MANY) < 0
        else:
            file.count += data.count(b"\n")
        file.end = start + whole
        self.seen, self.seen_at = (data if whole == len(data) else data[:whole]), start
        if whole < len(data):
            self._cut(len(data) - whole)

    def index_lines(self) -> None:
        """Find where every counted line starts: one ``find`` per line end over the lines not
        indexed yet (read again unless ``catch_up`` just read them). Lines that no longer end
        where they were counted (the file rewritten in place) are ``LogCorruptError``."""
        file = self.file
        first, stop = file._indexed_end, file.end
        if len(file.starts) == file.count:
            return
        offset = first - self.seen_at
        if offset >= 0 and stop - self.seen_at <= len(self.seen):
            data = self.seen[offset : stop - self.seen_at]
        else:
            data = _pread_all(self.fd, stop - first, first)
        starts = [first]
        base = first + 1
        find, append = data.find, starts.append
        at = find(b"\n")
        while at >= 0:
            append(base + at)
            at = find(b"\n", at + 1)
        if starts.pop() != stop or len(file.starts) + len(starts) != file.count:
            raise LogCorruptError(
                f"its lines no longer end where they were counted (bytes {first} to {stop} changed in place)",
                where=str(file.path),
            )
        file.starts.extend(starts)
        file._indexed_end = stop

    def _index(self, lines: Sequence[bytes]) -> None:
        file = self.file
        sizes = map((1).__add__, map(len, lines))
        if len(file.starts) < file.count:  # not indexed yet: only counted
            file.end += sum(sizes)
        else:
            starts = list(itertools.accumulate(sizes, initial=file.end))
            file.end = file._indexed_end = starts.pop()
            file.starts.extend(starts)
        file.count += len(lines)

    def _cut(self, torn: int) -> None:
        file = self.file
        if file.read_only:  # leave the file as it is; say so once per torn record
            if file.torn != file.end + torn:
                file.torn = file.end + torn
                warn(
                    TornTailWarning(
                        f"{file.path}: line {file.count + 1} was torn by an interrupted write; "
                        f"ignored its {torn} bytes at offset {file.end} (opened read-only)"
                    ),
                    part="stores",
                    stacklevel=2,
                )
            return
        os.ftruncate(self.fd, file.end)
        if file.fsync:
            _sync(self.fd)
        warn(
            TornTailWarning(
                f"{file.path}: line {file.count + 1} was torn by an interrupted write; "
                f"cut off its {torn} bytes at offset {file.end}"
            ),
            part="stores",
            stacklevel=2,
        )

    def append(self, records: Sequence[bytes]) -> None:
        """Append ``records`` (each without its line end) as one write, durable on return."""
        if not records:
            return
        self.write(records)
        try:
            self.sync()
        except BaseException:
            self.take_back()
            raise
        self.index(records)

    def write(self, records: Sequence[bytes]) -> None:
        """Write ``records`` as one write, not yet synced nor indexed (``sync``, then ``index``).

        A write that fails is taken back at once; a written batch whose ``sync`` fails is taken
        back with ``take_back``.
        """
        try:
            write_all(self.fd, b"\n".join(records) + b"\n")
        except BaseException:
            self.take_back()
            raise

    def sync(self) -> None:
        """Make what was written durable (unless the file was opened without ``fsync``)."""
        if self.file.fsync:
            _sync(self.fd)

    def take_back(self) -> None:
        """Cut off whatever was written since the last ``index``: nothing of it stays."""
        os.ftruncate(self.fd, self.file.end)

    def index(self, records: Sequence[bytes]) -> None:
        """Count ``records``, written and synced, as the file's next lines."""
        self._index(records)

    def block(self, first: int, stop: int) -> bytes:
        """Lines ``first`` to ``stop - 1`` (0-based) as stored: each ends with its line end."""
        return self.checked(first, stop)[0]

    def checked(self, first: int, stop: int) -> tuple[bytes, bool]:
        """``block``, and whether its lines are known to nest no deeper than ``MAX_DEPTH``: they
        are when ``catch_up`` read them just now, decoding, and found no line too deep."""
        file = self.file
        if first >= stop:
            return b"", True
        if (first and first >= len(file.starts)) or (stop < file.count and stop >= len(file.starts)):
            self.index_lines()
        begin = file.starts[first] if first else 0
        end = file.starts[stop] if stop < file.count else file.end
        offset = begin - self.seen_at
        if offset >= 0 and end - self.seen_at <= len(self.seen):  # read just now by catch_up
            data = (
                self.seen
                if offset == 0 and end - begin == len(self.seen)
                else self.seen[offset : end - self.seen_at]
            )
            return data, self.seen_shallow
        return _pread_all(self.fd, end - begin, begin), False

    def lines(self, numbers: Sequence[int]) -> list[bytes]:
        """The lines numbered ``numbers`` (0-based, ascending), without their line ends."""
        if not numbers:
            return []
        first, last = numbers[0], numbers[-1]
        data = self.block(first, last + 1)
        if last - first + 1 == len(numbers):
            return data.split(b"\n")[:-1]
        self.index_lines()
        starts, base = self.file.starts, self.file.starts[first]
        ends = [starts[n + 1] - 1 if n < last else len(data) + base - 1 for n in numbers]
        return [data[starts[n] - base : end - base] for n, end in zip(numbers, ends, strict=True)]
