"""Which IOPub messages are GPU out-of-memory errors (oomerrors), from literal message dicts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fracnb_meter.oomerrors import OOM_PATTERNS, STREAM_SCAN_CHARS, OomPattern, is_oom_text, oom_in_message


def error(ename: str, evalue: str, traceback: list[str] | None = None) -> dict:
    content = {"ename": ename, "evalue": evalue, "traceback": traceback or []}
    return {"header": {"msg_type": "error"}, "parent_header": {"msg_id": "r1"}, "content": content}


def stream(name: str, text: str) -> dict:
    return {
        "header": {"msg_type": "stream"},
        "parent_header": {"msg_id": "r1"},
        "content": {"name": name, "text": text},
    }


@pytest.mark.parametrize("pattern", OOM_PATTERNS, ids=lambda pattern: pattern.source)
def test_each_pattern_matches_its_own_example(pattern: OomPattern) -> None:
    ename, _, evalue = pattern.example.partition(": ")
    assert oom_in_message(error(ename, evalue))
    assert oom_in_message(stream("stderr", f"Traceback (most recent call last):\n  ...\n{pattern.example}\n"))


@pytest.mark.parametrize(
    ("ename", "evalue"),
    [
        ("OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 9.50 GiB"),
        ("RuntimeError", "CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 10.00 GiB total capacity)"),
        (
            "ResourceExhaustedError",
            "{{function_node __wrapped__MatMul_device_/job:localhost/replica:0/task:0/device:GPU:0}} OOM when "
            "allocating tensor with shape[65536,65536] and type float on /job:localhost/replica:0/task:0/device:GPU:0 "
            "by allocator GPU_0_bfc [Op:MatMul]",
        ),
        ("XlaRuntimeError", "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 68719476736 bytes."),
        ("OutOfMemoryError", "Out of memory allocating 68,719,476,736 bytes (allocated so far: 1,024 bytes)."),
        ("CudaAPIError", "[2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY"),
        ("RuntimeError", "cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
        ("RuntimeError", "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
    ],
)
def test_the_errors_of_the_common_gpu_libraries_are_out_of_memory(ename: str, evalue: str) -> None:
    assert oom_in_message(error(ename, evalue))


@pytest.mark.parametrize(
    ("ename", "evalue"),
    [
        ("ValueError", "shapes (3,) and (4,) not aligned"),
        ("MemoryError", "Unable to allocate 74.5 GiB for an array with shape (100000, 100000)"),
        ("java.lang.OutOfMemoryError", "Java heap space"),
        (
            "ResourceExhaustedError",
            "OOM when allocating tensor with shape[100000,100000] and type float on "
            "/job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu",
        ),
        ("RuntimeError", "CUDA error: device-side assert triggered"),
    ],
)
def test_other_errors_and_host_memory_errors_are_not(ename: str, evalue: str) -> None:
    assert not oom_in_message(error(ename, evalue))


def test_the_traceback_is_not_read() -> None:
    """A cell whose source mentions the message fails for another reason: not an out-of-memory error."""
    traceback = ["\x1b[0;31mValueError\x1b[0m", 'msg = "CUDA out of memory"', "ValueError: bad shape"]
    assert not oom_in_message(error("ValueError", "bad shape", traceback))


def test_only_stderr_streams_are_read() -> None:
    text = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB"
    assert oom_in_message(stream("stderr", text))
    assert not oom_in_message(stream("stdout", text))


def test_tensorflows_own_log_line_on_stderr_counts() -> None:
    line = (
        "2026-11-23 04:00:00.000000: W tensorflow/core/framework/op_kernel.cc:1828] OP_REQUIRES failed at "
        "random_op.cc:74 : RESOURCE_EXHAUSTED: OOM when allocating tensor with shape[65536,65536] and type float "
        "on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
    )
    assert oom_in_message(stream("stderr", line))


def test_a_huge_stream_is_read_only_up_to_its_scan_limit() -> None:
    assert oom_in_message(stream("stderr", "x" * (STREAM_SCAN_CHARS - 100) + "CUDA out of memory"))
    assert not oom_in_message(stream("stderr", "x" * STREAM_SCAN_CHARS + "CUDA out of memory"))


@pytest.mark.parametrize(
    "message",
    [
        {"header": {"msg_type": "status"}, "content": {"execution_state": "busy"}},
        {"header": {"msg_type": "display_data"}, "content": {"data": {"text/plain": "CUDA out of memory"}}},
        {"header": {"msg_type": "execute_result"}, "content": {"data": {"text/plain": "'CUDA out of memory'"}}},
        {"header": {"msg_type": "error"}, "content": b"not unpacked"},
    ],
)
def test_other_messages_are_not_errors(message: dict) -> None:
    assert not oom_in_message(message)


def test_text_matching_is_case_sensitive_to_the_libraries_wording() -> None:
    assert is_oom_text("CUDA out of memory")
    assert not is_oom_text("cuda out of memory in my notes")


def test_right_sizing_md_lists_every_pattern() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "right-sizing.md").read_text()
    listed = set(re.findall(r"^\|[^|\n]*\| `(.+)` \|$", docs.replace("\\|", "\N{DIVIDES}"), re.MULTILINE))
    assert {p.regex for p in OOM_PATTERNS} == {entry.replace("\N{DIVIDES}", "|") for entry in listed}
