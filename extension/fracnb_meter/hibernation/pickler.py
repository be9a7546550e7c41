"""The pickler of a save: cloudpickle (functions and classes defined in the notebook are saved by
value), arrays out of band, and the things that must not be saved refused by name.

One :class:`StatePickler` writes every variable of a kernel as its own record, one ``dump`` each,
in a single stream: its memo carries over from one record to the next, so an object two variables
share is written once and is one object again after a restore.

Why cloudpickle rather than dill: cloudpickle extends CPython's C pickler, so whatever pickle can
save it saves the same way (dill's pure-Python pickler fails on a PyTorch optimizer, for one), at C
speed, and numpy arrays use protocol 5's out-of-band buffers (dill writes them into the stream).

Functions defined in the notebook keep the notebook's namespace as their globals: the namespace
is written as a persistent id and loaded as the restoring kernel's own (cloudpickle alone would
give them a private copy, so a function would not see a variable rebound after the restore).
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from typing import IO, Any

import cloudpickle

from .arrays import ArrayWriter

PROTOCOL = 5
DEVICE_ARRAY = "fracnb-array"  # the persistent id's tag: (DEVICE_ARRAY, index, device)
MAIN_NAMESPACE = ("fracnb-main",)  # the persistent id of the notebook's namespace
FRAMEWORK_MODULES = ("torch", "jax", "jaxlib", "cupy")


class UnsaveableError(Exception):
    """An object that must not be saved, with the reason a person reads ('an open file')."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# (module, class name) -> why it is not saved. Matched along the type's MRO, so subclasses count.
# Open files are refused even where a pickler could save them: cloudpickle saves a file open for
# reading as its contents, which is no longer the file; dill reopens by name, truncating a file open for writing.
REFUSED: dict[tuple[str, str], str] = {
    ("io", "IOBase"): "an open file",
    ("_io", "_IOBase"): "an open file",
    ("socket", "socket"): "a socket",
    ("threading", "Thread"): "a thread",
    ("builtins", "generator"): "a generator",
    ("builtins", "coroutine"): "a coroutine",
    ("builtins", "async_generator"): "an async generator",
    ("subprocess", "Popen"): "a running process",
    ("multiprocessing.process", "BaseProcess"): "a process",
    ("multiprocessing.pool", "Pool"): "a process pool",
    ("concurrent.futures._base", "Executor"): "a thread or process pool",
    ("asyncio.events", "AbstractEventLoop"): "an event loop",
    ("mmap", "mmap"): "a memory map",
    ("torch.cuda.graphs", "CUDAGraph"): "a CUDA graph",
    ("torch.cuda.streams", "Stream"): "a CUDA stream",
    ("torch.cuda.streams", "Event"): "a CUDA event",
    ("torch.utils.data.dataloader", "_BaseDataLoaderIter"): "a data loader's iterator",
    ("ipywidgets.widgets.widget", "Widget"): "a widget (it lives in the browser)",
    ("ipykernel.comm.comm", "BaseComm"): "a connection to the browser",
    ("comm.base_comm", "BaseComm"): "a connection to the browser",
}


def refusal_of(kind: type) -> str | None:
    """Why objects of this type are never saved, or None."""
    for base in kind.__mro__:
        reason = REFUSED.get((base.__module__, base.__qualname__))
        if reason is not None:
            return reason
    return None


def describe_error(error: BaseException) -> str:
    """A one-line reason for a pickling failure, short enough for a notice."""
    if isinstance(error, UnsaveableError):
        return error.reason
    if isinstance(error, RecursionError):
        return "too deeply nested to save"
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    reason = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return reason if len(reason) <= 200 else reason[:199] + "\N{HORIZONTAL ELLIPSIS}"


class CountingSink(io.RawIOBase):
    """A write-only file that keeps only the number of bytes written (the dry pass)."""

    def __init__(self) -> None:
        self.count = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        self.count += size
        return size

    def tell(self) -> int:
        return self.count


class _MainNamespace(dict):  # type: ignore[type-arg]
    """Stands for the notebook's namespace as the globals of the functions defined in it."""


class StatePickler(cloudpickle.Pickler):  # type: ignore[misc]
    """cloudpickle's Pickler with protocol 5, out-of-band arrays, device arrays by persistent id, refusals."""

    def __init__(self, stream: IO[bytes], arrays: ArrayWriter) -> None:
        super().__init__(stream, protocol=PROTOCOL, buffer_callback=self._out_of_band)
        self.arrays = arrays
        self._device_written: dict[tuple[Any, ...], tuple[int, str]] = {}
        self._current: Any = None
        self._types: dict[type, Callable[[Any], Any] | None] = {}
        self.device_bytes: dict[tuple[str, str], int] = {}  # (framework, device) -> bytes of its arrays
        main = sys.modules.get("__main__")
        self._main_namespace = _MainNamespace()
        if main is not None:
            # cloudpickle gives functions that shared globals one new dict, looked up here by id.
            self.globals_ref[id(main.__dict__)] = self._main_namespace

    def dump_variable(self, value: Any) -> None:
        """Write one variable's record (after which the stream is broken if it raised)."""
        self._current = value
        try:
            self.dump(value)
        finally:
            self._current = None

    # -- hooks of the stock pickler -------------------------------------------------------------

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        handler = self._types.get(kind, _UNSET)
        if handler is _UNSET:
            handler = self._types[kind] = self._handler_for(kind)
        result = NotImplemented if handler is None else handler(obj)
        return super().reducer_override(obj) if result is NotImplemented else result

    def persistent_id(self, obj: Any) -> Any:
        if obj is self._main_namespace:
            return MAIN_NAMESPACE
        if type(obj).__name__ != "DeviceData" or type(obj).__module__ != __package__ + ".frameworks":
            return None
        written = self._device_written.get(obj.key)
        if written is None:
            index = self.arrays.add_device(obj.nbytes, obj.host_bytes)
            written = self._device_written[obj.key] = (index, obj.device)
            where = (obj.framework, obj.device)
            self.device_bytes[where] = self.device_bytes.get(where, 0) + obj.nbytes
        return (DEVICE_ARRAY, *written)

    def _out_of_band(self, buffer: Any) -> bool:
        self.arrays.add_out_of_band(buffer.raw())
        return False  # False: out of band

    # -- which objects get special treatment ----------------------------------------------------

    def _handler_for(self, kind: type) -> Callable[[Any], Any] | None:
        reason = refusal_of(kind)
        if reason is not None:
            return lambda obj: self._refuse(obj, reason)
        if isinstance(kind.__module__, str) and kind.__module__.split(".", 1)[0] in FRAMEWORK_MODULES:
            return _framework_reduce
        return None  # numpy arrays included: the C pickler sends their data out of band

    def _refuse(self, obj: Any, reason: str) -> Any:
        raise UnsaveableError(reason if obj is self._current else f"it holds {reason}")


_UNSET = object()


def _framework_reduce(obj: Any) -> Any:
    from .frameworks import reduce_framework_array  # noqa: PLC0415 - numpy only where a framework is

    return reduce_framework_array(obj) or NotImplemented
