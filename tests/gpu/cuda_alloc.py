"""Hold GPU memory from a plain process through the CUDA driver API (ctypes; no framework needed).

    python cuda_alloc.py MIB      # allocates MIB MiB on device 0, prints "ready <pid>", waits for stdin to close

Also importable: ``allocate(mib)`` in a kernel returns the context and pointer, which keep the
memory until the process exits.
"""

from __future__ import annotations

import ctypes
import os
import sys

MIB = 1 << 20


class CudaError(RuntimeError):
    pass


def _check(result: int, call: str) -> None:
    if result != 0:
        raise CudaError(f"{call} failed with CUDA error {result}")


def allocate(mib: int) -> tuple[ctypes.c_void_p, ctypes.c_uint64]:
    cuda = ctypes.CDLL("libcuda.so.1")
    _check(cuda.cuInit(0), "cuInit")
    device = ctypes.c_int()
    _check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    context = ctypes.c_void_p()
    _check(cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device), "cuCtxCreate")
    pointer = ctypes.c_uint64()
    _check(cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(mib * MIB)), "cuMemAlloc")
    _check(cuda.cuMemsetD8_v2(pointer, 1, ctypes.c_size_t(mib * MIB)), "cuMemsetD8")  # really touch it
    _check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    return context, pointer


def main() -> None:
    held = allocate(int(sys.argv[1]))
    sys.stdout.write(f"ready {os.getpid()}\n")
    sys.stdout.flush()
    sys.stdin.read()  # until the parent closes our stdin
    del held


if __name__ == "__main__":
    main()
