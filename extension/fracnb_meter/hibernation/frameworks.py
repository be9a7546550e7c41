"""PyTorch, JAX and CuPy arrays: saved as host bytes, put back on a GPU or in host memory.

Saving: :func:`reduce_framework_array` turns a tensor or array into a call of one of the
``rebuild_*`` functions below whose first argument is a :class:`DeviceData`, which the pickler
replaces by a persistent id after writing its bytes (fracnb_meter.hibernation.arrays). PyTorch is
handled per storage, so views of one storage stay views of one storage; the tensor itself is
memoised by the pickler, so a tensor referenced twice is one tensor again.

Loading: the ``rebuild_*`` functions read the target of this restore from :data:`TARGET` (a
context variable the restorer sets): GPU when the new server has one and the budget holds the
arrays, else host memory.

Nothing here imports a framework: a framework is handled only when the user's kernel has
imported it already (it is in ``sys.modules``).
"""

from __future__ import annotations

import contextvars
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is imported where arrays are: a restore without any stays light
    import mmap

    import numpy as np


@dataclass
class DeviceData:
    """The bytes of one array or storage, fetched to host only when written."""

    key: tuple[Any, ...]  # the same key for the same memory: written once
    nbytes: int
    framework: str
    device: str  # where it lived: "cuda:0", "gpu:0", "cpu"
    owner: Any  # the tensor, storage or array; fetched by host_bytes

    def host_bytes(self) -> np.ndarray:
        """A C-contiguous uint8 host copy (a view, without copying, for memory already on the host)."""
        if self.framework == "torch":
            return _torch_storage_bytes(self.owner)
        import numpy as np  # noqa: PLC0415 - see the imports

        if self.framework == "jax":
            return np.ascontiguousarray(np.asarray(self.owner)).reshape(-1).view(np.uint8)
        return np.ascontiguousarray(self.owner.get()).reshape(-1).view(np.uint8)  # CuPy


@dataclass(frozen=True)
class HostArray:
    """One saved array's bytes as loaded, with the device it was saved from (the restorer's persistent_load)."""

    values: np.ndarray  # uint8
    device: str


@dataclass(frozen=True)
class Target:
    """Where this restore puts device arrays, per framework: a device string, or None for host memory."""

    torch: str | None = None
    jax: str | None = None
    cupy: bool = False
    # Filled during the load: one device copy per saved storage/array, so views stay shared.
    cache: dict[int, Any] = field(default_factory=dict, compare=False)


TARGET: contextvars.ContextVar[Target | None] = contextvars.ContextVar("fracnb_hibernation_target", default=None)
# Set when an array saved on a GPU went to host memory instead (the restorer reports it).
MOVED_TO_HOST: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("fracnb_moved", default=None)


def as_bytes(buffer: bytearray | mmap.mmap) -> np.ndarray:
    """A loaded buffer as a writable uint8 array, without a copy."""
    import numpy as np  # noqa: PLC0415 - see the imports

    return np.frombuffer(buffer, dtype=np.uint8)


def _target() -> Target:
    return TARGET.get() or Target()


def _loaded(name: str) -> Any:
    return sys.modules.get(name)


def reduce_framework_array(obj: Any) -> tuple[Any, ...] | None:
    """A reduce tuple for a PyTorch tensor, JAX array or CuPy array; None for anything else."""
    module = type(obj).__module__.split(".", 1)[0]
    if module == "torch":
        return _reduce_torch(obj)
    if module in ("jax", "jaxlib"):
        return _reduce_jax(obj)
    if module == "cupy":
        return _reduce_cupy(obj)
    return None


# ---- PyTorch -------------------------------------------------------------------------------------


def _torch_storage_bytes(storage: Any) -> np.ndarray:
    torch = _loaded("torch")
    flat = torch.empty((0,), dtype=torch.uint8, device=storage.device).set_(storage)
    return flat.cpu().numpy()  # no copy when on the CPU already


def _reduce_torch(tensor: Any) -> tuple[Any, ...] | None:
    torch = _loaded("torch")
    if torch is None or type(tensor) not in (torch.Tensor, torch.nn.Parameter):
        return None  # subclasses keep their own pickling
    if tensor.layout != torch.strided or tensor.is_quantized or tensor.device.type == "meta":
        return None
    if tensor.requires_grad and not tensor.is_leaf:
        tensor = tensor.detach()  # the graph that made it cannot be saved; its values can
    storage = tensor.untyped_storage()
    device = str(storage.device)
    data = DeviceData(
        ("torch", device, storage.data_ptr(), storage.nbytes()), storage.nbytes(), "torch", device, storage
    )
    dtype = str(tensor.dtype).removeprefix("torch.")
    shape = (tensor.storage_offset(), tuple(tensor.size()), tuple(tensor.stride()))
    parameter = isinstance(tensor, torch.nn.Parameter)
    return (rebuild_torch, (data, dtype, shape, bool(tensor.requires_grad), parameter))


def _torch_target_device(saved_device: str) -> str:
    target = _target().torch
    if target is not None and saved_device != "cpu":
        return target
    if saved_device != "cpu":
        _note_moved(f"PyTorch tensors saved on {saved_device}")
    return "cpu"


def rebuild_torch(host: HostArray, dtype: str, shape: tuple[Any, ...], requires_grad: bool, parameter: bool) -> Any:
    import torch  # noqa: PLC0415 - only where PyTorch was saved

    device = _torch_target_device(host.device)
    cache = _target().cache
    storage = cache.get(id(host))
    if storage is None:
        storage = torch.from_numpy(host.values).untyped_storage()
        if device != "cpu":
            storage = storage.to(device=device)
        cache[id(host)] = storage
    offset, size, stride = shape
    tensor = torch.empty((0,), dtype=getattr(torch, dtype), device=storage.device)
    tensor.set_(storage, offset, size, stride)
    if parameter:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    return tensor.requires_grad_(requires_grad) if requires_grad else tensor


# ---- JAX -------------------------------------------------------------------------------------------


def _reduce_jax(array: Any) -> tuple[Any, ...] | None:
    jax = _loaded("jax")
    if jax is None or not isinstance(array, jax.Array) or not getattr(array, "is_fully_addressable", True):
        return None
    devices = sorted(array.devices(), key=lambda d: d.id)
    device = f"{devices[0].platform}:{devices[0].id}" if devices else "cpu:0"
    nbytes = int(array.size) * array.dtype.itemsize
    data = DeviceData(("jax", id(array)), nbytes, "jax", device, array)
    return (rebuild_jax, (data, str(array.dtype), tuple(array.shape)))


def rebuild_jax(host: HostArray, dtype: str, shape: tuple[int, ...]) -> Any:
    import jax  # noqa: PLC0415 - only where JAX was saved

    values = host.values.view(_jax_dtype(dtype)).reshape(shape)
    saved_device = host.device
    target = _target().jax
    if saved_device.startswith("cpu") or target is None:
        if not saved_device.startswith("cpu"):
            _note_moved(f"JAX arrays saved on {saved_device}")
        return jax.device_put(values, jax.devices("cpu")[0])
    platform, _, index = target.partition(":")
    return jax.device_put(values, jax.devices(platform)[int(index or 0)])


def _jax_dtype(name: str) -> Any:
    if name == "bfloat16" or name.startswith("float8"):
        import ml_dtypes  # noqa: PLC0415 - JAX's own dependency, for its extra types

        return getattr(ml_dtypes, name)
    import numpy as np  # noqa: PLC0415 - see the imports

    return np.dtype(name)


# ---- CuPy ------------------------------------------------------------------------------------------


def _reduce_cupy(array: Any) -> tuple[Any, ...] | None:
    cupy = _loaded("cupy")
    if cupy is None or type(array) is not cupy.ndarray:
        return None
    device = f"cuda:{array.device.id}"
    data = DeviceData(("cupy", device, array.data.ptr, array.nbytes), int(array.nbytes), "cupy", device, array)
    return (rebuild_cupy, (data, str(array.dtype), tuple(array.shape)))


def rebuild_cupy(host: HostArray, dtype: str, shape: tuple[int, ...]) -> Any:
    import numpy as np  # noqa: PLC0415 - see the imports

    values = host.values.view(np.dtype(dtype)).reshape(shape)
    if _target().cupy:
        import cupy  # noqa: PLC0415 - only where CuPy was saved

        return cupy.asarray(values)
    _note_moved("CuPy arrays (restored as NumPy arrays)")
    return values


# ---- shared ----------------------------------------------------------------------------------------


def _note_moved(what: str) -> None:
    moved = MOVED_TO_HOST.get()
    if moved is not None and what not in moved:
        moved.append(what)
