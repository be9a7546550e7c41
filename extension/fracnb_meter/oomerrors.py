"""Which kernel output is a GPU out-of-memory error: the one list of patterns (pure, no I/O).

The meter reads every kernel's IOPub messages (fracnb_meter.kernelwatch) and asks
:func:`oom_in_message` of each. Two kinds of message can show an out-of-memory error:

- ``error`` (an exception the cell raised): its ``"{ename}: {evalue}"`` is matched, never the
  traceback, which holds the cell's source and colour codes;
- ``stream`` on ``stderr``: a printed traceback, or a library's own log line (ipykernel
  forwards what C++ code writes to file descriptor 2 as well). Only the first
  ``STREAM_SCAN_CHARS`` characters of one message are read, so a flood of output costs little.

A pattern must name the GPU or a GPU library's status, so that host memory errors
(``MemoryError``, a JVM's ``OutOfMemoryError``, TensorFlow on the CPU) do not count.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

STREAM_SCAN_CHARS = 64 * 1024


@dataclass(frozen=True)
class OomPattern:
    """One library's out-of-memory error: where it comes from, a regular expression, a real example."""

    source: str
    regex: str
    example: str


OOM_PATTERNS: tuple[OomPattern, ...] = (
    OomPattern(
        "PyTorch (torch.OutOfMemoryError, older RuntimeError)",
        r"CUDA out of memory",
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.15 GiB",
    ),
    OomPattern(
        "PyTorch and CUDA runtime messages",
        r"CUDA error: out of memory",
        "RuntimeError: CUDA error: out of memory",
    ),
    OomPattern(
        "TensorFlow (ResourceExhaustedError)",
        r"OOM when allocating tensor[^\n]*GPU",
        "ResourceExhaustedError: OOM when allocating tensor with shape[100000,100000] and type float on "
        "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc [Op:RandomStandardNormal]",
    ),
    OomPattern(
        "JAX / XLA",
        r"RESOURCE_EXHAUSTED: Out of memory",
        "XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 40000000000 bytes.",
    ),
    OomPattern(
        "CuPy (cupy.cuda.memory.OutOfMemoryError)",
        r"OutOfMemoryError: Out of memory allocating",
        "OutOfMemoryError: Out of memory allocating 800,000,000,000 bytes (allocated so far: 0 bytes).",
    ),
    OomPattern(
        "CUDA driver API (Numba, PyCUDA, CuPy)",
        r"CUDA_ERROR_OUT_OF_MEMORY",
        "CudaAPIError: [2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY",
    ),
    OomPattern(
        "CUDA runtime API",
        r"cudaErrorMemoryAllocation",
        "CUDARuntimeError: cudaErrorMemoryAllocation: out of memory",
    ),
    OomPattern(
        "cuDNN, cuBLAS, cuSOLVER, cuSPARSE allocation failures",
        r"CU(?:DNN|BLAS|SOLVER|SPARSE)_STATUS_ALLOC_FAILED",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    ),
    OomPattern(
        "cuFFT allocation failure",
        r"CUFFT_ALLOC_FAILED",
        "CuFFTError: CUFFT_ALLOC_FAILED",
    ),
    OomPattern(
        "RAPIDS Memory Manager (cuDF, cuML)",
        r"out_of_memory: CUDA error",
        "MemoryError: std::bad_alloc: out_of_memory: CUDA error at: rmm/mr/device/cuda_memory_resource.hpp",
    ),
)

_ANY_OOM = re.compile("|".join(f"(?:{pattern.regex})" for pattern in OOM_PATTERNS))


def is_oom_text(text: str) -> bool:
    """Whether ``text`` holds a GPU out-of-memory error of any library in OOM_PATTERNS."""
    return _ANY_OOM.search(text) is not None


def message_text(message: Mapping[str, Any]) -> str | None:
    """The text of an IOPub message that can show an error: ``error`` and stderr ``stream`` messages; else None."""
    msg_type = message.get("header", {}).get("msg_type") or message.get("msg_type")
    content = message.get("content")
    if not isinstance(content, Mapping):
        return None
    if msg_type == "error":
        return f"{content.get('ename', '')}: {content.get('evalue', '')}"
    if msg_type == "stream" and content.get("name") == "stderr":
        text = content.get("text", "")
        return text[:STREAM_SCAN_CHARS] if isinstance(text, str) else None
    return None


def oom_in_message(message: Mapping[str, Any]) -> bool:
    """Whether a deserialised IOPub message (header, content) reports a GPU out-of-memory error."""
    text = message_text(message)
    return text is not None and is_oom_text(text)


def is_candidate(msg_type: str) -> bool:
    """Whether a message of this type is worth unpacking at all (the watcher skips the rest unread)."""
    return msg_type in ("error", "stream")
