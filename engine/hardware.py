"""What this machine can do, and the training settings that follow from it.

``detect()`` reads the CPU and memory with psutil and NVIDIA GPUs through
NVML or ``nvidia-smi``, never importing torch (a short-lived worker asks torch
where other GPUs may exist: MPS, ROCm); ``rl-studio-engine hardware`` prints
it as JSON.
``gpu_usage()`` reads live NVIDIA GPU utilisation and memory (NVML through
``pynvml`` when installed, else ``nvidia-smi``) without torch, for the
studio's hardware meter.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


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
    cpu_features: list[str] = field(default_factory=list)
    """The vector instruction sets of :data:`CPU_FEATURES` the CPU has (XLA
    and torch use the widest)."""
    jax_version: str = ""
    """The installed JAX (``rl.train``'s ``jax`` backend); empty: none."""
    jax_platforms: list[str] = field(default_factory=list)
    """Where that JAX can run: ``cpu``, and ``cuda`` with a CUDA plugin
    installed (read from package metadata: JAX is not imported)."""
    jax_devices: list[str] = field(default_factory=list)
    """The devices that JAX trains on here, as ``platform:id`` (its first is
    the one the ``jax`` backend uses): see :func:`jax_devices`."""

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


def _bf16(compute_capability: str) -> bool:
    """Ampere (8.0) and newer NVIDIA GPUs train in bfloat16."""
    major = _smi_number(compute_capability.partition(".")[0])
    return major is not None and major >= 8


def _each_nvml_gpu(read: Callable[[Any, int, Any, str], T]) -> list[T] | None:
    """``read(pynvml, index, handle, name)`` for every NVIDIA GPU NVML sees;
    None when ``pynvml`` or the driver is missing or NVML fails."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError: no driver, no GPU
        return None
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            out.append(read(pynvml, i, handle, name))
        return out
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _nvml_gpus() -> list[GpuInfo] | None:
    """NVIDIA GPUs through NVML, or None when ``pynvml`` or the driver is missing."""

    def read(pynvml: Any, index: int, handle: Any, name: str) -> GpuInfo:
        cc = ""
        with contextlib.suppress(Exception):
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            cc = f"{major}.{minor}"
        return GpuInfo(
            index=index,
            name=name,
            backend="cuda",
            memory_total_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
            bf16=_bf16(cc),
            compute_capability=cc,
        )

    return _each_nvml_gpu(read)


NVIDIA_SMI_DETECT_QUERY = "index,name,memory.total,compute_cap"


def parse_nvidia_smi_gpus(text: str) -> list[GpuInfo]:
    """Parse ``nvidia-smi --query-gpu=index,name,memory.total,compute_cap
    --format=csv,noheader,nounits`` (memory in MiB); other lines are skipped."""
    gpus = []
    for line in text.splitlines():
        head, *numbers = line.rsplit(",", 2)
        index, _, name = head.partition(",")
        idx = _smi_number(index)
        if len(numbers) != 2 or not name.strip() or idx is None:
            continue
        total = _smi_number(numbers[0])
        cc = numbers[1].strip() if _smi_number(numbers[1]) is not None else ""
        gpus.append(
            GpuInfo(
                index=int(idx),
                name=name.strip(),
                backend="cuda",
                memory_total_bytes=int(total * 2**20) if total is not None else 0,
                bf16=_bf16(cc),
                compute_capability=cc,
            )
        )
    return gpus


def _smi_gpus(executable: str | None) -> list[GpuInfo]:
    path = executable or shutil.which("nvidia-smi")
    if path is None:
        return []
    out = _query_nvidia_smi(path, NVIDIA_SMI_DETECT_QUERY)
    return parse_nvidia_smi_gpus(out) if out is not None else []


CPU_FEATURES = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16")
"""CPU flags (``/proc/cpuinfo``) the hardware report names."""


def jax_facts() -> tuple[str, list[str]]:
    """(JAX's version, the platforms it can run on), from package metadata:
    importing JAX takes seconds and the supervisor never does."""
    try:
        version = importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        return "", []
    platforms = ["cpu"]
    for plugin in ("jax-cuda12-plugin", "jax-cuda13-plugin"):
        try:
            importlib.metadata.version(plugin)
        except importlib.metadata.PackageNotFoundError:
            continue
        platforms.append("cuda")
        break
    return version, platforms


def jax_devices(platforms: list[str], gpus: list[GpuInfo]) -> list[str]:
    """The devices JAX puts its work on, as it names them (``cuda:0``,
    ``cpu:0``), without importing it: each detected CUDA GPU when a CUDA
    plugin is installed (JAX then prefers them), else the CPU; [] without
    JAX. JAX sees MPS and ROCm GPUs through plugins the studio does not
    install, so those count as the CPU."""
    if not platforms:
        return []
    cuda = [g for g in gpus if g.backend == "cuda"]
    if "cuda" in platforms and cuda:
        return [f"cuda:{i}" for i in range(len(cuda))]
    return ["cpu:0"]


def torch_version() -> str:
    """The installed torch's version, read from its metadata (no import)."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return ""


def torch_facts() -> dict[str, Any]:
    """What only torch knows: the CUDA (or ROCm) and MPS devices it sees.

    Imports torch; the supervisor asks a short-lived worker for it
    (``rl-studio-engine hardware --torch-facts``) instead of calling it.
    """
    try:
        import torch
    except ImportError:
        return {"gpus": []}
    gpus: list[dict[str, Any]] = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            cc = f"{props.major}.{props.minor}"
            gpus.append(
                asdict(
                    GpuInfo(
                        i, props.name, "cuda", int(props.total_memory), _bf16(cc), cc
                    )
                )
            )
    elif getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        import psutil

        # Apple GPUs share system memory.
        total = int(psutil.virtual_memory().total)
        gpus.append(asdict(GpuInfo(0, "Apple GPU", "mps", total, True)))
    return {"gpus": gpus}


TORCH_PROBE_TIMEOUT_S = 120.0
_cache_lock = threading.Lock()
_gpu_cache: dict[tuple[str | None, bool], list[GpuInfo]] = {}


def _torch_probe_needed() -> bool:
    """Whether GPUs may exist that NVML and nvidia-smi cannot see: Apple's
    MPS, or AMD's ROCm (which torch calls ``cuda``)."""
    return sys.platform == "darwin" or os.path.exists("/dev/kfd")


def _probe_torch() -> list[GpuInfo]:
    """Torch's view of the GPUs from a short-lived worker process, so that
    the calling process never imports torch ([] when the worker fails)."""
    if "torch" in sys.modules:  # a job process: torch is here anyway
        facts = torch_facts()
    else:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "engine", "hardware", "--torch-facts"],
                capture_output=True,
                text=True,
                timeout=TORCH_PROBE_TIMEOUT_S,
                check=False,
            )
            facts = json.loads(done.stdout) if done.returncode == 0 else {}
        except (OSError, subprocess.TimeoutExpired, ValueError):
            return []
    try:
        return [GpuInfo(**g) for g in facts.get("gpus", [])]
    except TypeError:
        return []


def detect_gpus(
    nvidia_smi: str | None = None, probe_torch: bool | None = None
) -> list[GpuInfo]:
    """The machine's GPUs, found once per process and cached.

    NVIDIA GPUs come from NVML (``pynvml``) or ``nvidia-smi`` without torch;
    only where neither sees one and another kind may exist (``probe_torch``
    None: on macOS or with ROCm) does a worker ask torch.
    """
    probe = _torch_probe_needed() if probe_torch is None else probe_torch
    key = (nvidia_smi, probe)
    with _cache_lock:
        if key not in _gpu_cache:
            gpus = (None if nvidia_smi else _nvml_gpus()) or _smi_gpus(nvidia_smi)
            if not gpus and probe:
                gpus = _probe_torch()
            _gpu_cache[key] = gpus
        return list(_gpu_cache[key])


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


def detect(
    nvidia_smi: str | None = None, probe_torch: bool | None = None
) -> HardwareInfo:
    """This machine's CPU, memory and GPUs, and the settings they suggest.

    Never imports torch (see ``detect_gpus``), so the supervisor answers it
    in milliseconds once the GPUs are known.
    """
    import psutil

    physical = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    logical = psutil.cpu_count(logical=True) or physical
    mem = psutil.virtual_memory()
    flags = _cpu_flags()
    cpu_bf16 = bool({"avx512_bf16", "amx_bf16"} & flags)
    gpus = detect_gpus(nvidia_smi, probe_torch)
    jax_version, jax_platforms = jax_facts()
    return HardwareInfo(
        cpu_model=_cpu_model(),
        cpu_physical_cores=physical,
        cpu_logical_cores=logical,
        ram_total_bytes=int(mem.total),
        ram_available_bytes=int(mem.available),
        cpu_bf16=cpu_bf16,
        gpus=gpus,
        torch_version=torch_version(),
        recommendations=recommend(gpus, physical, logical, cpu_bf16),
        cpu_features=[f for f in CPU_FEATURES if f in flags],
        jax_version=jax_version,
        jax_platforms=jax_platforms,
        jax_devices=jax_devices(jax_platforms, gpus),
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


def nvidia_smi_command(
    executable: str = "nvidia-smi", query: str = NVIDIA_SMI_QUERY
) -> list[str]:
    """The ``nvidia-smi`` command line asking ``query`` of every GPU as CSV."""
    return [executable, f"--query-gpu={query}", "--format=csv,noheader,nounits"]


def _query_nvidia_smi(executable: str, query: str) -> str | None:
    """``nvidia-smi``'s answer to ``query`` (:func:`nvidia_smi_command`);
    None when it cannot run, times out or fails."""
    try:
        done = subprocess.run(
            nvidia_smi_command(executable, query),
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


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

    def read(pynvml: Any, index: int, handle: Any, name: str) -> GpuUsage:
        util: float | None = None
        with contextlib.suppress(Exception):
            util = float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        used = total = None
        with contextlib.suppress(Exception):
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            used, total = int(mem.used), int(mem.total)
        return GpuUsage(
            index=index,
            name=name,
            util_percent=util,
            memory_used_bytes=used,
            memory_total_bytes=total,
        )

    return _each_nvml_gpu(read)


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
    out = _query_nvidia_smi(nvidia_smi, NVIDIA_SMI_QUERY)
    return parse_nvidia_smi(out) if out is not None else []


# ------------------------------------------------------------------ CLI
def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--compact", action="store_true", help="one line of JSON")
    parser.add_argument(
        "--usage",
        action="store_true",
        help="print live GPU utilisation and memory instead (no torch needed)",
    )
    parser.add_argument(
        "--torch-facts",
        action="store_true",
        help="print the GPUs torch sees (the worker the engine asks; imports torch)",
    )


def run(args: argparse.Namespace) -> int:
    if args.torch_facts:
        print(json.dumps(torch_facts()))
        return 0
    if args.usage:
        usage = {"gpus": [g.to_dict() for g in gpu_usage()]}
        print(json.dumps(usage, indent=None if args.compact else 2))
        return 0
    info = detect().to_dict()
    print(json.dumps(info, indent=None if args.compact else 2))
    return 0
