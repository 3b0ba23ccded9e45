"""Agents shared on the Hugging Face Hub in the ``huggingface_sb3`` layout
(issue 31, item 5), the layout RL Zoo and the community's SB3 agents use.

A repository holds:

* ``<algo>-<env>.zip``: the stable-baselines3 model (``ppo-CartPole-v1.zip``),
  with ``vec_normalize.pkl`` beside it when the policy normalizes;
* ``config.json``: the zip's ``data`` (its settings) and the system it ran on;
* ``results.json``: mean and standard deviation of the return over
  :data:`EVAL_EPISODES` evaluation episodes, deterministic or not, and when;
* ``replay.mp4``: the agent playing (:mod:`engine.rl.record`);
* ``README.md``: the model card, whose metadata says ``library_name:
  stable-baselines3``, tags the env, and gives a ``model-index`` with the env
  and ``mean_reward`` (``huggingface_hub``'s ``ModelCardData``, which writes
  what ``huggingface_sb3`` writes).

``rl.hub_push`` (``rl-studio-engine hub push MODEL --repo ORG/NAME``)
evaluates the policy, records the video, writes that folder in its run folder
and uploads it in one commit (``HfApi.create_repo`` and ``create_commit``, so
``HF_ENDPOINT`` and ``HF_TOKEN`` mean what they mean to every Hugging Face
tool). ``rl.hub_download`` (``hub download ORG/NAME --agent``) checks a
repository's file list for that layout, downloads it with the checked,
resumable download of :mod:`engine.llm.hub`, verifies that the zip is an SB3
policy (read without running code from it, :mod:`engine.rl.policy`), builds
the model's folder in its run folder and lists it in its summary, so the
project registers it whole (a copy renamed into ``models/``) with its
lineage: the source repository and the commit it came from.
"""

from __future__ import annotations

import json
import math
import shutil
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.errors import ConfigError, EngineError, quoted
from engine.jobs.context import JobContext
from engine.jobs.registry import job_kind
from engine.settings import build, setting

PUSH_KIND = "rl.hub_push"
DOWNLOAD_KIND = "rl.hub_download"
LIBRARY = "stable-baselines3"
"""The ``library_name`` of an SB3 agent's model card."""
EVAL_EPISODES = 10
"""Evaluation episodes behind the card's mean reward (``huggingface_sb3``'s)."""
VIDEO_FRAMES = 1000
"""Longest ``replay.mp4``, in frames (``huggingface_sb3``'s video length)."""
CONFIG_FILE = "config.json"
RESULTS_FILE = "results.json"
VIDEO_FILE = "replay.mp4"
CARD_FILE = "README.md"
HUB_VECNORMALIZE_FILE = "vec_normalize.pkl"
"""The normalization statistics in the Hub layout (training keeps them as
:data:`engine.rl.policy.VECNORMALIZE_FILE`)."""
PUSHED_FOLDER = "hub"
"""The folder of a push's run that holds what was uploaded."""
AGENT_FOLDER = "agent"
"""The folder of a download's run where the model is built before the
project registers it."""
SOURCE_PREFIX = "hf://"
"""A lineage parent naming a Hub repository: ``hf://org/name@<commit>``."""


def zip_name(algo: str, env: str) -> str:
    """``<algo>-<env>.zip`` as RL Zoo names it (``ppo-CartPole-v1.zip``); an
    env id's ``/`` and ``:`` become ``-`` (``ALE/Pong-v5``)."""
    safe_env = env.replace("/", "-").replace(":", "-")
    return f"{algo.lower()}-{safe_env}.zip"


def hub_source(repo_id: str, commit: str) -> str:
    """The lineage parent of a model downloaded from ``repo_id`` at ``commit``."""
    return f"{SOURCE_PREFIX}{repo_id}@{commit}"


# ------------------------------------------------------------------ push


@dataclass(frozen=True)
class HubPushConfig:
    """Settings of an ``rl.hub_push`` job."""

    model: str = setting("", label="Policy file")
    """The stable-baselines3 policy file (``model.zip``) to share."""
    repo_id: str = setting("", label="Repository")
    """The Hub repository to push to, ``org/name`` (created if missing)."""
    env: str | None = setting(None, label="Environment")
    """The env the policy plays (None: the one its ``state.json`` names)."""
    algo: str | None = setting(None, label="Algorithm")
    """Its algorithm (``PPO``; None: the one its ``state.json`` names)."""
    eval_episodes: int = setting(EVAL_EPISODES, min=1, max=1000, unit="episodes")
    """Evaluation episodes behind the card's mean ± std reward."""
    video_frames: int = setting(
        VIDEO_FRAMES, min=0, max=100_000, unit="frames", label="Video length"
    )
    """Longest ``replay.mp4`` (0: no video)."""
    seed: int = setting(0, min=0)
    """Seed of the first evaluation and video episode."""
    private: bool = setting(False)
    """Create the repository private (an existing one keeps its visibility)."""
    commit_message: str = setting("Upload a stable-baselines3 agent from RL Studio")
    """The message of the commit that uploads the files."""


def validate_push(config: Mapping[str, Any]) -> HubPushConfig:
    from engine.llm.hub import repo_id_problem

    cfg = build(HubPushConfig, config, "the hub push job")
    from engine.rl.policy import policy_file

    model = policy_file(cfg.model, "to push")
    repo = cfg.repo_id.strip()
    problem = repo_id_problem(repo)
    if problem or "/" not in repo:
        raise ConfigError(
            "repo_id", problem or f"repo_id must be org/name, not {quoted(repo)}."
        )
    from engine.rl.policy import state_beside

    state = state_beside(model)
    env = cfg.env or state.get("env")
    algo = cfg.algo or state.get("algo")
    for field, value in (("env", env), ("algo", algo)):
        if not isinstance(value, str) or not value:
            raise ConfigError(
                field,
                f"{field} is required: {model.name} has no state.json beside it "
                f"naming its {field}.",
            )
    return replace(cfg, model=str(model), repo_id=repo, env=env, algo=algo)


@job_kind(
    PUSH_KIND,
    check=validate_push,
    label="Push to the Hub",
    group="export",
    progress_unit="items",
    default_name="Push {repo_id}",
)
def run_push(ctx: JobContext, cfg: HubPushConfig) -> dict[str, Any]:
    """Evaluates an SB3 policy, records a video and uploads them with a model card
    to the Hugging Face Hub (the huggingface_sb3 layout)."""
    from engine.rl.env_info import register_designed_envs

    register_designed_envs(ctx.project_dir)
    folder = ctx.run_dir / PUSHED_FOLDER
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    built = write_layout(
        cfg,
        folder,
        project_dir=ctx.project_dir,
        settings=_run_settings(ctx.project_dir, Path(cfg.model)),
        progress=ctx.progress,
        should_stop=lambda: ctx.should_stop,
        log=ctx.log,
    )
    if built is None:
        return {"status": "stopped", "reason": "stopped before anything was uploaded"}
    ctx.log(
        f"mean reward {built['mean_reward']:.2f} ± {built['std_reward']:.2f} over "
        f"{built['n_eval_episodes']} episodes; uploading {len(built['files'])} "
        f"files to {cfg.repo_id}"
    )
    ctx.progress(2, 3, "uploading")
    commit = upload_folder(folder, cfg.repo_id, cfg.commit_message, cfg.private)
    ctx.progress(3, 3, "uploaded")
    ctx.log(f"pushed {cfg.repo_id} at commit {commit['commit']}: {commit['url']}")
    return {**built, **commit, "repo_id": cfg.repo_id, "folder": str(folder)}


Progress = Callable[[float, float, str], None]


def write_layout(
    cfg: HubPushConfig,
    folder: Path,
    *,
    project_dir: Path | None = None,
    settings: Mapping[str, Any] | None = None,
    progress: Progress = lambda done, total, message: None,
    should_stop: Callable[[], bool] = lambda: False,
    log: Callable[[str], None] = lambda text: None,
) -> dict[str, Any] | None:
    """The ``huggingface_sb3`` layout of the validated ``cfg``'s policy in
    ``folder``; returns what the card says (None when ``should_stop`` ended
    it). ``settings`` (the training run's) go into the card."""
    import datetime

    from engine.rl.policy import VECNORMALIZE_FILE

    assert cfg.env is not None and cfg.algo is not None  # validate fills them
    model = Path(cfg.model)
    name = zip_name(cfg.algo, cfg.env)
    shutil.copyfile(model, folder / name)
    if (model.parent / VECNORMALIZE_FILE).is_file():
        shutil.copyfile(
            model.parent / VECNORMALIZE_FILE, folder / HUB_VECNORMALIZE_FILE
        )
    _write_json(folder / CONFIG_FILE, _zip_config(model))
    progress(0, 3, "evaluating")
    evaluation = _evaluate(cfg, project_dir, should_stop)
    if evaluation is None:
        return None
    mean = float(sum(evaluation) / len(evaluation))
    std = math.sqrt(sum((r - mean) ** 2 for r in evaluation) / len(evaluation))
    results = {
        "mean_reward": mean,
        "std_reward": std,
        "is_deterministic": True,
        "n_eval_episodes": len(evaluation),
        "eval_datetime": datetime.datetime.now().isoformat(),
    }
    _write_json(folder / RESULTS_FILE, results)
    progress(1, 3, "recording the video")
    video: str | None = ""
    if cfg.video_frames > 0:
        video = _record(cfg, folder / VIDEO_FILE, project_dir, should_stop, log)
    if video is None:
        return None
    card = model_card(cfg.algo, cfg.env, mean, std, len(evaluation), settings, video)
    (folder / CARD_FILE).write_text(card, encoding="utf-8")
    return {
        "model_file": name,
        "env": cfg.env,
        "algo": cfg.algo,
        "mean_reward": mean,
        "std_reward": std,
        "n_eval_episodes": len(evaluation),
        "video": video,
        "files": sorted(p.name for p in folder.iterdir()),
    }


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")


def _zip_config(model: Path) -> dict[str, Any]:
    """The zip's ``data`` and the system it is shared from, as
    ``huggingface_sb3`` writes ``config.json``."""
    import stable_baselines3

    try:
        with zipfile.ZipFile(model) as zf:
            data = json.loads(zf.read("data").decode("utf-8"))
    except (KeyError, zipfile.BadZipFile, OSError, ValueError):
        raise EngineError(f"{model} is not a stable-baselines3 model zip.") from None
    if not isinstance(data, dict):
        raise EngineError(f"{model} is not a stable-baselines3 model zip.")
    data["system_info"] = stable_baselines3.get_system_info(print_info=False)[0]
    return data


def _evaluate(
    cfg: HubPushConfig, project_dir: Path | None, should_stop: Callable[[], bool]
) -> list[float] | None:
    """The returns of ``cfg.eval_episodes`` deterministic episodes."""
    from stable_baselines3.common.env_util import make_vec_env

    from engine.envs import families
    from engine.rl.policy import (
        EVAL_SEED_OFFSET,
        eval_env_count,
        evaluate,
        load_policy,
    )

    assert cfg.env is not None
    policy = load_policy(cfg.model, project_dir=project_dir)
    try:
        # As the agent plays: an Atari game's frames preprocessed as in
        # training, its rewards the game's own (families.wrap).
        venv = make_vec_env(
            families.vec_env_id(cfg.env),
            n_envs=eval_env_count(cfg.eval_episodes),
            seed=cfg.seed + EVAL_SEED_OFFSET,
            wrapper_class=families.wrap,
            wrapper_kwargs={"training": False},
        )
    except Exception as exc:
        raise EngineError(
            f"The env {cfg.env} could not be made to evaluate the policy "
            f"({type(exc).__name__}: {exc})."
        ) from None
    try:
        policy.check_env(venv, cfg.env)
        played = evaluate(
            policy,
            venv,
            episodes=cfg.eval_episodes,
            masked=policy.masked,
            should_stop=should_stop,
        )
    finally:
        venv.close()
    return None if played.stopped else played.rewards


def _record(
    cfg: HubPushConfig,
    out: Path,
    project_dir: Path | None,
    should_stop: Callable[[], bool],
    log: Callable[[str], None],
) -> str | None:
    """``replay.mp4``'s name, ``""`` when the env draws no frames (said in
    the log), None when stopped."""
    from engine.rl.record import RecordConfig, record_video

    record = RecordConfig(
        model=cfg.model,
        env=cfg.env,
        episodes=1000,
        seed=cfg.seed,
        max_frames=cfg.video_frames,
    )
    try:
        done = record_video(
            record, out, project_dir=project_dir, should_stop=should_stop
        )
    except EngineError as exc:
        log(f"no video: {exc}")
        return ""
    return None if done is None else out.name


def model_card(
    algo: str,
    env: str,
    mean: float,
    std: float,
    episodes: int,
    settings: Mapping[str, Any] | None = None,
    video: str = "",
) -> str:
    """``README.md``: metadata as ``huggingface_sb3`` writes it, then what
    the agent is, how it scored, its settings, its video and how to load it."""
    from huggingface_hub import EvalResult, ModelCardData

    data = ModelCardData(
        library_name=LIBRARY,
        tags=[env, "deep-reinforcement-learning", "reinforcement-learning", LIBRARY],
        model_name=algo,
        eval_results=[
            EvalResult(
                task_type="reinforcement-learning",
                task_name="reinforcement-learning",
                dataset_type=env,
                dataset_name=env,
                metric_type="mean_reward",
                metric_name="mean_reward",
                metric_value=f"{mean:.2f} +/- {std:.2f}",
            )
        ],
    )
    lines = [
        "---",
        data.to_yaml(),
        "---",
        "",
        f"# {algo} agent playing {env}",
        "",
        f"A trained **{algo}** agent playing **{env}**, trained with RL Studio "
        "and the [stable-baselines3 library]"
        "(https://github.com/DLR-RM/stable-baselines3).",
        "",
        "## Evaluation",
        "",
        f"Mean reward **{mean:.2f} ± {std:.2f}** over {episodes} deterministic "
        f"evaluation episodes (`{RESULTS_FILE}`).",
        "",
    ]
    if video:
        lines += ["## Video", "", f"[{video}]({video}): the agent playing {env}.", ""]
    if settings:
        lines += ["## Settings", "", "| Setting | Value |", "| --- | --- |"]
        lines += [
            f"| {key} | {_cell(value)} |"
            for key, value in sorted(settings.items())
            if value is not None
        ]
        lines.append("")
    lines += [
        "## Usage (with stable-baselines3)",
        "",
        "```python",
        "from huggingface_sb3 import load_from_hub",
        f"from stable_baselines3 import {algo}",
        "",
        f'checkpoint = load_from_hub("ORG/NAME", "{zip_name(algo, env)}")',
        f"model = {algo}.load(checkpoint)",
        "```",
        "",
        "Or in RL Studio: `rl-studio-engine hub download ORG/NAME --agent "
        "--project DIR`.",
        "",
    ]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, dict | list) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _run_settings(project_dir: Path, model: Path) -> dict[str, Any]:
    """The algorithm settings of the run that trained ``model`` when it is a
    registered model of the project (or a checkpoint of one of its runs)."""
    from engine.jobs.context import read_run_config

    run_dir: Path | None = None
    try:
        rel = model.resolve().relative_to((project_dir / "runs").resolve())
        run_dir = project_dir / "runs" / rel.parts[0]
    except (ValueError, OSError, IndexError):
        from engine.store.project import Project

        try:
            project = Project.open(project_dir)
        except Exception:
            return {}
        try:
            for m in project.list_models():
                if Path(m.path).resolve() == model.resolve() and m.source_run:
                    run_dir = project.run_dir(m.source_run)
        finally:
            project.close()
    if run_dir is None:
        return {}
    try:
        recorded = read_run_config(run_dir).get("config")
    except (OSError, ValueError):
        return {}
    config = recorded if isinstance(recorded, dict) else {}
    hyper = config.get("hyperparameters")
    out = dict(hyper) if isinstance(hyper, dict) else {}
    for key in ("total_steps", "n_envs", "seed", "policy"):
        if config.get(key) is not None:
            out[key] = config[key]
    return out


def upload_folder(
    folder: Path, repo_id: str, message: str, private: bool = False
) -> dict[str, str]:
    """Every file of ``folder`` to ``repo_id`` in one commit (the repo made
    first when missing); ``{"commit", "url"}``. A refusal is one sentence."""
    from huggingface_hub import CommitOperationAdd, HfApi, constants
    from huggingface_hub.utils.tqdm import disable_progress_bars

    api = HfApi()
    where = api.endpoint
    if constants.HF_HUB_OFFLINE:
        raise EngineError(
            f"Cannot push to {repo_id}: HF_HUB_OFFLINE is set, so the Hugging Face "
            "Hub may not be reached (unset it to push); nothing was committed."
        )
    try:
        with disable_progress_bars():  # the job reports its own progress
            api.create_repo(repo_id, private=private, exist_ok=True)
            operations = [
                CommitOperationAdd(path_in_repo=p.name, path_or_fileobj=str(p))
                for p in sorted(folder.iterdir())
                if p.is_file()
            ]
            info = api.create_commit(repo_id, operations, commit_message=message)
    except Exception as exc:
        raise EngineError(_upload_sentence(exc, repo_id, where)) from None
    return {"commit": str(info.oid), "url": f"{where}/{repo_id}"}


def _upload_sentence(exc: BaseException, repo_id: str, where: str) -> str:
    """One sentence for a failed upload: the server's status first."""
    response = getattr(exc, "response", None)
    cause = exc.__cause__ or exc.__context__
    if response is None and cause is not None:
        response = getattr(cause, "response", None)
    status = getattr(response, "status_code", None)
    if status in (401, 403):
        return (
            f"{where} refused the upload to {repo_id} (HTTP {status}): set HF_TOKEN "
            "to a token that may write to it; nothing was committed."
        )
    if isinstance(status, int):
        return (
            f"{where} refused the upload to {repo_id} with HTTP {status}; nothing "
            "was committed."
        )
    first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    return (
        f"Uploading to {repo_id} on {where} failed ({type(exc).__name__}"
        + (f": {first}" if first else "")
        + "); nothing was committed."
    )


# -------------------------------------------------------------- download


@dataclass(frozen=True)
class HubAgentConfig:
    """Settings of an ``rl.hub_download`` job."""

    repo_id: str = setting("", label="Repository")
    """The agent's Hub repository, ``org/name`` (``sb3/ppo-CartPole-v1``)."""
    revision: str = setting("main")
    """A branch, tag or commit of the repository."""
    name: str = setting("", label="Model name")
    """The model's name in the project ('' = the repository's)."""


def validate_download(config: Mapping[str, Any]) -> HubAgentConfig:
    from engine.llm.hub import checked_source

    cfg = build(HubAgentConfig, config, "the hub agent download job")
    repo, revision = checked_source(cfg.repo_id, cfg.revision.strip() or "main")
    return replace(cfg, repo_id=repo, revision=revision, name=cfg.name.strip())


@dataclass(frozen=True)
class Agent:
    """What a repository in the ``huggingface_sb3`` layout holds."""

    zip_file: str
    algo: str
    env: str
    vec_normalize: bool


def read_layout(
    repo_id: str, files: list[str], card: dict[str, Any] | None
) -> Agent | None:
    """The agent a repository's top-level ``files`` and model card metadata
    describe; one sentence when they are another layout. Without the card
    (None: before the download) only the model zip is looked for."""
    from engine.rl.config import ALGO_CONFIGS

    zips = sorted(f for f in files if f.endswith(".zip") and "/" not in f)
    layout = f"{repo_id} is not a stable-baselines3 agent in the huggingface_sb3 layout"
    if not zips:
        raise EngineError(
            f"{layout}: it holds no <algo>-<env>.zip model zip; nothing was added "
            "to the project."
        )
    if card is None:
        return None
    envs = _card_envs(card)
    if len(zips) > 1:
        named = [z for z in zips if any(z.endswith(f"-{e}.zip") for e in envs)]
        if len(named) != 1:
            raise EngineError(
                f"{repo_id} holds {len(zips)} model zips ({', '.join(zips[:5])}) "
                "and its model card does not say which is the agent; nothing was "
                "added to the project."
            )
        zips = named
    name = zips[0]
    stem = name[: -len(".zip")]
    algo_part, _, env_part = stem.partition("-")
    algos = {a.lower(): a for a in ALGO_CONFIGS}
    algos["ppo_lstm"] = "RecurrentPPO"  # RL Zoo's name for it
    algo = algos.get(algo_part.lower(), "")
    env = envs[0] if envs else env_part
    if not algo or not env:
        raise EngineError(
            f"{layout}: its model zip {quoted(name)} is not named <algo>-<env>.zip "
            f"with an algorithm of {', '.join(ALGO_CONFIGS)}; nothing was added "
            "to the project."
        )
    return Agent(name, algo, env, HUB_VECNORMALIZE_FILE in files)


def _card_envs(card: Mapping[str, Any]) -> list[str]:
    """The env ids a model card's ``model-index`` names."""
    envs: list[str] = []
    index = card.get("model-index")
    for entry in index if isinstance(index, list) else []:
        results = entry.get("results") if isinstance(entry, dict) else None
        for result in results if isinstance(results, list) else []:
            dataset = result.get("dataset") if isinstance(result, dict) else None
            env = dataset.get("type") if isinstance(dataset, dict) else None
            if isinstance(env, str) and env and env not in envs:
                envs.append(env)
    return envs


def _card_metadata(repo_id: str, readme: Path) -> dict[str, Any]:
    """The model card's metadata (empty without a card); the YAML is read
    safely (``huggingface_hub``'s ``ModelCard``, ``yaml.safe_load``)."""
    from huggingface_hub import ModelCard

    if not readme.is_file():
        return {}
    try:
        data = ModelCard.load(readme).data.to_dict()
    except Exception as exc:
        raise EngineError(
            f"The model card of {repo_id} cannot be read ({type(exc).__name__})."
        ) from None
    return data if isinstance(data, dict) else {}


@job_kind(
    DOWNLOAD_KIND,
    check=validate_download,
    label="Download agent",
    group="data",
    progress_unit="bytes",
    default_name="Download {repo_id}",
)
def run_download(ctx: JobContext, cfg: HubAgentConfig) -> dict[str, Any]:
    """Downloads a stable-baselines3 agent in the huggingface_sb3 layout from the
    Hugging Face Hub and registers it as a model of the project.

    In order: check the layout, download, verify, build the model."""
    from engine.llm import hub as transfer
    from engine.rl.env_info import register_designed_envs
    from engine.rl.policy import STATE_FILE, VECNORMALIZE_FILE, load_policy

    register_designed_envs(ctx.project_dir)
    ctx.log(
        f"Downloading the agent {cfg.repo_id} ({cfg.revision}) from "
        f"{transfer.endpoint()}."
    )
    listed = _listing(cfg.repo_id, cfg.revision)
    read_layout(cfg.repo_id, listed, None)  # another layout: nothing downloaded
    result = transfer.download(
        cfg.repo_id,
        cfg.revision,
        progress=lambda done, total, file: ctx.progress(done, max(total, 1), file),
        should_stop=lambda: bool(ctx.should_stop),
    )
    if result["stopped"]:
        ctx.log("Stopped; downloading it again resumes where it stopped.")
        return {"status": "stopped", "reason": "stopped before the download ended"}
    snapshot = Path(result["path"])
    card = _card_metadata(cfg.repo_id, snapshot / CARD_FILE)
    agent = read_layout(cfg.repo_id, listed, card)
    assert agent is not None
    folder = ctx.run_dir / AGENT_FOLDER
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    model = folder / "model.zip"
    shutil.copyfile(snapshot / agent.zip_file, model)
    if agent.vec_normalize:
        shutil.copyfile(snapshot / HUB_VECNORMALIZE_FILE, folder / VECNORMALIZE_FILE)
    # Read as every player reads it: no code from the file runs.
    policy = load_policy(model, project_dir=ctx.project_dir)
    _check_env(agent.env, policy, ctx.log)
    results = _results(snapshot / RESULTS_FILE)
    commit = str(result["commit"])
    _write_json(
        folder / STATE_FILE,
        {
            "env": agent.env,
            "algo": agent.algo,
            "source": hub_source(cfg.repo_id, commit),
        },
    )
    extra = [folder / VECNORMALIZE_FILE, folder / STATE_FILE]
    for name in (CARD_FILE, RESULTS_FILE, CONFIG_FILE):
        if (snapshot / name).is_file():
            shutil.copyfile(snapshot / name, folder / name)
            extra.append(folder / name)
    metrics = {f"hub/{k}": v for k, v in results.items()}
    ctx.log(
        f"{agent.algo} on {agent.env} from {cfg.repo_id} at {commit}"
        + (
            f": mean reward {results['mean_reward']:.2f} on the Hub"
            if "mean_reward" in results
            else ""
        )
    )
    return {
        "repo_id": cfg.repo_id,
        "revision": cfg.revision,
        "commit": commit,
        "env": agent.env,
        "algo": agent.algo,
        "models": [
            {
                "name": cfg.name or cfg.repo_id.split("/")[-1],
                "kind": "sb3-policy",
                "file": str(model),
                "extra_files": [str(p) for p in extra if p.is_file()],
                "env": agent.env,
                "algo": agent.algo,
                "base": f"{cfg.repo_id}@{commit}",
                "metrics": metrics,
                "parents": [hub_source(cfg.repo_id, commit)],
            }
        ],
    }


def _listing(repo_id: str, revision: str) -> list[str]:
    """The names of a repository's files, from the Hub's file list."""
    from huggingface_hub import HfApi

    from engine.llm.hub import endpoint

    try:
        info = HfApi().model_info(repo_id, revision=revision)
    except Exception as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status in (401, 404):
            raise EngineError(
                f"{repo_id} was not found on {endpoint()}: check the name, or set "
                "HF_TOKEN if it is private."
            ) from None
        raise EngineError(
            f"The file list of {repo_id} from {endpoint()} could not be read "
            f"({type(exc).__name__}" + (f", HTTP {status}" if status else "") + ")."
        ) from None
    return [s.rfilename for s in info.siblings or [] if isinstance(s.rfilename, str)]


def _check_env(env: str, policy: Any, log: Callable[[str], None]) -> None:
    """Refuse an env whose spaces are not the policy's; an env this install
    cannot make is said in the log (the model is still registered)."""
    from engine.envs.registry import make

    try:
        # designed envs are registered by the caller; an Atari game is
        # preprocessed as its agent sees it
        made = make(env)
    except Exception as exc:
        log(
            f"warning: {env} cannot be made here ({type(exc).__name__}: {exc}); "
            "the agent is registered, but plays once the env is installed."
        )
        return
    try:
        policy.check_env(made, env)
    finally:
        made.close()


def _results(path: Path) -> dict[str, float]:
    """``results.json``'s numbers (mean and std reward, episodes)."""
    from engine import untrusted

    try:
        data = untrusted.loads(path.read_bytes(), str(path))
    except (OSError, untrusted.UntrustedDataError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        k: float(v)
        for k, v in data.items()
        if k in ("mean_reward", "std_reward", "n_eval_episodes")
        and isinstance(v, int | float)
        and not isinstance(v, bool)
        and math.isfinite(v)
    }
