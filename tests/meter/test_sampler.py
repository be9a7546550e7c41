"""The sampler: lazy NVML, the sampling floor, and no library at all."""

from __future__ import annotations

import json
import subprocess
import sys

from fracnb_meter.sampler import Sampler
from fracnb_meter.testing.fakenvml import FakeDevice, FakeProcess, FakeState
from fracnb_meter.testing.server import StateFile
from tests.meter.meter_helpers import GIB


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_readings_are_cached_for_the_floor_interval(nvml_state: StateFile) -> None:
    clock = FakeClock()
    sampler = Sampler(floor_seconds=2.0, clock=clock)
    try:
        first = sampler.read()
        nvml_state.write(FakeState(devices=[FakeDevice.a100(0)], processes=[FakeProcess(0, 42, GIB)]))
        clock.now += 1.9
        assert sampler.read() is first  # within the floor: NVML is not asked again
        assert sampler.reads == 1
        clock.now += 0.2
        second = sampler.read()
        assert sampler.reads == 2
        assert [(p.pid, p.memory_bytes) for p in second.processes] == [(42, GIB)]
        assert first.processes == ()
    finally:
        sampler.close()


def test_a_reading_describes_devices(nvml_state: StateFile) -> None:
    sampler = Sampler(floor_seconds=0.0)
    try:
        reading = sampler.read()
    finally:
        sampler.close()
    assert reading.available
    assert reading.simulated
    assert reading.driver_version == "565.57.01"
    assert [gpu.memory_total_bytes for gpu in reading.gpus] == [80 * GIB]


def test_missing_bindings_are_reported() -> None:
    reading = Sampler(0.0, bindings=lambda: None).read()
    assert not reading.available
    assert "nvidia-ml-py" in reading.reason


PROBE = """
import json, sys
import fracnb_meter, fracnb_meter.server, fracnb_meter.widget, fracnb_meter.simulate
loaded_at_import = "libnvidia-ml" in open("/proc/self/maps").read()
from fracnb_meter.sampler import Sampler
reading = Sampler(0.0).read()
print(json.dumps({"loaded_at_import": loaded_at_import, "available": reading.available,
                  "reason": reading.reason, "pynvml": "pynvml" in sys.modules}))
"""


def test_import_touches_no_nvml_and_no_library_means_unavailable(fake_nvml_library) -> None:
    # A fresh interpreter without the fake anywhere on its library path.
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60)
    probe = json.loads(result.stdout)
    assert probe["loaded_at_import"] is False
    assert probe["available"] is False
    assert "libnvidia-ml.so.1" in probe["reason"]
    assert probe["pynvml"] is True  # the real bindings were tried, and failed cleanly
