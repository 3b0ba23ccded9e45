"""One way to load, run and evaluate a trained stable-baselines3 policy.

Everything that plays a saved policy goes through here: the flow's Evaluate
node, Models → Evaluate/Play and the designer's preview (``env_preview``
jobs), and the ONNX export; training's periodic evaluation uses the same
:func:`evaluate` on its live model.

:func:`load_policy` rebuilds the policy network from the zip alone (its class,
spaces and keyword arguments are in the zip's ``data``, the weights in
``policy.pth``), so PPO, A2C, DQN, SAC, TD3 and sb3-contrib's MaskablePPO,
RecurrentPPO, TQC, TRPO, QRDQN, ARS and CrossQ all load without knowing the
algorithm, and on the CPU. It never runs code from the file:
every pickled ``data`` entry is replaced through SB3's ``custom_objects``
(the four the policy needs are read by :mod:`engine.rl.safe_pickle`, the
rest, such as schedules and buffer classes, are not needed to act), and
tensors are read with ``weights_only``. A ``vecnormalize.pkl`` beside the zip
(where training saves it) supplies the observation normalization, applied
before every prediction as ``VecNormalize`` would; a MaskablePPO policy takes
the env's action masks, and a RecurrentPPO one carries its LSTM state from
step to step of an episode.
"""

from __future__ import annotations

import base64
import contextlib
import inspect
import json
import os
import sys
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import ConfigError, EngineError
from engine.rl.safe_pickle import Record, loads

VECNORMALIZE_FILE = "vecnormalize.pkl"
"""The normalization statistics training saves beside each ``model.zip``."""
STATE_FILE = "state.json"
"""Written beside every checkpoint's ``model.zip`` (and a Hub download's):
its step, env and algorithm."""

_POLICY_ENTRIES = ("policy_class", "policy_kwargs", "observation_space", "action_space")
"""The pickled ``data`` entries a policy is built from; the other pickled
entries (learning-rate and clip schedules, buffer classes, action noise,
train frequency) only matter to training and are left unread."""


@dataclass(frozen=True)
class ObsNormalization:
    """``VecNormalize``'s observation statistics:
    ``clip((obs - mean) / sqrt(var + epsilon), -clip_obs, clip_obs)``."""

    mean: Any
    """Running mean (an array, or a dict of arrays per key for dict spaces)."""
    var: Any
    """Running variance, shaped like ``mean``."""
    epsilon: float
    clip_obs: float
    keys: tuple[str, ...] | None = None
    """For dict observations, the keys that are normalized."""

    def apply(self, obs: Any) -> Any:
        if isinstance(obs, dict):
            out = dict(obs)
            for key in self.keys or ():
                out[key] = self._one(obs[key], self.mean[key], self.var[key])
            return out
        return self._one(obs, self.mean, self.var)

    def _one(self, obs: Any, mean: Any, var: Any) -> Any:
        scaled = (np.asarray(obs) - mean) / np.sqrt(var + self.epsilon)
        return np.clip(scaled, -self.clip_obs, self.clip_obs).astype(np.float32)


@dataclass
class LoadedPolicy:
    """A saved policy ready to act: normalization and masks included."""

    path: Path
    policy: Any
    """The SB3 policy module (``BasePolicy``), on the CPU, in eval mode."""
    normalization: ObsNormalization | None
    masked: bool
    """MaskablePPO: ``predict`` takes ``action_masks``."""
    outside_project: bool = False
    """The file lies outside the project the caller works in."""
    recurrent: bool = False
    """RecurrentPPO: its actions depend on an LSTM state, which :meth:`act`
    carries from step to step (SB3's ``evaluate_policy`` carries it through
    :meth:`predict`)."""
    _memory: Any = field(default=None, repr=False)
    """A recurrent policy's LSTM state after the last :meth:`act` (None: an
    episode starts)."""
    policy_kwargs: dict[str, Any] = field(default_factory=dict)
    """The keyword arguments the policy was built with, as an algorithm
    takes them (``policy_kwargs``): what a run that starts from it builds its
    network with, so that the weights fit."""

    @property
    def observation_space(self) -> Any:
        return self.policy.observation_space

    @property
    def action_space(self) -> Any:
        return self.policy.action_space

    @property
    def notice(self) -> str | None:
        """A sentence for the user when the file came from elsewhere."""
        if not self.outside_project:
            return None
        return (
            f"{self.path} comes from outside the project: only its weights, spaces "
            "and network settings were read (no code stored in it ran)."
        )

    def check_env(self, env: Any, env_id: str) -> None:
        """Refuse an env whose spaces are not the policy's, in one sentence.
        Images may come channels last where the policy keeps them channels
        first: SB3 transposes them (``VecTransposeImage``) in training and in
        ``predict``."""
        from stable_baselines3.common.vec_env import VecTransposeImage

        seen = env.observation_space
        if seen != self.observation_space and not (
            _is_image(seen)
            and VecTransposeImage.transpose_space(seen) == self.observation_space
        ):
            raise EngineError(
                f"The policy expects observations {self.observation_space} but "
                f"{env_id} gives {env.observation_space}."
            )
        if env.action_space != self.action_space:
            raise EngineError(
                f"The policy acts in {self.action_space} but {env_id} expects "
                f"{env.action_space}."
            )

    def normalize(self, obs: Any) -> Any:
        """The observation as the policy saw it in training."""
        return obs if self.normalization is None else self.normalization.apply(obs)

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
        action_masks: Any = None,
    ) -> tuple[Any, Any]:
        """SB3's ``predict`` (so SB3's ``evaluate_policy`` can drive it) on the
        normalized observation."""
        kwargs: dict[str, Any] = {}
        if self.masked and action_masks is not None:
            kwargs["action_masks"] = action_masks
        return self.policy.predict(  # type: ignore[no-any-return]
            self.normalize(observation),
            state,
            episode_start,
            deterministic,
            **kwargs,
        )

    def start_episode(self) -> None:
        """Forget the episode played so far (a recurrent policy's memory);
        players call it after each ``env.reset``."""
        self._memory = None

    def act(self, obs: Any, env: Any, deterministic: bool = True) -> Any:
        """The action for one (unbatched) observation of a Gymnasium env,
        with the env's action masks for a masked policy, and a recurrent
        policy's memory of the episode since :meth:`start_episode`."""
        masks = None
        if self.masked:
            get_masks = getattr(env.unwrapped, "action_masks", None)
            masks = get_masks() if get_masks is not None else None
        if not self.recurrent:
            action, _ = self.predict(
                obs, deterministic=deterministic, action_masks=masks
            )
            return action
        start = np.array([self._memory is None])
        action, self._memory = self.predict(
            obs, self._memory, start, deterministic, action_masks=masks
        )
        return action

    __call__ = act
    """A loaded policy is a player's ``policy(observation, env)``."""


def _is_image(space: Any) -> bool:
    from stable_baselines3.common.preprocessing import is_image_space

    return bool(is_image_space(space, check_channels=False))


def policy_file(model: str | None, purpose: str) -> Path:
    """The policy file a job's ``model`` setting names (``purpose``: what the
    job does with it, "to record"); ConfigError naming ``model`` when it is
    not given or not a file."""
    if not model:
        raise ConfigError("model", f"model is required: the policy file {purpose}.")
    path = Path(model).expanduser()
    if not path.is_file():
        raise ConfigError("model", f"The policy file {path} does not exist.")
    return path


def state_beside(model: Path) -> dict[str, Any]:
    """The :data:`STATE_FILE` beside ``model`` (naming its env and
    algorithm), or {} when there is none or it cannot be read."""
    try:
        data = json.loads((model.parent / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_data(path: Path) -> dict[str, Any]:
    try:
        with zipfile.ZipFile(path) as zf:
            data = json.loads(zf.read("data").decode("utf-8"))
    except KeyError:
        raise EngineError(f"{path} holds no stable-baselines3 policy.") from None
    except (zipfile.BadZipFile, OSError, ValueError, RecursionError) as exc:
        raise EngineError(
            f"{path} is not a stable-baselines3 model zip ({type(exc).__name__})."
        ) from None
    if not isinstance(data, dict):
        raise EngineError(f"{path} is not a stable-baselines3 model zip.")
    return data


def _pickled(path: Path, key: str, item: dict[str, Any]) -> bytes:
    """The pickle bytes of the serialized ``data`` entry ``key``."""
    try:
        return base64.b64decode(str(item[":serialized:"]).encode())
    except ValueError:
        raise EngineError(f"The {key} entry of {path} is damaged.") from None


def _custom_objects(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """A replacement for every pickled ``data`` entry, so SB3 unpickles none."""
    out: dict[str, Any] = {}
    for key, item in data.items():
        if not (isinstance(item, dict) and ":serialized:" in item):
            continue
        if key in _POLICY_ENTRIES:
            raw = _pickled(path, key, item)
            out[key] = loads(raw, f"The {key} entry of {path}")
        else:
            out[key] = None
    return out


@dataclass(frozen=True)
class SavedPolicy:
    """What a saved policy is, read without importing torch and without
    running code from the file: what a run that starts from it is checked
    against before its process starts."""

    path: Path
    policy_class: str
    """The policy class as ``module.Name``, read from the name the pickle
    holds (the class is not imported)."""
    observation_space: Any
    action_space: Any
    num_timesteps: int
    """Steps the policy was trained for (0 when the zip does not say)."""
    normalizes: bool
    """A ``vecnormalize.pkl`` beside it normalizes observations."""


def _class_name(path: Path, item: Any) -> str:
    """``module.Name`` of the pickled class ``item``, from the pickle's
    opcodes alone (nothing is imported or called)."""
    import pickletools

    if not (isinstance(item, dict) and ":serialized:" in item):
        raise EngineError(f"{path} names no stable-baselines3 policy class.")
    texts: list[str] = []
    try:
        for op, arg, _ in pickletools.genops(_pickled(path, "policy_class", item)):
            if op.name == "GLOBAL":
                return str(arg).replace(" ", ".", 1)
            if op.name == "STACK_GLOBAL" and len(texts) >= 2:
                return f"{texts[-2]}.{texts[-1]}"
            if isinstance(arg, str):
                texts.append(arg)
    except ValueError:
        pass
    raise EngineError(f"{path} names no stable-baselines3 policy class.")


def describe_policy(path: str | os.PathLike[str]) -> SavedPolicy:
    """:class:`SavedPolicy` of the SB3 ``.zip`` at ``path``; EngineError in
    one sentence when it is none."""
    from gymnasium import spaces

    path = Path(path)
    if not path.is_file():
        raise EngineError(f"The policy file {path} does not exist.")
    data = _read_data(path)
    found: dict[str, Any] = {}
    for key in ("observation_space", "action_space"):
        item = data.get(key)
        if isinstance(item, dict) and ":serialized:" in item:
            found[key] = loads(_pickled(path, key, item), f"The {key} entry of {path}")
        if not isinstance(found.get(key), spaces.Space):
            raise EngineError(f"{path} has no {key.replace('_', ' ')}.")
    steps = data.get("num_timesteps")
    return SavedPolicy(
        path=path,
        policy_class=_class_name(path, data.get("policy_class")),
        observation_space=found["observation_space"],
        action_space=found["action_space"],
        num_timesteps=steps if isinstance(steps, int) and steps > 0 else 0,
        normalizes=_normalization(path) is not None,
    )


def observations_fit(policy_space: Any, env_space: Any) -> bool:
    """Whether a policy taking ``policy_space`` plays an env giving
    ``env_space``: the same space, or an image the env gives channels last
    that SB3 transposes channels first (``VecTransposeImage``)."""
    if policy_space == env_space:
        return True
    from gymnasium import spaces

    if not (isinstance(policy_space, spaces.Box) and isinstance(env_space, spaces.Box)):
        return False
    shape = env_space.shape
    return (
        len(shape) == 3
        and env_space.dtype == np.uint8
        and policy_space.dtype == env_space.dtype
        and policy_space.shape == (shape[2], shape[0], shape[1])
    )


def _normalization(path: Path) -> ObsNormalization | None:
    """The observation statistics in the ``vecnormalize.pkl`` beside ``path``."""
    stats = path.with_name(VECNORMALIZE_FILE)
    if not stats.is_file():
        return None
    record = loads(stats.read_bytes(), f"The normalization file {stats}")
    fields: dict[str, Any] = vars(record) if isinstance(record, Record) else {}
    if not fields.get("norm_obs"):
        return None
    try:
        rms = fields["obs_rms"]
        keys = fields.get("norm_obs_keys")
        mean: Any
        var: Any
        if isinstance(rms, dict):
            mean = {k: np.asarray(v.mean, dtype=np.float64) for k, v in rms.items()}
            var = {k: np.asarray(v.var, dtype=np.float64) for k, v in rms.items()}
        else:
            mean = np.asarray(rms.mean, dtype=np.float64)
            var = np.asarray(rms.var, dtype=np.float64)
        return ObsNormalization(
            mean=mean,
            var=var,
            epsilon=float(fields["epsilon"]),
            clip_obs=float(fields["clip_obs"]),
            keys=tuple(keys) if isinstance(rms, dict) and keys else None,
        )
    except (AttributeError, KeyError, TypeError, ValueError):
        raise EngineError(f"{stats} holds no observation statistics.") from None


def restore_normalization(venv: Any, path: Path) -> None:
    """Give the fresh training ``VecNormalize`` ``venv`` the running
    statistics saved beside the policy ``path`` (read as
    :func:`_normalization` reads them: no code from the file runs), so that
    the policy sees observations as it saw them in training."""
    stats = path.with_name(VECNORMALIZE_FILE)
    record = loads(stats.read_bytes(), f"The normalization file {stats}")
    fields: dict[str, Any] = vars(record) if isinstance(record, Record) else {}

    def copy(target: Any, saved: Any) -> None:
        mean = np.asarray(saved.mean, dtype=np.float64)
        if mean.shape != target.mean.shape:
            raise ValueError(f"statistics of shape {mean.shape}")
        target.mean = mean.copy()
        target.var = np.asarray(saved.var, dtype=np.float64).copy()
        target.count = float(saved.count)

    try:
        saved_obs = fields["obs_rms"]
        if isinstance(venv.obs_rms, dict):
            for key, target in venv.obs_rms.items():
                copy(target, saved_obs[key])
        else:
            copy(venv.obs_rms, saved_obs)
        if fields.get("ret_rms") is not None:
            copy(venv.ret_rms, fields["ret_rms"])
        venv.clip_obs = float(fields["clip_obs"])
        venv.epsilon = float(fields["epsilon"])
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise EngineError(
            f"{stats} holds no observation statistics this env's observations "
            f"fit ({exc})."
        ) from None


def _is_inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def _policy_parts(path: Path, data: dict[str, Any]) -> tuple[type, dict[str, Any]]:
    """The policy class and its keyword arguments, checked for their kind."""
    from gymnasium import spaces
    from stable_baselines3.common.policies import BasePolicy

    policy_class = data.get("policy_class")
    if not (isinstance(policy_class, type) and issubclass(policy_class, BasePolicy)):
        raise EngineError(f"{path} names no stable-baselines3 policy class.")
    for key in ("observation_space", "action_space"):
        if not isinstance(data.get(key), spaces.Space):
            raise EngineError(f"{path} has no {key.replace('_', ' ')}.")
    kwargs = data.get("policy_kwargs") or {}
    if not (isinstance(kwargs, dict) and all(isinstance(k, str) for k in kwargs)):
        raise EngineError(f"The policy settings in {path} are not keyword arguments.")
    return policy_class, dict(kwargs)


def load_policy(
    path: str | os.PathLike[str], *, project_dir: str | os.PathLike[str] | None = None
) -> LoadedPolicy:
    """The policy saved in ``path`` (an SB3 ``.zip``), with the
    ``vecnormalize.pkl`` beside it; ``project_dir`` marks files from outside
    the project (see :attr:`LoadedPolicy.notice`)."""
    from stable_baselines3.common.save_util import load_from_zip_file

    path = Path(path)
    if not path.is_file():
        raise EngineError(f"The policy file {path} does not exist.")
    custom = _custom_objects(path, _read_data(path))
    try:
        data, params, _ = load_from_zip_file(
            path, device="cpu", custom_objects=custom, print_system_info=False
        )
    except Exception as exc:
        raise EngineError(
            f"{path} is not a stable-baselines3 model zip "
            f"({type(exc).__name__}: {exc})."
        ) from None
    if not data or not params or "policy" not in params:
        raise EngineError(f"{path} holds no stable-baselines3 policy.")
    policy_class, kwargs = _policy_parts(path, data)
    saved_kwargs = dict(kwargs)
    if data.get("use_sde"):
        kwargs["use_sde"] = True
    # ARS's policies take no learning rate (nothing trains them by gradient).
    takes_schedule = "lr_schedule" in inspect.signature(policy_class).parameters
    schedule = (_no_schedule,) if takes_schedule else ()
    try:
        policy = policy_class(
            data["observation_space"], data["action_space"], *schedule, **kwargs
        )
        policy.load_state_dict(params["policy"])
    except Exception as exc:
        raise EngineError(
            f"The policy in {path} cannot be rebuilt ({type(exc).__name__}: {exc})."
        ) from None
    policy.to("cpu")
    policy.set_training_mode(False)
    # A maskable or recurrent policy class was imported while its name was read.
    maskable = sys.modules.get("sb3_contrib.common.maskable.policies")
    recurrent = sys.modules.get("sb3_contrib.common.recurrent.policies")
    return LoadedPolicy(
        path=path,
        policy=policy,
        normalization=_normalization(path),
        masked=maskable is not None
        and isinstance(policy, maskable.MaskableActorCriticPolicy),
        outside_project=project_dir is not None
        and not _is_inside(path, Path(project_dir)),
        recurrent=recurrent is not None
        and isinstance(policy, recurrent.RecurrentActorCriticPolicy),
        policy_kwargs=saved_kwargs,
    )


def _no_schedule(_progress: float) -> float:
    """The learning rate of a policy that only acts (its optimizer is unused)."""
    return 0.0


# --------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------


EVAL_SEED_OFFSET = 1_000_003
"""A run's evaluation episodes are seeded with the run's seed plus this, so
they never replay the training envs' episodes."""

EVAL_ENVS_MAX = 32
"""Most env copies an evaluation plays side by side."""


def eval_env_count(episodes: int) -> int:
    """Env copies to play ``episodes`` evaluation episodes on: one episode
    each, all at once, up to :data:`EVAL_ENVS_MAX`; beyond it the fewest
    copies that still need the fewest rounds, so that every copy plays the
    same number of episodes (SB3's ``evaluate_policy`` keeps stepping a copy
    that has played its share until the last one has)."""
    rounds = -(-episodes // EVAL_ENVS_MAX)
    return max(1, -(-episodes // rounds))


@dataclass
class Evaluation:
    """Episodes played by :func:`evaluate`."""

    rewards: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    successes: list[bool] = field(default_factory=list)
    """``is_success`` of the episodes whose last info had it."""
    stopped: bool = False
    """Ended early because ``should_stop`` said so."""


EpisodeCallback = Callable[[int, float, int], None]
"""``on_episode(index, reward, length)`` after each finished episode."""


class _Stopped(Exception):
    pass


def _keep_mode(_mode: bool) -> None:
    """``set_training_mode`` while :func:`_acting_only` holds the policy."""


@contextlib.contextmanager
def _acting_only(model: Any) -> Iterator[None]:
    """Do once for a whole evaluation what SB3's ``predict`` redoes on every
    call, without changing a single action.

    * ``predict`` calls ``set_training_mode(False)``, a walk over every
      submodule (a fifth of an evaluation step on CartPole): the policy is
      put in eval mode here, and an instance attribute shadows that method
      with a no-op while this holds. It is left in eval mode, as ``predict``
      leaves it.
    * torch checks the arguments of every action distribution it builds (its
      logits are real numbers, ...), a fifth of a step more: the checks are
      off while this holds. A policy gone NaN is still refused, by the next
      training step, which checks."""
    from torch.distributions import Distribution

    policy: Any = getattr(model, "policy", None)
    shadow = hasattr(policy, "set_training_mode")
    if shadow:
        policy.set_training_mode(False)
        policy.set_training_mode = _keep_mode
    validating = Distribution._validate_args
    Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        Distribution.set_default_validate_args(validating)
        if shadow:
            del policy.set_training_mode


def _lean_actor(model: Any, deterministic: bool) -> Callable[[Any, Any], Any] | None:
    """``actions(observations, masks)`` for a batch, computed as
    ``predict(..., deterministic=True)`` computes them (the policy's own
    ``_predict`` on the same tensors, the same clipping) but without its
    per-call wrapping; None where that is not the same thing: sampled
    actions (DQN's exploration lives in the algorithm's ``predict``) and
    recurrent policies (their LSTM state)."""
    import torch
    from gymnasium import spaces
    from stable_baselines3.common.base_class import BaseAlgorithm

    if not deterministic:
        return None
    normalize: Callable[[Any], Any]
    if isinstance(model, LoadedPolicy) and not model.recurrent:
        policy, normalize = model.policy, model.normalize
    elif isinstance(model, BaseAlgorithm) and not hasattr(model.policy, "lstm_actor"):
        policy, normalize = model.policy, lambda obs: obs
    else:
        return None
    space = policy.action_space
    box = isinstance(space, spaces.Box)

    def actions(observations: Any, masks: Any) -> Any:
        obs, _ = policy.obs_to_tensor(normalize(observations))
        extra = {} if masks is None else {"action_masks": masks}
        with torch.no_grad():
            acted = policy._predict(obs, deterministic=True, **extra)
        acted = acted.cpu().numpy().reshape((-1, *space.shape))
        if box:
            acted = (
                policy.unscale_action(acted)
                if policy.squash_output
                else np.clip(acted, space.low, space.high)
            )
        return acted

    return actions


def _lean_envs(venv: Any) -> tuple[list[Any], Callable[[Any], Any]] | None:
    """The Monitor-wrapped envs of a ``DummyVecEnv`` (under at most an
    evaluation ``VecNormalize``) and the normalization its observations get,
    for :func:`_play_lean`; None for any other vectorized env, which SB3's
    ``evaluate_policy`` drives."""
    from gymnasium import spaces
    from stable_baselines3.common.env_util import is_wrapped
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    normalize: Callable[[Any], Any] = lambda obs: obs  # noqa: E731
    inner = venv
    if type(venv) is VecNormalize and not venv.training and not venv.norm_reward:
        inner, normalize = venv.venv, venv.normalize_obs
    if type(inner) is not DummyVecEnv:
        return None
    if not isinstance(inner.observation_space, spaces.Box | spaces.Discrete):
        return None  # dict and tuple observations: SB3's buffers per key
    if not all(is_wrapped(env, Monitor) for env in inner.envs):
        return None
    return inner.envs, normalize


def _play_lean(
    actions: Callable[[Any, Any], Any],
    venv: Any,
    envs: list[Any],
    normalize: Callable[[Any], Any],
    *,
    episodes: int,
    masked: bool,
    should_stop: Callable[[], bool] | None,
    on_episode: EpisodeCallback | None,
) -> Evaluation:
    """SB3's ``evaluate_policy`` on a ``DummyVecEnv`` of Monitor-wrapped envs,
    step for step (the same resets, actions, env steps and episodes, each env
    playing its share and stepped on until the last has), with none of its
    per-step copying: no deep copy of every info dict, one batched check of
    ``should_stop`` instead of a callback per env and step."""
    n = len(envs)
    targets = np.array([(episodes + i) // n for i in range(n)], dtype=int)
    counts = np.zeros(n, dtype=int)
    lengths_so_far = np.zeros(n, dtype=int)
    rewards_so_far = np.zeros(n)
    result = Evaluation()
    space = venv.observation_space
    raw = np.zeros((n, *space.shape), dtype=space.dtype)
    observations = venv.reset()
    while (counts < targets).any():
        if should_stop is not None and should_stop():
            result.stopped = True
            return result
        masks = np.stack(venv.env_method("action_masks")) if masked else None
        acted = actions(observations, masks)
        for i, env in enumerate(envs):
            obs, reward, terminated, truncated, info = env.step(acted[i])
            rewards_so_far[i] += reward
            lengths_so_far[i] += 1
            if terminated or truncated:
                if counts[i] < targets[i]:
                    if "is_success" in info:
                        result.successes.append(bool(info["is_success"]))
                    episode = info.get("episode")
                    if on_episode is not None:
                        reward_, length = (
                            (episode["r"], episode["l"])
                            if episode
                            else (rewards_so_far[i], lengths_so_far[i])
                        )
                        on_episode(int(counts.sum()), float(reward_), int(length))
                    if episode is not None:  # a life lost is not an episode
                        result.rewards.append(float(episode["r"]))
                        result.lengths.append(int(episode["l"]))
                        counts[i] += 1
                    rewards_so_far[i] = lengths_so_far[i] = 0
                obs, _ = env.reset()
            raw[i] = obs
        observations = normalize(raw)
    return result


def evaluate(
    model: Any,
    venv: Any,
    *,
    episodes: int,
    deterministic: bool = True,
    masked: bool = False,
    should_stop: Callable[[], bool] | None = None,
    on_episode: EpisodeCallback | None = None,
) -> Evaluation:
    """Play ``episodes`` episodes of ``model`` (an SB3 algorithm or a
    :class:`LoadedPolicy`) in ``venv`` as SB3's ``evaluate_policy`` does
    (sb3-contrib's for a masked policy on an env with action masks): by
    :func:`_play_lean` where the actions are deterministic and ``venv`` a
    ``DummyVecEnv``, the same episodes at under half the cost per step, else
    by SB3's own. ``venv`` should be Monitor-wrapped so that rewards are the
    env's own episode returns."""
    if masked:
        from sb3_contrib.common.maskable.utils import is_masking_supported

        masked = is_masking_supported(venv)
    actor = _lean_actor(model, deterministic)
    lean = _lean_envs(venv) if actor is not None else None
    if actor is not None and lean is not None:
        with _acting_only(model):
            return _play_lean(
                actor,
                venv,
                *lean,
                episodes=episodes,
                masked=masked,
                should_stop=should_stop,
                on_episode=on_episode,
            )
    result = Evaluation()

    def on_step(locals_: dict[str, Any], _globals: dict[str, Any]) -> None:
        if should_stop is not None and should_stop():
            raise _Stopped
        if not locals_["done"]:
            return
        info = locals_["info"]
        if "is_success" in info:
            result.successes.append(bool(info["is_success"]))
        if on_episode is not None:
            i = locals_["i"]
            episode = info.get("episode")
            reward = episode["r"] if episode else locals_["current_rewards"][i]
            length = episode["l"] if episode else locals_["current_lengths"][i]
            on_episode(int(locals_["episode_counts"].sum()), float(reward), int(length))

    evaluate_fn: Callable[..., Any]
    extra: dict[str, Any] = {}
    if masked:
        from sb3_contrib.common.maskable import evaluation as maskable

        evaluate_fn = maskable.evaluate_policy
        extra["use_masking"] = True
    else:
        from stable_baselines3.common import evaluation

        evaluate_fn = evaluation.evaluate_policy
    try:
        with _acting_only(model):
            played: Any = evaluate_fn(
                model,
                venv,
                n_eval_episodes=episodes,
                deterministic=deterministic,
                return_episode_rewards=True,
                callback=on_step,
                warn=False,
                **extra,
            )
    except _Stopped:
        result.stopped = True
        return result
    rewards, lengths = played
    result.rewards = [float(r) for r in rewards]
    result.lengths = [int(n) for n in lengths]
    return result
