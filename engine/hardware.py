"""What this machine can do, and the training settings that follow from it.

``detect()`` imports torch (to see CUDA and MPS devices), so the supervisor
calls it off its main thread; ``rl-studio-engine hardware`` prints it as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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


# ------------------------------------------------------------------ CLI
def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--compact", action="store_true", help="one line of JSON")


def run(args: argparse.Namespace) -> int:
    info = detect().to_dict()
    print(json.dumps(info, indent=None if args.compact else 2))
    return 0
