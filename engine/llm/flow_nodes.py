"""Language-model nodes: pick a base model, collect rollouts, build a
dataset, define rewards, fine-tune with TRL + LoRA, merge, evaluate.

Each node calls the validator and job function of the matching ``llm.*`` job
kind (``engine.llm.rollouts``, ``datasets``, ``train``, ``merge``,
``evaluate``) in the flow's process through :meth:`NodeRun.job_context`, so a
node and a job started from the Training workspace behave the same. Files go
where those jobs put them, under a name unique to the flow run and node
(``<flow-run>.<node-id>``), so a re-run never overwrites what an earlier,
cached result points at.

Values that travel along links (JSON, files as paths)::

    hf_model      {"path": "/abs/model/folder", "ref": "Qwen/Qwen2.5-0.5B-Instruct",
                   "name": "Qwen2.5-0.5B-Instruct", "kind": "hf" | "hf-merged",
                   "model_type": "qwen2", "architectures": [...],
                   "chat_family": "chatml", "fingerprint": "...",
                   "env_id": "..."}  # merged models: the env trained on
    adapter       {"path": "<project>/models/<id>/<run>.<node>", "base": "/abs/base",
                   "name": "GRPO Qwen2.5-0.5B-Instruct", "method": "grpo",
                   "env_id": "rlstudio/x-v0", "chat_family": "chatml",
                   "metrics": {...}, "run_dir": "..."}
    trajectories  {"file": "<project>/data/traces/<run>.<node>.jsonl",
                   "env": "<spec path or env id>", "env_id": "rlstudio/x-v0",
                   "policy": "llm:/abs/model", "stats": {...}}
    dataset       {"path": "<project>/data/datasets/<method>-<run>.<node>",
                   "method": "grpo", "env": "...", "env_id": "...", "stats": {...}}
    reward_fn     {"name": "env_reward", "weight": 1.0, ...settings}
    report        the evaluation report (``report.json`` of ``llm.evaluate``)
                  plus ``report_file`` and ``plot``.

Trained and merged models are returned in ``NodeResult.models`` with their
``parents`` (the folders they came from); the project store turns a parent
registered in the same run into a lineage link between the two models.

Heavy libraries (torch, transformers, TRL, numpy) are imported inside the
node functions only: building the catalog imports this module.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

from engine.errors import ConfigError, EngineError
from engine.flow import ParamSpec, PortSpec
from engine.llm.data_import import ImportConfig
from engine.llm.datasets import DatasetConfig
from engine.llm.judge import JudgeConfig
from engine.llm.merge import MergeConfig
from engine.llm.reward_model import RewardModelConfig
from engine.llm.rollouts import CollectConfig, EvaluateConfig
from engine.llm.train import METHODS, TrainConfig
from engine.nodes.base import (
    NodeError,
    NodeResult,
    NodeRun,
    json_object_check,
    parse_json_object,
)
from engine.nodes.registry import node_type
from engine.settings import as_dict, defaults_of, fields_of, param_specs

CATEGORY = "Language models"
DEFAULT_BASE_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"

REWARD_KINDS: tuple[str, ...] = (
    "env_reward",
    "format",
    "tool_validity",
    "task_completion",
    "efficiency",
    "python_syntax",
    "code_execution",
    "judge",
    "learned",
)
"""The names of ``engine.llm.rewards.REWARDS`` (that module imports numpy,
so the catalog keeps its own copy; a test checks they agree)."""

COLLECT_PARAMS = (
    "policy",
    "episodes",
    "num_envs",
    "max_steps",
    "max_new_tokens",
    "temperature",
    "greedy",
    "fallback",
    "noise",
    "system_prompt",
    "seed",
)
"""The llm.collect settings the Collect node has a parameter for, passed on
to the job (``system_prompt`` empty: none; ``max_steps`` unset: the env
node's)."""
DATASET_PARAMS = (
    "method",
    "validation_fraction",
    "kto_max_ratio",
    "manual_labels",
    "seed",
)
"""The llm.dataset settings the Build dataset node has a parameter for."""
EVALUATE_PARAMS = (
    "episodes",
    "num_envs",
    "max_steps",
    "max_new_tokens",
    "greedy",
    "fallback",
    "system_prompt",
    "seed",
)
"""The llm.evaluate settings the Evaluate node has a parameter for, passed on
as for :data:`COLLECT_PARAMS`."""

TRAIN_PARAMS = (
    "max_steps",
    "learning_rate",
    "lora_rank",
    "batch_size",
    "gradient_accumulation_steps",
    "num_generations",
    "max_completion_length",
    "max_length",
    "temperature",
    "seed",
    "num_processes",
    "strategy",
    "use_vllm",
)
"""The llm.train settings the Fine-tune node has a parameter for (declared,
with their defaults, bounds and help, by ``engine.llm.train.TrainConfig``)."""
# Fine-tune settings that have their own parameter or input; "settings" may
# carry any other TrainConfig setting a user can set.
_TRAIN_OWN = ("method", "model", "dataset", "name", "rewards", *TRAIN_PARAMS)
_TRAIN_FIELDS = tuple(n for n, info in fields_of(TrainConfig).items() if info.form)


# ------------------------------------------------------------------ helpers
def job_name(node: NodeRun) -> str:
    """The run id of the node's job context: names its traces, dataset,
    adapter and merged folders, unique per flow run and node."""
    return f"{node.flow_run_id}.{node.node_id}"


def run_job(node: NodeRun, kind: str, config: dict[str, Any]) -> dict[str, Any]:
    """Validate ``config`` with the job kind's validator and run its job
    function in this process, in the node's folder."""
    from engine.jobs.registry import get_kind, validate_config

    cfg = validate_config(kind, config)  # ConfigError: one sentence
    ctx = node.job_context(kind, cfg)
    try:
        summary = dict(get_kind(kind).entry(ctx))
    finally:
        ctx.close()
    return summary


def finite(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` without NaN or infinite numbers (the flow's JSON refuses
    them; a loss of NaN after a 1-step run is not worth failing for)."""
    return {
        k: v
        for k, v in values.items()
        if not (isinstance(v, float) and not math.isfinite(v))
    }


def env_for_llm(env: dict[str, Any], max_steps: int | None) -> tuple[str, int | None]:
    """The env reference the llm.* jobs take (the designed spec file, else the
    Gymnasium id) and the episode cap (the node's, else the env node's
    ``max_steps`` argument)."""
    kwargs = dict(env.get("kwargs") or {})
    cap = kwargs.pop("max_steps", None)
    if kwargs:
        raise NodeError(
            "Language-model nodes build the environment without arguments other "
            f"than max_steps; remove {sorted(kwargs)[0]!r} from the Environment "
            "node's arguments."
        )
    ref = str(env.get("spec_file") or env["id"])
    if max_steps:
        cap = max_steps
    return ref, (int(cap) if cap else None)


def model_name(ref: str) -> str:
    """A short display name: the last part of a hub id or folder."""
    return Path(ref.rstrip("/")).name or ref


def fingerprint(folder: Path) -> str:
    """Changes when the model's config, weights or tokenizer files change."""
    digest = hashlib.sha256()
    config = folder / "config.json"
    if config.is_file():
        digest.update(config.read_bytes())
    for f in sorted(folder.iterdir()):
        if f.is_file() and f.suffix in (".safetensors", ".bin", ".json", ".model"):
            st = f.stat()
            digest.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def hf_model_value(path: str, *, ref: str, name: str, kind: str) -> dict[str, Any]:
    """The ``hf_model`` value of a model folder (described from its JSON files)."""
    from engine.llm.base import inspect_model

    info = inspect_model(path)
    return {
        "path": info.path,
        "ref": ref,
        "name": name,
        "kind": kind,
        "model_type": info.model_type,
        "architectures": list(info.architectures),
        "chat_family": info.chat_family,
        "fingerprint": fingerprint(Path(info.path)),
    }


def optional_text(value: str | None) -> str | None:
    return (value or "").strip() or None


# --------------------------------------------------------------- base model


def _check_base(params: dict[str, Any]) -> list[str]:
    if not str(params.get("model", "")).strip():
        return [
            "model is empty; give a model folder or a hub id such as "
            f"{DEFAULT_BASE_MODEL}."
        ]
    return []


def reward_weight_param(what: str) -> ParamSpec:
    """The ``weight`` of a reward node: how much ``what`` counts in the sum
    GRPO maximizes (``GRPOConfig.reward_weights``)."""
    return ParamSpec(
        "weight",
        "float",
        1.0,
        min=-100.0,
        max=100.0,
        help=f"Weight of {what} in the sum GRPO maximizes.",
    )


@node_type(
    "llm.base_model",
    title="Base language model",
    category=CATEGORY,
    outputs=(
        PortSpec(
            "model",
            "hf_model",
            help="The model folder, its architecture and chat format.",
        ),
    ),
    params=(
        ParamSpec(
            "model",
            "str",
            DEFAULT_BASE_MODEL,
            help="A local Hugging Face model folder, or a hub id (org/name) already "
            "in the local Hugging Face cache (Models → Download from the Hub… "
            "puts it there); training never downloads.",
            label="Model folder or hub id",
            picker="base_model",
        ),
    ),
    cacheable=False,
    check=_check_base,
)
def base_model(node: NodeRun) -> NodeResult:
    """A causal language model from a local folder or the local Hugging Face
    cache, checked to be complete (config, weights, tokenizer)."""
    from engine.llm.base import resolve_model

    ref = str(node.params["model"]).strip()
    node.progress(0, 1, f"looking for {ref}")
    folder = resolve_model(ref, "model")  # ConfigError: where it should be
    if (folder / "adapter_config.json").is_file():
        raise NodeError(
            f"{folder} is a LoRA adapter, not a base model; pick the model it was "
            "trained on."
        )
    value = hf_model_value(str(folder), ref=ref, name=model_name(ref), kind="hf")
    node.progress(1, 1, value["name"])
    return NodeResult(
        outputs={"model": value},
        summary={
            "model": value["name"],
            "architecture": (value["architectures"] or [""])[0],
            "chat_family": value["chat_family"],
        },
        files=[value["path"]],
    )


# ----------------------------------------------------------------- rollouts
@node_type(
    "llm.collect",
    title="Collect rollouts",
    category=CATEGORY,
    inputs=(
        PortSpec("env", "env", help="The environment to play (a designed one)."),
        PortSpec(
            "model",
            "hf_model",
            required=False,
            help="The language model that acts (needed when policy is llm).",
        ),
    ),
    outputs=(
        PortSpec(
            "trajectories",
            "trajectories",
            help="The recorded episodes (JSON Lines, one episode a line).",
        ),
    ),
    params=param_specs(CollectConfig, COLLECT_PARAMS),
)
def collect(node: NodeRun) -> NodeResult:
    """Play episodes with the language model (or the env's expert) and
    record every step: prompt, completion, tool, reward and env state."""
    p = node.params
    env_ref, cap = env_for_llm(node.input("env"), p["max_steps"])
    model = node.inputs.get("model")
    if p["policy"] == "llm" and model is None:
        raise NodeError(
            "Link a language model to the model input, or choose policy expert or rule."
        )
    config: dict[str, Any] = {
        **{k: p[k] for k in COLLECT_PARAMS},
        "env": env_ref,
        "model": model["path"] if model and p["policy"] == "llm" else None,
        "system_prompt": optional_text(p["system_prompt"]),
        "max_steps": cap,
        "name": job_name(node),
    }
    summary = run_job(node, "llm.collect", config)
    stats = finite(dict(summary.get("stats", {})))
    if node.should_stop:
        return NodeResult(outputs={}, stopped=True)
    if not stats.get("episodes"):
        raise NodeError("No episode was recorded.")
    value = {
        "file": summary["traces"],
        "env": summary["env"],
        "env_id": node.input("env")["id"],
        "policy": summary["policy"],
        "stats": stats,
    }
    return NodeResult(
        outputs={"trajectories": value},
        summary={
            k: stats.get(k)
            for k in (
                "episodes",
                "success_rate",
                "mean_return",
                "invalid_action_rate",
                "unparsed_rate",
            )
        },
        files=[value["file"]],
    )


# ------------------------------------------------------------------ sources
# What nodes read outside the graph, fingerprinted for their cache keys: a
# link carries a trace file's path, not its content, and labels are set in
# the traces view between runs.
def files_fingerprint(paths: list[str]) -> dict[str, Any]:
    """The files' count, and a digest of their paths, sizes and times of
    change (a missing one counts as changed)."""
    stamps = []
    for path in sorted(paths):
        try:
            st = Path(path).stat()
            stamps.append([path, st.st_size, st.st_mtime_ns])
        except OSError:
            stamps.append([path, -1, -1])
    text = repr(stamps).encode("utf-8")
    return {"rows": len(stamps), "digest": hashlib.sha256(text).hexdigest()}


def _trace_files(inputs: dict[str, Any]) -> list[str]:
    return [str(t.get("file", "")) for t in inputs.get("trajectories") or []]


def labelled_traces(
    params: dict[str, Any], inputs: dict[str, Any], project_dir: Path
) -> dict[str, dict[str, Any]]:
    """A node over traces and their labels: the trace files, and the labels
    that point into them (a trace's labels go by its file's stem), unless the
    node leaves manual labels out."""
    from engine.store.labels import fingerprint

    files = _trace_files(inputs)
    sources = {"traces": files_fingerprint(files)}
    if params.get("manual_labels", True):
        sources["labels"] = fingerprint(project_dir, [Path(f).stem for f in files])
    return sources


def dataset_files(
    params: dict[str, Any], inputs: dict[str, Any], project_dir: Path
) -> dict[str, dict[str, Any]]:
    """A node over a dataset folder: its train and validation files."""
    folder = Path(str((inputs.get("dataset") or {}).get("path", "")))
    names = ("train.jsonl", "train.parquet", "validation.jsonl", "validation.parquet")
    return {"dataset": files_fingerprint([str(folder / n) for n in names])}


# ------------------------------------------------------------------ dataset
@node_type(
    "llm.dataset",
    title="Build dataset",
    category=CATEGORY,
    inputs=(
        PortSpec(
            "trajectories",
            "trajectories",
            multiple=True,
            help="Recorded episodes; several links are pooled.",
        ),
    ),
    outputs=(
        PortSpec(
            "dataset",
            "dataset",
            help="A training set (train and validation JSON Lines + parquet).",
        ),
    ),
    params=param_specs(DatasetConfig, DATASET_PARAMS),
    sources=labelled_traces,
)
def dataset(node: NodeRun) -> NodeResult:
    """Turn recorded episodes into a TRL training set for one method, split
    into train and validation."""
    p = node.params
    trajectories = node.input("trajectories")
    envs = sorted({t["env"] for t in trajectories})
    summary = run_job(
        node,
        "llm.dataset",
        {
            **{k: p[k] for k in DATASET_PARAMS},
            "traces": [t["file"] for t in trajectories],
            "name": f"{p['method']}-{job_name(node)}",
        },
    )
    stats = finite(dict(summary["stats"]))
    value = {
        "path": summary["dataset"],
        "method": summary["method"],
        "env": envs[0] if len(envs) == 1 else "",
        "env_id": trajectories[0].get("env_id", "") if len(envs) == 1 else "",
        "stats": stats,
    }
    return NodeResult(
        outputs={"dataset": value},
        summary={k: stats.get(k) for k in ("train", "validation", "episodes")},
        files=[str(Path(value["path"]) / "train.jsonl")],
    )


# ----------------------------------------------------------- dataset source
# The import's settings but its folder name: the node names the folder after
# the source and the flow run, so a re-run never replaces a cached result.
_IMPORT_PARAMS = tuple(n for n in fields_of(ImportConfig) if n != "name")


def import_source(params: dict[str, Any], project_dir: Path) -> str:
    """The node's source: a Hub id as given, a path resolved against the
    project folder."""
    from engine.llm.data_import import is_hub_id

    source = str(params.get("source") or "").strip()
    if not source or is_hub_id(source):
        return source
    path = Path(source).expanduser()
    return str(path if path.is_absolute() else project_dir / path)


def source_file(
    params: dict[str, Any], inputs: dict[str, Any], project_dir: Path
) -> dict[str, dict[str, Any]]:
    """The imported file (or each file of the folder): an edited file makes
    the node run again. A Hub dataset has no file here to watch."""
    source = import_source(params, project_dir)
    path = Path(source)
    if not source or not (path.is_absolute() or path.exists()):
        return {}
    files = [str(f) for f in path.rglob("*") if f.is_file()] if path.is_dir() else []
    return {"source file": files_fingerprint(files or [source])}


def _check_import(params: dict[str, Any]) -> list[str]:
    from engine.llm.data_import import parse_columns

    if not str(params.get("source") or "").strip():
        return ["source is empty; give a data file, a folder or a Hub dataset id."]
    try:
        parse_columns(str(params.get("columns") or ""))
    except ConfigError as exc:
        return [str(exc)]
    return []


@node_type(
    "llm.import",
    title="Dataset source",
    category=CATEGORY,
    outputs=(
        PortSpec(
            "dataset",
            "dataset",
            help="The imported training set (train and validation splits); link "
            "it to Fine-tune.",
        ),
    ),
    params=param_specs(ImportConfig, _IMPORT_PARAMS),
    check=_check_import,
    sources=source_file,
)
def import_data(node: NodeRun) -> NodeResult:
    """Import your own data (a JSONL, JSON, CSV or Parquet file, a dataset
    folder or a Hub dataset) as a training set: each row checked, duplicates
    dropped, split into train and validation."""
    from engine.llm.data_import import KIND, default_name

    p = node.params
    source = import_source(p, node.project_dir)
    summary = run_job(
        node,
        KIND,
        {
            **{k: p[k] for k in _IMPORT_PARAMS},
            "source": source,
            "name": f"{default_name(source)}-{job_name(node)}",
        },
    )
    stats = finite(dict(summary["stats"]))
    value = {
        "path": summary["dataset"],
        "method": summary["method"],
        "env": "",
        "env_id": "",
        "stats": stats,
    }
    return NodeResult(
        outputs={"dataset": value},
        summary={
            "format": summary["format"],
            "method": summary["method"],
            **{k: stats.get(k) for k in ("train", "validation", "duplicates")},
        },
        files=[str(Path(value["path"]) / "train.jsonl")],
    )


# ------------------------------------------------------------------ rewards
def _check_reward(params: dict[str, Any]) -> list[str]:
    problems = json_object_check("settings")(params)
    if not problems:
        settings = parse_json_object(params.get("settings", "{}"), "settings")
        for key in ("name", "weight"):
            if key in settings:
                problems.append(
                    f"settings must not set {key!r}; it has its own parameter."
                )
    return problems


@node_type(
    "llm.reward",
    title="Reward function",
    category=CATEGORY,
    outputs=(
        PortSpec(
            "reward",
            "reward_fn",
            help="A GRPO reward function and its weight; link it to Fine-tune.",
        ),
    ),
    params=(
        ParamSpec(
            "kind",
            "choice",
            "env_reward",
            choices=REWARD_KINDS,
            help="env_reward: the env's reward for the answer's tool; format: "
            "the answer is just a tool; tool_validity: the tool is valid now; "
            "task_completion: the tool finishes the task; efficiency: short "
            "answers; python_syntax / code_execution: code that parses / runs "
            "(confined: no network, read-only files, limits); judge: a local "
            "model ranks each group against a rubric (the LLM judge node sets "
            "it up field by field); learned: a reward model trained on your "
            "labels (the Learn reward node sets it up).",
            label="Reward",
        ),
        reward_weight_param("this reward"),
        ParamSpec(
            "settings",
            "str",
            "{}",
            help='The reward\'s own settings as a JSON object, e.g. {"unparsed": '
            '-1} (env_reward), {"target_chars": 32} (efficiency), '
            '{"timeout_s": 5, "memory_mb": 512} (code_execution).',
            label="Settings (JSON)",
        ),
    ),
    check=_check_reward,
)
def reward(node: NodeRun) -> NodeResult:
    """One reward function for GRPO fine-tuning, with its weight."""
    from engine.llm.rewards import build_rewards

    p = node.params
    spec = {
        **parse_json_object(p["settings"], "settings"),
        "name": p["kind"],
        "weight": float(p["weight"]),
    }
    build_rewards([spec], "reward")  # ConfigError for a bad name or weight
    return NodeResult(
        outputs={"reward": spec},
        summary={"reward": p["kind"], "weight": spec["weight"]},
    )


LEARN_PARAMS = (
    "agent",
    "base_model",
    "epochs",
    "learning_rate",
    "lora_r",
    "hidden",
    "validation_fraction",
    "min_labels",
    "suggest",
    "seed",
)


@node_type(
    "reward.train",
    title="Learn reward",
    category=CATEGORY,
    inputs=(
        PortSpec(
            "trajectories",
            "trajectories",
            multiple=True,
            help="Traces whose manual labels (set in Models → Traces) train it.",
        ),
    ),
    outputs=(
        PortSpec(
            "reward",
            "reward_fn",
            help="The learned reward for GRPO; link it to Fine-tune.",
        ),
    ),
    params=(
        *param_specs(RewardModelConfig, LEARN_PARAMS),
        reward_weight_param("the learned reward"),
    ),
    sources=labelled_traces,
)
def learn_reward(node: NodeRun) -> NodeResult:
    """Train a reward model on the labels of the linked traces: its held-out
    accuracy, label suggestions, and a ``learned`` GRPO reward."""
    p = node.params
    trajectories = node.input("trajectories")
    summary = run_job(
        node,
        "reward.train",
        {
            "traces": [t["file"] for t in trajectories],
            **{k: p[k] for k in LEARN_PARAMS},
            "name": f"reward-{job_name(node)}",
        },
    )
    spec = {
        "name": "learned",
        "model": summary["reward_model"],
        "weight": float(p["weight"]),
    }
    report = summary["report"]
    return NodeResult(
        outputs={"reward": spec},
        summary={
            "held_out_accuracy": report.get("accuracy"),
            "labels": report.get("labels"),
            "suggestions": summary["suggestions"],
        },
    )


def _check_judge(params: dict[str, Any]) -> list[str]:
    from engine.llm.judge import check_config

    try:
        check_config({k: params[k] for k in fields_of(JudgeConfig) if k in params})
    except ConfigError as exc:
        return [str(exc)]
    return []


@node_type(
    "llm.judge",
    title="LLM judge reward",
    category=CATEGORY,
    outputs=(
        PortSpec(
            "reward",
            "reward_fn",
            help="The judge's relative scores as a GRPO reward; link it to Fine-tune.",
        ),
    ),
    params=(
        *param_specs(JudgeConfig, fields_of(JudgeConfig)),
        reward_weight_param("the judge's score"),
    ),
    check=_check_judge,
)
def judge_reward(node: NodeRun) -> NodeResult:
    """A local model ranks each GRPO group against the user's rubric."""
    from engine.llm.judge import check_config

    p = node.params
    settings = check_config({k: p[k] for k in fields_of(JudgeConfig)}, "judge")
    spec = {**as_dict(settings), "name": "judge", "weight": float(p["weight"])}
    return NodeResult(
        outputs={"reward": spec},
        summary={"reward": "judge", "model": spec["model"], "weight": spec["weight"]},
    )


# ---------------------------------------------------------------- fine-tune
def _check_train(params: dict[str, Any]) -> list[str]:
    problems = json_object_check("settings")(params)
    if not problems:
        settings = parse_json_object(params.get("settings", "{}"), "settings")
        for key in settings:
            if key in _TRAIN_OWN:
                problems.append(
                    f"settings must not set {key!r}; it has its own parameter or input."
                )
            elif key not in _TRAIN_FIELDS:
                problems.append(f"settings has an unknown training setting {key!r}.")
        from engine.llm.distributed import package_problem

        missing = package_problem(
            str(params.get("strategy") or "ddp"), bool(params.get("use_vllm"))
        )
        if missing:
            problems.append(missing)
    gens = params.get("num_generations")
    batch = params.get("batch_size")
    accum = params.get("gradient_accumulation_steps", 1)
    # GRPO groups answers over every process's batches.
    procs = params.get("num_processes") or 1
    if (
        params.get("method") == "grpo"
        and isinstance(gens, int)
        and isinstance(batch, int)
        and isinstance(accum, int)
        and isinstance(procs, int)
        and gens >= 2
        and batch >= 1
        and (batch * accum * procs) % gens
    ):
        problems.append(
            f"num_generations ({gens}) must divide batch_size x "
            f"gradient_accumulation_steps x num_processes ({batch} x {accum} x "
            f"{procs}), as GRPO requires."
        )
    return problems


@node_type(
    "llm.train",
    title="Fine-tune (TRL)",
    category=CATEGORY,
    inputs=(
        PortSpec("model", "hf_model", help="The base model to adapt."),
        PortSpec("dataset", "dataset", help="The training set."),
        PortSpec(
            "rewards",
            "reward_fn",
            required=False,
            multiple=True,
            help="GRPO reward functions (summed by weight); none linked: env "
            "reward plus a small format reward.",
        ),
    ),
    outputs=(
        PortSpec(
            "adapter",
            "adapter",
            help="The trained LoRA adapter (a PEFT folder).",
        ),
    ),
    params=(
        ParamSpec(
            "method",
            "choice",
            "auto",
            choices=("auto", *METHODS),
            help="TRL method: grpo (online RL with the rewards), sft, kto or dpo; "
            "auto: the method the dataset was built for.",
        ),
        *param_specs(TrainConfig, TRAIN_PARAMS),
        ParamSpec(
            "settings",
            "str",
            "{}",
            help='Other training settings as a JSON object, e.g. {"beta": 0.04, '
            '"lora_alpha": 32, "warmup_ratio": 0.1, "precision": "bf16", '
            '"save_steps": 50}.',
            label="Settings (JSON)",
        ),
        ParamSpec(
            "name",
            "str",
            "",
            help="Name of the adapter in the model list; empty: '<METHOD> <base>'.",
            label="Model name",
        ),
    ),
    check=_check_train,
    sources=dataset_files,
)
def train(node: NodeRun) -> NodeResult:
    """Fine-tune the model with TRL (GRPO, SFT, KTO or DPO) and a LoRA
    adapter; defaults for batch size, rank and precision come from the
    hardware, live curves go to the flow run's metrics."""
    p = node.params
    model = node.input("model")
    data = node.input("dataset")
    rewards = list(node.inputs.get("rewards") or [])
    method = data["method"] if p["method"] == "auto" else p["method"]
    if method != data["method"]:
        raise NodeError(
            f"The dataset was built for {data['method'].upper()}, not "
            f"{method.upper()}; build it with method {method!r} or fine-tune with "
            f"method {data['method']!r}."
        )
    if rewards and method != "grpo":
        raise NodeError(
            f"Reward functions steer GRPO only, not {method.upper()}; unlink them "
            "or fine-tune with method grpo."
        )
    defaults = defaults_of(TrainConfig)
    config: dict[str, Any] = {
        **parse_json_object(p["settings"], "settings"),
        "method": method,
        "model": model["path"],
        "dataset": data["path"],
        "name": None,  # the adapter folder is the job's run id: job_name(node)
        # Only what the user changed: the job fits the rest to the hardware.
        **{k: p[k] for k in TRAIN_PARAMS if p[k] != defaults[k]},
    }
    if method == "grpo" and rewards:
        config["rewards"] = [dict(r) for r in rewards]
    summary = run_job(node, "llm.train", config)
    if summary.get("stopped"):
        return NodeResult(outputs={}, stopped=True)
    (entry,) = summary["models"]
    metrics = finite(dict(summary.get("metrics", {})))
    name = p["name"].strip() or f"{method.upper()} {model['name']}"
    value = {
        "path": entry["file"],
        "base": entry["base"],
        "base_name": model["name"],
        "name": name,
        "method": method,
        "env_id": data.get("env_id", ""),
        "chat_family": model.get("chat_family", "unknown"),
        "metrics": metrics,
        "run_dir": str(node.work_dir),
    }
    return NodeResult(
        outputs={"adapter": value},
        summary={
            k: metrics.get(k)
            for k in ("global_step", "train_loss", "reward_mean", "wall_s")
        },
        models=[
            {
                **entry,  # its kind, file, base and parents, as the job says
                "name": name,
                "env": data.get("env_id", ""),
                "algo": method.upper(),
                "metrics": metrics,
            }
        ],
        files=[entry["file"]],
    )


# -------------------------------------------------------------------- merge
@node_type(
    "llm.merge",
    title="Merge adapter",
    category=CATEGORY,
    inputs=(PortSpec("adapter", "adapter", help="The LoRA adapter to fold in."),),
    outputs=(
        PortSpec(
            "model",
            "hf_model",
            help="A full model folder with the adapter folded into its weights.",
        ),
    ),
    params=(
        *param_specs(MergeConfig, ("dtype",)),
        ParamSpec(
            "name",
            "str",
            "",
            help="Name of the merged model in the model list; empty: the "
            "adapter's name + ' merged'.",
            label="Model name",
        ),
    ),
)
def merge(node: NodeRun) -> NodeResult:
    """Fold the LoRA adapter into its base model's weights and save a full
    model folder (safetensors and tokenizer), ready to export."""
    p = node.params
    adapter = node.input("adapter")
    summary = run_job(
        node,
        "llm.merge",
        {
            "adapter": adapter["path"],
            "base": adapter.get("base"),
            "dtype": p["dtype"],
            "name": job_name(node),
            "seed": 0,
        },
    )
    (entry,) = summary["models"]
    name = p["name"].strip() or f"{adapter.get('name') or 'adapter'} merged"
    value = hf_model_value(
        entry["file"], ref=entry["file"], name=name, kind="hf-merged"
    )
    value["adapter"] = adapter["path"]
    value["base"] = entry["base"]
    value["env_id"] = adapter.get("env_id", "")
    return NodeResult(
        outputs={"model": value},
        summary={"model": name, "dtype": p["dtype"]},
        models=[
            {
                **entry,  # its kind, file, base, parents and metrics
                "name": name,
                "env": value["env_id"],
                "algo": adapter.get("method", "").upper(),
            }
        ],
        files=[entry["file"]],
    )


# ----------------------------------------------------------------- evaluate
@node_type(
    "llm.evaluate",
    title="Evaluate language-model policy",
    category=CATEGORY,
    inputs=(
        PortSpec("env", "env", help="The environment to play."),
        PortSpec(
            "model",
            "hf_model",
            required=False,
            help="The model to evaluate (link this or an adapter).",
        ),
        PortSpec(
            "adapter",
            "adapter",
            required=False,
            help="A LoRA adapter to evaluate on its base model (instead of a model).",
        ),
        PortSpec(
            "baseline",
            "hf_model",
            required=False,
            help="A model to compare with (before / after), e.g. the base model.",
        ),
    ),
    outputs=(
        PortSpec(
            "report",
            "report",
            help="Success rate, mean return, invalid-action and unparsed rates, "
            "expert agreement, tokens/s.",
        ),
    ),
    params=param_specs(EvaluateConfig, EVALUATE_PARAMS),
)
def evaluate(node: NodeRun) -> NodeResult:
    """Play the language model (or adapter) in the environment and report
    success rate, return and invalid actions, compared with a baseline when
    one is linked."""
    import json

    p = node.params
    target = node.model_or_adapter("evaluate")[0]["path"]
    baseline = node.inputs.get("baseline")
    env_ref, cap = env_for_llm(node.input("env"), p["max_steps"])
    summary = run_job(
        node,
        "llm.evaluate",
        {
            **{k: p[k] for k in EVALUATE_PARAMS},
            "model": target,
            "baseline": baseline["path"] if baseline else None,
            "env": env_ref,
            "system_prompt": optional_text(p["system_prompt"]),
            "max_steps": cap,
        },
    )
    if node.should_stop:
        return NodeResult(outputs={}, stopped=True)
    try:
        report = json.loads(Path(summary["report"]).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EngineError(f"The evaluation report could not be read: {exc}.") from None
    report["results"] = {k: finite(v) for k, v in report.get("results", {}).items()}
    report["report_file"] = summary["report"]
    report["plot"] = summary["plot"]
    after = report["results"].get("after", {})
    return NodeResult(
        outputs={"report": report},
        summary={
            k: after.get(k)
            for k in ("success_rate", "mean_return", "invalid_action_rate")
        },
        files=[summary["report"], summary["plot"]],
    )
