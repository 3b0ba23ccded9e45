"""Settings of an ``rl.train`` run: one dataclass per algorithm, presets,
checks.

A run's config is a :class:`TrainConfig` (recorded as JSON, its
``hyperparameters`` an instance of the algorithm's dataclass). :func:`check`
is the job kind's validator: it fills every default (preset for the
environment and algorithm, hardware-derived vectorisation and thread count, a
random seed when none is given), resolves ``algo="auto"`` and refuses
anything that cannot work with a :class:`~engine.errors.ConfigError` naming
the field, before any process starts; :func:`validate` gives the same as the
JSON a run records. It is idempotent: checking a checked config gives the
same config back.

The kind is declared in :mod:`engine.rl.job`.

Units: every duration is counted in **environment steps** (one ``step()`` of
one environment copy), never in rollouts, iterations or episodes, unless the
field says otherwise.

Top-level keys (:class:`TrainConfig`) sit at the root of the dict; algorithm
hyperparameters (:class:`PPOConfig`, ...) under ``"hyperparameters"``.
Errors on a hyperparameter name the field ``"hyperparameters.<name>"``.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine import contract
from engine.envs.curriculum import CurriculumConfig
from engine.envs.families import VEC_ENV_CHOICES
from engine.errors import ConfigError, quoted
from engine.rl import hardware_profiles
from engine.rl.compiled import TWIN_IDS, compiles
from engine.rl.compiled.support import ALGOS, AUTO_JAX_MIN_STEPS, BACKENDS
from engine.rl.env_info import EnvInfo, inspect_env, register_designed_envs
from engine.rl.hardware_profiles import DEFAULT_PROFILE
from engine.rl.presets import builtin_presets
from engine.rl.zoo_presets import zoo_preset, zoo_version
from engine.settings import (
    STEPS_MAX,
    Search,
    as_dict,
    check_fields,
    check_value,
    defaults_of,
    fields_of,
    load,
    same_setting,
    setting,
)

ACTIVATIONS = ("tanh", "relu", "elu", "leaky_relu")
SCHEDULES = ("constant", "linear")
DEVICES = ("auto", "cpu", "cuda", "mps")
"""The device choices a form offers (``cuda:N`` is accepted too)."""
POLICIES = ("MlpPolicy", "CnnPolicy", "MultiInputPolicy")
SEED_MAX = 2**32 - 1
ROLLOUT_MAX = 2**24
"""The most steps or transitions of one rollout, batch or update (n_steps,
batch sizes, train_freq, gradient_steps): about 16 million, past any tuned
table's largest."""
BUFFER_MAX = 10**8
"""The most transitions a replay buffer may hold (SB3 allocates it whole)."""
LAYER_MAX = 65_536
"""The most units of one hidden layer (``net_arch``)."""

# --------------------------------------------------------------------------
# Algorithm hyperparameters
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class PPOBase:
    """Fields PPO and MaskablePPO share."""

    learning_rate: float = setting(
        3e-4, min=0, exclusive_min=True, search=Search(1e-5, 1e-2, log=True)
    )
    """Adam step size at the start of training (per gradient step)."""
    learning_rate_schedule: str = setting("constant", choices=SCHEDULES)
    """``constant``, or ``linear``: decays to 0 at ``total_steps``."""
    n_steps: int = setting(2048, min=1, max=ROLLOUT_MAX, unit="steps")
    """Steps collected per environment copy before each update; a rollout is
    ``n_steps * n_envs`` steps."""
    batch_size: int = setting(64, min=1, max=ROLLOUT_MAX, unit="transitions")
    """Transitions per minibatch (at most ``n_steps * n_envs``)."""
    n_epochs: int = setting(10, min=1, max=10_000, search=Search(1, 20))
    """Passes over each rollout per update."""
    gamma: float = setting(
        0.99, min=0, exclusive_min=True, max=1, search=Search(0.9, 0.9999)
    )
    """Discount factor per step, in (0, 1]."""
    gae_lambda: float = setting(0.95, min=0, max=1, search=Search(0.8, 1.0))
    """Generalized Advantage Estimation lambda, in [0, 1]."""
    clip_range: float = setting(0.2, min=0, exclusive_min=True, search=Search(0.1, 0.4))
    """Policy ratio clipping (dimensionless, > 0)."""
    clip_range_schedule: str = setting("constant", choices=SCHEDULES)
    """``constant``, or ``linear``: ``clip_range`` decays to 0 at the end."""
    normalize_advantage: bool = setting(True)
    """Normalize advantages per minibatch."""
    ent_coef: float = setting(0.0, min=0, search=Search(1e-8, 0.1, log=True))
    """Weight of the entropy bonus in the loss (>= 0)."""
    vf_coef: float = setting(0.5, min=0)
    """Weight of the value loss in the loss (>= 0)."""
    max_grad_norm: float = setting(0.5, min=0, exclusive_min=True)
    """Gradient norm clip (> 0)."""
    target_kl: float | None = setting(None, min=0, exclusive_min=True)
    """Stop an update's epochs early when the approximate KL exceeds this."""
    net_arch: list[int] = setting(
        factory=lambda: [64, 64], min=1, max=LAYER_MAX, unit="units"
    )
    """Hidden layer widths of the policy and value networks (units)."""
    activation: str = setting("tanh", choices=ACTIVATIONS)
    """Hidden activation: ``tanh``, ``relu``, ``elu`` or ``leaky_relu``."""
    ortho_init: bool = setting(True)
    """Orthogonal weight initialisation."""


@dataclass(frozen=True)
class PPOConfig(PPOBase):
    """Proximal Policy Optimization (stable-baselines3 ``PPO``)."""

    use_sde: bool = setting(False)
    """State-dependent exploration (continuous actions only)."""
    sde_sample_freq: int = setting(-1, min=-1, max=STEPS_MAX, unit="steps")
    """Resample the SDE noise every this many steps (-1: once per rollout)."""
    log_std_init: float = setting(0.0)
    """Initial log standard deviation of Gaussian actions (continuous only)."""


@dataclass(frozen=True)
class MaskablePPOConfig(PPOBase):
    """PPO with invalid-action masking (sb3-contrib ``MaskablePPO``); the
    environment must expose ``action_masks()``. Discrete actions only."""


@dataclass(frozen=True)
class A2CConfig:
    """Advantage Actor-Critic (stable-baselines3 ``A2C``)."""

    learning_rate: float = setting(
        7e-4, min=0, exclusive_min=True, search=Search(1e-5, 1e-2, log=True)
    )
    """Optimizer step size at the start of training (per gradient step)."""
    learning_rate_schedule: str = same_setting(PPOBase, "learning_rate_schedule")
    n_steps: int = setting(
        5, min=1, max=ROLLOUT_MAX, unit="steps", search=Search(1, 64, log=True)
    )
    """Steps collected per environment copy before each update."""
    gamma: float = same_setting(PPOBase, "gamma")
    gae_lambda: float = setting(1.0, min=0, max=1, search=Search(0.8, 1.0))
    """Generalized Advantage Estimation lambda, in [0, 1] (1 = plain returns)."""
    ent_coef: float = same_setting(PPOBase, "ent_coef")
    vf_coef: float = same_setting(PPOBase, "vf_coef")
    max_grad_norm: float = same_setting(PPOBase, "max_grad_norm")
    normalize_advantage: bool = setting(False)
    """Normalize advantages per update."""
    use_rms_prop: bool = setting(True)
    """RMSprop (as in the A2C paper) instead of Adam."""
    use_sde: bool = same_setting(PPOConfig, "use_sde")
    sde_sample_freq: int = same_setting(PPOConfig, "sde_sample_freq")
    net_arch: list[int] = same_setting(PPOBase, "net_arch")  # noqa: RUF009 a field
    activation: str = same_setting(PPOBase, "activation")
    ortho_init: bool = same_setting(PPOBase, "ortho_init")
    log_std_init: float = same_setting(PPOConfig, "log_std_init")


@dataclass(frozen=True)
class DQNConfig:
    """Deep Q-Network (stable-baselines3 ``DQN``); discrete actions only."""

    learning_rate: float = same_setting(PPOBase, "learning_rate", default=1e-4)
    learning_rate_schedule: str = same_setting(PPOBase, "learning_rate_schedule")
    buffer_size: int = setting(1_000_000, min=1, max=BUFFER_MAX, unit="transitions")
    """Replay buffer capacity (transitions)."""
    learning_starts: int = setting(100, min=0, max=STEPS_MAX, unit="steps")
    """Steps collected before the first gradient step."""
    batch_size: int = setting(32, min=1, max=ROLLOUT_MAX, unit="transitions")
    """Transitions per gradient step."""
    tau: float = setting(1.0, min=0, exclusive_min=True, max=1)
    """Target network soft-update coefficient in (0, 1] (1 = hard copy)."""
    gamma: float = same_setting(PPOBase, "gamma")
    train_freq: int = setting(
        4, min=1, max=ROLLOUT_MAX, unit="steps", search=Search(1, 256, log=True)
    )
    """Update the network every this many steps (per environment copy)."""
    gradient_steps: int = setting(1, min=-1, max=ROLLOUT_MAX)
    """Gradient steps per update (-1: as many as steps collected)."""
    target_update_interval: int = setting(
        10_000, min=1, max=STEPS_MAX, unit="steps", search=Search(1, 20_000, log=True)
    )
    """Copy the network to the target network every this many steps."""
    exploration_fraction: float = setting(0.1, min=0, max=1, search=Search(0, 0.5))
    """Fraction of ``total_steps`` over which epsilon decays, in [0, 1]."""
    exploration_initial_eps: float = setting(1.0, min=0, max=1)
    """Epsilon (probability of a random action) at the start, in [0, 1]."""
    exploration_final_eps: float = setting(0.05, min=0, max=1, search=Search(0, 0.2))
    """Epsilon after the decay, in [0, 1]."""
    max_grad_norm: float = setting(10.0, min=0, exclusive_min=True)
    """Gradient norm clip (> 0)."""
    net_arch: list[int] = setting(
        factory=lambda: [64, 64], min=1, max=LAYER_MAX, unit="units"
    )
    """Hidden layer widths of the Q-network (units)."""
    activation: str = setting("relu", choices=ACTIVATIONS)
    """Hidden activation: ``tanh``, ``relu``, ``elu`` or ``leaky_relu``."""


@dataclass(frozen=True)
class ActorCriticOffPolicyBase:
    """Fields SAC and TD3 share (their replay, target and update schedule)."""

    learning_rate: float = same_setting(PPOBase, "learning_rate", default=3e-4)
    learning_rate_schedule: str = same_setting(PPOBase, "learning_rate_schedule")
    buffer_size: int = same_setting(DQNConfig, "buffer_size")
    learning_starts: int = setting(100, min=0, max=STEPS_MAX, unit="steps")
    """Steps collected (random actions) before the first gradient step."""
    batch_size: int = setting(256, min=1, max=ROLLOUT_MAX, unit="transitions")
    """Transitions per gradient step."""
    tau: float = setting(
        0.005, min=0, exclusive_min=True, max=1, search=Search(1e-3, 0.08, log=True)
    )
    """Target network soft-update coefficient in (0, 1]."""
    gamma: float = same_setting(PPOBase, "gamma")
    train_freq: int = setting(1, min=1, max=ROLLOUT_MAX, unit="steps")
    """Update the networks every this many steps (per environment copy)."""
    gradient_steps: int = same_setting(DQNConfig, "gradient_steps")


@dataclass(frozen=True)
class SACConfig(ActorCriticOffPolicyBase):
    """Soft Actor-Critic (stable-baselines3 ``SAC``); continuous actions only."""

    ent_coef: str = setting("auto", numeric_text=True)
    """Entropy weight: a number, ``auto`` (learned) or ``auto_0.1`` (learned,
    starting at 0.1)."""
    target_entropy: str = setting("auto", numeric_text=True)
    """Target entropy for a learned ``ent_coef``: ``auto`` (-action dims) or a
    number."""
    use_sde: bool = setting(False)
    """State-dependent exploration instead of Gaussian noise."""
    sde_sample_freq: int = setting(-1, min=-1, max=STEPS_MAX, unit="steps")
    """Resample the SDE noise every this many steps (-1: at the start only)."""
    net_arch: list[int] = setting(
        factory=lambda: [256, 256], min=1, max=LAYER_MAX, unit="units"
    )
    """Hidden layer widths of the actor and critics (units)."""
    activation: str = setting("relu", choices=ACTIVATIONS)
    """Hidden activation: ``tanh``, ``relu``, ``elu`` or ``leaky_relu``."""
    log_std_init: float = setting(-3.0)
    """Initial log standard deviation of the actor (with ``use_sde``)."""


@dataclass(frozen=True)
class TD3Config(ActorCriticOffPolicyBase):
    """Twin Delayed DDPG (stable-baselines3 ``TD3``); continuous actions only."""

    learning_rate: float = same_setting(PPOBase, "learning_rate", default=1e-3)
    policy_delay: int = setting(2, min=1, max=10_000)
    """Actor and target updates once per this many critic updates."""
    target_policy_noise: float = setting(0.2, min=0)
    """Std of the smoothing noise added to target actions (action units)."""
    target_noise_clip: float = setting(0.5, min=0)
    """Absolute limit of that smoothing noise (action units)."""
    action_noise_std: float = setting(0.1, min=0)
    """Std of the Gaussian exploration noise, as a fraction of the action
    range's half-width (0 = none)."""
    net_arch: list[int] = setting(
        factory=lambda: [400, 300], min=1, max=LAYER_MAX, unit="units"
    )
    """Hidden layer widths of the actor and critics (units)."""
    activation: str = setting("relu", choices=ACTIVATIONS)
    """Hidden activation: ``tanh``, ``relu``, ``elu`` or ``leaky_relu``."""


# sb3-contrib's algorithms (defaults: sb3-contrib 2.9's).


@dataclass(frozen=True)
class RecurrentPPOConfig(PPOBase):
    """PPO with an LSTM in the policy and value networks (sb3-contrib
    ``RecurrentPPO``): it acts on what it remembers of the episode, for
    partially observed envs."""

    n_steps: int = same_setting(PPOBase, "n_steps", default=128)
    batch_size: int = setting(128, min=1, max=ROLLOUT_MAX, unit="transitions")
    """Transitions per minibatch (at most ``n_steps * n_envs``); minibatches
    are whole sequences of an env copy's steps."""
    use_sde: bool = same_setting(PPOConfig, "use_sde")
    sde_sample_freq: int = same_setting(PPOConfig, "sde_sample_freq")
    log_std_init: float = same_setting(PPOConfig, "log_std_init")
    lstm_hidden_size: int = setting(256, min=1, max=LAYER_MAX, unit="units")
    """Units of the LSTM's hidden state."""
    n_lstm_layers: int = setting(1, min=1, max=64)
    """Stacked LSTM layers."""
    shared_lstm: bool = setting(False)
    """The critic uses the actor's LSTM (then ``enable_critic_lstm`` must be
    off)."""
    enable_critic_lstm: bool = setting(True)
    """The critic has an LSTM of its own (with neither this nor
    ``shared_lstm``, the critic sees no memory)."""


@dataclass(frozen=True)
class TRPOConfig:
    """Trust Region Policy Optimization (sb3-contrib ``TRPO``): natural
    gradient steps within a KL bound, found by conjugate gradient and a line
    search."""

    learning_rate: float = setting(
        1e-3, min=0, exclusive_min=True, search=Search(1e-5, 1e-2, log=True)
    )
    """Adam step size of the value function (per critic update)."""
    learning_rate_schedule: str = same_setting(PPOBase, "learning_rate_schedule")
    n_steps: int = same_setting(PPOBase, "n_steps")
    batch_size: int = setting(128, min=1, max=ROLLOUT_MAX, unit="transitions")
    """Transitions per minibatch of the value function's updates (at least
    2)."""
    gamma: float = same_setting(PPOBase, "gamma")
    gae_lambda: float = same_setting(PPOBase, "gae_lambda")
    target_kl: float = setting(
        0.01, min=0, exclusive_min=True, search=Search(1e-3, 0.1, log=True)
    )
    """The largest KL divergence between the old and new policy an update
    may make (the trust region)."""
    cg_max_steps: int = setting(15, min=1, max=10_000)
    """Conjugate gradient iterations per update."""
    cg_damping: float = setting(0.1, min=0)
    """Damping of the Hessian-vector products in conjugate gradient."""
    line_search_shrinking_factor: float = setting(
        0.8, min=0, exclusive_min=True, max=1, exclusive_max=True
    )
    """Step size shrink per line search iteration, in (0, 1)."""
    line_search_max_iter: int = setting(10, min=1, max=10_000)
    """Line search iterations per update at most."""
    n_critic_updates: int = setting(10, min=1, max=10_000)
    """Passes of the value function over each rollout per update."""
    sub_sampling_factor: int = setting(1, min=1, max=ROLLOUT_MAX)
    """Use every this many transitions of a rollout for the policy step
    (1: all)."""
    normalize_advantage: bool = same_setting(PPOBase, "normalize_advantage")
    use_sde: bool = same_setting(PPOConfig, "use_sde")
    sde_sample_freq: int = same_setting(PPOConfig, "sde_sample_freq")
    net_arch: list[int] = same_setting(PPOBase, "net_arch")  # noqa: RUF009 a field
    activation: str = same_setting(PPOBase, "activation")
    ortho_init: bool = same_setting(PPOBase, "ortho_init")
    log_std_init: float = same_setting(PPOConfig, "log_std_init")


@dataclass(frozen=True)
class QRDQNConfig:
    """Quantile Regression DQN (sb3-contrib ``QRDQN``): DQN learning the
    distribution of returns as quantiles; discrete actions only."""

    learning_rate: float = same_setting(PPOBase, "learning_rate", default=5e-5)
    learning_rate_schedule: str = same_setting(PPOBase, "learning_rate_schedule")
    buffer_size: int = same_setting(DQNConfig, "buffer_size")
    learning_starts: int = same_setting(DQNConfig, "learning_starts")
    batch_size: int = same_setting(DQNConfig, "batch_size")
    tau: float = same_setting(DQNConfig, "tau")
    gamma: float = same_setting(PPOBase, "gamma")
    train_freq: int = same_setting(DQNConfig, "train_freq")
    gradient_steps: int = same_setting(DQNConfig, "gradient_steps")
    target_update_interval: int = same_setting(DQNConfig, "target_update_interval")
    exploration_fraction: float = same_setting(
        DQNConfig, "exploration_fraction", default=0.005
    )
    exploration_initial_eps: float = same_setting(DQNConfig, "exploration_initial_eps")
    exploration_final_eps: float = same_setting(
        DQNConfig, "exploration_final_eps", default=0.01
    )
    max_grad_norm: float | None = setting(None, min=0, exclusive_min=True)
    """Gradient norm clip (None: no clipping)."""
    n_quantiles: int = setting(200, min=1, max=10_000)
    """Quantiles of each action's return distribution."""
    net_arch: list[int] = same_setting(DQNConfig, "net_arch")  # noqa: RUF009 a field
    activation: str = same_setting(DQNConfig, "activation")


@dataclass(frozen=True)
class TQCConfig(SACConfig):
    """Truncated Quantile Critics (sb3-contrib ``TQC``): SAC whose critics
    learn quantiles of the return and drop the highest ones against
    overestimation; continuous actions only."""

    top_quantiles_to_drop_per_net: int = setting(2, min=0, max=10_000)
    """Highest quantiles of each critic dropped from the target (fewer than
    ``n_quantiles``)."""
    n_quantiles: int = setting(25, min=1, max=10_000)
    """Quantiles each critic predicts."""
    n_critics: int = setting(2, min=1, max=100)
    """Critic networks."""


@dataclass(frozen=True)
class CrossQConfig:
    """CrossQ (sb3-contrib ``CrossQ``): SAC without target networks, batch
    renormalization in the critics instead; continuous actions only."""

    learning_rate: float = same_setting(PPOBase, "learning_rate", default=1e-3)
    learning_rate_schedule: str = same_setting(PPOBase, "learning_rate_schedule")
    buffer_size: int = same_setting(DQNConfig, "buffer_size")
    learning_starts: int = same_setting(ActorCriticOffPolicyBase, "learning_starts")
    batch_size: int = same_setting(ActorCriticOffPolicyBase, "batch_size")
    gamma: float = same_setting(PPOBase, "gamma")
    train_freq: int = same_setting(ActorCriticOffPolicyBase, "train_freq")
    gradient_steps: int = same_setting(DQNConfig, "gradient_steps")
    policy_delay: int = setting(3, min=1, max=10_000)
    """Actor (and entropy) updates once per this many critic updates."""
    ent_coef: str = same_setting(SACConfig, "ent_coef")
    target_entropy: str = same_setting(SACConfig, "target_entropy")
    use_sde: bool = same_setting(SACConfig, "use_sde")
    sde_sample_freq: int = same_setting(SACConfig, "sde_sample_freq")
    net_arch: list[int] = same_setting(SACConfig, "net_arch")  # noqa: RUF009 a field
    critic_net_arch: list[int] = setting(
        factory=lambda: [1024, 1024], min=1, max=LAYER_MAX, unit="units"
    )
    """Hidden layer widths of the critics (units): wider than the actor's,
    as CrossQ's authors advise."""
    activation: str = same_setting(SACConfig, "activation")
    log_std_init: float = same_setting(SACConfig, "log_std_init")
    batch_norm: bool = setting(True)
    """Batch renormalization layers in the actor and critics."""
    batch_norm_momentum: float = setting(0.01, min=0, max=1)
    """Update rate of the batch renormalization statistics, in [0, 1]."""
    batch_norm_eps: float = setting(1e-3, min=0, exclusive_min=True)
    """Added to the variance before dividing by it (> 0)."""
    renorm_warmup_steps: int = setting(100_000, min=0, max=STEPS_MAX, unit="steps")
    """Gradient steps before the running statistics replace the batch's."""
    n_critics: int = same_setting(TQCConfig, "n_critics")


@dataclass(frozen=True)
class ARSConfig:
    """Augmented Random Search (sb3-contrib ``ARS``): random perturbations of
    the policy's weights, each scored by whole episodes; no gradients."""

    learning_rate: float = setting(
        0.02, min=0, exclusive_min=True, search=Search(1e-3, 0.1, log=True)
    )
    """Step size of each update along the best perturbations."""
    learning_rate_schedule: str = same_setting(PPOBase, "learning_rate_schedule")
    n_delta: int = setting(8, min=1, max=10_000, search=Search(4, 64, log=True))
    """Random perturbations per update (each played with + and - sign)."""
    n_top: int | None = setting(None, min=1, max=10_000)
    """Best perturbations an update follows (None: all ``n_delta``)."""
    delta_std: float = setting(
        0.05, min=0, exclusive_min=True, search=Search(0.01, 0.3, log=True)
    )
    """Standard deviation of the perturbations (weight units)."""
    zero_policy: bool = setting(True)
    """Start from a policy whose output weights are zero."""
    alive_bonus_offset: float = setting(0.0, unit="reward")
    """Added to every step's reward while scoring a perturbation (negative
    to remove a locomotion env's bonus for staying alive)."""
    n_eval_episodes: int = setting(1, min=1, max=10_000, unit="episodes")
    """Episodes played per perturbation and sign."""
    net_arch: list[int] = setting(
        factory=lambda: [64, 64], min=1, max=LAYER_MAX, unit="units"
    )
    """Hidden layer widths of the policy (units); [] for a linear policy."""
    activation: str = same_setting(DQNConfig, "activation")
    with_bias: bool = setting(True)
    """Bias terms in the policy's layers."""
    squash_output: bool = setting(True)
    """Squash continuous actions into the action bounds with tanh (else
    clip)."""


AlgoConfig = (
    PPOConfig
    | A2CConfig
    | DQNConfig
    | SACConfig
    | TD3Config
    | MaskablePPOConfig
    | RecurrentPPOConfig
    | TQCConfig
    | TRPOConfig
    | QRDQNConfig
    | ARSConfig
    | CrossQConfig
)
"""The hyperparameters of one algorithm: the dataclass :data:`ALGO_CONFIGS`
gives for a run's ``algo``."""

ALGO_CONFIGS: dict[str, type[AlgoConfig]] = {
    "PPO": PPOConfig,
    "A2C": A2CConfig,
    "DQN": DQNConfig,
    "SAC": SACConfig,
    "TD3": TD3Config,
    "MaskablePPO": MaskablePPOConfig,
    "RecurrentPPO": RecurrentPPOConfig,
    "TQC": TQCConfig,
    "TRPO": TRPOConfig,
    "QRDQN": QRDQNConfig,
    "ARS": ARSConfig,
    "CrossQ": CrossQConfig,
}
"""Algorithm name (as SB3 and sb3-contrib spell it) -> hyperparameter
dataclass."""

ALGO_NAMES = ("auto", *ALGO_CONFIGS)
SB3_CONTRIB = frozenset(
    {"MaskablePPO", "RecurrentPPO", "TQC", "TRPO", "QRDQN", "ARS", "CrossQ"}
)
"""The algorithms sb3-contrib holds (the others are stable-baselines3's)."""
ON_POLICY = frozenset({"PPO", "A2C", "MaskablePPO", "RecurrentPPO", "TRPO"})
OFF_POLICY = frozenset({"DQN", "SAC", "TD3", "QRDQN", "TQC", "CrossQ"})
"""ARS is neither: it scores whole episodes of perturbed policies."""
MINIBATCHED = frozenset({"PPO", "MaskablePPO", "RecurrentPPO", "TRPO"})
"""On-policy algorithms that split each rollout into minibatches of
``batch_size``."""


@dataclass(frozen=True)
class Fit:
    """What an algorithm trains on."""

    actions: frozenset[str]
    """Action spaces, by Gymnasium class name."""
    policies: tuple[str, ...] = POLICIES
    """Policy kinds (:data:`POLICIES`): the observations it takes."""


_ANY_ACTIONS = frozenset({"Box", "Discrete", "MultiDiscrete", "MultiBinary"})
_BOX = frozenset({"Box"})
ALGO_FITS: dict[str, Fit] = {
    "PPO": Fit(_ANY_ACTIONS),
    "A2C": Fit(_ANY_ACTIONS),
    "DQN": Fit(frozenset({"Discrete"})),
    "SAC": Fit(_BOX),
    "TD3": Fit(_BOX),
    "MaskablePPO": Fit(frozenset({"Discrete", "MultiDiscrete", "MultiBinary"})),
    "RecurrentPPO": Fit(_ANY_ACTIONS),
    "TQC": Fit(_BOX),
    "TRPO": Fit(_ANY_ACTIONS),
    "QRDQN": Fit(frozenset({"Discrete"})),
    "ARS": Fit(frozenset({"Box", "Discrete"}), policies=("MlpPolicy",)),
    "CrossQ": Fit(_BOX, policies=("MlpPolicy",)),
}
"""Which action spaces and observations each algorithm fits (sb3-contrib's
and SB3's tables of supported spaces); validation reads it, and the
alternatives a refusal suggests come from it."""


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainConfig:
    """Everything about an ``rl.train`` run except the algorithm's own
    hyperparameters (those go in ``hyperparameters``)."""

    env: str = setting("", group="Run", picker="env")
    """Gymnasium id (``CartPole-v1``) or designed env (``rlstudio/<name>-v0``)."""
    env_kwargs: dict[str, Any] = setting(factory=dict, form=False)
    """Keyword arguments passed to ``gymnasium.make``."""
    algo: str = setting("auto", choices=ALGO_NAMES, group="Run", label="Algorithm")
    """An algorithm of stable-baselines3 (``PPO``, ``A2C``, ``DQN``, ``SAC``,
    ``TD3``) or sb3-contrib (``MaskablePPO``, ``RecurrentPPO``, ``TQC``,
    ``TRPO``, ``QRDQN``, ``ARS``, ``CrossQ``), or ``auto`` (MaskablePPO for
    envs with ``action_masks()``, else PPO). PPO on an env with action masks
    becomes MaskablePPO."""
    backend: str = setting("auto", choices=BACKENDS, group="Run")
    """``sb3`` (stable-baselines3 in torch), ``jax`` (PPO compiled with its
    environment into one XLA program, for envs with a compiled twin) or
    ``auto``: ``jax`` where it can train the run and the run is long enough
    to pay for compiling, else ``sb3``; the run log says which and why."""
    total_steps: int | None = setting(
        None, min=1, max=STEPS_MAX, unit="steps", group="Run"
    )
    """Training length in environment steps (summed over env copies);
    None: the preset's length."""
    seed: int | None = setting(None, min=0, max=SEED_MAX, group="Run")
    """Random seed; None: one is drawn and recorded."""
    n_envs: int | None = setting(
        None, min=1, max=1024, group="Run", label="Parallel envs"
    )
    """Environment copies stepped together; None: preset or hardware."""
    vec_env: str = setting(
        "auto", choices=VEC_ENV_CHOICES, group="Run", label="Env processes"
    )
    """How the env copies step: ``dummy`` (in turn, in the training
    process), ``subproc`` (a process each) or ``auto``: ``subproc`` for the
    slow simulators (MuJoCo, Box2D) on a machine of 4 CPUs or more, else
    ``dummy``; the run log says which."""
    vec_normalize: bool | None = setting(None, form=False)
    """Normalize observations and rewards with running statistics; None:
    preset."""
    eval_every_steps: int = setting(
        10_000, min=0, max=STEPS_MAX, unit="steps", group="Run"
    )
    """Evaluate on a separate env every this many steps (0: never)."""
    eval_episodes: int = setting(10, min=1, max=100_000, unit="episodes", group="Run")
    """Episodes per evaluation."""
    eval_deterministic: bool = setting(True, form=False)
    """Evaluate with the greedy (deterministic) policy."""
    eval_video_episodes: int = setting(
        0, min=0, max=100, unit="episodes", group="Run", label="Video per evaluation"
    )
    """Episodes recorded as a video after each evaluation, at most 1,000
    frames (0: no videos); kept as ``videos/eval-<step>.mp4`` in the run
    folder, shown in TensorBoard and logged to MLflow."""
    checkpoint_every_steps: int = setting(
        50_000, min=0, max=STEPS_MAX, unit="steps", group="Run"
    )
    """Save a resumable checkpoint every this many steps (0: only at the end
    and on stop)."""
    keep_checkpoints: int = setting(3, min=1, max=1000, group="Run")
    """Periodic checkpoints kept (the best-by-eval one is kept besides)."""
    target_eval_reward: float | None = setting(None, unit="reward", group="Run")
    """Stop once the eval mean reward reaches this (None: never)."""
    convergence_window: int = setting(
        5, min=1, max=100_000, unit="evaluations", form=False
    )
    """Evaluations averaged by the convergence test."""
    convergence_patience: int | None = setting(
        None, min=1, max=100_000, unit="evaluations", group="Run"
    )
    """Stop when the windowed eval mean has not improved by more than
    ``convergence_min_delta`` for this many evaluations (None: never)."""
    convergence_min_delta: float = setting(0.0, min=0, unit="reward", form=False)
    """Smallest improvement of the windowed eval mean that counts (reward)."""
    torch_threads: int | None = setting(None, min=1, max=1024, form=False)
    """Torch intra-op threads; None: from the hardware."""
    device: str = setting("auto", choices=DEVICES, group="Run")
    """``auto`` (GPU if present, except for MLP policies), ``cpu``, ``cuda``,
    ``cuda:N`` or ``mps``."""
    hardware_profile: str = setting(DEFAULT_PROFILE, group="Run")
    """A hardware profile (``engine.rl.hardware_profiles``): ``auto`` (the
    detected hardware decides), ``cpu``, ``gpu`` or one the user saved
    (``rl-studio-engine hardware --save-profile``). It sets the settings it
    fixes (device, torch_threads, n_envs, backend) that the run does not
    give itself; the run log lists them."""
    policy: str | None = setting(None, choices=POLICIES, form=False)
    """SB3 policy class name; None: ``MultiInputPolicy`` for dict
    observations, ``CnnPolicy`` for images, else ``MlpPolicy``."""
    preset: str = setting("", group="Run")
    """A project preset (``presets/<name>.preset.json``, saved by
    ``rl-studio-engine tune --save-preset``) used instead of the built-in one
    for the environment and algorithm ('' = the built-in one)."""
    start_from: str = setting("", group="Run", label="Start from")
    """A policy to continue training: an SB3 model file (``.zip``) or the id
    or name of one of the project's SB3 policies, a run's or one downloaded
    from the Hub ('' = a new policy). The run builds its network from that
    policy's weights (and normalization statistics), takes its env,
    algorithm and normalization where it gives none, trains ``total_steps``
    more as a new run counted from step 0, and its model's lineage names the
    one it started from."""
    name: str = setting("", group="Run", label="Model name")
    """Display name of the model this run registers ('' = generated)."""
    agent: str = setting("", form=False)
    """The named agent whose next version (``v1``, ``v2``, ...) this run's
    model becomes ('' = none; ``POST /agents/{name}/act`` serves it)."""
    project_dir: str | None = setting(None, form=False)
    """Project folder, used to find designed envs (``rlstudio/...``)."""
    hyperparameters: AlgoConfig = setting(factory=PPOConfig, form=False)
    """The algorithm's settings, an instance of its dataclass
    (:data:`ALGO_CONFIGS`); a config sent to validation gives the ones it
    overrides as an object (``{"learning_rate": 1e-3}``), and validation
    fills the rest from the preset and the dataclass."""
    learned_reward: str = setting("", form=False)
    """A control reward model folder (``reward.train`` on labelled traces):
    each step's reward becomes the env's plus ``learned_reward_weight`` times
    its p(good) ('' = the env's reward alone)."""
    learned_reward_weight: float = setting(1.0, min=-100, max=100, form=False)
    """Weight of the learned reward added to the env's."""
    curriculum: CurriculumConfig | None = setting(
        None, group="Curriculum", structure=CurriculumConfig
    )
    """Stages of difficulty of a designed env, easiest first, and when to
    move between them (``engine.envs.curriculum.CurriculumConfig``); None:
    the env as designed throughout."""
    notes: list[str] = setting(factory=list, form=False)
    """What the engine fitted among the values it chose (rollout sizes to the
    step budget, ...); filled by validation and written to the run log."""

    def __post_init__(self) -> None:
        # settings.load rebuilds a field that holds one config dataclass;
        # these hold one of several (the class of ``algo``) or None, so a
        # recorded config's objects become their dataclasses here.
        hyper: Any = self.hyperparameters
        if isinstance(hyper, Mapping):
            cls = ALGO_CONFIGS.get(self.algo, PPOConfig)
            object.__setattr__(self, "hyperparameters", load(cls, hyper))
        curriculum: Any = self.curriculum
        if isinstance(curriculum, Mapping):
            object.__setattr__(self, "curriculum", load(CurriculumConfig, curriculum))


TRAIN_FIELDS = tuple(fields_of(TrainConfig))


# --------------------------------------------------------------------------
# Presets: the built-in ones are data (resources/presets/, read by
# engine.rl.presets); project presets are files a sweep saved.
# --------------------------------------------------------------------------

DEFAULT_TOTAL_STEPS = 100_000


PRESET_FORMAT = 1
"""Format version of a project preset file."""
_RUN_ONLY = ("env", "algo", "seed", "project_dir", "preset", "name", "notes")
"""Settings a preset never holds: they name the run, not how it trains."""


def _builtin(env_id: str, algo: str) -> dict[str, Any]:
    """The bundled preset of ``algo`` on ``env_id``, else RL Zoo's (read
    from its installed files, :mod:`engine.rl.zoo_presets`), else {}."""
    by_algo = builtin_presets().get(env_id, {})
    if algo in by_algo:
        return by_algo[algo]
    if algo == "MaskablePPO" and "PPO" in by_algo:
        return by_algo["PPO"]
    like = "PPO" if algo == "MaskablePPO" else algo
    known = (
        {*TRAIN_FIELDS, *fields_of(ALGO_CONFIGS[algo])} if algo in ALGO_CONFIGS else ()
    )
    return zoo_preset(env_id, like, known) or {}


def preset_for(env_id: str, algo: str) -> dict[str, Any]:
    """The settings of the built-in preset for ``env_id`` and ``algo`` ({}
    when there is none)."""
    return {k: v for k, v in _builtin(env_id, algo).items() if k != "provenance"}


def preset_provenance(
    env_id: str,
    algo: str,
    project_dir: str | os.PathLike[str] | None = None,
    preset: str = "",
) -> str:
    """Where the preset a run of ``algo`` on ``env_id`` starts from comes
    from, in one sentence: the project preset ``preset`` when named, else
    the built-in one."""
    if preset:
        try:
            record = load_preset(project_dir, preset)
        except ConfigError as exc:
            return str(exc)
        where = record.get("provenance")
        name = f"The project preset {quoted(preset)}"
    else:
        where = _builtin(env_id, algo).get("provenance")
        name = f"The built-in preset for {algo} on {env_id}"
        if where is None:
            return (
                f"There is no built-in preset for {algo} on {env_id}: the "
                "algorithm's defaults and the hardware's choices."
            )
    return f"{name}: {provenance_text(where)}."


def builtin_presets_text() -> str:
    """What the built-in presets are, for ``train --help``: the tuned ones
    by name with their sweeps, then how many come from elsewhere."""
    tuned: list[str] = []
    others: dict[str, int] = {}
    seen: list[dict[str, Any]] = []
    for env_id, by_algo in builtin_presets().items():
        if any(by_algo is other for other in seen):
            continue  # an alias (Taxi-v4 of Taxi-v3): the same presets
        seen.append(by_algo)
        for algo, preset in by_algo.items():
            where = preset.get("provenance", {})
            if "study" in where:
                tuned.append(
                    f"{algo} on {env_id} (the sweep {where['study']!r}, "
                    f"{where.get('trials')} trials, {where.get('date')})"
                )
            else:
                source = str(where.get("source", "unknown source"))
                others[source] = others.get(source, 0) + 1
    rest = ", ".join(f"{n} {source}" for source, n in others.items())
    head = "tuned here: " + "; ".join(tuned) if tuned else "none tuned here"
    text = f"Built-in presets: {head}; the others: {rest}."
    if zoo_version() is not None:
        text += (
            f" Elsewhere RL Zoo's settings, read from rl_zoo3 {zoo_version()}'s "
            "hyperparameter files (every env and algorithm it covers)."
        )
    return text


def provenance_text(where: Any) -> str:
    """A preset's provenance record as a phrase: a sweep's study, trials,
    budget, date, objective and result, or its source."""
    if not isinstance(where, dict):
        return "no provenance recorded"
    if "study" not in where:
        source = str(where.get("source", "unknown source"))
        detail = where.get("detail")
        return f"{source} ({detail})" if detail else source
    trials = where.get("trials")
    steps = where.get("steps_per_trial")
    parts = [f"tuned by the sweep {where['study']!r}"]
    if trials is not None and steps is not None:
        parts.append(f"{trials} trials of up to {steps:,} steps")
    if where.get("date"):
        parts.append(f"on {where['date']}")
    text = ", ".join(parts)
    if where.get("objective"):
        text += f"; objective {where['objective']}"
    if where.get("result"):
        text += f"; result {where['result']}"
    elif where.get("value") is not None:
        text += f"; best value {where['value']:.4g}"
    return text


def save_preset(
    project_dir: str | os.PathLike[str],
    name: str,
    *,
    env: str,
    algo: str,
    settings: dict[str, Any],
    provenance: dict[str, Any],
) -> Path:
    """Write the project preset ``name``: ``settings`` shaped like a
    built-in preset (TrainConfig keys and hyperparameters mixed), for
    ``env`` and ``algo``, with where it came from (a sweep's study, trials,
    budget). Returns its file."""
    from engine.store.atomic import atomic_write_json
    from engine.store.paths import checked_name

    path = contract.preset_file(project_dir, checked_name("preset", name))
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "format": PRESET_FORMAT,
        "name": name,
        "env": env,
        "algo": algo,
        "settings": {k: v for k, v in settings.items() if k not in _RUN_ONLY},
        "provenance": provenance,
    }
    atomic_write_json(path, record)
    return path


def preset_names(project_dir: str | os.PathLike[str] | None) -> list[str]:
    """The project's presets, by name."""
    if project_dir is None:
        return []
    folder = Path(project_dir) / contract.PRESETS_FOLDER
    if not folder.is_dir():
        return []
    return sorted(
        p.name.removesuffix(contract.PRESET_SUFFIX)
        for p in folder.glob(f"*{contract.PRESET_SUFFIX}")
    )


def load_preset(
    project_dir: str | os.PathLike[str] | None, name: str
) -> dict[str, Any]:
    """The project preset record ``name`` (see :func:`save_preset`); a
    ConfigError naming ``preset`` when there is none or it is malformed."""
    from engine import untrusted
    from engine.store.paths import checked_name

    checked_name("preset", name)
    if project_dir is None:
        raise ConfigError(
            "preset", f"The preset {quoted(name)} needs a project to be read from."
        )
    path = contract.preset_file(project_dir, name)
    if not path.is_file():
        raise ConfigError(
            "preset", f"There is no preset {quoted(name)} in this project ({path})."
        )
    try:
        record = untrusted.load_file(path, str(path))
    except untrusted.UntrustedDataError as exc:
        raise ConfigError("preset", str(exc)) from None
    if (
        not isinstance(record, dict)
        or not isinstance(record.get("env"), str)
        or record.get("algo") not in ALGO_CONFIGS
        or not isinstance(record.get("settings"), dict)
    ):
        raise ConfigError(
            "preset", f"The preset file {path} is not an RL Studio preset."
        )
    algo_fields = fields_of(ALGO_CONFIGS[record["algo"]])
    for key in record["settings"]:
        if key in _RUN_ONLY or (key not in TRAIN_FIELDS and key not in algo_fields):
            raise ConfigError(
                "preset",
                f"The preset {quoted(name)} has a setting {quoted(key)} a preset "
                "cannot set.",
            )
    return record


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
    gain little from more copies, and ARS plays whole episodes per
    perturbation: 1.
    """
    if algo not in ON_POLICY:
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
# Algorithm defaults
# --------------------------------------------------------------------------


def algo_defaults(algo: str) -> dict[str, Any]:
    """The dataclass defaults of ``algo`` as a dict."""
    return defaults_of(ALGO_CONFIGS[algo])


# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------

_ALGO_ALIASES = {name.lower(): name for name in ALGO_CONFIGS} | {
    "maskable_ppo": "MaskablePPO",
    "maskable-ppo": "MaskablePPO",
    # RL Zoo's names, and the paper's spelling
    "ppo_lstm": "RecurrentPPO",
    "recurrent_ppo": "RecurrentPPO",
    "qr-dqn": "QRDQN",
    "qr_dqn": "QRDQN",
    "auto": "auto",
}


def _resolve_algo(value: Any) -> str:
    if not isinstance(value, str) or value.lower() not in _ALGO_ALIASES:
        known = ", ".join([*ALGO_CONFIGS, "auto"])
        raise ConfigError(
            "algo", f"Unknown algorithm {quoted(value)}; choose one of {known}."
        )
    return _ALGO_ALIASES[value.lower()]


def _check_top_level(cfg: TrainConfig) -> None:
    """The checks across a run's own settings (each alone is checked)."""
    if not isinstance(cfg.notes, list) or not all(
        isinstance(n, str) for n in cfg.notes
    ):
        raise ConfigError("notes", "notes must be a list of sentences.")
    if (
        cfg.target_eval_reward is not None or cfg.convergence_patience is not None
    ) and (cfg.eval_every_steps == 0):
        raise ConfigError(
            "eval_every_steps",
            "Stopping on a target reward or on convergence needs evaluations; "
            "set eval_every_steps above 0.",
        )


def _check_device(value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError("device", f"device must be text, not {quoted(value)}.")
    dev = value.strip().lower()
    if dev in ("auto", "cpu"):
        return dev
    if dev == "cuda" or dev.startswith("cuda:"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(
                "device",
                f"device {quoted(value)} was asked for but no CUDA GPU is available.",
            )
        index = dev.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise ConfigError(
                "device", f"There is no GPU {quoted(value)} on this machine."
            )
        return dev
    if dev == "mps":
        import torch

        if not torch.backends.mps.is_available():
            raise ConfigError(
                "device", "device 'mps' was asked for but Apple MPS is not available."
            )
        return dev
    raise ConfigError("device", _device_form_problem(value))


def _device_form_problem(value: Any) -> str:
    return f"device must be auto, cpu, cuda, cuda:N or mps, not {quoted(value)}."


def check_profile_settings(name: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a hardware profile ``name`` fixes, checked as a run's
    own (a device's form only: whether it exists is the run's check); a
    ConfigError naming ``hardware_profile`` says which one is wrong."""
    infos = fields_of(TrainConfig)
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if key == "device":
            dev = value.strip().lower() if isinstance(value, str) else ""
            if dev in DEVICES or re.fullmatch(r"cuda:\d+", dev):
                out[key] = dev
                continue
            problem = _device_form_problem(value)
        else:
            try:
                out[key] = check_value(infos[key], value, key)
                continue
            except ConfigError as exc:
                problem = str(exc)
        raise ConfigError(
            "hardware_profile", f"The hardware profile {quoted(name)}: {problem}"
        )
    return out


def _check_hyper(
    algo: str, hp: dict[str, Any], n_envs: int, info: EnvInfo | None
) -> dict[str, Any]:
    """The hyperparameters checked against ``algo``'s dataclass (types,
    bounds, choices) and against each other; coerced where harmless."""

    def f(name: str) -> str:
        return f"hyperparameters.{name}"

    hp = check_fields(ALGO_CONFIGS[algo], hp, prefix="hyperparameters.")
    # ARS's policy without hidden layers is its linear one (RL Zoo's choice);
    # on images the CNN's features may go straight to the heads (SB3's
    # CnnPolicy default, and so RL Zoo's for the Atari games).
    image = info is not None and info.observation_kind == "image"
    if not hp["net_arch"] and algo != "ARS" and not image:
        raise ConfigError(f("net_arch"), "net_arch needs at least one hidden layer.")
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
        rollout = hp["n_steps"] * n_envs
        if hp.get("normalize_advantage", False) and rollout < 2:
            raise ConfigError(
                f("n_steps"),
                "n_steps * n_envs must be at least 2 when advantages are normalized.",
            )
    if algo in MINIBATCHED:
        rollout = hp["n_steps"] * n_envs
        if hp["batch_size"] > rollout:
            raise ConfigError(
                f("batch_size"),
                f"batch_size ({hp['batch_size']}) is larger than the rollout "
                f"n_steps * n_envs = {hp['n_steps']} * {n_envs} = {rollout}.",
            )
    if algo in OFF_POLICY and hp["gradient_steps"] == 0:
        raise ConfigError(
            f("gradient_steps"), "gradient_steps must be -1 or at least 1, not 0."
        )
    if algo == "RecurrentPPO" and hp["shared_lstm"] and hp["enable_critic_lstm"]:
        raise ConfigError(
            f("shared_lstm"),
            "RecurrentPPO's critic shares the actor's LSTM or has its own, not "
            "both: turn off shared_lstm or enable_critic_lstm.",
        )
    if algo == "TRPO" and hp["batch_size"] < 2:
        # Declared from 1 like the other algorithms' batch_size, so that the
        # Train node's one batch_size parameter stays a number.
        raise ConfigError(
            f("batch_size"), "TRPO's batch_size must be at least 2, not 1."
        )
    if algo == "TQC" and hp["top_quantiles_to_drop_per_net"] >= hp["n_quantiles"]:
        raise ConfigError(
            f("top_quantiles_to_drop_per_net"),
            f"top_quantiles_to_drop_per_net ({hp['top_quantiles_to_drop_per_net']}) "
            f"must be fewer than n_quantiles ({hp['n_quantiles']}).",
        )
    if algo == "ARS" and hp["n_top"] is not None and hp["n_top"] > hp["n_delta"]:
        raise ConfigError(
            f("n_top"),
            f"n_top ({hp['n_top']}) cannot be more than n_delta ({hp['n_delta']}).",
        )
    if "target_entropy" in hp:  # a learned entropy weight: SAC, TQC, CrossQ
        _check_entropy(hp)
    return hp


def _check_entropy(hp: dict[str, Any]) -> None:
    """SAC's, TQC's and CrossQ's ``ent_coef`` and ``target_entropy``."""

    def f(name: str) -> str:
        return f"hyperparameters.{name}"

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
                f"not {quoted(ent)}.",
            )
    elif ent != "auto":
        try:
            start = float(ent.partition("_")[2])
        except ValueError:
            start = -1.0
        if not start > 0:
            raise ConfigError(
                f("ent_coef"),
                f"ent_coef 'auto_<start>' needs a positive start, not {quoted(ent)}.",
            )
    if hp["target_entropy"] != "auto":
        try:
            float(hp["target_entropy"])
        except ValueError:
            raise ConfigError(
                f("target_entropy"),
                "target_entropy must be 'auto' or a number, "
                f"not {quoted(hp['target_entropy'])}.",
            ) from None


MIN_UPDATES = 4
"""Updates a run gets at least when the engine chooses the rollout size."""
DEFAULT_ROLLOUT = 2048
"""SB3's PPO rollout (``n_steps`` with one env copy), kept whatever the copies."""


def fit_to_budget(
    algo: str, hp: dict[str, Any], chosen: set[str], total_steps: int, n_envs: int
) -> list[str]:
    """Fit the rollout sizes the engine chose (not the user: ``chosen`` names
    them) to the env copies and the step budget, in place; one sentence per
    change, for the run log.

    On-policy algorithms train in whole rollouts of ``n_steps * n_envs``
    steps, so a rollout larger than the budget trains several times the
    steps asked; off-policy ones learn nothing before ``learning_starts``.
    """
    notes: list[str] = []

    def change(name: str, value: int, why: str) -> None:
        if value != hp[name]:
            notes.append(f"{name} {hp[name]} -> {value}: {why}.")
            hp[name] = value

    if algo in ON_POLICY and "n_steps" in chosen:
        if algo != "A2C" and hp["n_steps"] == DEFAULT_ROLLOUT:
            change(
                "n_steps",
                max(16, DEFAULT_ROLLOUT // n_envs),
                f"a {DEFAULT_ROLLOUT}-step rollout spread over {n_envs} env copies",
            )
        fit = max(1, total_steps // (MIN_UPDATES * n_envs))
        if hp["n_steps"] > fit:
            change(
                "n_steps",
                fit,
                f"{MIN_UPDATES} updates of n_steps x {n_envs} env copies within "
                f"the {total_steps} steps asked",
            )
        if hp.get("normalize_advantage") and hp["n_steps"] * n_envs < 2:
            change("n_steps", 2, "normalized advantages need 2 steps per rollout")
    if algo in MINIBATCHED and "batch_size" in chosen:
        rollout = hp["n_steps"] * n_envs
        if hp["batch_size"] > rollout:
            change("batch_size", rollout, f"the rollout is {rollout} steps")
    if algo in OFF_POLICY:
        if "learning_starts" in chosen and hp["learning_starts"] > total_steps // 10:
            change(
                "learning_starts",
                total_steps // 10,
                f"learning from the first 90% of the {total_steps} steps asked",
            )
        if "buffer_size" in chosen and hp["buffer_size"] > total_steps:
            change(
                "buffer_size",
                max(total_steps, hp["batch_size"]),
                f"the run collects {total_steps} transitions",
            )
    return notes


_DISCRETE_SPACES = ("Discrete", "MultiDiscrete", "MultiBinary")


def _alternatives(info: EnvInfo, policy: str) -> str:
    """The algorithms that fit ``info``'s action space and ``policy``, as a
    phrase (MaskablePPO only for an env with action masks)."""
    names = [
        algo
        for algo, fit in ALGO_FITS.items()
        if info.action_space in fit.actions
        and policy in fit.policies
        and (algo != "MaskablePPO" or info.has_action_masks)
    ]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]


def _needed_actions(actions: frozenset[str]) -> str:
    """An algorithm's action spaces as a phrase: ``a continuous action space
    (Box)``."""
    kinds = [name for name in (*_DISCRETE_SPACES, "Box") if name in actions]
    listed = ", ".join(kinds[:-1]) + f" or {kinds[-1]}" if len(kinds) > 1 else kinds[0]
    if actions == _BOX:
        return "a continuous action space (Box)"
    if actions <= set(_DISCRETE_SPACES):
        return f"a discrete action space ({listed})"
    return f"a {listed} action space"


def _default_policy(info: EnvInfo) -> str:
    """The policy kind an env's observations call for."""
    policy = {"dict": "MultiInputPolicy", "image": "CnnPolicy"}
    return policy.get(info.observation_kind, "MlpPolicy")


def _check_algo_fits_env(algo: str, info: EnvInfo) -> None:
    """Refuse, in one sentence naming the algorithm, the env and its action
    space, an algorithm :data:`ALGO_FITS` says does not fit."""
    env_id = info.env_id
    if info.action_kind == "other":
        raise ConfigError(
            "env",
            f"{quoted(env_id)} has a {info.action_space} action space, "
            "which no algorithm here supports.",
        )
    if algo == "MaskablePPO" and not info.has_action_masks:
        raise ConfigError(
            "algo",
            "MaskablePPO needs an environment with action_masks(), "
            f"and {quoted(env_id)} has none; use PPO.",
        )
    actions = ALGO_FITS[algo].actions
    if info.action_space not in actions:
        raise ConfigError(
            "algo",
            f"{algo} needs {_needed_actions(actions)}, but {quoted(env_id)} has "
            f"a {info.action_kind} one ({info.action_space}); use "
            f"{_alternatives(info, _default_policy(info))}.",
        )


def _check_policy_fits(algo: str, policy: str, info: EnvInfo, asked: bool) -> None:
    """Refuse a policy kind the algorithm has not (ARS and CrossQ have MLPs
    only), in one sentence."""
    policies = ALGO_FITS[algo].policies
    if policy in policies:
        return
    why = (
        "as the run asks"
        if asked
        else f"which {quoted(info.env_id)}'s {info.observation_kind} observations need"
    )
    raise ConfigError(
        "policy" if asked else "algo",
        f"{algo} trains {' or '.join(policies)} only, not {policy} ({why}); use "
        f"{_alternatives(info, policy)}.",
    )


# --------------------------------------------------------------------------
# The backend
# --------------------------------------------------------------------------


def jax_problem(cfg: TrainConfig) -> tuple[str, str] | None:
    """(setting, one sentence) why the ``jax`` backend cannot train ``cfg``
    (a validated ``rl.train`` config); None when it can. Asked without
    importing JAX."""
    hp = cfg.hyperparameters
    if cfg.algo not in ALGOS:
        return "algo", (
            f"The jax backend trains PPO and MaskablePPO only, not {cfg.algo}; "
            "use backend sb3."
        )
    twinned = compiles(cfg.env)
    if not twinned or cfg.env_kwargs:
        what = "with env_kwargs" if twinned else "yet"
        return "env", (
            f"{cfg.env} has no compiled twin {what} (the jax backend trains "
            f"{', '.join(TWIN_IDS)}, designed grids and designed workflows); use "
            "backend sb3."
        )
    assert isinstance(hp, PPOBase)  # the algorithms above
    use_sde = getattr(hp, "use_sde", False)  # MaskablePPO has none
    refused = {
        "hyperparameters.use_sde": (use_sde, use_sde),
        "hyperparameters.target_kl": (hp.target_kl is not None, hp.target_kl),
        "vec_normalize": (cfg.vec_normalize, cfg.vec_normalize),
        "learned_reward": (bool(cfg.learned_reward), cfg.learned_reward),
        # The compiled learner starts from its own initial parameters.
        "start_from": (bool(cfg.start_from), cfg.start_from),
        "policy": (cfg.policy != "MlpPolicy", cfg.policy),
    }
    for name, (used, value) in refused.items():
        if used:
            short = name.rsplit(".", 1)[-1]
            return name, (
                f"The jax backend does not support {short} (set to "
                f"{value!r}); use backend sb3 or leave {short} at its default."
            )
    assert cfg.n_envs is not None  # filled by validation
    rollout = cfg.n_envs * hp.n_steps
    if rollout % hp.batch_size:
        return "hyperparameters.batch_size", (
            f"The jax backend needs batch_size ({hp.batch_size}) to divide "
            f"n_steps x n_envs ({rollout}), so every minibatch is full."
        )
    if importlib.util.find_spec("jax") is None:
        return "backend", (
            "JAX is not installed; install rl-studio[jax] or use backend sb3."
        )
    return None


def resolve_backend(cfg: TrainConfig) -> tuple[str, str]:
    """(backend, why) for a validated config whose ``backend`` is ``auto``,
    ``sb3`` or ``jax``; raises ConfigError for ``jax`` where it cannot train."""
    wanted = cfg.backend
    problem = jax_problem(cfg) if wanted != "sb3" else None
    if wanted == "jax":
        if problem is not None:
            raise ConfigError(*problem)
        return "jax", "asked for"
    if wanted == "sb3":
        return "sb3", "asked for"
    if problem is not None:
        return "sb3", problem[1].split(";")[0]
    assert cfg.total_steps is not None  # filled by validation
    if cfg.total_steps < AUTO_JAX_MIN_STEPS:
        return "sb3", (
            f"{cfg.total_steps:,} steps are too few to pay for compiling "
            f"(auto compiles runs of {AUTO_JAX_MIN_STEPS:,} steps or more)"
        )
    return "jax", f"{cfg.env} and PPO compile"


def _known_settings(config: Mapping[str, Any]) -> None:
    """Refuse a config that is no object, or names a setting no run has."""
    if not isinstance(config, Mapping):
        raise ConfigError("config", "The training config must be a JSON object.")
    unknown = [k for k in config if k not in TRAIN_FIELDS]
    if unknown:
        name = unknown[0]
        close = difflib.get_close_matches(name, TRAIN_FIELDS, n=1)
        hint = f"; did you mean {quoted(close[0])}?" if close else "."
        raise ConfigError(name, f"Unknown setting {quoted(name)}{hint}")


def _project_preset(values: dict[str, Any]) -> dict[str, Any] | None:
    """The project preset the run names (None: the built-in one), whose env
    and algorithm fill those the run leaves open."""
    preset_name = values["preset"]
    if not preset_name:
        return None
    if not isinstance(preset_name, str):
        raise ConfigError("preset", f"preset must be text, not {quoted(preset_name)}.")
    record = load_preset(values["project_dir"], preset_name)
    # A preset knows what it was tuned for.
    if not values["env"]:
        values["env"] = record["env"]
    if values["algo"] == "auto":
        values["algo"] = record["algo"]
    return record


def _env_settings(values: Mapping[str, Any]) -> tuple[str, dict[str, Any], str | None]:
    """The environment id, its keyword arguments and the project folder."""
    env_id = values["env"]
    if not isinstance(env_id, str) or not env_id.strip():
        raise ConfigError("env", "Choose an environment id, for example 'CartPole-v1'.")
    env_kwargs = values["env_kwargs"]
    if not isinstance(env_kwargs, Mapping):
        raise ConfigError(
            "env_kwargs", "env_kwargs must be a mapping of argument names to values."
        )
    project_dir = values["project_dir"]
    return (
        env_id.strip(),
        dict(env_kwargs),
        None if project_dir is None else str(project_dir),
    )


def _algo_for_env(algo: str, info: EnvInfo) -> str:
    """``auto`` resolved for the env (MaskablePPO where it masks actions,
    which PPO then means too), checked against its action space."""
    if algo == "auto":
        algo = "MaskablePPO" if info.has_action_masks else "PPO"
    elif algo == "PPO" and info.has_action_masks and info.action_kind == "discrete":
        algo = "MaskablePPO"
    _check_algo_fits_env(algo, info)
    return algo


def _known_hyperparameters(algo: str, given: Mapping[str, Any]) -> None:
    valid_names = list(fields_of(ALGO_CONFIGS[algo]))
    for name in given:
        if name not in valid_names:
            close = difflib.get_close_matches(str(name), valid_names, n=1)
            hint = f"; did you mean {quoted(close[0])}?" if close else "."
            raise ConfigError(
                f"hyperparameters.{name}",
                f"Unknown hyperparameter {quoted(name)} for {algo}{hint}",
            )


def _preset_settings(
    record: dict[str, Any] | None, preset_name: str, env_id: str, algo: str
) -> dict[str, Any]:
    """The preset's settings: the project's named one (tuned for this env
    and algorithm), else the built-in one."""
    if record is None:
        return preset_for(env_id, algo)
    if (record["env"], record["algo"]) != (env_id, algo):
        raise ConfigError(
            "preset",
            f"The preset {quoted(preset_name)} was tuned for {record['algo']} on "
            f"{record['env']}, not {algo} on {env_id}.",
        )
    return dict(record["settings"])


def _with_extras(
    cfg: TrainConfig, curriculum: Any, project_dir: str | None
) -> TrainConfig:
    """The learned reward, the curriculum and the backend checked."""
    if cfg.learned_reward:
        from engine.rl.learned_reward import check_model

        cfg = replace(
            cfg,
            learned_reward=check_model(cfg.learned_reward, project_dir=project_dir),
        )
    if curriculum is not None:
        from engine.rl.curriculum import check_for_env_id

        if cfg.eval_every_steps <= 0:
            raise ConfigError(
                "eval_every_steps",
                "A curriculum moves on its evaluations; set eval_every_steps above 0.",
            )
        checked = check_for_env_id(curriculum, cfg.env, cfg.env_kwargs)
        cfg = replace(cfg, curriculum=load(CurriculumConfig, checked))
    backend, why = resolve_backend(cfg)
    if cfg.backend == "auto":
        cfg = replace(cfg, notes=[*cfg.notes, f"backend auto chose {backend}: {why}"])
    return replace(cfg, backend=backend)


def check(config: Mapping[str, Any]) -> TrainConfig:
    """The ``rl.train`` validator (the kind's ``check``): the run's config
    with every default filled, or ConfigError naming the field.

    Builds the environment once (``gymnasium.make``) to check that the
    algorithm fits its action space.
    """
    _known_settings(config)
    from engine.rl.start_from import resolve as resolve_start

    start = resolve_start(config.get("start_from"), config.get("project_dir"))
    if start is not None:  # the model's env, algorithm, ... where none is given
        config = start.fill(config)
    # The raw values, defaults filled in, until each is checked.
    values: dict[str, Any] = {
        **defaults_of(TrainConfig),
        "hyperparameters": {},
        **config,
    }
    # The profile's settings win over the preset's, a setting given over both.
    from_profile, profile_notes = hardware_profiles.apply_profile(
        values["hardware_profile"], config, check_profile_settings
    )
    values.update(from_profile)
    record = _project_preset(values)
    env_id, env_kwargs, project_dir = _env_settings(values)
    algo = _resolve_algo(values["algo"])
    hp_in = values["hyperparameters"]
    if not isinstance(hp_in, Mapping):
        raise ConfigError(
            "hyperparameters", "hyperparameters must be a mapping of names to values."
        )
    device = _check_device(values["device"])

    register_designed_envs(project_dir)
    info = inspect_env(env_id, env_kwargs)
    algo = _algo_for_env(algo, info)
    _known_hyperparameters(algo, hp_in)
    preset = _preset_settings(record, values["preset"], env_id, algo)
    preset_hp = {k: v for k, v in preset.items() if k not in TRAIN_FIELDS}
    for key, value in preset.items():
        if key in TRAIN_FIELDS and config.get(key) is None and key not in from_profile:
            values[key] = value
    # What neither the run, its profile nor its preset says.
    derived: dict[str, Callable[[], Any]] = {
        "total_steps": lambda: DEFAULT_TOTAL_STEPS,
        "n_envs": lambda: default_n_envs(algo),
        "vec_normalize": lambda: False,
        "torch_threads": default_torch_threads,
        "seed": lambda: random.SystemRandom().randrange(2**31),
    }
    for key, default in derived.items():
        if values[key] is None:
            values[key] = default()
    curriculum = values["curriculum"]
    values.update(
        env=env_id,
        env_kwargs=env_kwargs,
        project_dir=project_dir,
        algo=algo,
        device=device,
        hyperparameters=ALGO_CONFIGS[algo](),  # checked below
        curriculum=None,  # likewise
    )
    cfg = load(TrainConfig, check_fields(TrainConfig, values, skip=("algo", "device")))
    _check_top_level(cfg)
    asked = cfg.policy is not None
    if cfg.policy is None:
        cfg = replace(cfg, policy=_default_policy(info))
    assert cfg.policy is not None  # chosen above
    _check_policy_fits(algo, cfg.policy, info, asked)
    if start is not None:
        start.check(algo, env_id, env_kwargs, bool(cfg.vec_normalize))
    assert cfg.total_steps is not None and cfg.n_envs is not None  # filled above

    hp = {**algo_defaults(algo), **preset_hp, **hp_in}
    chosen = set(hp) - set(hp_in)
    hp = check_fields(ALGO_CONFIGS[algo], hp, prefix="hyperparameters.")
    notes = fit_to_budget(algo, hp, chosen, cfg.total_steps, cfg.n_envs)
    hp = _check_hyper(algo, hp, cfg.n_envs, info)
    cfg = replace(
        cfg,
        hyperparameters=load(ALGO_CONFIGS[algo], hp),
        notes=[*cfg.notes, *profile_notes, *notes],
    )
    return _with_extras(cfg, curriculum, project_dir)


def validate(config: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`check`'s config as the JSON object a run records (what
    ``engine.jobs.registry.validate_config("rl.train", config)`` returns),
    for callers that keep a run's config as JSON."""
    return as_dict(check(config))
