"""Live hardware load: nvidia-smi parsing, the ``hardware.usage`` request on
the real engine with a fake ``nvidia-smi`` on the PATH, and the studio's
hardware meter updating CPU, RAM and GPU gauges on its own timer."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from engine_harness import EngineProcess
from studio_harness import build_main_window

from engine import protocol
from engine.hardware import GpuUsage, gpu_usage, nvidia_smi_command, parse_nvidia_smi
from studio.main_window import MainWindow
from widgets.hardware_meter import HardwareMeter, Usage

REPO = Path(__file__).resolve().parents[1]
MIB = 2**20

# What nvidia-smi 550 prints for the query engine.hardware sends: an H100 at
# 37 %, and a MIG-partitioned A100 that reports no utilisation.
SMI_OUTPUT = (
    "0, NVIDIA H100 80GB HBM3, 37, 1234, 81559\n"
    "1, NVIDIA A100-SXM4-40GB, [N/A], 5, 40960\n"
)


def fake_nvidia_smi(folder: Path, output: str = SMI_OUTPUT, code: int = 0) -> Path:
    """An ``nvidia-smi`` that checks it was asked the right query."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nvidia-smi"
    expected = nvidia_smi_command("nvidia-smi")[1:]
    path.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"if sys.argv[1:] != {expected!r}:\n"
        "    sys.exit('unexpected arguments: ' + ' '.join(sys.argv[1:]))\n"
        f"sys.stdout.write({output!r})\n"
        f"sys.exit({code})\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_nvidia_smi_output_is_parsed_with_unknowns_as_none() -> None:
    assert parse_nvidia_smi(SMI_OUTPUT + "\nNo devices were found\n") == [
        GpuUsage(0, "NVIDIA H100 80GB HBM3", 37.0, 1234 * MIB, 81559 * MIB),
        GpuUsage(1, "NVIDIA A100-SXM4-40GB", None, 5 * MIB, 40960 * MIB),
    ]
    assert parse_nvidia_smi("0, Jetson, 12, [Not Supported], [Not Supported]") == [
        GpuUsage(0, "Jetson", 12.0, None, None)
    ]
    assert parse_nvidia_smi("") == []


class FakeNvml:
    """The few pynvml calls engine.hardware makes, for one H100 at 37 %."""

    shut_down = 0

    def nvmlInit(self) -> None:  # pynvml's names
        pass

    def nvmlShutdown(self) -> None:
        FakeNvml.shut_down += 1

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"h{i}"

    def nvmlDeviceGetName(self, handle: str) -> bytes:
        return b"NVIDIA H100"

    def nvmlDeviceGetCudaComputeCapability(self, handle: str) -> tuple[int, int]:
        return 9, 0

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> object:
        return type("Mem", (), {"used": 3 * MIB, "total": 80 * 1024 * MIB})()

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> object:
        raise RuntimeError("not supported")  # as on a MIG slice


def test_nvml_reads_gpus_and_usage(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine import hardware

    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    (gpu,) = hardware._nvml_gpus() or []
    assert (gpu.name, gpu.compute_capability, gpu.bf16) == ("NVIDIA H100", "9.0", True)
    assert gpu.memory_total_bytes == 80 * 1024 * MIB
    (use,) = hardware._nvml_usage() or []
    assert use == GpuUsage(0, "NVIDIA H100", None, 3 * MIB, 80 * 1024 * MIB)
    assert FakeNvml.shut_down == 2


def test_gpu_usage_runs_nvidia_smi_and_survives_its_failure(tmp_path: Path) -> None:
    good = fake_nvidia_smi(tmp_path / "good")
    (h100, a100) = gpu_usage(str(good))
    assert h100.util_percent == 37.0 and h100.memory_used_bytes == 1234 * MIB
    assert a100.util_percent is None
    broken = fake_nvidia_smi(tmp_path / "broken", "NVML: driver mismatch\n", code=9)
    assert gpu_usage(str(broken)) == []
    assert gpu_usage(str(tmp_path / "missing")) == []


def test_hardware_command_prints_live_usage(tmp_path: Path) -> None:
    fake_nvidia_smi(tmp_path)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [sys.executable, "-m", "engine.cli", "hardware", "--usage", "--compact"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    gpus = json.loads(done.stdout)["gpus"]
    assert [g["util_percent"] for g in gpus] == [37.0, None]
    assert "torch" not in done.stderr


@pytest.fixture
def fake_smi_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    fake_nvidia_smi(folder)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


def test_engine_answers_hardware_usage(fake_smi_on_path: Path) -> None:
    engine = EngineProcess()
    try:
        engine.call(protocol.Hello(protocol_version=protocol.PROTOCOL_VERSION))
        result = engine.call(protocol.GetHardwareUsage())
    finally:
        engine.close()
    assert result["gpus"][0] == {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "util_percent": 37.0,
        "memory_used_bytes": 1234 * MIB,
        "memory_total_bytes": 81559 * MIB,
    }


def test_meter_shows_gpu_utilisation_and_memory(qtbot) -> None:
    meter = HardwareMeter()
    qtbot.addWidget(meter)
    meter.show()
    meter.set_usage(Usage(20, 1, 2))
    assert not meter.gpu.isVisible() and not meter.vram.isVisible()
    meter.set_usage(
        Usage(
            20,
            1,
            2,
            gpu_name="H100",
            gpu_memory_used_bytes=20 * 2**30,
            gpu_memory_total_bytes=80 * 2**30,
            gpu_util_percent=37.0,
        )
    )
    assert meter.gpu.value.text() == "37%" and meter.gpu.bar.value() == 37
    assert meter.vram.value.text() == "20.0/80.0 GiB" and meter.vram.bar.value() == 25
    assert "H100" in meter.gpu.toolTip()
    # A GPU whose driver reports no utilisation says so instead of 0 %.
    meter.set_usage(Usage(20, 1, 2, gpu_name="Apple GPU", gpu_memory_total_bytes=2**34))
    assert meter.gpu.value.text() == "n/a" and "not reported" in meter.gpu.toolTip()
    assert meter.vram.value.text() == "16.0 GiB"


@pytest.fixture
def window(qtbot, tmp_path: Path, fake_smi_on_path: Path) -> Iterator[MainWindow]:
    win = build_main_window(qtbot, tmp_path)
    with qtbot.waitSignal(win.session.hardware_changed, timeout=60_000):
        win.session.client.start()  # inherits the PATH with the fake nvidia-smi
    win.show()
    yield win
    win.session.client.stop()


def test_status_bar_meter_updates_live(
    qtbot, window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    meter = window.hardware_meter
    session = window.session
    # CPU and RAM come from psutil on the meter's timer: a changing reading
    # shows without anything else happening.
    readings = iter(range(11, 100))
    monkeypatch.setattr(psutil, "cpu_percent", lambda *_a, **_k: next(readings))
    qtbot.waitUntil(lambda: meter.cpu.value.text() not in ("", "11%"), timeout=10_000)
    first = meter.cpu.value.text()
    qtbot.waitUntil(lambda: meter.cpu.value.text() != first, timeout=10_000)
    assert meter.ram.value.text().endswith(" GiB")
    # GPU gauges show only for a detected GPU (none on the test machines);
    # once detection names a CUDA device, the engine reports its load (here
    # from the fake nvidia-smi) on the same timer.
    assert meter.gpu.isVisible() == bool(session.hardware.get("gpus"))
    gpu = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "backend": "cuda"}
    session._on_hardware_reply({**session.hardware, "gpus": [gpu]})
    qtbot.waitUntil(lambda: meter.gpu.value.text() == "37%", timeout=10_000)
    assert meter.vram.value.text() == "1.2/79.6 GiB"
    assert session.gpu_usage[0]["util_percent"] == 37.0


def test_the_hardware_report_names_jax_and_the_cpus_vector_units() -> None:
    """Read from package metadata and /proc/cpuinfo: detecting imports no JAX."""
    import importlib.metadata

    from engine.hardware import CPU_FEATURES

    code = (
        "import json, sys\n"
        "from engine.hardware import detect\n"
        "info = detect(nvidia_smi='', probe_torch=False)\n"
        "print(json.dumps([info.cpu_features, info.jax_version, info.jax_platforms,"
        " 'jax' in sys.modules]))\n"
    )
    root = Path(__file__).parents[1]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, check=True, cwd=root)  # fmt: skip
    features, version, platforms, imported = json.loads(done.stdout)
    assert set(features) <= set(CPU_FEATURES) and not imported
    with open("/proc/cpuinfo", encoding="utf-8") as fh:
        flags = next((line.split() for line in fh if line.startswith("flags")), [])
    assert ("avx2" in features) == ("avx2" in flags)
    try:
        installed = importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        installed = ""
    assert version == installed
    assert platforms[:1] == (["cpu"] if installed else [])
