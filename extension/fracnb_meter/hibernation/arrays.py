"""The arrays' file: every buffer of a save, written once, straight from the array's memory.

Two kinds of record share ``arrays.bin``, each aligned to 64 bytes:

- *out-of-band* buffers: numpy arrays (and so pandas frames) pickled with protocol 5; the pickle
  stream holds only a NEXT_BUFFER mark, and loading hands them back in the same order;
- *device* buffers: PyTorch storages, JAX and CuPy arrays, copied to host one at a time and
  written at once, so a save holds at most one array's host copy beyond what the user had.

:class:`ArrayWriter` writes (or, for the dry pass, only counts); :func:`read_records` reads them
back, each into its own writable buffer.
"""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

ALIGNMENT = 64
LARGE_BUFFER = 1 << 20  # from here on, buffers are anonymous memory (new_buffer)
CHUNK = 64 << 20  # one write() call at most: Linux writes at most ~2 GiB per call, and deadlines are checked between


class DeadlineExceededError(Exception):
    """The save ran past the deadline the server gave it."""


@dataclass(frozen=True)
class Record:
    offset: int
    length: int


@dataclass
class ArrayWriter:
    """Appends buffers to ``stream`` (None: the dry pass, which counts without copying anything)."""

    stream: IO[bytes] | None
    deadline: float | None = None
    clock: Callable[[], float] = time.time
    position: int = 0  # the end of the last record, counted
    written: int = 0  # the end of the last record, written
    out_of_band: list[Record] = field(default_factory=list)
    device: list[Record] = field(default_factory=list)

    def check_deadline(self) -> None:
        if self.deadline is not None and self.clock() > self.deadline:
            raise DeadlineExceededError("the save ran past its time limit")

    def add_out_of_band(self, buffer: memoryview) -> None:
        self.out_of_band.append(self._append(buffer))

    def add_device(self, length: int, fetch: Callable[[], Any]) -> int:
        """Write one device array's host copy (``fetch`` makes it; not called in the dry pass)."""
        if self.stream is None:
            self.device.append(self._append_count(length))
        else:
            host = fetch()
            self.device.append(self._append(memoryview(host).cast("B")))
            del host  # the host copy of a GPU array goes before the next one is made
        return len(self.device) - 1

    def _append_count(self, length: int) -> Record:
        self.check_deadline()
        start = self.position + (-self.position) % ALIGNMENT
        self.position = start + length
        return Record(start, length)

    def _append(self, buffer: memoryview) -> Record:
        raw = buffer.cast("B") if buffer.format != "B" or buffer.ndim != 1 else buffer
        record = self._append_count(raw.nbytes)
        if self.stream is not None:
            if record.offset > self.written:
                _write_all(self.stream, memoryview(bytes(record.offset - self.written)))
            for start in range(0, raw.nbytes, CHUNK):
                self.check_deadline()
                _write_all(self.stream, raw[start : start + CHUNK])
            self.written = record.offset + record.length
        return record


def _write_all(stream: IO[bytes], data: memoryview) -> None:
    """A raw file's write may be partial: loop until every byte is out."""
    while data.nbytes:
        written = stream.write(data)
        if written is None:  # a non-blocking stream: never the case for a regular file
            raise OSError("the arrays' file refused a write")
        data = data[written:]


def new_buffer(length: int) -> bytearray | mmap.mmap:
    """A writable buffer of ``length`` bytes to read into. A large one is anonymous memory, which the
    system hands out as zero pages on first touch: a bytearray would first be filled with zeros, a
    whole extra pass over the memory (half the time of a restore of large arrays)."""
    return mmap.mmap(-1, length) if length >= LARGE_BUFFER else bytearray(length)


def read_records(stream: IO[bytes], records: list[Record]) -> list[bytearray | mmap.mmap]:
    """Each record into its own buffer (writable, so numpy arrays built on it are too)."""
    buffers = []
    for record in records:
        buffer = new_buffer(record.length)
        view = memoryview(buffer)
        stream.seek(record.offset)
        done = 0
        while done < record.length:
            count = stream.readinto(view[done : done + CHUNK])
            if not count:
                raise EOFError(f"the arrays' file ends before byte {record.offset + record.length}")
            done += count
        buffers.append(buffer)
    return buffers


def file_size(stream: IO[bytes]) -> int:
    return os.fstat(stream.fileno()).st_size
