"""Settings of an ``rl.train`` run: one dataclass per algorithm, presets, checks.

A run's config is a plain dict (it travels as JSON). :func:`validate` is the
job kind's validator: it fills every default (preset for the environment and
algorithm, hardware-derived vectorisation and thread count, a random seed when
none is given), resolves ``algo="auto"`` and refuses anything that cannot
work with a :class:`~engine.errors.ConfigError` naming the field, before any
process starts. Its output is idempotent: validating a validated config gives
the same config back.

Units: every duration is counted in **environment steps** (one ``step()`` of
one environment copy), never in rollouts, iterations or episodes, unless the
field says otherwise.

Top-level keys (:class:`TrainConfig`) sit at the root of the dict; algorithm
hyperparameters (:class:`PPOConfig`, ...) under ``"hyperparameters"``.
Errors on a hyperparameter name the field ``"hyperparameters.<name>"``.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import importlib.util
import inspect
import itertools
import math
import os
import random
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import ConfigError

# --------------------------------------------------------------------------
# Algorithm hyperparameters
# --------------------------------------------------------------------------


@dataclass
class _PPOBase:
    """Fields PPO and MaskablePPO share."""

    learning_rate: float = 3e-4
    """Adam step size at the start of training (per gradient step)."""
    learning_rate_schedule: str = "constant"
    """``constant``, or ``linear``: decays to 0 at ``total_steps``."""
    n_steps: int = 2048
    """Steps collected per environment copy before each update; a rollout is
    ``n_steps * n_envs`` steps."""
    batch_size: int = 64
    """Transitions per minibatch (at most ``n_steps * n_envs``)."""
    n_epochs: int = 10
    """Passes over each rollout per update."""
    gamma: float = 0.99
    """Discount factor per step, in (0, 1]."""
    gae_lambda: float = 0.95
    """Generalized Advantage Estimation lambda, in [0, 1]."""
    clip_range: float = 0.2
    """Policy ratio clipping (dimensionless, > 0)."""
    clip_range_schedule: str = "constant"
    """``constant``, or ``linear``: ``clip_range`` decays to 0 at the end."""
    normalize_advantage: bool = True
    """Normalize advantages per minibatch."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus in the loss (>= 0)."""
    vf_coef: float = 0.5
    """Weight of the value loss in the loss (>= 0)."""
    max_grad_norm: float = 0.5
    """Gradient norm clip (> 0)."""
    target_kl: float | None = None
    """Stop an update's epochs early when the approximate KL exceeds this."""
    net_arch: list[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer widths of the policy and value networks (units)."""
    activation: str = "tanh"
    """Hidden activation: ``tanh``, ``relu``, ``elu`` or ``leaky_relu``."""
    ortho_init: bool = True
    """Orthogonal weight initialisation."""


@dataclass
class PPOConfig(_PPOBase):
    """Proximal Policy Optimization (stable-baselines3 ``PPO``)."""

    use_sde: bool = False
    """State-dependent exploration (continuous actions only)."""
    sde_sample_freq: int = -1
    """Resample the SDE noise every this many steps (-1: once per rollout)."""
    log_std_init: float = 0.0
    """Initial log standard deviation of Gaussian actions (continuous only)."""


@dataclass
class MaskablePPOConfig(_PPOBase):
    """PPO with invalid-action masking (sb3-contrib ``MaskablePPO``); the
    environment must expose ``action_masks()``. Discrete actions only."""


@dataclass
class A2CConfig:
    """Advantage Actor-Critic (stable-baselines3 ``A2C``)."""

    learning_rate: float = 7e-4
    """Optimizer step size at the start of training (per gradient step)."""
    learning_rate_schedule: str = "constant"
    """``constant``, or ``linear``: decays to 0 at ``total_steps``."""
    n_steps: int = 5
    """Steps collected per environment copy before each update."""
    gamma: float = 0.99
    """Discount factor per step, in (0, 1]."""
    gae_lambda: float = 1.0
    """Generalized Advantage Estimation lambda, in [0, 1] (1 = plain returns)."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus in the loss (>= 0)."""
    vf_coef: float = 0.5
    """Weight of the value loss in the loss (>= 0)."""
    max_grad_norm: float = 0.5
    """Gradient norm clip (> 0)."""
    normalize_advantage: bool = False
    """Normalize advantages per update."""
    use_rms_prop: bool = True
    """RMSprop (as in the A2C paper) instead of Adam."""
    use_sde: bool = False
    """State-dependent exploration (continuous actions only)."""
    sde_sample_freq: int = -1
    """Resample the SDE noise every this many steps (-1: once per rollout)."""
    net_arch: list[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer widths of the policy and value networks (units)."""
    activation: str = "tanh"
    """Hidden activation: ``tanh``, ``relu``, ``elu`` or ``leaky_relu``."""
    ortho_init: bool = True
    """Orthogonal weight initialisation."""
    log_std_init: float = 0.0
    """Initial log standard deviation of Gaussian actions (continuous only)."""


@dataclass
class DQNConfig:
    """Deep Q-Network (stable-baselines3 ``DQN``); discrete actions only."""

    learning_rate: float = 1e-4
    """Adam step size at the start of training (per gradient step)."""
    learning_rate_schedule: str = "constant"
    """``constant``, or ``linear``: decays to 0 at ``total_steps``."""
    buffer_size: int = 1_000_000
    """Replay buffer capacity (transitions)."""
    learning_starts: int = 100
    """Steps collected before the first gradient step."""
    batch_size: int = 32
    """Transitions per gradient step."""
    tau: float = 1.0
    """Target network soft-update coefficient in (0, 1] (1 = hard copy)."""
    gamma: float = 0.99
    """Discount factor per step, in (0, 1]."""
    train_freq: int = 4
    """Update the network every this many steps (per environment copy)."""
    gradient_steps: int = 1
    """Gradient steps per update (-1: as many as steps collected)."""
    target_update_interval: int = 10_000
    """Copy the network to the target network every this many steps."""
    exploration_fraction: float = 0.1
    """Fraction of ``total_steps`` over which epsilon decays, in [0, 1]."""
    exploration_initial_eps: float = 1.0
    """Epsilon (probability of a random action) at the start, in [0, 1]."""
    exploration_final_eps: float = 0.05
    """Epsilon after the decay, in [0, 1]."""
    max_grad_norm: float = 10.0
    """Gradient norm clip (> 0)."""
    net_arch: list[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer widths of the Q-network (units)."""
    activation: str = "relu"
    """Hidden activation: ``tanh``, ``relu``, ``elu`` or ``leaky_relu``."""


@dataclass
class SACConfig:
    """Soft Actor-Critic (stable-baselines3 ``SAC``); continuous actions only."""

    learning_rate: float = 3e-4
    """Adam step size at the start of training (per gradient step)."""
    learning_rate_schedule: str = "constant"
    """``constant``, or ``linear``: decays to 0 at ``total_steps``."""
    buffer_size: int = 1_000_000
    """Replay buffer capacity (transitions)."""
    learning_starts: int = 100
    """Steps collected (random actions) before the first gradient step."""
    batch_size: int = 256
    """Transitions per gradient step."""
    tau: float = 0.005
    """Target network soft-update coefficient in (0, 1]."""
    gamma: float = 0.99
    """Discount factor per step, in (0, 1]."""
    train_freq: int = 1
    """Update the networks every this many steps (per environment copy)."""
    gradient_steps: int = 1
    """Gradient steps per update (-1: as many as steps collected)."""
    ent_coef: str = "auto"
    """Entropy weight: a number, ``auto`` (learned) or ``auto_0.1`` (learned,
    starting at 0.1)."""
    target_entropy: str = "auto"
    """Target entropy for a learned ``ent_coef``: ``auto`` (-action dims) or a
    number."""
    use_sde: bool = False
    """State-dependent exploration instead of Gaussian noise."""
    sde_sample_freq: int = -1
    """Resample the SDE noise every this many steps (-1: at the start only)."""
    net_arch: list[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer widths of the actor and critics (units)."""
    activation: str = "relu"
    """Hidden activation: ``tanh``, ``relu``, ``elu`` or ``leaky_relu``."""
    log_std_init: float = -3.0
    """Initial log standard deviation of the actor (with ``use_sde``)."""


@dataclass
class TD3Config:
    """Twin Delayed DDPG (stable-baselines3 ``TD3``); continuous actions only."""

    learning_rate: float = 1e-3
    """Adam step size at the start of training (per gradient step)."""
    learning_rate_schedule: str = "constant"
    """``constant``, or ``linear``: decays to 0 at ``total_steps``."""
    buffer_size: int = 1_000_000
    """Replay buffer capacity (transitions)."""
    learning_starts: int = 100
    """Steps collected (random actions) before the first gradient step."""
    batch_size: int = 256
    """Transitions per gradient step."""
    tau: float = 0.005
    """Target network soft-update coefficient in (0, 1]."""
    gamma: float = 0.99
    """Discount factor per step, in (0, 1]."""
    train_freq: int = 1
    """Update the networks every this many steps (per environment copy)."""
    gradient_steps: int = 1
    """Gradient steps per update (-1: as many as steps collected)."""
    policy_delay: int = 2
    """Actor and target updates once per this many critic updates."""
    target_policy_noise: float = 0.2
    """Std of the smoothing noise added to target actions (action units)."""
    target_noise_clip: float = 0.5
    """Absolute limit of that smoothing noise (action units)."""
    action_noise_std: float = 0.1
    """Std of the Gaussian exploration noise, as a fraction of the action
    range's half-width (0 = none)."""
    net_arch: list[int] = field(default_factory=lambda: [400, 300])
    """Hidden layer widths of the actor and critics (units)."""
    activation: str = "relu"
    """Hidden activation: ``tanh``, ``relu``, ``elu`` or ``leaky_relu``."""


ALGO_CONFIGS: dict[str, type] = {
    "PPO": PPOConfig,
    "A2C": A2CConfig,
    "DQN": DQNConfig,
    "SAC": SACConfig,
    "TD3": TD3Config,
    "MaskablePPO": MaskablePPOConfig,
}
"""Algorithm name (as SB3 spells it) -> hyperparameter dataclass."""

ON_POLICY = frozenset({"PPO", "A2C", "MaskablePPO"})
OFF_POLICY = frozenset({"DQN", "SAC", "TD3"})
DISCRETE_ONLY = frozenset({"DQN", "MaskablePPO"})
CONTINUOUS_ONLY = frozenset({"SAC", "TD3"})
ACTIVATIONS = ("tanh", "relu", "elu", "leaky_relu")
SCHEDULES = ("constant", "linear")


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------


@dataclass
class TrainConfig:
    """Everything about an ``rl.train`` run except the algorithm's own
    hyperparameters (those go in ``hyperparameters``)."""

    env: str = ""
    """Gymnasium id (``CartPole-v1``) or designed env (``rlstudio/<name>-v0``)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments passed to ``gymnasium.make``."""
    algo: str = "auto"
    """``PPO``, ``A2C``, ``DQN``, ``SAC``, ``TD3``, ``MaskablePPO`` or ``auto``
    (MaskablePPO for envs with ``action_masks()``, else PPO). PPO on an env
    with action masks becomes MaskablePPO."""
    total_steps: int | None = None
    """Training length in environment steps (summed over env copies);
    None: the preset's length."""
    seed: int | None = None
    """Random seed; None: one is drawn and recorded."""
    n_envs: int | None = None
    """Environment copies stepped together; None: preset or hardware."""
    vec_normalize: bool | None = None
    """Normalize observations and rewards with running statistics; None:
    preset."""
    eval_every_steps: int = 10_000
    """Evaluate on a separate env every this many steps (0: never)."""
    eval_episodes: int = 10
    """Episodes per evaluation."""
    eval_deterministic: bool = True
    """Evaluate with the greedy (deterministic) policy."""
    checkpoint_every_steps: int = 50_000
    """Save a resumable checkpoint every this many steps (0: only at the end
    and on stop)."""
    keep_checkpoints: int = 3
    """Periodic checkpoints kept (the best-by-eval one is kept besides)."""
    target_eval_reward: float | None = None
    """Stop once the eval mean reward reaches this (None: never)."""
    convergence_window: int = 5
    """Evaluations averaged by the convergence test."""
    convergence_patience: int | None = None
    """Stop when the windowed eval mean has not improved by more than
    ``convergence_min_delta`` for this many evaluations (None: never)."""
    convergence_min_delta: float = 0.0
    """Smallest improvement of the windowed eval mean that counts (reward)."""
    torch_threads: int | None = None
    """Torch intra-op threads; None: from the hardware."""
    device: str = "auto"
    """``auto`` (GPU if present, except for MLP policies), ``cpu``, ``cuda``,
    ``cuda:N`` or ``mps``."""
    policy: str | None = None
    """SB3 policy class name; None: ``MultiInputPolicy`` for dict
    observations, ``CnnPolicy`` for images, else ``MlpPolicy``."""
    name: str = ""
    """Display name of the model this run registers ('' = generated)."""
    project_dir: str | None = None
    """Project folder, used to find designed envs (``rlstudio/...``)."""
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    """Overrides of the algorithm's dataclass fields (e.g. ``learning_rate``)."""


TRAIN_FIELDS = tuple(f.name for f in dataclasses.fields(TrainConfig))
CONTINUOUS_HINT = "SAC, TD3, PPO or A2C"
DISCRETE_HINT = "PPO, A2C or DQN"


# --------------------------------------------------------------------------
# Presets in the spirit of RL Zoo's tuned settings (rl-baselines3-zoo,
# hyperparams/*.yml). Keys at the preset's root are TrainConfig fields; the
# rest go to the algorithm's dataclass.
# --------------------------------------------------------------------------

_DQN_CLASSIC: dict[str, Any] = {
    "total_steps": 100_000,
    "learning_rate": 6.3e-4,
    "batch_size": 128,
    "buffer_size": 50_000,
    "learning_starts": 0,
    "gamma": 0.99,
    "target_update_interval": 250,
    "train_freq": 4,
    "gradient_steps": -1,
    "exploration_fraction": 0.12,
    "exploration_final_eps": 0.1,
    "net_arch": [256, 256],
}

PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "CartPole-v1": {
        "PPO": {
            "n_envs": 8,
            "total_steps": 100_000,
            "n_steps": 32,
            "batch_size": 256,
            "gae_lambda": 0.8,
            "gamma": 0.98,
            "n_epochs": 20,
            "ent_coef": 0.0,
            "learning_rate": 1e-3,
            "learning_rate_schedule": "linear",
            "clip_range": 0.2,
            "clip_range_schedule": "linear",
        },
        "A2C": {"n_envs": 8, "total_steps": 500_000, "ent_coef": 0.0},
        "DQN": {
            "total_steps": 50_000,
            "learning_rate": 2.3e-3,
            "batch_size": 64,
            "buffer_size": 100_000,
            "learning_starts": 1000,
            "gamma": 0.99,
            "target_update_interval": 10,
            "train_freq": 256,
            "gradient_steps": 128,
            "exploration_fraction": 0.16,
            "exploration_final_eps": 0.04,
            "net_arch": [256, 256],
        },
    },
    "MountainCar-v0": {
        "PPO": {
            "vec_normalize": True,
            "n_envs": 16,
            "total_steps": 1_000_000,
            "n_steps": 16,
            "gae_lambda": 0.98,
            "gamma": 0.99,
            "n_epochs": 4,
            "ent_coef": 0.0,
        },
        "A2C": {
            "vec_normalize": True,
            "n_envs": 16,
            "total_steps": 1_000_000,
            "ent_coef": 0.0,
        },
        "DQN": {
            "total_steps": 120_000,
            "learning_rate": 4e-3,
            "batch_size": 128,
            "buffer_size": 10_000,
            "learning_starts": 1000,
            "gamma": 0.98,
            "target_update_interval": 600,
            "train_freq": 16,
            "gradient_steps": 8,
            "exploration_fraction": 0.2,
            "exploration_final_eps": 0.07,
            "net_arch": [256, 256],
        },
    },
    "Acrobot-v1": {
        "PPO": {
            "vec_normalize": True,
            "n_envs": 16,
            "total_steps": 1_000_000,
            "n_steps": 256,
            "gae_lambda": 0.94,
            "gamma": 0.99,
            "n_epochs": 4,
            "ent_coef": 0.0,
        },
        "A2C": {
            "vec_normalize": True,
            "n_envs": 16,
            "total_steps": 500_000,
            "ent_coef": 0.0,
        },
        "DQN": dict(_DQN_CLASSIC),
    },
    "Pendulum-v1": {
        "PPO": {
            "n_envs": 4,
            "total_steps": 100_000,
            "n_steps": 1024,
            "gae_lambda": 0.95,
            "gamma": 0.9,
            "n_epochs": 10,
            "ent_coef": 0.0,
            "learning_rate": 1e-3,
            "clip_range": 0.2,
            "use_sde": True,
            "sde_sample_freq": 4,
        },
        "A2C": {
            "vec_normalize": True,
            "n_envs": 8,
            "total_steps": 1_000_000,
            "ent_coef": 0.0,
            "max_grad_norm": 0.5,
            "n_steps": 8,
            "gae_lambda": 0.9,
            "vf_coef": 0.4,
            "gamma": 0.9,
            "use_rms_prop": True,
            "normalize_advantage": False,
            "learning_rate": 7e-4,
            "learning_rate_schedule": "linear",
            "use_sde": True,
            "log_std_init": -2.0,
            "ortho_init": False,
        },
        "SAC": {"total_steps": 20_000, "learning_rate": 1e-3},
        "TD3": {
            "total_steps": 20_000,
            "learning_rate": 1e-3,
            "action_noise_std": 0.1,
            "gamma": 0.98,
            "buffer_size": 200_000,
            "learning_starts": 10_000,
            "gradient_steps": 1,
            "train_freq": 1,
            "net_arch": [400, 300],
        },
    },
    "LunarLander-v3": {
        "PPO": {
            "n_envs": 16,
            "total_steps": 1_000_000,
            "n_steps": 1024,
            "batch_size": 64,
            "gae_lambda": 0.98,
            "gamma": 0.999,
            "n_epochs": 4,
            "ent_coef": 0.01,
        },
        "A2C": {
            "n_envs": 8,
            "total_steps": 200_000,
            "gamma": 0.995,
            "n_steps": 5,
            "learning_rate": 8.3e-4,
            "learning_rate_schedule": "linear",
            "ent_coef": 1e-5,
        },
        "DQN": dict(_DQN_CLASSIC),
    },
    # Not in RL Zoo's tables: tabular envs with one-hot observations, where
    # sparse rewards want exploration and long horizons.
    "FrozenLake-v1": {
        "PPO": {
            "n_envs": 8,
            "total_steps": 100_000,
            "n_steps": 128,
            "batch_size": 256,
            "n_epochs": 10,
            "gamma": 0.99,
            "ent_coef": 0.01,
        },
        "DQN": {
            "total_steps": 50_000,
            "learning_rate": 1e-3,
            "buffer_size": 20_000,
            "learning_starts": 500,
            "batch_size": 64,
            "target_update_interval": 500,
            "exploration_fraction": 0.3,
            "exploration_final_eps": 0.05,
        },
    },
    "Taxi-v3": {
        "PPO": {
            "n_envs": 8,
            "total_steps": 300_000,
            "n_steps": 256,
            "batch_size": 256,
            "n_epochs": 10,
            "gamma": 0.99,
            "ent_coef": 0.01,
            "net_arch": [128, 128],
        },
        "DQN": {
            "total_steps": 200_000,
            "learning_rate": 1e-3,
            "buffer_size": 50_000,
            "learning_starts": 1000,
            "batch_size": 128,
            "target_update_interval": 1000,
            "exploration_fraction": 0.3,
            "exploration_final_eps": 0.05,
            "net_arch": [128, 128],
        },
    },
}
"""env id -> algo -> preset (TrainConfig keys and hyperparameters mixed)."""

# Gymnasium 1.x renamed Taxi-v3 to Taxi-v4 (same task); keep both spellings.
PRESETS["Taxi-v4"] = PRESETS["Taxi-v3"]
PRESETS["LunarLanderContinuous-v3"] = {
    "SAC": {
        "total_steps": 500_000,
        "learning_rate": 7.3e-4,
        "buffer_size": 1_000_000,
        "batch_size": 256,
        "ent_coef": "auto",
        "gamma": 0.99,
        "tau": 0.01,
        "train_freq": 1,
        "gradient_steps": 1,
        "learning_starts": 10_000,
        "net_arch": [400, 300],
    },
}

DEFAULT_TOTAL_STEPS = 100_000


def preset_for(env_id: str, algo: str) -> dict[str, Any]:
    """The preset for ``env_id`` and ``algo`` ({} when there is none)."""
    by_algo = PRESETS.get(env_id, {})
    if algo in by_algo:
        return dict(by_algo[algo])
    if algo == "MaskablePPO" and "PPO" in by_algo:
        return dict(by_algo["PPO"])
    return {}


# --------------------------------------------------------------------------
# Hardware-derived defaults
# --------------------------------------------------------------------------


def _cpu_counts() -> tuple[int, int]:
    """(logical, physical) CPU counts, at least 1 each."""
    logical = os.cpu_count() or 1
    physical = logical
    try:
        import psutil

        physical = psutil.cpu_count(logical=False) or logical
    except ImportError:  # psutil is a dependency; tolerate its absence
        pass
    return max(1, logical), max(1, physical)


def default_n_envs(algo: str) -> int:
    """Environment copies when neither the user nor a preset says.

    On-policy algorithms learn from batches of parallel experience: 4 copies
    per core, between 4 and 16. Off-policy ones learn one step at a time and
    gain little from more copies: 1.
    """
    if algo in OFF_POLICY:
        return 1
    logical, _ = _cpu_counts()
    return max(4, min(16, 4 * logical))


def default_torch_threads() -> int:
    """Torch intra-op threads for MLP policies on the CPU.

    Measured here: PPO on CartPole runs faster with 1 thread than with 2 (a
    64-unit MLP is too small to split), and the remaining cores are better
    left to environments. Large machines get a few threads for the update.
    """
    _, physical = _cpu_counts()
    return max(1, min(4, physical // 4))


# --------------------------------------------------------------------------
# Field documentation (for parameter forms and --help)
# --------------------------------------------------------------------------


def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings of a dataclass (including its bases), by field."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0]
        assert isinstance(body, ast.ClassDef)
        statements = body.body
        for stmt, following in itertools.pairwise(statements):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[stmt.target.id] = " ".join(following.value.value.split())
    return docs


def describe(algo: str) -> list[dict[str, Any]]:
    """Fields of ``algo``'s dataclass as ``{name, type, default, doc}`` rows."""
    cls = ALGO_CONFIGS[algo]
    docs = field_docs(cls)
    rows = []
    for f in dataclasses.fields(cls):
        default = (
            f.default_factory()
            if f.default_factory is not dataclasses.MISSING
            else f.default
        )
        rows.append(
            {
                "name": f.name,
                "type": str(f.type),
                "default": default,
                "doc": docs.get(f.name, ""),
            }
        )
    return rows


def algo_defaults(algo: str) -> dict[str, Any]:
    """The dataclass defaults of ``algo`` as a dict."""
    return dataclasses.asdict(ALGO_CONFIGS[algo]())


# --------------------------------------------------------------------------
# Environment inspection
# --------------------------------------------------------------------------


@dataclass
class EnvInfo:
    """What validation learns by building the environment once."""

    env_id: str
    action_kind: str
    """``discrete`` (Discrete, MultiDiscrete, MultiBinary), ``continuous``
    (Box) or ``other``."""
    action_space: str
    observation_kind: str
    """``dict``, ``image`` or ``vector``."""
    has_action_masks: bool


def register_designed_envs(project_dir: str | os.PathLike[str] | None) -> None:
    """Register the project's designed envs (``rlstudio/<name>-v0``) with
    Gymnasium when the ``engine.envs`` package provides them."""
    if project_dir is None:
        return
    try:
        spec = importlib.util.find_spec("engine.envs")
    except (ImportError, ValueError):
        return
    if spec is None:
        return
    module = importlib.import_module("engine.envs")
    register = getattr(module, "register_project_envs", None)
    if callable(register):
        register(Path(project_dir))


def _unknown_env_message(env_id: str, known: list[str]) -> str:
    close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.6)
    if not close:
        lowered = {k.lower(): k for k in known}
        close = [
            lowered[m]
            for m in difflib.get_close_matches(
                env_id.lower(), list(lowered), n=3, cutoff=0.5
            )
        ]
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "."
    return f"Unknown environment {env_id!r}{hint}"


def inspect_env(env_id: str, env_kwargs: dict[str, Any]) -> EnvInfo:
    """Build the environment once to learn its spaces; ConfigError on failure."""
    import gymnasium as gym
    from gymnasium import error as gym_error
    from gymnasium import spaces

    if env_id not in gym.registry:
        raise ConfigError("env", _unknown_env_message(env_id, sorted(gym.registry)))
    try:
        env = gym.make(env_id, **env_kwargs)
    except gym_error.DependencyNotInstalled as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        first = first.rstrip(".") + "." if first else "see the log."
        raise ConfigError(
            "env",
            f"Environment {env_id!r} needs a package that is not installed: {first}",
        ) from exc
    except TypeError as exc:
        raise ConfigError(
            "env_kwargs",
            f"Environment {env_id!r} does not accept these arguments: {exc}.",
        ) from exc
    except gym_error.Error as exc:
        raise ConfigError(
            "env", f"Environment {env_id!r} cannot be made: {exc}."
        ) from exc
    try:
        act = env.action_space
        obs = env.observation_space
        if isinstance(act, spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary):
            action_kind = "discrete"
        elif isinstance(act, spaces.Box):
            action_kind = "continuous"
        else:
            action_kind = "other"
        if isinstance(obs, spaces.Dict):
            observation_kind = "dict"
        elif (
            isinstance(obs, spaces.Box)
            and len(obs.shape) == 3
            and obs.dtype.name == "uint8"
        ):
            observation_kind = "image"
        else:
            observation_kind = "vector"
        try:
            has_masks = callable(env.get_wrapper_attr("action_masks"))
        except AttributeError:
            has_masks = False
        return EnvInfo(
            env_id=env_id,
            action_kind=action_kind,
            action_space=type(act).__name__,
            observation_kind=observation_kind,
            has_action_masks=has_masks,
        )
    finally:
        env.close()


# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------

_ALGO_ALIASES = {name.lower(): name for name in ALGO_CONFIGS} | {
    "maskable_ppo": "MaskablePPO",
    "maskable-ppo": "MaskablePPO",
    "auto": "auto",
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _need_int(
    fld: str, value: Any, minimum: int | None = None, *, allow_none: bool = False
) -> None:
    if value is None and allow_none:
        return
    if not _is_int(value):
        raise ConfigError(fld, f"{_short(fld)} must be a whole number, not {value!r}.")
    if minimum is not None and value < minimum:
        raise ConfigError(
            fld, f"{_short(fld)} must be at least {minimum}, not {value}."
        )


def _need_number(
    fld: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    allow_none: bool = False,
) -> None:
    if value is None and allow_none:
        return
    if not _is_number(value) or not math.isfinite(value):
        raise ConfigError(fld, f"{_short(fld)} must be a number, not {value!r}.")
    if low is not None and (value <= low if low_open else value < low):
        word = "greater than" if low_open else "at least"
        raise ConfigError(fld, f"{_short(fld)} must be {word} {low:g}, not {value:g}.")
    if high is not None and value > high:
        raise ConfigError(
            fld, f"{_short(fld)} must be at most {high:g}, not {value:g}."
        )


def _need_bool(fld: str, value: Any, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, bool):
        raise ConfigError(fld, f"{_short(fld)} must be true or false, not {value!r}.")


def _need_choice(fld: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(
            fld, f"{_short(fld)} must be one of {', '.join(choices)}, not {value!r}."
        )


def _short(fld: str) -> str:
    return fld.rsplit(".", 1)[-1]


def _resolve_algo(value: Any) -> str:
    if not isinstance(value, str) or value.lower() not in _ALGO_ALIASES:
        known = ", ".join([*ALGO_CONFIGS, "auto"])
        raise ConfigError(
            "algo", f"Unknown algorithm {value!r}; choose one of {known}."
        )
    return _ALGO_ALIASES[value.lower()]


def _check_top_level(cfg: dict[str, Any]) -> None:
    _need_int("total_steps", cfg["total_steps"], 1)
    _need_int("seed", cfg["seed"], 0)
    if cfg["seed"] >= 2**32:
        raise ConfigError("seed", f"seed must be below 2**32, not {cfg['seed']}.")
    _need_int("n_envs", cfg["n_envs"], 1)
    if cfg["n_envs"] > 1024:
        raise ConfigError(
            "n_envs", f"n_envs must be at most 1024, not {cfg['n_envs']}."
        )
    _need_bool("vec_normalize", cfg["vec_normalize"])
    _need_int("eval_every_steps", cfg["eval_every_steps"], 0)
    _need_int("eval_episodes", cfg["eval_episodes"], 1)
    _need_bool("eval_deterministic", cfg["eval_deterministic"])
    _need_int("checkpoint_every_steps", cfg["checkpoint_every_steps"], 0)
    _need_int("keep_checkpoints", cfg["keep_checkpoints"], 1)
    _need_number("target_eval_reward", cfg["target_eval_reward"], allow_none=True)
    _need_int("convergence_window", cfg["convergence_window"], 1)
    _need_int("convergence_patience", cfg["convergence_patience"], 1, allow_none=True)
    _need_number("convergence_min_delta", cfg["convergence_min_delta"], low=0.0)
    _need_int("torch_threads", cfg["torch_threads"], 1)
    if not isinstance(cfg["name"], str):
        raise ConfigError("name", f"name must be text, not {cfg['name']!r}.")
    if cfg["policy"] is not None and cfg["policy"] not in (
        "MlpPolicy",
        "CnnPolicy",
        "MultiInputPolicy",
    ):
        raise ConfigError(
            "policy",
            "policy must be MlpPolicy, CnnPolicy or MultiInputPolicy, "
            f"not {cfg['policy']!r}.",
        )
    if (
        cfg["target_eval_reward"] is not None or cfg["convergence_patience"] is not None
    ) and (cfg["eval_every_steps"] == 0):
        raise ConfigError(
            "eval_every_steps",
            "Stopping on a target reward or on convergence needs evaluations; "
            "set eval_every_steps above 0.",
        )


def _check_device(value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError("device", f"device must be text, not {value!r}.")
    dev = value.strip().lower()
    if dev in ("auto", "cpu"):
        return dev
    if dev == "cuda" or dev.startswith("cuda:"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(
                "device",
                f"device {value!r} was asked for but no CUDA GPU is available.",
            )
        index = dev.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise ConfigError("device", f"There is no GPU {value!r} on this machine.")
        return dev
    if dev == "mps":
        import torch

        if not torch.backends.mps.is_available():
            raise ConfigError(
                "device", "device 'mps' was asked for but Apple MPS is not available."
            )
        return dev
    raise ConfigError(
        "device", f"device must be auto, cpu, cuda, cuda:N or mps, not {value!r}."
    )


def _coerce_hyper(algo: str, hp: dict[str, Any]) -> dict[str, Any]:
    """Type-check hyperparameters against the dataclass; ints become floats
    where a float is expected."""
    cls = ALGO_CONFIGS[algo]
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        fld = f"hyperparameters.{f.name}"
        value = hp[f.name]
        ftype = str(f.type)
        if ftype == "float":
            _need_number(fld, value)
            value = float(value)
        elif ftype == "float | None":
            _need_number(fld, value, allow_none=True)
            value = None if value is None else float(value)
        elif ftype == "int":
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            _need_int(fld, value)
        elif ftype == "bool":
            _need_bool(fld, value)
        elif ftype == "str":
            if _is_number(value) and f.name in ("ent_coef", "target_entropy"):
                value = str(float(value))
            if not isinstance(value, str):
                raise ConfigError(fld, f"{f.name} must be text, not {value!r}.")
        elif ftype == "list[int]":
            if not isinstance(value, list | tuple) or not all(
                _is_int(v) and v > 0 for v in value
            ):
                raise ConfigError(
                    fld,
                    f"{f.name} must be a list of positive layer widths, not {value!r}.",
                )
            value = [int(v) for v in value]
        else:  # pragma: no cover - a new field type needs a branch here
            raise AssertionError(f"unhandled field type {ftype} for {f.name}")
        out[f.name] = value
    return out


def _check_hyper(
    algo: str, hp: dict[str, Any], n_envs: int, info: EnvInfo | None
) -> None:
    def f(name: str) -> str:
        return f"hyperparameters.{name}"

    _need_number(f("learning_rate"), hp["learning_rate"], low=0.0, low_open=True)
    _need_choice(f("learning_rate_schedule"), hp["learning_rate_schedule"], SCHEDULES)
    _need_number(f("gamma"), hp["gamma"], low=0.0, high=1.0, low_open=True)
    _need_choice(f("activation"), hp["activation"], ACTIVATIONS)
    if not hp["net_arch"]:
        raise ConfigError(f("net_arch"), "net_arch needs at least one hidden layer.")
    if "max_grad_norm" in hp:
        _need_number(f("max_grad_norm"), hp["max_grad_norm"], low=0.0, low_open=True)
    if "ent_coef" in hp and not isinstance(hp["ent_coef"], str):
        _need_number(f("ent_coef"), hp["ent_coef"], low=0.0)
    if "vf_coef" in hp:
        _need_number(f("vf_coef"), hp["vf_coef"], low=0.0)
    if "gae_lambda" in hp:
        _need_number(f("gae_lambda"), hp["gae_lambda"], low=0.0, high=1.0)
    if (
        "use_sde" in hp
        and hp["use_sde"]
        and info is not None
        and info.action_kind != "continuous"
    ):
        raise ConfigError(
            f("use_sde"), "use_sde works only with continuous (Box) action spaces."
        )
    if algo in ON_POLICY:
        _need_int(f("n_steps"), hp["n_steps"], 1)
        rollout = hp["n_steps"] * n_envs
        if hp.get("normalize_advantage", False) and rollout < 2:
            raise ConfigError(
                f("n_steps"),
                "n_steps * n_envs must be at least 2 when advantages are normalized.",
            )
    if algo in ("PPO", "MaskablePPO"):
        _need_int(f("batch_size"), hp["batch_size"], 1)
        rollout = hp["n_steps"] * n_envs
        if hp["batch_size"] > rollout:
            raise ConfigError(
                f("batch_size"),
                f"batch_size ({hp['batch_size']}) is larger than the rollout "
                f"n_steps * n_envs = {hp['n_steps']} * {n_envs} = {rollout}.",
            )
        _need_int(f("n_epochs"), hp["n_epochs"], 1)
        _need_number(f("clip_range"), hp["clip_range"], low=0.0, low_open=True)
        _need_choice(f("clip_range_schedule"), hp["clip_range_schedule"], SCHEDULES)
        _need_number(
            f("target_kl"), hp["target_kl"], low=0.0, low_open=True, allow_none=True
        )
    if algo in OFF_POLICY:
        _need_int(f("buffer_size"), hp["buffer_size"], 1)
        _need_int(f("learning_starts"), hp["learning_starts"], 0)
        _need_int(f("batch_size"), hp["batch_size"], 1)
        _need_number(f("tau"), hp["tau"], low=0.0, high=1.0, low_open=True)
        _need_int(f("train_freq"), hp["train_freq"], 1)
        _need_int(f("gradient_steps"), hp["gradient_steps"], -1)
        if hp["gradient_steps"] == 0:
            raise ConfigError(
                f("gradient_steps"), "gradient_steps must be -1 or at least 1, not 0."
            )
    if algo == "DQN":
        _need_int(f("target_update_interval"), hp["target_update_interval"], 1)
        for name in (
            "exploration_fraction",
            "exploration_initial_eps",
            "exploration_final_eps",
        ):
            _need_number(f(name), hp[name], low=0.0, high=1.0)
    if algo == "SAC":
        ent = hp["ent_coef"]
        if not ent.startswith("auto"):
            try:
                number = float(ent)
            except ValueError:
                number = -1.0
            if not number >= 0:
                raise ConfigError(
                    f("ent_coef"),
                    "ent_coef must be 'auto', 'auto_<start>' or a number >= 0, "
                    f"not {ent!r}.",
                )
        elif ent != "auto":
            try:
                start = float(ent.partition("_")[2])
            except ValueError:
                start = -1.0
            if not start > 0:
                raise ConfigError(
                    f("ent_coef"),
                    f"ent_coef 'auto_<start>' needs a positive start, not {ent!r}.",
                )
        if hp["target_entropy"] != "auto":
            try:
                float(hp["target_entropy"])
            except ValueError:
                raise ConfigError(
                    f("target_entropy"),
                    "target_entropy must be 'auto' or a number, "
                    f"not {hp['target_entropy']!r}.",
                ) from None
    if algo == "TD3":
        _need_int(f("policy_delay"), hp["policy_delay"], 1)
        _need_number(f("target_policy_noise"), hp["target_policy_noise"], low=0.0)
        _need_number(f("target_noise_clip"), hp["target_noise_clip"], low=0.0)
        _need_number(f("action_noise_std"), hp["action_noise_std"], low=0.0)


def _check_algo_fits_env(algo: str, info: EnvInfo) -> None:
    env_id = info.env_id
    if info.action_kind == "other":
        raise ConfigError(
            "env",
            f"{env_id!r} has a {info.action_space} action space, "
            "which no algorithm here supports.",
        )
    if algo == "MaskablePPO" and not info.has_action_masks:
        raise ConfigError(
            "algo",
            "MaskablePPO needs an environment with action_masks(), "
            f"and {env_id!r} has none; use PPO.",
        )
    if algo in DISCRETE_ONLY and info.action_kind != "discrete":
        raise ConfigError(
            "algo",
            f"{algo} needs a discrete action space, but {env_id!r} has a continuous "
            f"({info.action_space}) one; use {CONTINUOUS_HINT}.",
        )
    if algo in CONTINUOUS_ONLY and info.action_kind != "continuous":
        raise ConfigError(
            "algo",
            f"{algo} needs a continuous action space, but {env_id!r} has a discrete "
            f"({info.action_space}) one; use {DISCRETE_HINT}.",
        )
    if algo == "DQN" and info.action_space != "Discrete":
        raise ConfigError(
            "algo",
            f"DQN needs a Discrete action space, but {env_id!r} has a "
            f"{info.action_space} one; use PPO or A2C.",
        )


def validate(config: dict[str, Any]) -> dict[str, Any]:
    """The ``rl.train`` validator: the normalized config, or ConfigError.

    Builds the environment once (``gymnasium.make``) to check that the
    algorithm fits its action space.
    """
    if not isinstance(config, dict):
        raise ConfigError("config", "The training config must be a JSON object.")
    unknown = [k for k in config if k not in TRAIN_FIELDS]
    if unknown:
        name = unknown[0]
        close = difflib.get_close_matches(name, TRAIN_FIELDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        raise ConfigError(name, f"Unknown setting {name!r}{hint}")
    cfg: dict[str, Any] = dataclasses.asdict(TrainConfig())
    cfg.update(config)

    env_id = cfg["env"]
    if not isinstance(env_id, str) or not env_id.strip():
        raise ConfigError("env", "Choose an environment id, for example 'CartPole-v1'.")
    env_id = cfg["env"] = env_id.strip()
    if not isinstance(cfg["env_kwargs"], dict):
        raise ConfigError(
            "env_kwargs", "env_kwargs must be a mapping of argument names to values."
        )
    if cfg["project_dir"] is not None and not isinstance(cfg["project_dir"], str):
        cfg["project_dir"] = str(cfg["project_dir"])
    algo = _resolve_algo(cfg["algo"])
    hp_in = cfg["hyperparameters"]
    if not isinstance(hp_in, dict):
        raise ConfigError(
            "hyperparameters", "hyperparameters must be a mapping of names to values."
        )
    cfg["device"] = _check_device(cfg["device"])

    register_designed_envs(cfg["project_dir"])
    info = inspect_env(env_id, dict(cfg["env_kwargs"]))

    if algo == "auto":
        algo = "MaskablePPO" if info.has_action_masks else "PPO"
    elif algo == "PPO" and info.has_action_masks and info.action_kind == "discrete":
        algo = "MaskablePPO"
    _check_algo_fits_env(algo, info)
    cfg["algo"] = algo

    valid_names = list(ALGO_CONFIGS[algo].__dataclass_fields__)
    for name in hp_in:
        if name not in valid_names:
            close = difflib.get_close_matches(str(name), valid_names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else "."
            raise ConfigError(
                f"hyperparameters.{name}",
                f"Unknown hyperparameter {name!r} for {algo}{hint}",
            )

    preset = preset_for(env_id, algo)
    preset_train = {k: v for k, v in preset.items() if k in TRAIN_FIELDS}
    preset_hp = {k: v for k, v in preset.items() if k not in TRAIN_FIELDS}
    if cfg["total_steps"] is None:
        cfg["total_steps"] = preset_train.get("total_steps", DEFAULT_TOTAL_STEPS)
    if cfg["n_envs"] is None:
        cfg["n_envs"] = preset_train.get("n_envs", default_n_envs(algo))
    if cfg["vec_normalize"] is None:
        cfg["vec_normalize"] = bool(preset_train.get("vec_normalize", False))
    if cfg["torch_threads"] is None:
        cfg["torch_threads"] = default_torch_threads()
    if cfg["seed"] is None:
        cfg["seed"] = random.SystemRandom().randrange(2**31)
    if isinstance(cfg["total_steps"], float) and cfg["total_steps"].is_integer():
        cfg["total_steps"] = int(cfg["total_steps"])
    _check_top_level(cfg)
    if cfg["policy"] is None:
        cfg["policy"] = {"dict": "MultiInputPolicy", "image": "CnnPolicy"}.get(
            info.observation_kind, "MlpPolicy"
        )

    hp = {**algo_defaults(algo), **preset_hp, **hp_in}
    # SB3's n_steps default (2048) assumes one env copy; with the copies the
    # hardware gives, keep the rollout near 2048 steps instead of multiplying it.
    if (
        algo in ("PPO", "MaskablePPO")
        and "n_steps" not in preset_hp
        and "n_steps" not in hp_in
    ):
        hp["n_steps"] = max(16, hp["n_steps"] // max(1, cfg["n_envs"]))
    hp = _coerce_hyper(algo, hp)
    # A preset's batch size was tuned for its n_envs; when the hardware gives
    # fewer copies, shrink it to the rollout rather than refuse the defaults.
    if algo in ("PPO", "MaskablePPO") and "batch_size" not in hp_in:
        hp["batch_size"] = max(1, min(hp["batch_size"], hp["n_steps"] * cfg["n_envs"]))
    _check_hyper(algo, hp, cfg["n_envs"], info)
    cfg["hyperparameters"] = hp
    cfg["env_kwargs"] = dict(cfg["env_kwargs"])
    return cfg
