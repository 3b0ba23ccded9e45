"""The ``rl.train`` job: stable-baselines3 training inside a job process.

SB3's own ``learn()`` loop does the training; this module only plugs into its
hooks:

* a ``KVWriter`` (logger output format) forwards every value SB3 logs to
  ``ctx.metrics`` under SB3's own keys (``rollout/ep_rew_mean``,
  ``train/loss``, ``time/fps``, ...); a second one writes them to
  TensorBoard event files, one event per dump, without waiting for the disk;
* a ``BaseCallback`` reports progress, honours ``ctx.should_stop``, evaluates
  on a separate environment (``eval/*``), writes checkpoints and applies the
  stop conditions (target reward, convergence).

Run folder (``ctx.run_dir``)::

    reproduce.json                 resolved config, seed, versions, command
    tensorboard/                   TensorBoard event files
    checkpoints/step-0000001024/   model.zip, vecnormalize.pkl, state.json,
                                   replay_buffer.pkl (newest checkpoint only)
    checkpoints/best/              best model by eval mean reward

Resume (``ctx.resume``) loads the newest checkpoint with its replay buffer and
normalization statistics and continues with ``reset_num_timesteps=False``, so
the step counter, schedules and curves carry on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine import contract
from engine.envs.curriculum import CurriculumConfig
from engine.envs.spec import designed_spec_file
from engine.errors import EngineError
from engine.jobs.context import STOP_REASONS, JobContext
from engine.rl.checkpoints import (
    BEST_FOLDER,
    CHECKPOINT_PREFIX,
    checkpoints,
    latest_checkpoint,
    summary_of,
)
from engine.rl.config import (
    OFF_POLICY,
    SB3_CONTRIB,
    TRAIN_FIELDS,
    A2CConfig,
    AlgoConfig,
    ARSConfig,
    CrossQConfig,
    DQNConfig,
    PPOBase,
    PPOConfig,
    QRDQNConfig,
    RecurrentPPOConfig,
    SACConfig,
    TD3Config,
    TQCConfig,
    TrainConfig,
    TRPOConfig,
    algo_defaults,
    preset_provenance,
)
from engine.rl.env_info import register_designed_envs
from engine.rl.eval_video import EvalVideos
from engine.rl.policy import (
    EVAL_SEED_OFFSET,
    VECNORMALIZE_FILE,
    Evaluation,
    eval_env_count,
    evaluate,
)
from engine.settings import as_dict, load, same_named
from engine.store.atomic import (
    atomic_write_json,
    atomic_write_text,
    json_safe,
    temp_path,
)
from engine.store.metrics import iter_metrics

PROGRESS_INTERVAL_S = 0.1


EvalHook = Callable[[int, float], "str | None"]
"""Told each evaluation's step and mean reward; a sentence stops the run as
``stopped`` by ``pruned`` (a sweep's pruner), with that sentence as its
reason."""


def train(
    ctx: JobContext, cfg: TrainConfig, *, on_eval: EvalHook | None = None
) -> dict[str, Any]:
    """Train the validated ``cfg``; returns the run summary. ``on_eval`` (a
    sweep's trial) sees every evaluation and may stop the run."""
    if cfg.project_dir is None:  # the project the run is in holds its envs
        cfg = replace(cfg, project_dir=str(ctx.project_dir))
    # This process has not registered the project's designed envs yet.
    register_designed_envs(cfg.project_dir)
    return Trainer(ctx, cfg, on_eval=on_eval).train()


def run(ctx: JobContext, *, on_eval: EvalHook | None = None) -> dict[str, Any]:
    """:func:`train` on the config ``ctx`` recorded (validated), for callers
    that run the job on a context of their own (a sweep's trial)."""
    return train(ctx, load(TrainConfig, ctx.config), on_eval=on_eval)


# --------------------------------------------------------------------------
# Building SB3 objects
# --------------------------------------------------------------------------


def algo_class(algo: str) -> Any:
    """The SB3 (or sb3-contrib) algorithm class for ``algo``."""
    if algo in SB3_CONTRIB:
        import sb3_contrib

        return getattr(sb3_contrib, algo)
    import stable_baselines3

    return getattr(stable_baselines3, algo)


def policy_name(algo: str, policy: str) -> str:
    """The name ``algo`` gives the policy kind ``policy`` (``MlpPolicy``,
    ...): RecurrentPPO's are its LSTM ones (``MlpLstmPolicy``)."""
    if algo == "RecurrentPPO":
        return policy.replace("Policy", "LstmPolicy")
    return policy


# The arguments of SB3's algorithms that are settings of the same name, by
# the algorithms that take them (the rest are computed in model_kwargs).
ON_POLICY_ARGS = "n_steps gae_lambda ent_coef vf_coef max_grad_norm normalize_advantage"
OFF_POLICY_ARGS = "buffer_size learning_starts batch_size tau train_freq gradient_steps"
DQN_ARGS = (
    "target_update_interval exploration_fraction exploration_initial_eps "
    "exploration_final_eps max_grad_norm"
)
TD3_ARGS = "policy_delay target_policy_noise target_noise_clip"
TRPO_ARGS = (
    "n_steps batch_size gae_lambda normalize_advantage target_kl cg_max_steps "
    "cg_damping line_search_shrinking_factor line_search_max_iter "
    "n_critic_updates sub_sampling_factor"
)
ARS_ARGS = "n_delta n_top delta_std zero_policy alive_bonus_offset n_eval_episodes"
CROSSQ_ARGS = (
    "buffer_size learning_starts batch_size train_freq gradient_steps policy_delay"
)
# Settings that are arguments of the policy class of the same name.
LSTM_POLICY_ARGS = "lstm_hidden_size n_lstm_layers shared_lstm enable_critic_lstm"
CROSSQ_POLICY_ARGS = (
    "batch_norm batch_norm_momentum batch_norm_eps renorm_warmup_steps n_critics"
)


def model_kwargs(hp: AlgoConfig, action_space: Any) -> dict[str, Any]:
    """Constructor keyword arguments of the algorithm ``hp`` configures."""
    import numpy as np
    from stable_baselines3.common.utils import LinearSchedule
    from torch import nn

    activations: dict[str, type[nn.Module]] = {
        "tanh": nn.Tanh,
        "relu": nn.ReLU,
        "elu": nn.ELU,
        "leaky_relu": nn.LeakyReLU,
    }

    def schedule(value: float, kind: str) -> Any:
        # LinearSchedule is a plain class, so it pickles into the model zip.
        return LinearSchedule(value, 0.0, 1.0) if kind == "linear" else value

    policy_kwargs: dict[str, Any] = {
        "net_arch": list(hp.net_arch),
        "activation_fn": activations[hp.activation],
    }
    kw: dict[str, Any] = {
        "learning_rate": schedule(hp.learning_rate, hp.learning_rate_schedule),
    }
    if not isinstance(hp, ARSConfig):  # ARS scores undiscounted episodes
        kw["gamma"] = hp.gamma
    box = type(action_space).__name__ == "Box"
    if isinstance(hp, PPOBase | A2CConfig):  # on-policy
        kw.update(same_named(hp, ON_POLICY_ARGS))
        policy_kwargs["ortho_init"] = hp.ortho_init
        # MaskablePPO has no SDE
        if isinstance(hp, PPOConfig | A2CConfig | RecurrentPPOConfig):
            kw["use_sde"] = hp.use_sde
            kw["sde_sample_freq"] = hp.sde_sample_freq
            if hp.use_sde or box:
                policy_kwargs["log_std_init"] = hp.log_std_init
        if isinstance(hp, A2CConfig):
            kw["use_rms_prop"] = hp.use_rms_prop
        else:
            kw["batch_size"] = hp.batch_size
            kw["n_epochs"] = hp.n_epochs
            kw["clip_range"] = schedule(hp.clip_range, hp.clip_range_schedule)
            kw["target_kl"] = hp.target_kl
        if isinstance(hp, RecurrentPPOConfig):
            policy_kwargs.update(same_named(hp, LSTM_POLICY_ARGS))
    elif isinstance(hp, TRPOConfig):
        kw.update(same_named(hp, TRPO_ARGS))
        kw["use_sde"] = hp.use_sde
        kw["sde_sample_freq"] = hp.sde_sample_freq
        policy_kwargs["ortho_init"] = hp.ortho_init
        if hp.use_sde or box:
            policy_kwargs["log_std_init"] = hp.log_std_init
    elif isinstance(hp, ARSConfig):
        kw.update(same_named(hp, ARS_ARGS))
        policy_kwargs["with_bias"] = hp.with_bias
        policy_kwargs["squash_output"] = hp.squash_output
    elif isinstance(hp, CrossQConfig):
        kw.update(same_named(hp, CROSSQ_ARGS))
        # The actor's widths and the critics' (wider, as CrossQ's authors use).
        policy_kwargs["net_arch"] = {
            "pi": list(hp.net_arch),
            "qf": list(hp.critic_net_arch),
        }
        policy_kwargs.update(same_named(hp, CROSSQ_POLICY_ARGS))
    else:
        kw.update(same_named(hp, OFF_POLICY_ARGS))
    if isinstance(hp, DQNConfig | QRDQNConfig):
        kw.update(same_named(hp, DQN_ARGS))
        if isinstance(hp, QRDQNConfig):
            policy_kwargs["n_quantiles"] = hp.n_quantiles
    elif isinstance(hp, SACConfig | CrossQConfig):  # TQC is a SACConfig
        ent = hp.ent_coef
        kw["ent_coef"] = ent if ent.startswith("auto") else float(ent)
        target = hp.target_entropy
        kw["target_entropy"] = target if target == "auto" else float(target)
        kw["use_sde"] = hp.use_sde
        kw["sde_sample_freq"] = hp.sde_sample_freq
        if hp.use_sde:
            policy_kwargs["log_std_init"] = hp.log_std_init
        if isinstance(hp, TQCConfig):
            kw["top_quantiles_to_drop_per_net"] = hp.top_quantiles_to_drop_per_net
            policy_kwargs["n_quantiles"] = hp.n_quantiles
            policy_kwargs["n_critics"] = hp.n_critics
    elif isinstance(hp, TD3Config):
        from stable_baselines3.common.noise import NormalActionNoise

        kw.update(same_named(hp, TD3_ARGS))
        if hp.action_noise_std > 0:
            half_width = (action_space.high - action_space.low) / 2.0
            kw["action_noise"] = NormalActionNoise(
                mean=np.zeros(action_space.shape),
                sigma=hp.action_noise_std * half_width,
            )
    kw["policy_kwargs"] = policy_kwargs
    return kw


def _gamma(hp: AlgoConfig) -> float:
    """The discount VecNormalize scales rewards by (ARS has none: SB3's)."""
    return getattr(hp, "gamma", 0.99)


def resolve_device(cfg: TrainConfig) -> str:
    """``auto`` means the CPU for MLP policies (a GPU only slows them down)."""
    if cfg.device == "auto" and cfg.policy == "MlpPolicy":
        return "cpu"
    return cfg.device


# --------------------------------------------------------------------------
# Reproducibility record
# --------------------------------------------------------------------------


VERSIONED_PACKAGES = (
    ("torch", "torch"),
    ("stable-baselines3", "stable_baselines3"),
    ("sb3-contrib", "sb3_contrib"),
    ("gymnasium", "gymnasium"),
    ("numpy", "numpy"),
    ("jax", "jax"),  # the jax backend's
)
"""(distribution, module) of the packages a run's result depends on."""


def package_versions() -> dict[str, str]:
    """Versions of the packages a run's result depends on: the ``__version__``
    of a module already imported (the code that runs), else the installed
    distribution's (reading its metadata took 9 ms a run)."""
    from importlib import metadata

    versions = {"python": platform.python_version()}
    for dist, module in VERSIONED_PACKAGES:
        version = getattr(sys.modules.get(module), "__version__", None)
        if version is not None:
            versions[dist] = str(version)
            continue
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def env_spec_hash(
    env_id: str, env_kwargs: dict[str, Any], project_dir: str | None
) -> str:
    """sha256 of the designed env's spec file, or of the Gymnasium spec
    (id, entry point, keyword arguments, time limit)."""
    spec_file = designed_spec_file(env_id, project_dir)
    if spec_file is not None:
        return "sha256:" + hashlib.sha256(spec_file.read_bytes()).hexdigest()
    import gymnasium as gym

    spec = gym.spec(env_id)
    record = {
        "id": env_id,
        "entry_point": str(spec.entry_point),
        "kwargs": {**spec.kwargs, **env_kwargs},
        "max_episode_steps": spec.max_episode_steps,
    }
    text = json.dumps(record, sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _set_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def reproduce_argv(cfg: TrainConfig) -> list[str]:
    """The ``rl-studio-engine train`` arguments that rerun ``cfg`` exactly.

    Everything that differs from the dataclass defaults is spelled out, preset
    values and hardware-derived ones included, so a later change of presets
    or another machine does not change the run.
    """
    argv = [
        "rl-studio-engine",
        "train",
        "--env",
        cfg.env,
        "--algo",
        cfg.algo,
        "--steps",
        str(cfg.total_steps),
        "--seed",
        str(cfg.seed),
    ]
    # Compared and spelled as the run records them (a curriculum as JSON).
    recorded, defaults = as_dict(cfg), as_dict(TrainConfig())
    always = ("n_envs", "vec_normalize", "torch_threads")
    skip = (
        "env",
        "algo",
        "total_steps",
        "seed",
        "hyperparameters",
        "project_dir",
        "notes",
        "preset",  # its values are spelled out below
        "hardware_profile",  # likewise; a saved one may not exist elsewhere
    )
    for key in TRAIN_FIELDS:
        if key in skip:
            continue
        value = recorded[key]
        if key in always or value != defaults[key]:
            argv += ["--set", f"{key}={_set_value(value)}"]
    hp_defaults = algo_defaults(cfg.algo)
    for key, value in as_dict(cfg.hyperparameters).items():
        if value != hp_defaults.get(key):
            argv += ["--set", f"{key}={_set_value(value)}"]
    if designed_spec_file(cfg.env, cfg.project_dir) is not None:
        argv += ["--project", str(cfg.project_dir)]
    return argv


def write_reproduce(run_dir: Path, cfg: TrainConfig) -> dict[str, Any]:
    argv = reproduce_argv(cfg)
    record = {
        "kind": "rl.train",
        "config": as_dict(cfg),
        "seed": cfg.seed,
        "versions": package_versions(),
        "env_spec_hash": env_spec_hash(cfg.env, cfg.env_kwargs, cfg.project_dir),
        "command": shlex.join(argv),
        "argv": argv,
    }
    atomic_write_json(run_dir / "reproduce.json", record)
    return record


def _wrapped(env: Any, learned_reward: tuple[str, float] | None = None) -> Any:
    """One training env copy with its family's preprocessing (Atari's, see
    :func:`engine.envs.families.wrap`) and the learned reward, if any; a
    module function, so subprocess workers can build it."""
    from engine.envs.families import wrap

    env = wrap(env, training=True)
    if learned_reward is not None:
        from engine.rl.learned_reward import LearnedRewardWrapper

        model, weight = learned_reward
        env = LearnedRewardWrapper(env, model=model, weight=weight)
    return env


# --------------------------------------------------------------------------
# The trainer
# --------------------------------------------------------------------------


class Trainer:
    """One training run: builds everything, then lets SB3's ``learn`` drive."""

    def __init__(
        self, ctx: JobContext, cfg: TrainConfig, on_eval: EvalHook | None = None
    ) -> None:
        # Validation fills these (None there means "the engine chooses").
        assert cfg.total_steps is not None and cfg.seed is not None
        assert cfg.n_envs is not None and cfg.torch_threads is not None
        self.ctx = ctx
        self.cfg = cfg
        self.on_eval = on_eval
        self.pruned_reason = ""
        self.algo = cfg.algo
        self.total_steps: int = cfg.total_steps
        self.seed: int = cfg.seed
        self.n_envs: int = cfg.n_envs
        self.torch_threads: int = cfg.torch_threads
        self.off_policy = self.algo in OFF_POLICY
        self.run_dir = ctx.run_dir
        self.ckpt_dir = ctx.checkpoint_dir
        self.tb_dir = self.run_dir / "tensorboard"
        self.model: Any = None
        """The SB3 model. The ``jax`` backend builds it after its first
        update (:meth:`ensure_built`), so that a run's first metrics row does
        not wait for torch and SB3 to import; where its settings' SB3 file
        template is cached, it holds a
        :class:`~engine.rl.compiled.sb3_file.FileModel` instead, which writes
        ``model.zip`` without torch."""
        self.logger: Any = None
        """Where the run's rows go: the model's SB3 ``Logger``, or for the
        ``jax`` backend a :class:`RowLogger`, which needs no SB3."""
        self.venv: Any = None
        self.eval_env: Any = None
        self.play_evaluation: Callable[[], Evaluation] | None = None
        """Plays the evaluation episodes instead of SB3 on ``eval_env``: the
        ``jax`` backend plays them in the env's compiled twin."""
        # evaluation and stop-condition state (saved in each checkpoint)
        self.eval_history: list[float] = []
        self.best_eval_reward: float | None = None
        self.best_eval_metrics: dict[str, float] = {}
        self.last_eval_reward: float | None = None
        self.last_eval_step = -1
        self.best_window_mean = -math.inf
        self.stale_evals = 0
        self.next_eval_step = 0
        self.next_ckpt_step = 0
        self.stopped_by = "steps"
        self.last_logged: dict[str, float] = {}
        self.resumed_from: dict[str, Any] | None = None
        self._last_progress = 0.0
        self.curriculum: Any = None
        """The CurriculumCallback of a run with a curriculum."""
        self.videos: EvalVideos | None = None
        """Records a video after each evaluation (``eval_video_episodes``)."""
        if cfg.eval_video_episodes > 0:
            self.videos = EvalVideos(
                self.run_dir,
                env=cfg.env,
                env_kwargs=dict(cfg.env_kwargs),
                episodes=cfg.eval_video_episodes,
                seed=cfg.seed,
                project_dir=Path(cfg.project_dir) if cfg.project_dir else None,
                tensorboard_dir=self.tb_dir,
                log=ctx.log,
                should_stop=lambda: ctx.should_stop,
            )
        self._curriculum_state: dict[str, Any] | None = None

    # ------------------------------------------------------------- build
    def _make_env(self, n_envs: int, seed: int, log: bool = False) -> Any:
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

        from engine.envs import families

        families.load_families()
        kind, why = families.vec_env_class(self.cfg.vec_env, self.cfg.env, n_envs)
        if log:
            self.ctx.log(f"env copies: {n_envs} in {kind} vectorized envs ({why})")
        learned = (
            (self.cfg.learned_reward, self.cfg.learned_reward_weight)
            if self.cfg.learned_reward
            else None
        )
        return make_vec_env(
            families.vec_env_id(self.cfg.env),
            n_envs=n_envs,
            seed=seed,
            env_kwargs=dict(self.cfg.env_kwargs),
            wrapper_class=_wrapped,
            wrapper_kwargs={"learned_reward": learned},
            vec_env_cls=SubprocVecEnv if kind == "subproc" else DummyVecEnv,
        )

    def _build(self) -> None:
        import torch
        from stable_baselines3.common.logger import Logger
        from stable_baselines3.common.vec_env import VecNormalize

        cfg = self.cfg
        torch.set_num_threads(self.torch_threads)
        device = resolve_device(cfg)
        seed = self.seed
        hp = cfg.hyperparameters
        cls = algo_class(self.algo)
        venv = self._make_env(self.n_envs, seed, log=True)
        latest = self.latest_checkpoint() if self.ctx.resume else None
        if self.ctx.resume and latest is None:
            self.ctx.log("no checkpoint to resume from; starting from scratch")
            self._truncate_metrics(0)
        if latest is not None:
            if cfg.vec_normalize:
                venv = VecNormalize.load(str(latest / VECNORMALIZE_FILE), venv)
                venv.training = True
            model = cls.load(latest / "model.zip", env=venv, device=device)
            state = json.loads((latest / "state.json").read_text(encoding="utf-8"))
            self._restore_state(state)
            self._curriculum_state = state.get("curriculum")
            buffer_size = 0
            replay = latest / "replay_buffer.pkl"
            if self.off_policy and replay.exists():
                model.load_replay_buffer(replay)
                buffer_size = int(model.replay_buffer.size())
            self.resumed_from = {
                "step": int(model.num_timesteps),
                "checkpoint": str(latest),
                "replay_buffer_transitions": buffer_size,
            }
            self._truncate_metrics(int(model.num_timesteps))
            self.ctx.log(
                f"resumed from {latest.name} at step {model.num_timesteps}"
                + (f" with {buffer_size} replay transitions" if self.off_policy else "")
            )
        else:
            if cfg.vec_normalize:
                venv = VecNormalize(venv, gamma=_gamma(hp))
            assert cfg.policy is not None  # filled by validation
            kwargs = model_kwargs(hp, venv.action_space)
            policy = policy_name(self.algo, cfg.policy)

            def make(policy_kwargs: dict[str, Any]) -> Any:
                return cls(
                    policy,
                    venv,
                    seed=seed,
                    device=device,
                    verbose=0,
                    **{**kwargs, "policy_kwargs": policy_kwargs},
                )

            if cfg.start_from:
                from engine.rl.start_from import build_model

                model = build_model(
                    make,
                    cfg.start_from,
                    venv=venv,
                    env_id=cfg.env,
                    project_dir=cfg.project_dir,
                    log=self.ctx.log,
                )
            else:
                model = make(kwargs["policy_kwargs"])
        self.venv = venv
        self.model = model
        if cfg.eval_every_steps > 0:
            # Episodes played side by side share each policy forward pass;
            # all of them at once (one per env copy) take the fewest passes
            # and env steps. SB3's evaluate_policy gives each env a fixed
            # share of the episodes, so short episodes do not crowd out
            # long ones.
            eval_envs = eval_env_count(cfg.eval_episodes)
            eval_env = self._make_env(eval_envs, seed + EVAL_SEED_OFFSET)
            if cfg.vec_normalize:
                eval_env = VecNormalize(
                    eval_env, training=False, norm_reward=False, gamma=_gamma(hp)
                )
            self.eval_env = eval_env
        if cfg.curriculum is not None:
            self._build_curriculum(cfg.curriculum, latest is not None)
        if self.logger is None:
            self.tb_dir.mkdir(parents=True, exist_ok=True)
            self.logger = Logger(
                folder=str(self.tb_dir),
                output_formats=[
                    # Every dump to the job's metrics, and to TensorBoard.
                    _log_writer(lambda step, values, _: self._on_logged(step, values)),
                    _log_writer(*tensorboard_sink(self.tb_dir)),
                ],
            )
            model.set_logger(self.logger)

    def ensure_built(self) -> None:
        """The SB3 side (model, envs), built now if it is not yet."""
        if self.model is None:
            self._build()

    def _build_curriculum(self, curriculum: CurriculumConfig, resumed: bool) -> None:
        from engine.envs.curriculum import Schedule
        from engine.rl.curriculum import curriculum_callback_class

        schedule = Schedule(curriculum)
        if resumed and self._curriculum_state:
            schedule.restore(self._curriculum_state)
        envs = [e for e in (self.venv, self.eval_env) if e is not None]
        self.curriculum = curriculum_callback_class()(schedule, envs, self.ctx.log)
        self.curriculum.apply()
        self.ctx.log(
            f"curriculum: stage {schedule.stage} of {len(schedule.stages) - 1}, "
            f"advancing at a success rate of {curriculum.threshold:g} over "
            f"{curriculum.window} evaluation episodes"
        )

    # ------------------------------------------------------------- train
    def train(self) -> dict[str, Any]:
        ctx, cfg = self.ctx, self.cfg
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.ckpt_dir.mkdir(parents=True, exist_ok=True)
        record = write_reproduce(self.run_dir, cfg)
        ctx.log(f"reproduce with: {record['command']}")
        compiled = cfg.backend == "jax"
        if compiled:
            from engine.rl.compiled.learner import jax_device

            self.logger = RowLogger(self._on_logged, self.tb_dir)
            # A resumed run starts from its checkpoint's SB3 model; a new one
            # builds it after the first update (engine.rl.compiled.learner).
            if ctx.resume:
                self._build()
            start = self.num_timesteps
            device: Any = jax_device(cfg)  # where JAX trains, not torch
        else:
            self._build()
            start = self.num_timesteps
            device = self.model.device
        ctx.log(
            f"{self.algo} on {cfg.env}: {self.total_steps} steps, "
            f"{self.n_envs} envs, seed {self.seed}, backend {cfg.backend}, "
            f"device {device}, {self.torch_threads} torch threads"
        )
        ctx.log(preset_provenance(cfg.env, self.algo, cfg.project_dir, cfg.preset))
        for note in cfg.notes:
            ctx.log(f"fitted to this run: {note}")
        if self.resumed_from is None:
            self.next_eval_step = cfg.eval_every_steps
            self.next_ckpt_step = cfg.checkpoint_every_steps
        remaining = self.total_steps - start
        try:
            # should_stop is read once here, as before there were two backends.
            to_train = remaining > 0 and not ctx.should_stop
            if to_train and compiled:
                from engine.rl.compiled.learner import learn

                learn(self)
            elif to_train:
                self._learn_sb3(remaining)
            self.ensure_built()
            if ctx.should_stop and self.stopped_by == "steps":
                self.stopped_by = ctx.stop_reason
            steps = self.num_timesteps
            if (
                self.stopped_by not in (*STOP_REASONS, "pruned")
                and self.evaluates
                # SB3 may overshoot total_steps by part of a rollout; an eval
                # at total_steps already describes the final policy.
                and self.last_eval_step < min(steps, self.total_steps)
            ):
                self.evaluate()
            self.save_checkpoint()
            ctx.progress(min(steps, self.total_steps), self.total_steps)
            if self.curriculum is not None and self.best_eval_reward is None:
                schedule = self.curriculum.schedule
                ctx.log(
                    f"warning: the curriculum ended at stage {schedule.stage} of "
                    f"{len(schedule.stages) - 1} without an evaluation of the env "
                    "as designed, so the run's model is its last checkpoint, not "
                    "the best by evaluation."
                )
        finally:
            # Never let cleanup hide the error that ended training.
            for closing in (self.logger, self.venv, self.eval_env):
                if closing is not None:
                    with contextlib.suppress(Exception):
                        closing.close()
        return self.summary()

    def _learn_sb3(self, remaining: int) -> None:
        """SB3's ``learn`` for the remaining steps, with the studio's callback."""
        callback: Any = _studio_callback_class()(self)
        if self.curriculum is not None:
            from stable_baselines3.common.callbacks import CallbackList

            callback = CallbackList([callback, self.curriculum])
        self.model.learn(
            total_timesteps=remaining,
            callback=callback,
            log_interval=1,
            reset_num_timesteps=self.resumed_from is None,
            progress_bar=False,
        )

    @property
    def evaluates(self) -> bool:
        """Whether the run evaluates: on ``eval_env`` in SB3, or (``jax``)
        in the env's compiled twin, which needs no SB3 env."""
        return self.cfg.eval_every_steps > 0 and (
            self.eval_env is not None or self.play_evaluation is not None
        )

    @property
    def num_timesteps(self) -> int:
        """Steps trained so far (0 before the SB3 model is built)."""
        return 0 if self.model is None else int(self.model.num_timesteps)

    # ------------------------------------------------------- SB3 hooks
    def _on_logged(self, step: int, values: dict[str, Any]) -> None:
        """Everything SB3's logger dumps (KVWriter.write) lands here."""
        numeric = {k: float(v) for k, v in values.items() if _is_number(v)}
        self.last_logged.update(numeric)
        if numeric:
            self.ctx.metrics(step, numeric)

    def on_step(self, num_timesteps: int) -> bool:
        """Called after every vectorized step; False stops ``learn``."""
        now = time.monotonic()
        if now - self._last_progress >= PROGRESS_INTERVAL_S:
            self._last_progress = now
            self.ctx.progress(num_timesteps, self.total_steps)
        if self.ctx.should_stop:
            self.stopped_by = self.ctx.stop_reason
            return False
        keep_going = True
        if self.next_eval_step and num_timesteps >= self.next_eval_step:
            every = self.cfg.eval_every_steps
            self.next_eval_step = (num_timesteps // every + 1) * every
            keep_going = self.evaluate()
        if self.next_ckpt_step and num_timesteps >= self.next_ckpt_step:
            every = self.cfg.checkpoint_every_steps
            self.next_ckpt_step = (num_timesteps // every + 1) * every
            self.save_checkpoint()
        return keep_going

    # -------------------------------------------------------- evaluate
    def evaluate(self) -> bool:
        """Evaluate on the eval env, log ``eval/*``, keep the best model and
        apply the reward and convergence stop conditions; False to stop."""
        import numpy as np

        cfg, model = self.cfg, self.model
        if not self.evaluates:
            return True
        if cfg.vec_normalize:
            from stable_baselines3.common.vec_env import sync_envs_normalization

            sync_envs_normalization(self.venv, self.eval_env)
        result = (
            self.play_evaluation()
            if self.play_evaluation is not None
            else evaluate(
                model,
                self.eval_env,
                episodes=cfg.eval_episodes,
                deterministic=cfg.eval_deterministic,
                masked=self.algo == "MaskablePPO",
                # a long evaluation must not delay Stop
                should_stop=lambda: self.ctx.should_stop,
            )
        )
        if result.stopped:
            self.stopped_by = self.ctx.stop_reason
            return False
        rewards, lengths, successes = result.rewards, result.lengths, result.successes
        step = int(model.num_timesteps)
        mean = float(np.mean(rewards))
        metrics = {
            "eval/mean_reward": mean,
            "eval/std_reward": float(np.std(rewards)),
            "eval/mean_ep_length": float(np.mean(lengths)),
        }
        if successes:
            metrics["eval/success_rate"] = float(np.mean(successes))
        # Rewards of easier stages do not compare with the env's own: the
        # best model and the stop conditions look at the last stage only.
        final_stage = self.curriculum is None or self.curriculum.schedule.last
        if self.curriculum is not None:
            metrics.update(self.curriculum.on_eval([bool(s) for s in successes], step))
        # Through the run's logger, so TensorBoard and metrics.jsonl both get it.
        for key, value in metrics.items():
            self.logger.record(key, value)
        self.logger.dump(step)
        if self.videos is not None:
            self.videos.record(model, self.venv if cfg.vec_normalize else None, step)
        self.last_eval_reward = mean
        self.last_eval_step = step
        if not final_stage:
            return self._on_eval_hook(step, mean)
        self.eval_history.append(mean)
        if self.best_eval_reward is None or mean > self.best_eval_reward:
            self.best_eval_reward = mean
            self.best_eval_metrics = {**metrics, "step": step}
            self._save_best()
        if not self._on_eval_hook(step, mean):
            return False
        target = cfg.target_eval_reward
        if target is not None and mean >= target:
            self.stopped_by = "target"
            self.ctx.log(f"eval mean reward {mean:.2f} reached the target {target:g}")
            return False
        patience = cfg.convergence_patience
        window = cfg.convergence_window
        if patience is not None and len(self.eval_history) >= window:
            window_mean = float(np.mean(self.eval_history[-window:]))
            if window_mean > self.best_window_mean + cfg.convergence_min_delta:
                self.best_window_mean = window_mean
                self.stale_evals = 0
            else:
                self.stale_evals += 1
                if self.stale_evals >= patience:
                    self.stopped_by = "convergence"
                    self.ctx.log(
                        f"converged: eval mean over {window} evaluations has not "
                        f"improved for {patience} evaluations"
                    )
                    return False
        return True

    def _on_eval_hook(self, step: int, mean: float) -> bool:
        """Tell ``on_eval`` (a sweep's pruner); False when it stops the run."""
        if self.on_eval is not None:
            reason = self.on_eval(step, mean)
            if reason:
                self.stopped_by = "pruned"
                self.pruned_reason = reason
                self.ctx.log(reason)
                return False
        return True

    # ------------------------------------------------------ checkpoints
    def _state(self) -> dict[str, Any]:
        # NaN in what SB3 logged (explained variance when every return is
        # equal) is stored as null: state.json must stay strict JSON.
        state: dict[str, Any] = json_safe(
            {
                "step": int(self.model.num_timesteps),
                "algo": self.algo,
                # So that a summary read from this checkpoint says where this
                # attempt started (engine.rl.checkpoints.summary_on_disk).
                "resumed_from": self.resumed_from,
                "env": self.cfg.env,
                "eval_history": self.eval_history,
                "best_eval_reward": self.best_eval_reward,
                "best_eval_metrics": self.best_eval_metrics,
                "last_eval_reward": self.last_eval_reward,
                "last_eval_step": self.last_eval_step,
                "best_window_mean": None
                if math.isinf(self.best_window_mean)
                else self.best_window_mean,
                "stale_evals": self.stale_evals,
                "next_eval_step": self.next_eval_step,
                "next_ckpt_step": self.next_ckpt_step,
                "last_logged": self.last_logged,
                "curriculum": None
                if self.curriculum is None
                else self.curriculum.schedule.state(),
            }
        )
        return state

    def _restore_state(self, state: dict[str, Any]) -> None:
        self.eval_history = [float(x) for x in state.get("eval_history", [])]
        self.best_eval_reward = state.get("best_eval_reward")
        self.best_eval_metrics = dict(state.get("best_eval_metrics") or {})
        self.last_eval_reward = state.get("last_eval_reward")
        self.last_eval_step = int(state.get("last_eval_step", -1))
        bwm = state.get("best_window_mean")
        self.best_window_mean = -math.inf if bwm is None else float(bwm)
        self.stale_evals = int(state.get("stale_evals", 0))
        self.next_eval_step = int(state.get("next_eval_step", 0))
        self.next_ckpt_step = int(state.get("next_ckpt_step", 0))
        self.last_logged = dict(state.get("last_logged") or {})

    def _write_model_dir(self, folder: Path, *, replay: bool) -> None:
        """Save model, normalization stats, (replay buffer) and state into a
        fresh folder (a :func:`temp_path`, removed again if this fails);
        callers rename it into place."""
        folder.mkdir(parents=True)
        try:
            self.model.save(folder / "model.zip")
            if self.cfg.vec_normalize:
                self.venv.save(str(folder / VECNORMALIZE_FILE))
            if replay and self.off_policy:
                self.model.save_replay_buffer(folder / "replay_buffer.pkl")
            atomic_write_json(folder / "state.json", self._state())
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise

    def save_checkpoint(self) -> Path:
        """A resumable checkpoint at the current step; prunes old ones."""
        step = int(self.model.num_timesteps)
        final = self.ckpt_dir / f"{CHECKPOINT_PREFIX}{step:010d}"
        tmp = temp_path(final)
        self._write_model_dir(tmp, replay=True)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        checkpoints = self.checkpoints()
        for old in checkpoints[: -self.cfg.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        # Only the newest checkpoint carries the (large) replay buffer.
        for old in checkpoints[:-1]:
            with contextlib.suppress(FileNotFoundError):
                (old / "replay_buffer.pkl").unlink()
        return final

    def _save_best(self) -> None:
        best = self.ckpt_dir / BEST_FOLDER
        tmp = temp_path(best)
        self._write_model_dir(tmp, replay=False)
        old = self.ckpt_dir / ".old-best"
        if best.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(best, old)
        os.replace(tmp, best)
        shutil.rmtree(old, ignore_errors=True)

    def checkpoints(self) -> list[Path]:
        """Complete periodic checkpoints, oldest first."""
        return checkpoints(self.ckpt_dir)

    def latest_checkpoint(self) -> Path | None:
        return latest_checkpoint(self.ckpt_dir)

    def _truncate_metrics(self, step: int) -> None:
        """Drop rows logged after the checkpoint (a crash between checkpoint
        and the end leaves some), so that the resumed curves stay monotonic."""
        path = self.run_dir / contract.METRICS_FILE
        if not path.exists():
            return
        rows = list(iter_metrics(path))
        kept = [r for r in rows if int(r.get("step", 0)) <= step]
        if len(kept) != len(rows):
            text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in kept)
            atomic_write_text(path, text)

    # ---------------------------------------------------------- summary
    def summary(self) -> dict[str, Any]:
        best_dir = self.ckpt_dir / BEST_FOLDER
        if (best_dir / "model.zip").exists():
            model_dir = best_dir
            metrics = {k: v for k, v in self.best_eval_metrics.items() if k != "step"}
        else:
            latest = self.latest_checkpoint()
            if latest is None:
                raise EngineError("Training ended without saving a model.")
            model_dir = latest
            metrics = {}
        out = summary_of(self.cfg, self._state(), model_dir, metrics, self.stopped_by)
        if self.pruned_reason:
            # Stopped on purpose, though by no one of STOP_REASONS.
            out["status"] = "stopped"
            out["reason"] = self.pruned_reason
        return out


# --------------------------------------------------------------------------
# SB3 subclasses, defined on first use so that importing this module does
# not import SB3 or torch.
# --------------------------------------------------------------------------

_classes: dict[str, type] = {}


LogSink = Callable[[int, dict[str, Any], dict[str, tuple[str, ...]]], None]
"""What receives an SB3 logger dump: step, key/values, and the output
formats each key is excluded from."""


def _log_writer(write: LogSink, close: Callable[[], None] = lambda: None) -> Any:
    """An SB3 logger output format (``KVWriter``) handing every dump to
    ``write``; ``close`` when the logger closes."""
    if "writer" not in _classes:
        from stable_baselines3.common.logger import KVWriter

        class SinkWriter(KVWriter):
            def __init__(self, write: LogSink, close: Callable[[], None]) -> None:
                self._write, self._close = write, close

            def write(
                self,
                key_values: dict[str, Any],
                key_excluded: dict[str, tuple[str, ...]],
                step: int = 0,
            ) -> None:
                self._write(int(step), key_values, key_excluded)

            def close(self) -> None:
                self._close()

        _classes["writer"] = SinkWriter
    return _classes["writer"](write, close)


def tensorboard_sink(folder: Path) -> tuple[LogSink, Callable[[], None]]:
    """Scalars to a TensorBoard event file, one event per dump: (write, close).

    Instead of SB3's ``TensorBoardOutputFormat``, which goes through torch's
    ``SummaryWriter`` one scalar at a time, a background thread computing
    CRCs in pure Python, and a wait for the disk after every dump: together
    about 2 % of PPO's CartPole throughput.
    """
    from engine.rl.tensorboard import EventFile

    events = EventFile(folder)

    def scalars(
        step: int, key_values: dict[str, Any], excluded: dict[str, tuple[str, ...]]
    ) -> None:
        values = {
            key: float(value)
            for key, value in key_values.items()
            if "tensorboard" not in (excluded.get(key) or ()) and _is_number(value)
        }
        if values:
            events.scalars(step, values)

    return scalars, events.close


class RowLogger:
    """SB3's ``Logger`` as the ``jax`` backend uses it (``record``, ``dump``,
    ``close``), without importing SB3: each dump is one row of the run's
    metrics and one TensorBoard event, as through SB3's logger."""

    def __init__(
        self, on_logged: Callable[[int, dict[str, Any]], None], tb_dir: Path
    ) -> None:
        self.on_logged = on_logged
        self.tensorboard, self.close = tensorboard_sink(tb_dir)
        self.values: dict[str, Any] = {}

    def record(self, key: str, value: Any) -> None:
        self.values[key] = value

    def dump(self, step: int) -> None:
        values, self.values = self.values, {}
        self.on_logged(step, values)
        self.tensorboard(step, values, {})


def _is_number(value: Any) -> bool:
    """A real number SB3 logged (numpy scalars included; bools and text not)."""
    if isinstance(value, bool) or not hasattr(value, "__float__"):
        return False
    return getattr(value, "ndim", 0) == 0


def _studio_callback_class() -> type:
    if "callback" not in _classes:
        from stable_baselines3.common.callbacks import BaseCallback

        class StudioCallback(BaseCallback):
            """Progress, stop, evaluation and checkpoints, after every step."""

            def __init__(self, trainer: Trainer) -> None:
                super().__init__(verbose=0)
                self.trainer = trainer

            def _on_step(self) -> bool:
                return self.trainer.on_step(self.num_timesteps)

        _classes["callback"] = StudioCallback
    return _classes["callback"]
