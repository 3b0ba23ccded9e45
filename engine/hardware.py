"""What this machine can do, and the training settings that follow from it.

``detect()`` imports torch (to see CUDA and MPS devices), so the supervisor
calls it off its main thread; ``rl-studio-engine hardware`` prints it as JSON.
``gpu_usage()`` reads live NVIDIA GPU utilisation and memory (NVML through
``pynvml`` when installed, else ``nvidia-smi``) without torch, for the
studio's hardware meter.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    backend: str
    """``cuda`` or ``mps``."""
    memory_total_bytes: int
    bf16: bool
    compute_capability: str = ""


@dataclass(frozen=True)
class Recommendations:
    """Starting points a trainer uses unless the user overrides them."""

    device: str
    """``cuda``, ``mps`` or ``cpu``."""
    dtype: str
    """Training precision for language models: ``bf16``, ``fp16`` or ``fp32``."""
    batch_size: int
    """Per-device batch size for language-model fine-tuning (sequences)."""
    lora_rank: int
    grpo_num_generations: int
    """Completions sampled per prompt in GRPO."""
    gradient_checkpointing: bool
    vec_envs: int
    """Environments stepped in parallel for SB3 training."""
    torch_threads: int
    """Intra-op threads for CPU training (physical cores)."""


@dataclass(frozen=True)
class HardwareInfo:
    cpu_model: str
    cpu_physical_cores: int
    cpu_logical_cores: int
    ram_total_bytes: int
    ram_available_bytes: int
    cpu_bf16: bool
    gpus: list[GpuInfo] = field(default_factory=list)
    torch_version: str = ""
    recommendations: Recommendations | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "hardware")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _gpus() -> tuple[list[GpuInfo], str]:
    try:
        import torch
    except ImportError:
        return [], ""
    gpus: list[GpuInfo] = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            gpus.append(
                GpuInfo(
                    index=i,
                    name=props.name,
                    backend="cuda",
                    memory_total_bytes=int(props.total_memory),
                    bf16=bool(props.major >= 8),
                    compute_capability=f"{props.major}.{props.minor}",
                )
            )
    elif getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        import psutil

        # Apple GPUs share system memory.
        gpus.append(
            GpuInfo(0, "Apple GPU", "mps", int(psutil.virtual_memory().total), True)
        )
    return gpus, str(torch.__version__)


def recommend(
    gpus: list[GpuInfo], physical_cores: int, logical_cores: int, cpu_bf16: bool
) -> Recommendations:
    """Settings for a ~0.5B-parameter model with LoRA and for SB3 on CPU.

    The memory tiers are coarse on purpose: they are starting points that
    fit, not tuned optima.
    """
    vec_envs = max(1, min(16, logical_cores))
    threads = max(1, physical_cores)
    if not gpus:
        return Recommendations(
            device="cpu",
            dtype="bf16" if cpu_bf16 else "fp32",
            batch_size=1,
            lora_rank=8,
            grpo_num_generations=4,
            # Checkpointing trades compute for memory; on CPU memory is the
            # cheaper resource.
            gradient_checkpointing=False,
            vec_envs=vec_envs,
            torch_threads=threads,
        )
    best = max(gpus, key=lambda g: g.memory_total_bytes)
    gib = best.memory_total_bytes / 2**30
    if gib >= 40:
        batch, rank, gens, ckpt = 16, 64, 16, False
    elif gib >= 20:
        batch, rank, gens, ckpt = 8, 32, 8, False
    elif gib >= 10:
        batch, rank, gens, ckpt = 4, 16, 8, True
    else:
        batch, rank, gens, ckpt = 2, 8, 4, True
    dtype = "bf16" if best.bf16 else "fp16"
    return Recommendations(
        device=best.backend,
        dtype=dtype,
        batch_size=batch,
        lora_rank=rank,
        grpo_num_generations=gens,
        gradient_checkpointing=ckpt,
        vec_envs=vec_envs,
        torch_threads=threads,
    )


def detect() -> HardwareInfo:
    import psutil

    physical = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    logical = psutil.cpu_count(logical=True) or physical
    mem = psutil.virtual_memory()
    flags = _cpu_flags()
    cpu_bf16 = bool({"avx512_bf16", "amx_bf16"} & flags)
    gpus, torch_version = _gpus()
    return HardwareInfo(
        cpu_model=_cpu_model(),
        cpu_physical_cores=physical,
        cpu_logical_cores=logical,
        ram_total_bytes=int(mem.total),
        ram_available_bytes=int(mem.available),
        cpu_bf16=cpu_bf16,
        gpus=gpus,
        torch_version=torch_version,
        recommendations=recommend(gpus, physical, logical, cpu_bf16),
    )


# ------------------------------------------------------------- live usage
@dataclass(frozen=True)
class GpuUsage:
    index: int
    name: str
    util_percent: float | None
    """Share of the last sample period a kernel ran, 0..100 (None: unknown)."""
    memory_used_bytes: int | None
    memory_total_bytes: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


NVIDIA_SMI_QUERY = "index,name,utilization.gpu,memory.used,memory.total"
NVIDIA_SMI_TIMEOUT_S = 3.0


def nvidia_smi_command(executable: str = "nvidia-smi") -> list[str]:
    return [
        executable,
        f"--query-gpu={NVIDIA_SMI_QUERY}",
        "--format=csv,noheader,nounits",
    ]


def _smi_number(text: str) -> float | None:
    # nvidia-smi prints "[N/A]" or "[Not Supported]" for what a GPU lacks
    # (utilisation on some MIG slices, memory on unified-memory boards).
    try:
        return float(text.strip())
    except ValueError:
        return None


def parse_nvidia_smi(text: str) -> list[GpuUsage]:
    """Parse ``nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,
    memory.total --format=csv,noheader,nounits`` (memory in MiB). Lines that
    do not have the five fields are skipped."""
    gpus = []
    for line in text.splitlines():
        # A GPU name has no commas, so a plain split is safe; split from the
        # right anyway so that one would not shift the numbers.
        head, *numbers = line.rsplit(",", 3)
        index, _, name = head.partition(",")
        if len(numbers) != 3 or not name:
            continue
        idx = _smi_number(index)
        if idx is None:
            continue
        util, used, total = (_smi_number(n) for n in numbers)
        gpus.append(
            GpuUsage(
                index=int(idx),
                name=name.strip(),
                util_percent=util,
                memory_used_bytes=None if used is None else int(used * 2**20),
                memory_total_bytes=None if total is None else int(total * 2**20),
            )
        )
    return gpus


def _nvml_usage() -> list[GpuUsage] | None:
    """Usage through NVML, or None when ``pynvml`` or the driver is missing."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError: no driver, no GPU
        return None
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            util: float | None = None
            with contextlib.suppress(Exception):
                util = float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            used = total = None
            with contextlib.suppress(Exception):
                mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
                used, total = int(mem.used), int(mem.total)
            gpus.append(
                GpuUsage(
                    index=i,
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    util_percent=util,
                    memory_used_bytes=used,
                    memory_total_bytes=total,
                )
            )
        return gpus
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def gpu_usage(nvidia_smi: str | None = None) -> list[GpuUsage]:
    """Live utilisation and memory of each NVIDIA GPU; [] where there is none.

    ``nvidia_smi`` names the executable to run (default: ``nvidia-smi`` on the
    PATH, used when ``pynvml`` is not installed).
    """
    if nvidia_smi is None:
        nvml = _nvml_usage()
        if nvml is not None:
            return nvml
        nvidia_smi = shutil.which("nvidia-smi")
        if nvidia_smi is None:
            return []
    try:
        done = subprocess.run(
            nvidia_smi_command(nvidia_smi),
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    return parse_nvidia_smi(done.stdout)


# ------------------------------------------------------------------ CLI
def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--compact", action="store_true", help="one line of JSON")
    parser.add_argument(
        "--usage",
        action="store_true",
        help="print live GPU utilisation and memory instead (no torch needed)",
    )


def run(args: argparse.Namespace) -> int:
    if args.usage:
        usage = {"gpus": [g.to_dict() for g in gpu_usage()]}
        print(json.dumps(usage, indent=None if args.compact else 2))
        return 0
    info = detect().to_dict()
    print(json.dumps(info, indent=None if args.compact else 2))
    return 0
