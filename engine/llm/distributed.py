"""Scale-out of ``llm.train``: one run, many processes, one or more machines.

A run with ``num_processes`` > 1 or ``num_machines`` > 1 writes
``distributed/accelerate_config.json`` (an accelerate config file:
reproducible, and visible in the run folder) and ``distributed/job.json``
(the run id and its validated config) into its run folder, then starts
``accelerate launch --config_file ... -m engine.llm.distributed RUN_DIR``. Each
rank runs :func:`worker_main`, the ordinary training of
:func:`engine.llm.train.train_model`:

- rank 0 alone writes metrics, checkpoints (the Trainer saves on the main
  process), the adapter and ``distributed/summary.json``;
- every rank writes its output to ``distributed/ranks/rank-N.log``; the job
  copies those lines into the run log as ``[rank N] ...``;
- Stop writes ``stop.request`` in the run folder; each rank watches it and the
  ranks agree on stopping at the same step (an all-reduce of the flag in the
  training callback), so one checkpoint is saved;
- a rank that dies fails the run with its last log lines, and the job ends
  every process of the launch it started.

CPU runs use torch's gloo backend (accelerate's multi-process launcher with
``use_cpu``), so the multi-process path runs on any machine. Machines other
than 0 run ``rl-studio-engine worker`` (:func:`run`), which launches their
share of the ranks against machine 0's main process.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.confine import process_alive
from engine.errors import ConfigError, EngineError
from engine.line_worker import engine_pythonpath
from engine.settings import Offer, as_dict

if TYPE_CHECKING:
    from engine.llm.train import TrainConfig

STRATEGIES = ("ddp", "fsdp", "deepspeed_zero2", "deepspeed_zero3")
WORKER_ENV = "RLSTUDIO_ACCELERATE_WORKER"
DIST_DIR = "distributed"
CONFIG_NAME = "accelerate_config.json"
JOB_NAME = "job.json"
SUMMARY_NAME = "summary.json"
RANKS_DIR = "ranks"
TORCHRUN_DIR = "torchrun"
"""torchrun's own log folder (its ranks' error reports), in the run folder
instead of a ``torchelastic_*`` folder left in the system's temp folder."""
LAST_LINES = 8
"""Lines of a dead rank's log quoted in the run's error."""
POLL_S = 0.5


def dist_dir(run_dir: Path) -> Path:
    return Path(run_dir) / DIST_DIR


def machine_failure(run_dir: Path, machine_rank: int) -> Path:
    """Where machine ``machine_rank`` (1..) writes why its ranks failed, so
    machine 0 (whose ranks would wait for theirs in a collective, with no
    deadline) ends the run with that sentence instead of hanging."""
    return dist_dir(run_dir) / f"machine-{machine_rank}.failed"


def _other_machine_failure(run_dir: Path, machines: int) -> str | None:
    """The first sentence another machine left in its failure file."""
    for m in range(1, machines):
        with contextlib.suppress(OSError):
            text = machine_failure(run_dir, m).read_text(encoding="utf-8").strip()
            return f"Machine {m} failed: {text[:500] or 'no reason given.'}"
    return None


def rank_log(run_dir: Path, rank: int) -> Path:
    return dist_dir(run_dir) / RANKS_DIR / f"rank-{rank}.log"


def rank_pid(run_dir: Path, rank: int) -> Path:
    return dist_dir(run_dir) / RANKS_DIR / f"rank-{rank}.pid"


# ------------------------------------------------------------ what is offered
def package_problem(strategy: str, use_vllm: bool = False) -> str | None:
    """Why a package the settings need is missing (one sentence), or None;
    imports nothing, so a flow node's check can ask before any run."""
    deepspeed = strategy.startswith("deepspeed")
    if deepspeed and importlib.util.find_spec("deepspeed") is None:
        return (
            f"The strategy {strategy} needs the deepspeed package, which is not "
            "installed (pip install deepspeed); use ddp or fsdp."
        )
    if use_vllm and importlib.util.find_spec("vllm") is None:
        return "vLLM generation needs the vllm package, which is not installed."
    return None


def strategy_problem(strategy: str, device: str) -> str | None:
    """Why ``strategy`` cannot run here (one sentence), or None."""
    problem = package_problem(strategy)
    if problem:
        return problem
    if strategy != "ddp" and device != "cuda":
        return (
            f"The strategy {strategy} needs CUDA GPUs and this run trains on the "
            f"{device}; use ddp, which runs on any device."
        )
    return None


def strategies_offered(device: str) -> tuple[str, ...]:
    """The strategies this machine's packages and hardware allow."""
    return tuple(s for s in STRATEGIES if strategy_problem(s, device) is None)


def vllm_problem(device: str) -> str | None:
    """Why GRPO cannot generate with vLLM (colocate) here, or None."""
    if device != "cuda":
        return f"vLLM generation needs a CUDA GPU and this run trains on the {device}."
    if importlib.util.find_spec("vllm") is None:
        return "vLLM generation needs the vllm package, which is not installed."
    return None


def machine_device() -> str:
    """``cuda`` when this machine has a CUDA GPU, else ``cpu``: what the
    offers below assume a run trains on. Asks the engine's hardware
    detection (cached; NVML or nvidia-smi), which never imports torch here."""
    from engine import hardware

    gpus = hardware.detect_gpus()
    return "cuda" if any(g.backend == "cuda" for g in gpus) else "cpu"


def machine_offers() -> dict[str, Offer]:
    """What this machine's packages and hardware allow of the scale-out
    settings, by setting: the strategies offered, and vLLM generation
    disabled with its reason where it cannot run. Forms (the Fine-tune node,
    ``TrainConfig``'s fields) show this; :func:`check` still refuses a config
    asking for more (an old flow, another machine's config)."""
    device = machine_device()
    vllm = vllm_problem(device)
    if vllm and device != "cuda":
        vllm = "vLLM generation needs a CUDA GPU, and this machine has none."
    return {
        "strategy": Offer(choices=strategies_offered(device)),
        "use_vllm": Offer(disabled=vllm or ""),
    }


def offer_strategy() -> Offer:
    return machine_offers()["strategy"]


def offer_vllm() -> Offer:
    return machine_offers()["use_vllm"]


def check(cfg: TrainConfig, gpu_count: int) -> None:
    """ConfigError (one sentence) for a scale-out setting this machine or
    this config cannot run; called by the validator, once the hardware's
    values are filled in, before anything starts."""
    procs, machines = cfg.num_processes or 1, cfg.num_machines
    device = cfg.device or "cpu"
    if procs % machines:
        raise ConfigError(
            "num_processes",
            f"num_processes ({procs}) counts the processes of all machines and "
            f"must be a multiple of num_machines ({machines}).",
        )
    per_machine = procs // machines
    if device == "cuda" and per_machine > max(gpu_count, 1):
        raise ConfigError(
            "num_processes",
            f"num_processes asks for {per_machine} processes per machine but "
            f"this machine has {gpu_count} CUDA GPU(s); one process per GPU.",
        )
    if device == "mps" and per_machine > 1:
        raise ConfigError(
            "num_processes", "An Apple GPU (mps) trains in one process only."
        )
    cores = os.cpu_count() or 1
    if device == "cpu" and per_machine > cores:
        raise ConfigError(
            "num_processes",
            f"num_processes asks for {per_machine} processes per machine but "
            f"this machine has {cores} CPU cores; use at most {cores}.",
        )
    if machines > 1 and not cfg.main_process_ip.strip():
        raise ConfigError(
            "main_process_ip",
            f"num_machines is {machines}, so main_process_ip must give the "
            "address of machine 0 that the other machines reach.",
        )
    if cfg.machine_rank >= machines:
        raise ConfigError(
            "machine_rank",
            f"machine_rank ({cfg.machine_rank}) must be below num_machines "
            f"({machines}).",
        )
    problem = strategy_problem(cfg.strategy, device)
    if problem:
        raise ConfigError("strategy", problem)
    if cfg.use_vllm:
        if cfg.method != "grpo":
            raise ConfigError(
                "use_vllm", "use_vllm speeds up GRPO generation only; turn it off."
            )
        problem = vllm_problem(device)
        if problem:
            raise ConfigError("use_vllm", problem)


def is_distributed(cfg: TrainConfig) -> bool:
    return (cfg.num_processes or 1) > 1 or cfg.num_machines > 1


# ----------------------------------------------------------- the launch files
def accelerate_config(cfg: TrainConfig, machine_rank: int = 0) -> dict[str, Any]:
    """The accelerate config file's content for ``cfg`` on ``machine_rank``."""
    cpu = cfg.device != "cuda"
    strategy = cfg.strategy
    mixed = {"bf16": "bf16", "fp16": "fp16"}.get(cfg.precision or "", "no")
    out: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        # accelerate's multi-process launcher (torchrun); with use_cpu the
        # ranks pick the gloo backend.
        "distributed_type": {
            "ddp": "MULTI_GPU",
            "fsdp": "FSDP",
            "deepspeed_zero2": "DEEPSPEED",
            "deepspeed_zero3": "DEEPSPEED",
        }[strategy],
        "num_processes": cfg.num_processes or 1,
        "num_machines": cfg.num_machines,
        "machine_rank": machine_rank,
        "main_process_ip": cfg.main_process_ip.strip() or "127.0.0.1",
        "main_process_port": cfg.main_process_port,
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": cpu,
        "mixed_precision": "no" if cpu else mixed,
        "gpu_ids": "all",
        "downcast_bf16": "no",
        "debug": False,
        "main_training_function": "main",
        "tpu_use_cluster": False,
        "tpu_use_sudo": False,
        "tpu_env": [],
    }
    if strategy == "fsdp":
        out["fsdp_config"] = {
            "fsdp_version": 2,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_reshard_after_forward": True,
        }
    elif strategy.startswith("deepspeed"):
        out["deepspeed_config"] = {
            "zero_stage": 2 if strategy == "deepspeed_zero2" else 3,
            "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
            "offload_optimizer_device": "none",
            "offload_param_device": "none",
            "zero3_init_flag": strategy == "deepspeed_zero3",
        }
    return out


def write_launch_files(
    run_dir: Path,
    run_id: str,
    kind: str,
    cfg: TrainConfig,
    machine_rank: int = 0,
    *,
    resume: bool = False,
) -> Path:
    """Write the job and accelerate config files; the accelerate config's path."""
    from engine.store.atomic import atomic_write_json

    folder = dist_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    if machine_rank == 0:
        atomic_write_json(
            folder / JOB_NAME,
            {
                "run_id": run_id,
                "kind": kind,
                "config": as_dict(cfg),
                "resume": resume,
            },
        )
    name = (
        CONFIG_NAME
        if machine_rank == 0
        else f"accelerate_config.machine-{machine_rank}.json"
    )
    path = folder / name
    atomic_write_json(path, accelerate_config(cfg, machine_rank))
    return path


def launch_command(
    config_file: Path, run_dir: Path, *, resume: bool = False
) -> list[str]:
    """``accelerate launch --config_file CONFIG --log_dir RUN_DIR/distributed/torchrun
    -m engine.llm.distributed RUN_DIR``."""
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(config_file),
        "--log_dir",
        str(dist_dir(run_dir) / TORCHRUN_DIR),
        "-m",
        "engine.llm.distributed",
        str(run_dir),
    ]
    if resume:
        cmd.append("--resume")
    return cmd


# ------------------------------------------------------------------ the launch
class Launch:
    """One ``accelerate launch`` and its ranks on this machine: starts it in
    its own session, copies rank logs into ``say`` with their rank, and ends
    every process it started."""

    def __init__(
        self, cmd: list[str], run_dir: Path, say: Any, local_ranks: range
    ) -> None:
        self.run_dir = Path(run_dir)
        self.say = say
        self.local_ranks = local_ranks
        self.launcher_lines: list[str] = []
        self._offsets: dict[int, int] = {}
        ranks = dist_dir(run_dir) / RANKS_DIR
        ranks.mkdir(parents=True, exist_ok=True)
        for r in local_ranks:
            rank_log(run_dir, r).unlink(missing_ok=True)
            rank_pid(run_dir, r).unlink(missing_ok=True)
        env = {
            **os.environ,
            WORKER_ENV: "1",
            "PYTHONUNBUFFERED": "1",
            # The engine package must import in the ranks as it does here.
            "PYTHONPATH": engine_pythonpath(),
        }
        self.proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_end_with_parent,
            text=True,
            errors="replace",
        )
        self._reader = threading.Thread(target=self._read_launcher, daemon=True)
        self._reader.start()

    def _read_launcher(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.launcher_lines.append(line)
            del self.launcher_lines[:-200]
            if line.strip():
                self.say(f"[launcher] {line}")

    def joined(self) -> bool:
        """Every rank of this machine has started (after the rendezvous of
        all machines: torchrun starts the ranks only then)."""
        return all(rank_pid(self.run_dir, r).exists() for r in self.local_ranks)

    def pump(self) -> None:
        """Copy new complete lines of the rank logs into the run log."""
        for r in self.local_ranks:
            path, offset = rank_log(self.run_dir, r), self._offsets.get(r, 0)
            lines, self._offsets[r] = _new_lines(path, offset)
            for line in lines:
                line = _TORCH_PREFIX.sub("", line)
                if line.strip():
                    self.say(f"[rank {r}] {line}")

    def rank_pids(self) -> list[int]:
        pids = []
        for r in self.local_ranks:
            with contextlib.suppress(OSError, ValueError):
                pids.append(int(rank_pid(self.run_dir, r).read_text().strip()))
        return pids

    def end(self) -> None:
        """End the launcher and every rank it started (TERM, then KILL)."""
        pids = self.rank_pids()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            alive = False
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)
                alive = True
            for pid in pids:
                if process_alive(pid, zombies=False):  # a zombie rank is gone
                    alive = True
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, sig)
            if not alive:
                break
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and (
                self.proc.poll() is None
                or any(process_alive(p, zombies=False) for p in pids)
            ):
                time.sleep(0.1)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self._reader.join(timeout=5)
        self.pump()

    def failure(self) -> str:
        """The sentence for a launch that exited non-zero: which rank died
        and its last lines."""
        code = self.proc.returncode
        rank, rank_code = _failed_rank("\n".join(self.launcher_lines))
        if rank is None:
            return (
                f"The distributed launch exited with code {code}; its last lines: "
                + _joined_tail(self.launcher_lines)
            )
        lines: list[str] = []
        with contextlib.suppress(OSError):
            lines = (
                rank_log(self.run_dir, rank).read_text(errors="replace").splitlines()
            )
        how = (
            f"was killed by signal {-rank_code}"
            if rank_code and rank_code < 0
            else (f"exited with code {rank_code}")
        )
        return f"Rank {rank} of the run {how}; its last lines: " + _joined_tail(lines)


_TORCH_PREFIX = re.compile(r"^\[rank\d+\]:\s?")
"""torch prefixes a rank's error lines with ``[rankN]:``; ours says it."""


def _end_with_parent() -> None:
    """In the launcher, before it runs: SIGTERM when the job process dies,
    however it dies (the launcher then ends its ranks); Linux only."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(
                pr_set_pdeathsig, signal.SIGTERM
            )


def _joined_tail(lines: list[str]) -> str:
    lines = [_TORCH_PREFIX.sub("", x).strip() for x in lines]
    tail = [x for x in lines if x][-LAST_LINES:]
    return " | ".join(tail) if tail else "(none)"


_FAILURE = re.compile(r"rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*(-?\d+)")


def _failed_rank(text: str) -> tuple[int | None, int | None]:
    """The rank torchrun's failure report blames: one killed by a signal
    first (the others were ended because of it), else its root cause."""
    found = [(int(r), int(c)) for r, c in _FAILURE.findall(text)]
    if not found:
        return None, None
    killed = [f for f in found if f[1] < 0 and f[1] != -signal.SIGTERM]
    return killed[0] if killed else found[-1]


def _new_lines(path: Path, offset: int) -> tuple[list[str], int]:
    """The complete lines written to ``path`` after byte ``offset``, and the
    offset after them: none while the file cannot be read or its new text
    has no end of line yet (a torn last line waits for its end)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    return data[:end].decode("utf-8", "replace").splitlines(), offset + end + 1


class MetricsFollower:
    """Rank 0 writes the run's ``metrics.jsonl`` itself; the job process
    follows it and passes the new rows on (the studio's live curves, MLflow)
    with the progress, without writing the file a second time."""

    def __init__(self, ctx: Any, max_steps: int) -> None:
        from engine import contract

        self.ctx = ctx
        self.max_steps = max_steps
        self.path = Path(ctx.run_dir) / contract.METRICS_FILE
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def pump(self) -> None:
        from engine import protocol

        lines, self.offset = _new_lines(self.path, self.offset)
        rows = []
        for line in lines:
            with contextlib.suppress(ValueError):
                row = json.loads(line)
                if isinstance(row, dict) and "step" in row:
                    rows.append(row)
        if not rows:
            return
        if self.ctx.tracker is not None:
            self.ctx.tracker.metrics(rows)
        self.ctx.emit(protocol.RunMetrics(run_id=self.ctx.run_id, rows=rows))
        step = max(int(r["step"]) for r in rows)
        if self.max_steps > 0:
            self.ctx.progress(step, self.max_steps)


def run_distributed(ctx: Any, cfg: TrainConfig) -> dict[str, Any]:
    """Job side on machine 0: launch the ranks, mirror their logs, pass Stop
    on, and return rank 0's summary."""
    from engine.jobs.context import STOP_REQUEST_FILE

    config_file = write_launch_files(
        ctx.run_dir, ctx.run_id, ctx.kind, cfg, resume=ctx.resume
    )
    summary_file = dist_dir(ctx.run_dir) / SUMMARY_NAME
    summary_file.unlink(missing_ok=True)
    stop_file = ctx.run_dir / STOP_REQUEST_FILE
    stop_file.unlink(missing_ok=True)
    for m in range(1, cfg.num_machines):
        machine_failure(ctx.run_dir, m).unlink(missing_ok=True)
    procs = cfg.num_processes or 1
    per_machine = procs // cfg.num_machines
    cmd = launch_command(config_file, ctx.run_dir, resume=ctx.resume)
    ctx.log(
        f"scale-out: {procs} processes on {cfg.num_machines} "
        f"machine(s), strategy {cfg.strategy}; effective batch "
        f"{effective_batch(cfg)} sequences per optimizer step"
    )
    ctx.log("launching: " + " ".join(cmd))
    launch = Launch(cmd, ctx.run_dir, ctx.log, range(per_machine))
    follow = MetricsFollower(ctx, cfg.max_steps)
    t0 = time.monotonic()
    try:
        while launch.proc.poll() is None:
            if ctx.wait_for_stop(POLL_S) and not stop_file.exists():
                # Written again if a rank starting late removed it.
                stop_file.write_text(ctx.stop_reason or "user", encoding="utf-8")
            launch.pump()
            follow.pump()
            failed = _other_machine_failure(ctx.run_dir, cfg.num_machines)
            if failed is not None:
                raise EngineError(failed)
            waited = time.monotonic() - t0
            if waited > cfg.join_timeout_s and not launch.joined():
                others = cfg.num_machines - 1
                raise EngineError(
                    f"The ranks did not start within join_timeout_s "
                    f"({cfg.join_timeout_s:g} s)"
                    + (
                        f": {others} other machine(s) did not join; start "
                        f"`rl-studio-engine worker --run-dir {ctx.run_dir} "
                        "--machine-rank N --main-process-ip "
                        f"{cfg.main_process_ip}` on each."
                        if others
                        else "; the machine may be overloaded."
                    )
                )
        launch.pump()
        follow.pump()
        if launch.proc.returncode != 0:
            raise EngineError(launch.failure())
    finally:
        launch.end()
    if not summary_file.is_file():
        raise EngineError(
            "The distributed run ended without rank 0's summary; see the run log."
        )
    summary: dict[str, Any] = json.loads(summary_file.read_text(encoding="utf-8"))
    return summary


def effective_batch(cfg: TrainConfig) -> int:
    """Sequences per optimizer step over all processes."""
    return (
        (cfg.batch_size or 1)
        * cfg.gradient_accumulation_steps
        * (cfg.num_processes or 1)
    )


# ------------------------------------------------------------------- a rank
def worker_main(argv: list[str]) -> int:
    """One rank under ``accelerate launch``: output to its rank log, a
    context whose stop flag follows ``RUN_DIR/stop.request``, the ordinary
    training; rank 0 writes the summary."""
    from engine.jobs.context import STOP_REQUEST_FILE, JobContext
    from engine.store.atomic import atomic_write_json

    parser = argparse.ArgumentParser(prog="engine.llm.distributed")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    run_dir: Path = args.run_dir
    rank = int(os.environ.get("RANK", "0"))
    log = rank_log(run_dir, rank)
    log.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    rank_pid(run_dir, rank).write_text(str(os.getpid()), encoding="utf-8")
    record = json.loads((dist_dir(run_dir) / JOB_NAME).read_text(encoding="utf-8"))
    ctx = JobContext(
        record["run_id"], run_dir, record["kind"], record["config"], resume=args.resume
    )
    if rank != 0:
        ctx.metrics = lambda *a, **k: None  # type: ignore[method-assign]

    def watch() -> None:
        while not ctx.wait_for_stop(1.0):
            if (run_dir / STOP_REQUEST_FILE).exists():
                ctx.request_stop()

    threading.Thread(target=watch, daemon=True).start()
    from engine.llm.train import TrainConfig, train_model
    from engine.settings import load

    summary = train_model(ctx, load(TrainConfig, ctx.config))
    ctx.close()
    if rank == 0:
        atomic_write_json(dist_dir(run_dir) / SUMMARY_NAME, summary)
    return 0


def weights_digest(model: Any) -> str:
    """SHA-256 of the trainable weights' bytes, in parameter order (the same
    on every rank of a data-parallel run)."""
    import hashlib

    digest = hashlib.sha256()
    for name, param in model.named_parameters():
        if param.requires_grad:
            digest.update(name.encode())
            digest.update(param.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def world_size() -> int:
    """Processes of the torch.distributed group (1 outside one)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_world_size())
    return 1


def agreed_stop(flag: bool) -> bool:
    """True on every rank when any rank wants to stop (ranks must leave the
    training loop at the same step, or the others wait in an all-reduce)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return flag
    import torch

    t = torch.tensor([1.0 if flag else 0.0])
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


# ------------------------------------------------- `rl-studio-engine worker`
def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run-dir",
        type=Path,
        required=True,
        help="the run folder of the run that machine 0 started (shared storage)",
    )
    parser.add_argument(
        "--machine-rank", type=int, required=True, help="this machine's rank (1..)"
    )
    parser.add_argument(
        "--main-process-ip",
        required=True,
        help="the address of machine 0, as this machine reaches it",
    )
    parser.add_argument(
        "--main-process-port",
        type=int,
        default=None,
        help="machine 0's port (default: the run's main_process_port)",
    )


def needed_files(run_dir: Path, cfg: TrainConfig | None) -> list[str]:
    """What this machine lacks of the run (the run folder not shared)."""
    need = []
    for name in (JOB_NAME, CONFIG_NAME):
        path = dist_dir(run_dir) / name
        if not path.is_file():
            need.append(str(path))
    if cfg is not None:
        for used in (cfg.model, cfg.dataset):
            if not Path(used).exists():
                need.append(used)
    return need


def wait_for_main(ip: str, port: int, timeout: float) -> None:
    """Return once machine 0's main process accepts connections, or raise
    EngineError after ``timeout`` seconds (nothing is started before)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((ip, port), timeout=max(0.1, min(2.0, left))):
                return
        except OSError:
            if time.monotonic() >= deadline:
                raise EngineError(
                    f"The main process at {ip}:{port} could not be reached within "
                    f"join_timeout_s ({timeout:g} s); start the run on machine 0 "
                    "first and check the address, the port and the firewall."
                ) from None
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def run(args: argparse.Namespace) -> int:
    """``rl-studio-engine worker``: this machine's ranks of a run that
    machine 0 started."""
    run_dir = Path(args.run_dir).expanduser().resolve()
    job_file = dist_dir(run_dir) / JOB_NAME
    from engine.llm.train import TrainConfig
    from engine.settings import load

    record = None
    cfg = None
    if job_file.is_file():
        record = json.loads(job_file.read_text(encoding="utf-8"))
        cfg = load(TrainConfig, record["config"])
    missing = needed_files(run_dir, cfg)
    if missing:
        raise EngineError(
            f"This machine does not see the run folder {run_dir} as machine 0 "
            "wrote it; put it on storage both machines share, or copy these "
            "here first: " + ", ".join(missing) + "."
        )
    assert record is not None and cfg is not None
    machines = cfg.num_machines
    if not 1 <= args.machine_rank < machines:
        raise EngineError(
            f"--machine-rank must be between 1 and {machines - 1} for this run "
            f"of {machines} machines (machine 0 is the one that started it)."
        )
    cfg = replace(
        cfg,
        main_process_ip=args.main_process_ip,
        main_process_port=args.main_process_port or cfg.main_process_port,
    )
    wait_for_main(cfg.main_process_ip, cfg.main_process_port, cfg.join_timeout_s)
    config_file = write_launch_files(
        run_dir, record["run_id"], record["kind"], cfg, args.machine_rank
    )
    per_machine = (cfg.num_processes or 1) // machines
    first = args.machine_rank * per_machine
    cmd = launch_command(config_file, run_dir, resume=bool(record.get("resume")))

    def say(line: str) -> None:
        print(line, flush=True)

    launch = Launch(cmd, run_dir, say, range(first, first + per_machine))
    t0 = time.monotonic()
    failure = machine_failure(run_dir, args.machine_rank)
    failure.unlink(missing_ok=True)
    try:
        while launch.proc.poll() is None:
            time.sleep(POLL_S)
            launch.pump()
            if time.monotonic() - t0 > cfg.join_timeout_s and not launch.joined():
                raise EngineError(
                    f"This machine's ranks did not start within join_timeout_s "
                    f"({cfg.join_timeout_s:g} s): machine 0's run at "
                    f"{cfg.main_process_ip}:{cfg.main_process_port} did not "
                    "take them; check that it still runs."
                )
        launch.pump()
        if launch.proc.returncode != 0:
            raise EngineError(launch.failure())
    except (EngineError, KeyboardInterrupt) as exc:
        # Machine 0 reads it and ends the run rather than wait for ranks
        # that will not come back.
        with contextlib.suppress(OSError):
            failure.write_text(str(exc) or "interrupted", encoding="utf-8")
        raise
    finally:
        launch.end()
    return 0


if __name__ == "__main__":
    # One rank under ``accelerate launch`` (launch_command).
    raise SystemExit(worker_main(sys.argv[1:]))
