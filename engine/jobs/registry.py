"""The kinds of job the supervisor can start, by name.

Entries are ``module:function`` strings so that the supervisor never imports
heavy libraries: the job function is imported in the job process, the
validator (quick, may import gymnasium) in the supervisor before the process
starts.

* job function: ``run(ctx: JobContext) -> dict`` — the run's summary.
* validator: ``validate(config: dict) -> dict`` — the normalized config with
  every default filled in; raises ``engine.errors.ConfigError`` naming the
  field for anything that cannot work.
* summary on disk: ``read(run_dir: Path, config: dict) -> dict | None`` — run
  in the supervisor for a run stopped by force (see
  :attr:`JobKind.summary_on_disk`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.errors import ConfigError


@dataclass(frozen=True)
class JobKind:
    name: str
    entry: str
    """``module:function`` run in the job process."""
    validator: str | None = None
    """``module:function`` run in the supervisor before the process starts."""
    description: str = ""
    resumable: bool = False
    schema: str | None = None
    """``module:function`` giving the parameter form: ``schema(values) -> list``."""
    default_name: str | None = None
    """A ``str.format`` template over the validated config naming a run the
    user did not name (``"{algo} {env}"``); its ``name`` setting wins."""
    project_field: str | None = None
    """A config key the supervisor fills with the open project's folder when
    the config leaves it out, so that validation sees the project's designed
    envs (``rlstudio/<name>-v0``) before the job starts."""
    stop_grace_s: float = 0.0
    """The least time a stop of this kind gets before the supervisor forces
    it, whatever the caller asked: a sweep stops its workers, whose trials
    save their checkpoints first."""
    summary_on_disk: str | None = None
    """``module:function`` giving the summary of a run of this kind from what
    it saved in its folder (its last checkpoint): what the supervisor
    records for a run stopped by force, killed before it reported its own
    summary (``engine.jobs.lifecycle.finish_forced``). ``read(run_dir,
    config)`` returns None when the run saved nothing yet and raises
    ``engine.errors.EngineError`` in one sentence for a checkpoint it cannot
    read. It runs in the supervisor, so it must not import torch. Kinds
    without one keep the summary the run's row had."""


JOB_KINDS: dict[str, JobKind] = {}


def register(kind: JobKind) -> JobKind:
    JOB_KINDS[kind.name] = kind
    return kind


register(
    JobKind(
        name="selftest",
        entry="engine.jobs.selftest:run",
        validator="engine.jobs.selftest:validate",
        description="Checks the engine end to end: progress, metrics, logs, stop.",
        resumable=True,
        summary_on_disk="engine.jobs.selftest:summary_on_disk",
    )
)


def run_name(kind_name: str, config: dict[str, Any], name: str = "") -> str:
    """The name a new run gets: ``name``, else the config's ``name`` setting,
    else the kind's default name; empty when none applies."""
    kind = get_kind(kind_name)
    if name:
        return name
    if isinstance(config.get("name"), str) and config["name"].strip():
        return str(config["name"]).strip()
    if kind.default_name:
        try:
            return kind.default_name.format_map(config)
        except (KeyError, IndexError, ValueError):
            return ""
    return ""


def get_kind(name: str) -> JobKind:
    try:
        return JOB_KINDS[name]
    except KeyError:
        known = ", ".join(sorted(JOB_KINDS))
        raise ConfigError(
            "kind", f"Unknown job kind {name!r}; known kinds: {known}."
        ) from None


def load(ref: str) -> Callable[..., Any]:
    module_name, _, attr = ref.partition(":")
    module = importlib.import_module(module_name)
    fn: Callable[..., Any] = getattr(module, attr)
    return fn


def run_schema(kind_name: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    kind = get_kind(kind_name)
    if kind.schema is None:
        return []
    fields: list[dict[str, Any]] = load(kind.schema)(dict(values))
    return fields


def validate_config(kind_name: str, config: dict[str, Any]) -> dict[str, Any]:
    kind = get_kind(kind_name)
    if kind.validator is None:
        return dict(config)
    result: dict[str, Any] = load(kind.validator)(dict(config))
    return result


register(
    JobKind(
        name="rl.train",
        entry="engine.rl.train:run",
        validator="engine.rl.config:validate",
        schema="engine.rl.schema:schema",
        project_field="project_dir",
        default_name="{algo} {env}",
        description="Trains a stable-baselines3 agent (PPO, A2C, DQN, SAC, TD3, "
        "MaskablePPO) on a Gymnasium or designed environment.",
        resumable=True,
        summary_on_disk="engine.rl.checkpoints:summary_on_disk",
    )
)


register(
    JobKind(
        name="rl.tune",
        entry="engine.rl.tune:job",
        validator="engine.rl.tune:validate_job",
        schema="engine.rl.tune:schema",
        project_field="project_dir",
        default_name="sweep {study}",
        description="An Optuna sweep over an rl.train run's settings: its "
        "trials are rl.train runs of the project, trained by worker processes.",
        # Its workers get 60 s to stop (engine.rl.sweep_workers.WorkerGroup.stop).
        stop_grace_s=90.0,
    )
)


register(
    JobKind(
        name="rl.tune.preset",
        entry="engine.rl.tune:preset_job",
        validator="engine.rl.tune:validate_preset_job",
        project_field="project_dir",
        default_name="preset {name}",
        description="Saves a sweep's best trial's settings as a project preset.",
    )
)


register(
    JobKind(
        name="flow.run",
        entry="engine.nodes.executor:run",
        validator="engine.nodes.executor:validate",
        description="Runs a workflow graph (.flow.json): its nodes in order, "
        "reusing the outputs of unchanged nodes.",
    )
)


# Language-model agents (engine/llm/).
for _name, _entry, _validator, _description, _resumable in (
    (
        "llm.collect",
        "engine.llm.rollouts:run_collect",
        "engine.llm.rollouts:validate_collect",
        "Records episodes of a language-model (or rule-based) policy in an env "
        "as JSONL traces in the project's data/traces/.",
        True,
    ),
    (
        "llm.dataset",
        "engine.llm.datasets:run_dataset",
        "engine.llm.datasets:validate_dataset",
        "Builds an SFT, KTO, DPO or GRPO dataset (JSONL + parquet) from traces.",
        False,
    ),
    (
        "reward.train",
        "engine.llm.reward_model:run",
        "engine.llm.reward_model:validate",
        "Trains a reward model from the traces' manual labels (a LoRA reward "
        "head on a language model, or an MLP on observations), reports its "
        "held-out accuracy and suggests labels for unlabelled steps.",
        False,
    ),
    (
        "llm.train",
        "engine.llm.train:run",
        "engine.llm.train:validate",
        "Fine-tunes a language model with a LoRA adapter through TRL "
        "(GRPO, KTO, DPO or SFT).",
        True,
    ),
    (
        "llm.merge",
        "engine.llm.merge:run",
        "engine.llm.merge:validate",
        "Merges a LoRA adapter into its base model as a new HF folder.",
        False,
    ),
    (
        "llm.evaluate",
        "engine.llm.evaluate:run",
        "engine.llm.evaluate:validate",
        "Runs language-model policies in an env: success rate, return, "
        "invalid actions, before/after report.",
        False,
    ),
):
    register(JobKind(_name, _entry, _validator, _description, _resumable))


register(
    JobKind(
        name="hub.download",
        entry="engine.llm.hub:run",
        validator="engine.llm.hub:validate",
        schema="engine.llm.hub:schema",
        description="Downloads a model from the Hugging Face Hub into the HF cache "
        "(progress in bytes; a stopped download resumes).",
    )
)
register(
    JobKind(
        name="export.gguf",
        entry="engine.export.jobs:run_gguf",
        validator="engine.export.jobs:validate_gguf",
        description="Converts a Hugging Face model or LoRA adapter to GGUF and "
        "verifies the file.",
    )
)
register(
    JobKind(
        name="deploy.ollama",
        entry="engine.export.jobs:run_ollama",
        validator="engine.export.jobs:validate_ollama",
        description="Creates an Ollama model from a GGUF, or writes an import bundle.",
    )
)
register(
    JobKind(
        name="export.ollama",
        entry="engine.export.ollama_job:run",
        validator="engine.export.ollama_job:validate",
        description="One-click export to Ollama: merges a LoRA adapter, exports "
        "a GGUF and creates the Ollama model (or writes an import bundle).",
    )
)
register(
    JobKind(
        name="export.onnx",
        entry="engine.export.jobs:run_onnx",
        validator="engine.export.jobs:validate_onnx",
        description="Exports a stable-baselines3 policy to ONNX, checked with "
        "onnxruntime.",
    )
)


# Designed environments (engine/envs/).
register(
    JobKind(
        name="env_check",
        entry="engine.envs.job:run_check",
        validator="engine.envs.job:validate_check",
        description="Checks a designed environment and writes report.json.",
    )
)
register(
    JobKind(
        name="env_preview",
        entry="engine.envs.job:run_preview",
        validator="engine.envs.job:validate_preview",
        description="Plays a few episodes of a designed environment (preview.json).",
    )
)
