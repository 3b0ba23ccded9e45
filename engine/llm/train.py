"""Fine-tuning a language model with TRL and a PEFT LoRA adapter.

Methods: ``grpo`` (online RL with the reward functions of
:mod:`engine.llm.rewards`), ``kto``, ``dpo`` and ``sft`` (offline, from a
dataset folder of :mod:`engine.llm.datasets`). Defaults for batch size, LoRA
rank, number of generations, precision and gradient checkpointing come from
:func:`engine.hardware.detect`; every field of :class:`TrainConfig` can be
overridden.

Metrics stream to ``ctx.metrics`` and to TensorBoard event files in the
run's ``tensorboard/`` (as SB3 runs write them) through
:class:`StudioCallback` (a ``transformers.TrainerCallback``) under
slash-namespaced keys:
``train/loss``, ``train/learning_rate``, ``train/grad_norm``, ``train/kl``,
``train/entropy``, ``train/tokens_per_s``, ``reward/mean``, ``reward/std``,
``reward/<fn>_mean``, ``reward/<fn>_std``, ``completion/mean_length``, and the
method's own (``dpo/...``, ``kto/...``). Checkpoints go to the run's
``checkpoints/`` folder (``checkpoint-<step>``); a resumed run continues
from the latest one. Stop is cooperative: the callback sets
``control.should_training_stop`` (and ``should_save``) once ``ctx.should_stop``.

With ``num_processes`` or ``num_machines`` above 1 the job launches its
ranks through ``accelerate launch`` (:mod:`engine.llm.distributed`); rank 0
writes metrics straight to the run's ``metrics.jsonl``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.errors import ConfigError, EngineError
from engine.jobs.context import JobContext
from engine.jobs.registry import job_kind
from engine.llm.distributed import STRATEGIES, offer_strategy, offer_vllm
from engine.llm.health import EarlyStop, HealthMonitor, health_callback
from engine.settings import as_dict, build, drawn_seed, setting
from engine.store.paths import checked_name
from engine.store.project import new_model_folder

METHODS = ("grpo", "kto", "dpo", "sft")
PRECISIONS = ("bf16", "fp16", "fp32")
SEED_MAX = 2**31 - 1
GRPO_DEFAULT_BETA = 0.04
"""KL coefficient of GRPO when the config leaves ``beta`` empty (the
DeepSeekMath value TRL used before 0.19). With LoRA the reference model is
the base with the adapter switched off, so the KL term costs one extra
forward pass and no memory."""


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one ``llm.train`` run. ``None`` means "from the hardware"."""

    method: str = setting("grpo", choices=METHODS)
    """``grpo``, ``kto``, ``dpo`` or ``sft``."""
    model: str = setting("", picker="base_model")
    """Base model: a local HF folder or a hub id in the local cache."""
    dataset: str = setting("")
    """Dataset folder (``train.jsonl`` or ``train.parquet`` inside, as
    llm.dataset writes) or one such file, with this method's columns."""
    name: str | None = setting(None, check=checked_name)
    """Name of the adapter, its folder in ``<project>/models/<id>/`` (run id
    if None)."""
    max_steps: int = setting(
        100, min=-1, max=10**7, unit="optimizer steps", label="Steps"
    )
    """Optimizer steps to train (a step is one batch times accumulation)."""
    num_epochs: float = setting(1.0, min=0, exclusive_min=True, unit="epochs")
    """Passes over the dataset; used only when ``max_steps`` is -1."""
    learning_rate: float = setting(
        5e-5, min=0, max=1, exclusive_min=True, exclusive_max=True
    )
    """Peak learning rate (linear decay to zero)."""
    warmup_ratio: float = setting(0.0, min=0, max=1)
    """Fraction of the steps spent warming the learning rate up."""
    batch_size: int | None = setting(None, min=1, max=4096, unit="sequences")
    """Sequences per device per step (GRPO: completions per step); None:
    from the hardware, fitted to the method and the dataset."""
    gradient_accumulation_steps: int = setting(
        1, min=1, max=1024, label="Gradient accumulation"
    )
    """Batches accumulated per optimizer step."""
    lora_rank: int | None = setting(None, min=1, max=1024, label="LoRA rank")
    """LoRA rank r (adapter width); None: from the hardware."""
    lora_alpha: float | None = setting(
        None, min=0, exclusive_min=True, label="LoRA alpha"
    )
    """LoRA scaling numerator (2 x rank if None)."""
    lora_dropout: float = setting(
        0.0, min=0, max=1, exclusive_max=True, label="LoRA dropout"
    )
    """Dropout on the LoRA input (probability)."""
    lora_target_modules: str | list[str] = setting(
        "all-linear", label="LoRA target modules"
    )
    """Modules that get adapters (``all-linear`` or names)."""
    max_length: int = setting(512, min=1, max=131_072, unit="tokens")
    """Tokens per training sequence (prompt + completion) for SFT/KTO/DPO."""
    max_prompt_length: int | None = setting(None, min=1, unit="tokens")
    """Prompt tokens kept (left-truncated) for GRPO; None keeps all."""
    max_completion_length: int = setting(16, min=1, max=32_768, unit="tokens")
    """Tokens generated per completion in GRPO."""
    num_generations: int | None = setting(None, min=2, max=256)
    """Completions sampled per prompt in GRPO (at least 2); None: from the
    hardware."""
    temperature: float = setting(1.0, min=0, max=5, exclusive_min=True)
    """Sampling temperature of GRPO generations."""
    beta: float | None = setting(None, min=0)
    """KL (GRPO) / preference (DPO, KTO) coefficient. None: TRL's default for
    DPO and KTO, :data:`GRPO_DEFAULT_BETA` for GRPO (TRL's 0 would neither
    limit nor report the drift from the base model; 0 turns it off)."""
    rewards: list[dict[str, Any]] | None = setting(None)
    """GRPO reward functions ``[{"name", "weight", ...params}]``."""
    desirable_weight: float | None = setting(None, min=0, exclusive_min=True)
    """KTO weight of desirable rows (balanced from the dataset if None)."""
    undesirable_weight: float | None = setting(None, min=0, exclusive_min=True)
    """KTO weight of undesirable rows (balanced from the dataset if None)."""
    precision: str | None = setting(None, choices=PRECISIONS)
    """``bf16``, ``fp16`` or ``fp32``."""
    gradient_checkpointing: bool | None = setting(None)
    """Recompute activations in the backward pass to save memory."""
    logging_steps: int = setting(1, min=1, unit="optimizer steps")
    """Steps between metric reports."""
    save_steps: int = setting(50, min=0, unit="optimizer steps")
    """Steps between checkpoints (0: only at the end and on stop)."""
    save_total_limit: int = setting(2, min=1)
    """Checkpoints kept in the run folder."""
    eval_every_steps: int = setting(
        50, min=0, unit="optimizer steps", label="Evaluate every"
    )
    """Steps between scores of the validation split (``eval/loss`` for SFT,
    DPO and KTO; ``eval/reward``, the declared rewards' mean on held-out
    prompts, for GRPO), and at the last step; 0: never."""
    eval_batches: int = setting(2, min=1, max=100_000, unit="batches")
    """Validation batches (of batch_size rows; GRPO: of its answers) scored
    each time: the split's first rows, the same each time so that the scores
    compare like with like, and few so that validating costs about 2 % of
    the training time at the default schedule."""
    early_stop_patience: int = setting(0, min=0, unit="evaluations")
    """Evaluations without a better validation score before the run stops
    early (0: never)."""
    health_checks: bool = setting(True)
    """Watch the run: a NaN or exploding loss stops it; rewards that never
    vary, a zero gradient or learning rate and an adapter that learned
    nothing are warnings in its log and summary."""
    seed: int | None = setting(None, min=0, max=SEED_MAX)
    """Random seed (chosen and saved if None)."""
    device: str | None = setting(None)
    """``cuda``, ``mps`` or ``cpu`` (the detected best if None)."""
    num_processes: int | None = setting(
        None, min=1, max=4096, unit="processes", label="Processes"
    )
    """Training processes over all machines, one per GPU (CPU processes use
    the gloo backend); each takes batch_size sequences per step. None: the
    CUDA GPU count, 1 on the CPU."""
    strategy: str = setting("ddp", choices=STRATEGIES, offer=offer_strategy)
    """How processes share the work: ``ddp`` (a model copy each, gradients
    averaged; any device), ``fsdp`` (sharded; CUDA), ``deepspeed_zero2`` /
    ``deepspeed_zero3`` (CUDA and the deepspeed package)."""
    num_machines: int = setting(1, min=1, max=1024, unit="machines")
    """Machines taking part; the others run ``rl-studio-engine worker``."""
    machine_rank: int = setting(0, min=0, max=1023)
    """This machine's rank (0: the one that starts the run)."""
    main_process_ip: str = setting("", label="Main process IP")
    """Address of machine 0 that the other machines reach (needed with more
    than one machine)."""
    main_process_port: int = setting(29500, min=1, max=65535)
    """TCP port of machine 0's main process."""
    join_timeout_s: float = setting(
        300.0, min=1, max=86_400, unit="s", label="Join timeout"
    )
    """Seconds to wait for all processes and machines to join before the
    run fails (and for a worker machine to reach machine 0)."""
    use_vllm: bool = setting(
        False, label="vLLM generation (colocate)", offer=offer_vllm
    )
    """GRPO generates with TRL's vLLM integration in colocate mode (needs a
    CUDA GPU and the vllm package)."""
    dataset_rows: int = setting(0, min=0, form=False)
    """Rows of the dataset's training split (counted by validation)."""
    notes: list[str] = setting(factory=list, form=False)
    """What validation fitted to the hardware, one sentence each (for the
    run log)."""


HARDWARE_SETTINGS = (
    "batch_size",
    "lora_rank",
    "num_generations",
    "precision",
    "gradient_checkpointing",
    "device",
    "num_processes",
)
"""The settings that, left None, take the value :func:`hardware_defaults`
suggests."""


def hardware_defaults() -> dict[str, Any]:
    """Defaults for the fields left None, from the detected hardware."""
    from engine.hardware import detect

    info = detect()
    rec = info.recommendations
    assert rec is not None
    gpus = sum(1 for g in info.gpus if g.backend == "cuda")
    return {
        "batch_size": rec.batch_size,
        "lora_rank": rec.lora_rank,
        "num_generations": rec.grpo_num_generations,
        "precision": rec.dtype,
        "gradient_checkpointing": rec.gradient_checkpointing,
        "device": rec.device,
        "gpu_count": gpus,
        "num_processes": max(gpus, 1) if rec.device == "cuda" else 1,
    }


KTO_MIN_BATCH = 2
"""TRL's KTO estimates its KL reference from the other rows of a batch, so a
device batch of one is refused ("Actual (not effective) batch size must be
> 1")."""


def fit_to_hardware(
    cfg: TrainConfig, chosen: set[str], n_rows: int
) -> tuple[TrainConfig, list[str]]:
    """``cfg`` with the batch size and GRPO generations the hardware
    suggested (named in ``chosen``; never what the user set) fitted to what
    the method accepts and to the dataset; one sentence per change, for the
    run log."""
    batch, gens = cfg.batch_size, cfg.num_generations
    assert batch is not None and gens is not None, "filled from the hardware"
    fitted = {"batch_size": batch, "num_generations": gens}
    notes: list[str] = []

    def change(key: str, value: int, why: str) -> None:
        if value != fitted[key]:
            notes.append(f"{key} {fitted[key]} -> {value}: {why}.")
            fitted[key] = value

    method = cfg.method
    # GRPO groups answers over the batches of every process.
    accum = cfg.gradient_accumulation_steps * (cfg.num_processes or 1)
    if "batch_size" in chosen:
        if method != "grpo" and n_rows > 0 and batch > n_rows:
            change("batch_size", n_rows, f"the dataset has {n_rows} rows")
        if method == "kto" and fitted["batch_size"] < KTO_MIN_BATCH:
            change(
                "batch_size",
                KTO_MIN_BATCH,
                "KTO compares each row with the others of its batch",
            )
    if method == "grpo" and "batch_size" in chosen:
        # The hardware suggests a batch without knowing the answers per
        # prompt (a CPU: 1 sequence, 4 answers); raise it to the smallest
        # batch GRPO accepts rather than refuse the user's run.
        while batch * accum % gens:
            batch += 1
        change("batch_size", batch, f"GRPO groups {gens} answers per prompt")
    elif method == "grpo" and "num_generations" in chosen and batch * accum % gens:
        # The user's batch stays; the answers per prompt shrink to divide it.
        total = batch * accum
        fits = [g for g in range(2, gens + 1) if total % g == 0]
        if fits:
            change(
                "num_generations",
                max(fits),
                "GRPO groups answers within batch_size x accumulation x "
                f"processes = {total}",
            )
    fitted_cfg = replace(
        cfg,
        batch_size=fitted["batch_size"],
        num_generations=fitted["num_generations"],
    )
    return fitted_cfg, notes


def validate(
    config: Mapping[str, Any], hardware: dict[str, Any] | None = None
) -> TrainConfig:
    """The normalized ``llm.train`` config (defaults filled) or ConfigError."""
    from engine.llm.base import check_chat_template, check_trainable, inspect_model
    from engine.llm.datasets import check_columns, dataset_files

    cfg = build(TrainConfig, config, "llm.train")
    if not cfg.model:
        raise ConfigError("model", "model must name a base model folder or hub id.")
    info = inspect_model(cfg.model)
    check_trainable(info)
    check_chat_template(info)
    if not cfg.dataset:
        raise ConfigError("dataset", "dataset must name a dataset folder.")
    ds = Path(cfg.dataset).expanduser()
    train_file, _ = dataset_files(ds)
    if not train_file.is_file():
        raise ConfigError(
            "dataset", f"Dataset {ds} does not exist; build it with llm.dataset first."
        )
    n_rows = check_columns(train_file, cfg.method)
    hw = hardware if hardware is not None else hardware_defaults()
    chosen = {key for key in HARDWARE_SETTINGS if getattr(cfg, key) is None}
    filled = {key: hw.get(key, 1) for key in chosen}
    # Hardware values are checked like the user's.
    cfg = build(
        TrainConfig,
        {**as_dict(cfg), **filled, "model": info.path, "dataset": str(ds.resolve())},
        "llm.train",
    )
    if cfg.max_steps == 0:
        raise ConfigError(
            "max_steps", "max_steps must be -1 (epochs) or at least 1, not 0."
        )
    if cfg.precision == "fp16" and cfg.device == "cpu":
        raise ConfigError(
            "precision", "fp16 training needs a GPU; use bf16 or fp32 on the CPU."
        )
    from engine.llm.distributed import check as check_scale_out

    check_scale_out(cfg, int(hw.get("gpu_count", 0)))
    if cfg.lora_alpha is None:
        assert cfg.lora_rank is not None  # filled from the hardware
        cfg = replace(cfg, lora_alpha=2.0 * cfg.lora_rank)
    cfg, notes = fit_to_hardware(cfg, chosen, n_rows)
    batch, gens, procs = cfg.batch_size, cfg.num_generations, cfg.num_processes
    assert batch is not None and gens is not None and procs is not None
    if cfg.method == "kto" and batch < KTO_MIN_BATCH:
        raise ConfigError(
            "batch_size",
            f"KTO needs a batch_size of at least {KTO_MIN_BATCH}: it compares "
            "each row with the others of its batch.",
        )
    if cfg.method == "grpo":
        if cfg.beta is None:
            cfg = replace(cfg, beta=GRPO_DEFAULT_BETA)
        accum = cfg.gradient_accumulation_steps
        if batch * accum * procs % gens:
            raise ConfigError(
                "num_generations",
                f"num_generations ({gens}) must divide batch_size x "
                f"gradient_accumulation_steps x num_processes ({batch} x "
                f"{accum} x {procs}), as TRL's GRPO requires; change one of them.",
            )
        from engine.llm.rewards import build_rewards

        build_rewards(cfg.rewards)
        if cfg.rewards is None:
            from engine.llm.rewards import DEFAULT_REWARDS

            cfg = replace(cfg, rewards=[dict(r) for r in DEFAULT_REWARDS])
    seed = drawn_seed(cfg.seed)
    return replace(cfg, dataset_rows=n_rows, notes=notes, seed=seed)


# ------------------------------------------------------------------ callback
_RENAME = {
    "loss": "train/loss",
    "learning_rate": "train/learning_rate",
    "grad_norm": "train/grad_norm",
    "kl": "train/kl",
    "entropy": "train/entropy",
    "reward": "reward/mean",
    "reward_std": "reward/std",
    "frac_reward_zero_std": "reward/frac_zero_std",
    "completions/mean_length": "completion/mean_length",
    "completions/max_length": "completion/max_length",
    "completions/clipped_ratio": "completion/clipped_ratio",
    "mean_token_accuracy": "train/mean_token_accuracy",
    "epoch": "train/epoch",
    "num_tokens": "train/num_tokens",
}
_SKIP = {
    "total_flos",
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "train_loss",
    "step_time",
    # An evaluation's own timing and token count, not a score.
    "eval_runtime",
    "eval_samples_per_second",
    "eval_steps_per_second",
    "eval_num_tokens",
}


def studio_metric_keys(logs: dict[str, Any], method: str) -> dict[str, float]:
    """TRL/transformers log keys -> the studio's slash-namespaced keys."""
    out: dict[str, float] = {}
    for key, value in logs.items():
        if (
            key in _SKIP
            or not isinstance(value, int | float)
            or isinstance(value, bool)
        ):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            continue
        if key in _RENAME:
            out[_RENAME[key]] = float(value)
        elif key.startswith("completions/"):
            out["completion/" + key.removeprefix("completions/").replace("/", "_")] = (
                float(value)
            )
        elif key.startswith("rewards/") and method == "grpo":
            # rewards/<fn>/mean -> reward/<fn>_mean
            parts = key.split("/")
            if len(parts) == 3:
                out[f"reward/{parts[1]}_{parts[2]}"] = float(value)
        elif key.startswith("eval_completions/"):
            # The held-out answers' lengths repeat the training ones'.
            continue
        elif key.startswith("eval_"):
            out["eval/" + key.removeprefix("eval_").replace("/", "_")] = float(value)
        else:
            prefix = method if "/" in key else "train"
            out[f"{prefix}/{key.replace('/', '_')}"] = float(value)
    return out


def make_callback(
    ctx: Any, method: str, total_steps: int, tensorboard: Path | None = None
) -> Any:
    """A TrainerCallback streaming metrics/progress to ``ctx`` (and the same
    rows to TensorBoard event files in ``tensorboard``, with the writer SB3
    runs use) and stopping training when ``ctx.should_stop`` becomes True.
    Its ``close()`` ends the event file."""
    from transformers import TrainerCallback

    from engine.rl.tensorboard import EventFile

    class StudioCallback(TrainerCallback):
        def __init__(self) -> None:
            self.last_tokens: float | None = None
            self.last_time = time.monotonic()
            self.stopped = False
            self.events = None if tensorboard is None else EventFile(tensorboard)

        def close(self) -> None:
            if self.events is not None:
                self.events.close()

        def on_train_begin(
            self, args: Any, state: Any, control: Any, **kw: Any
        ) -> None:
            # A fresh run counts tokens from 0, so its first log already gives
            # a rate; a resumed one has no count at its start and waits for
            # the second log.
            self.last_time = time.monotonic()
            self.last_tokens = 0.0 if state.global_step == 0 else None

        def on_log(
            self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any
        ) -> None:
            if not logs:
                return
            row = studio_metric_keys(dict(logs), method)
            now = time.monotonic()
            tokens = logs.get("num_tokens")
            if isinstance(tokens, int | float):
                if self.last_tokens is not None and now > self.last_time:
                    row["train/tokens_per_s"] = (tokens - self.last_tokens) / (
                        now - self.last_time
                    )
                self.last_tokens = float(tokens)
                self.last_time = now
            if row:
                ctx.metrics(state.global_step, row)
                if self.events is not None:
                    self.events.scalars(state.global_step, row)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            ctx.progress(state.global_step, total_steps or state.max_steps)
            from engine.llm.distributed import agreed_stop

            # Every rank leaves at the same step (and saves one checkpoint).
            if agreed_stop(ctx.should_stop):
                if not ctx.should_stop:
                    ctx.request_stop()
                self.stopped = True
                control.should_training_stop = True
                control.should_save = True
            return control

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            # Ranks decide together at step ends; alone, stop at once.
            from engine.llm.distributed import world_size

            if ctx.should_stop and world_size() < 2:
                self.stopped = True
                control.should_training_stop = True
            return control

    return StudioCallback()


# ------------------------------------------------------------------ trainer
def latest_checkpoint(folder: Path) -> Path | None:
    cks = [
        p
        for p in folder.glob("checkpoint-*")
        if p.is_dir() and p.name.split("-")[-1].isdigit()
    ]
    return max(cks, key=lambda p: int(p.name.split("-")[-1])) if cks else None


def kto_weights(train: Any) -> tuple[float, float]:
    """Desirable/undesirable weights that balance the classes (TRL's advice:
    ``desirable_weight * n_desirable`` close to ``undesirable_weight *
    n_undesirable``)."""
    labels = [bool(x) for x in train["label"]]
    pos = sum(labels)
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return 1.0, 1.0
    if pos >= neg:
        return 1.0, pos / neg
    return neg / pos, 1.0


def _checkpointing_arg() -> str:
    """The TrainingArguments field for activation recomputation: transformers
    5 renamed ``gradient_checkpointing`` (now a deprecated alias that warns)."""
    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    return (
        "activation_checkpointing"
        if "activation_checkpointing" in names
        else "gradient_checkpointing"
    )


def build_trainer(
    cfg: TrainConfig, output_dir: Path, callbacks: list[Any] | None = None
) -> Any:
    """The TRL trainer for ``cfg`` (a validated config), not yet trained."""
    from engine.llm.datasets import load_split

    method = cfg.method
    train, val = load_split(cfg.dataset, method)
    val = _eval_rows(cfg, val)
    tokenizer, model = _load_model(cfg)
    common = _common_args(cfg, output_dir, validate=val is not None)
    beta: dict[str, Any] = {} if cfg.beta is None else {"beta": cfg.beta}
    kwargs: dict[str, Any] = {
        "model": model,
        "train_dataset": train,
        "eval_dataset": val,
        "processing_class": tokenizer,
        "peft_config": _lora_config(cfg),
        "callbacks": callbacks or [],
    }
    if method == "grpo":
        return _grpo_trainer(cfg, common, beta, kwargs)
    if method == "sft":
        from trl import SFTConfig, SFTTrainer

        sft_args = SFTConfig(**common, max_length=cfg.max_length)
        return SFTTrainer(args=sft_args, **kwargs)
    if method == "dpo":
        from trl import DPOConfig, DPOTrainer

        dpo_args = DPOConfig(**common, **beta, max_length=cfg.max_length)
        return DPOTrainer(args=dpo_args, **kwargs)
    from trl import KTOConfig, KTOTrainer

    dw, uw = kto_weights(train)
    kto_args = KTOConfig(
        **common,
        **beta,
        max_length=cfg.max_length,
        desirable_weight=cfg.desirable_weight or dw,
        undesirable_weight=cfg.undesirable_weight or uw,
    )
    return KTOTrainer(args=kto_args, **kwargs)


def _load_model(cfg: TrainConfig) -> tuple[Any, Any]:
    """The tokenizer (with a pad token) and the model in the precision it
    trains in; a model that cannot load is one sentence saying why."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    use_cpu = cfg.device == "cpu"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[
        cfg.precision or "fp32"
    ]
    if use_cpu and dtype == torch.bfloat16:
        # CPU autocast in bf16 is slow without AMX; train in fp32 weights and
        # let the Trainer's bf16 flag decide autocast.
        dtype = torch.float32
    try:
        tokenizer = AutoTokenizer.from_pretrained(cfg.model)
        model = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=dtype)
    except Exception as exc:
        if _is_oom(exc):
            raise EngineError(
                f"Loading the model {cfg.model} ran out of memory; pick a "
                "smaller model, choose bf16 precision, or close other programs."
            ) from exc
        if not isinstance(exc, OSError | ValueError | KeyError | ImportError):
            raise
        # The validator reads JSON only; an architecture this transformers
        # does not know, or damaged weights, surface here.
        raise EngineError(
            f"The model at {cfg.model} cannot be loaded as a causal language "
            f"model ({type(exc).__name__}: {_first_line(exc)}); pick a "
            "*ForCausalLM model that transformers supports, or update "
            "transformers."
        ) from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, model


def _lora_config(cfg: TrainConfig) -> Any:
    from peft import LoraConfig

    assert cfg.lora_rank is not None and cfg.lora_alpha is not None  # validated
    return LoraConfig(
        r=cfg.lora_rank,
        # peft types it int; it only scales by alpha / r, so a float works.
        lora_alpha=cfg.lora_alpha,  # type: ignore[arg-type]
        lora_dropout=cfg.lora_dropout,
        target_modules=cfg.lora_target_modules,
        task_type="CAUSAL_LM",
    )


EVAL_METRICS = {"grpo": ("eval_reward", True)}
"""The validation score of each method as the trainer reports it, and
whether higher is better; the others score ``eval_loss``, lower better."""


def eval_metric(method: str) -> tuple[str, bool]:
    """(the trainer's key of ``method``'s validation score, higher is better)."""
    return EVAL_METRICS.get(method, ("eval_loss", False))


def _eval_batch_size(cfg: TrainConfig) -> int:
    """Rows per device per validation batch: the training batch, for GRPO
    rounded up to whole groups of answers (TRL scores a prompt's answers
    together)."""
    assert cfg.batch_size is not None and cfg.num_generations is not None
    if cfg.method != "grpo":
        return cfg.batch_size
    gens = cfg.num_generations
    return -(-cfg.batch_size // gens) * gens


def _eval_rows(cfg: TrainConfig, val: Any) -> Any:
    """The validation rows scored at each evaluation (None: no validation,
    when it is off or the split is empty)."""
    if not cfg.eval_every_steps or val is None or len(val) == 0:
        return None
    rows = cfg.eval_batches * _eval_batch_size(cfg) * (cfg.num_processes or 1)
    if cfg.method == "grpo":
        # A GRPO row is a prompt, answered num_generations times.
        assert cfg.num_generations is not None
        rows = max(1, rows // cfg.num_generations)
    return val.select(range(min(rows, len(val))))


def _common_args(
    cfg: TrainConfig, output_dir: Path, validate: bool = False
) -> dict[str, Any]:
    """The training arguments every method's TRL config takes (with
    ``validate``, scoring the validation split every ``eval_every_steps``)."""
    use_cpu = cfg.device == "cpu"
    evaluation: dict[str, Any] = {"eval_strategy": "no"}
    if validate:
        evaluation = {
            "eval_strategy": "steps",
            "eval_steps": cfg.eval_every_steps,
            "per_device_eval_batch_size": _eval_batch_size(cfg),
        }
    return {
        **evaluation,
        "output_dir": str(output_dir),
        "use_cpu": use_cpu,
        "report_to": [],
        "max_steps": cfg.max_steps,
        "num_train_epochs": cfg.num_epochs,
        "learning_rate": cfg.learning_rate,
        "warmup_steps": cfg.warmup_ratio,
        "per_device_train_batch_size": cfg.batch_size,
        "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
        "logging_steps": cfg.logging_steps,
        "save_strategy": "steps" if cfg.save_steps else "no",
        "save_steps": max(1, cfg.save_steps),
        "save_total_limit": cfg.save_total_limit,
        "seed": cfg.seed,
        "bf16": cfg.precision == "bf16" and not use_cpu,
        "fp16": cfg.precision == "fp16",
        _checkpointing_arg(): bool(cfg.gradient_checkpointing),
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }


def _grpo_trainer(
    cfg: TrainConfig,
    common: dict[str, Any],
    beta: dict[str, Any],
    kwargs: dict[str, Any],
) -> Any:
    """GRPO's trainer: its reward functions and weights, generation
    settings, and vLLM when asked for."""
    from trl import GRPOConfig, GRPOTrainer

    from engine.llm.rewards import build_rewards

    rewards = build_rewards(cfg.rewards)
    # vLLM in this process's GPU (colocate): no separate server to run.
    vllm: dict[str, Any] = (
        {"use_vllm": True, "vllm_mode": "colocate"} if cfg.use_vllm else {}
    )
    grpo_args = GRPOConfig(
        **common,
        **beta,
        num_generations=cfg.num_generations,
        max_completion_length=cfg.max_completion_length,
        temperature=cfg.temperature,
        reward_weights=[r.weight for r in rewards],
        **vllm,
    )
    if cfg.max_prompt_length is not None and hasattr(grpo_args, "max_prompt_length"):
        grpo_args.max_prompt_length = cfg.max_prompt_length
    # TRL types a reward function as returning list[float | None]; a
    # RewardFunction returns list[float] (it always scores).
    reward_funcs: list[Any] = list(rewards)
    return GRPOTrainer(reward_funcs=reward_funcs, args=grpo_args, **kwargs)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


# What the allocators say when memory runs out: CUDA ("CUDA out of memory",
# torch.OutOfMemoryError), the CPU allocator ("DefaultCPUAllocator: can't
# allocate memory"), MPS ("MPS backend out of memory").
_OOM_WORDS = ("out of memory", "can't allocate memory", "cannot allocate memory")


def _is_oom(exc: BaseException) -> bool:
    text = str(exc).lower()
    return (
        type(exc).__name__ == "OutOfMemoryError"
        or isinstance(exc, MemoryError)
        or (isinstance(exc, RuntimeError) and any(w in text for w in _OOM_WORDS))
    )


def train_model(
    ctx: JobContext, cfg: TrainConfig, callbacks: list[Any] | None = None
) -> dict[str, Any]:
    """Train in this process; returns the summary.

    ``callbacks`` are extra ``TrainerCallback`` objects (after the studio's
    own), for code that drives training itself.
    """
    # Checked before training, so a bad name costs nothing.
    name = cfg.name or ctx.run_id
    model_dir = new_model_folder(ctx.project_dir, name)
    ctx.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    # Beside SB3's: runs/<id>/tensorboard/ (one writer: rank 0 of accelerate).
    # Rank 0 alone writes the run's files; the others only train.
    rank0 = os.environ.get("RANK", "0") == "0"
    tensorboard = ctx.run_dir / "tensorboard" if rank0 else None
    callback = make_callback(ctx, cfg.method, cfg.max_steps, tensorboard)
    key, higher = eval_metric(cfg.method)
    health = health_callback(
        ctx.log,
        HealthMonitor(cfg.max_steps) if cfg.health_checks else None,
        EarlyStop(cfg.early_stop_patience, higher) if cfg.early_stop_patience else None,
        key,
    )
    try:
        return _train_with(ctx, cfg, name, model_dir, [callback, health], callbacks)
    finally:
        callback.close()


def _train_with(
    ctx: JobContext,
    cfg: TrainConfig,
    name: str,
    model_dir: Path,
    own: list[Any],
    callbacks: list[Any] | None,
) -> dict[str, Any]:
    """Trains with the studio's ``own`` callbacks (its metric stream, its
    health watch) and the caller's; returns the summary."""
    from engine.store.atomic import atomic_write_json

    callback, health = own
    trainer = build_trainer(cfg, ctx.checkpoint_dir, [*own, *(callbacks or [])])
    # With tqdm off, transformers adds a PrinterCallback that prints every
    # log row into the run's log; StudioCallback already streams them as
    # metrics.
    from transformers import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    for note in cfg.notes:
        ctx.log(f"fitted to this run: {note}")
    resume_from = latest_checkpoint(ctx.checkpoint_dir) if ctx.resume else None
    if resume_from is not None:
        ctx.log(f"resuming from {resume_from.name}")
    t0 = time.monotonic()
    try:
        result = trainer.train(
            resume_from_checkpoint=str(resume_from) if resume_from else None
        )
    except Exception as exc:
        if isinstance(exc, ValueError) and "num_samples" in str(exc):
            raise EngineError(
                f"No training row of {cfg.dataset} fits in max_length "
                f"{cfg.max_length} tokens; raise max_length or shorten the prompts."
            ) from exc
        if _is_oom(exc):
            step = getattr(trainer.state, "global_step", 0)
            raise EngineError(
                f"Training ran out of memory at step {step}; lower batch_size, "
                "max_length or max_completion_length, or turn on "
                "gradient_checkpointing."
            ) from exc
        raise
    wall = time.monotonic() - t0
    if health.monitor is not None and health.monitor.fatal is not None:
        # The broken weights are not saved; the run ends failed with why.
        raise EngineError(health.monitor.fatal)
    from engine.llm.distributed import weights_digest, world_size

    if world_size() > 1:
        # Equal on every rank when the ranks' gradients were averaged.
        ctx.log(f"trained weights digest {weights_digest(trainer.model)}")
    if os.environ.get("RANK", "0") == "0":
        model_dir.mkdir(parents=True, exist_ok=True)
        trainer.model.save_pretrained(str(model_dir))
        trainer.processing_class.save_pretrained(str(model_dir))
        # A user-visible record of where the adapter came from.
        atomic_write_json(
            model_dir / "rlstudio.json",
            {
                "kind": "lora-adapter",
                "base": cfg.model,
                "method": cfg.method,
                "dataset": cfg.dataset,
                "run_id": ctx.run_id,
            },
        )
    final = {
        "global_step": int(trainer.state.global_step),
        "train_loss": float(getattr(result, "training_loss", float("nan")) or 0.0),
        "wall_s": round(wall, 3),
        "steps_per_s": trainer.state.global_step / wall if wall > 0 else 0.0,
    }
    for entry in reversed(trainer.state.log_history):
        if "reward" in entry:
            final["reward_mean"] = float(entry["reward"])
            break
    key, _ = eval_metric(cfg.method)
    scores = [e[key] for e in trainer.state.log_history if key in e]
    if scores:
        final[key] = float(scores[-1])
    return {
        "method": cfg.method,
        "stopped": bool(callback.stopped),
        "early_stopped": health.early_stopped,
        "warnings": list(health.monitor.warnings if health.monitor else []),
        "metrics": final,
        "models": [
            {
                "name": name,
                "kind": "lora-adapter",
                "file": str(model_dir),
                "base": cfg.model,
                "parents": [cfg.model],
                "metrics": final,
            }
        ],
    }


@job_kind(
    "llm.train",
    check=validate,
    label="LLM fine-tuning",
    group="training",
    resumable=True,
)
def run(ctx: JobContext, cfg: TrainConfig) -> dict[str, Any]:
    """Fine-tunes a language model with a LoRA adapter through TRL (GRPO, KTO, DPO
    or SFT).

    Job entry of ``llm.train``: in this process, or over the processes
    and machines of the scale-out settings (:mod:`engine.llm.distributed`)."""
    from engine.llm.distributed import WORKER_ENV, is_distributed, run_distributed

    if is_distributed(cfg) and not os.environ.get(WORKER_ENV):
        return run_distributed(ctx, cfg)
    return train_model(ctx, cfg)
