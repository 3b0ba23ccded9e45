"""A training run that starts from a saved policy (``rl.train``'s
``start_from``): a model file, or one of the project's SB3 policies (a run's,
or an agent downloaded from the Hub).

Validation (:func:`resolve`, :meth:`StartModel.fill`, :meth:`StartModel.check`)
reads the policy without torch and without running code from the file
(:func:`engine.rl.policy.describe_policy`): the run takes the model's env,
algorithm, policy kind and normalization where it gives none of its own,
and is refused, in one sentence, where they differ. Training
(:func:`build_model`) loads it through :func:`engine.rl.policy.load_policy`
and copies its weights into the run's freshly built model: the network is
built with the saved policy's own keyword arguments, so the weights fit;
the optimizer starts afresh (the new run has its own learning rate and
schedule).

The run is a new one: its steps, curves, schedules and ``total_steps``
count from 0 (``total_steps`` is what this run trains, as for any run, and a
Hub agent's ten million steps would leave its curves nowhere near the
others'); the summary says how many steps the policy had before.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import ConfigError, EngineError, quoted
from engine.rl.policy import SavedPolicy, describe_policy, observations_fit

FIELD = "start_from"
POLICY_KINDS = ("sb3-policy",)
"""The model kinds a run can start from."""

POLICY_ALGOS: dict[str, tuple[str, ...]] = {
    "stable_baselines3.common.policies": ("PPO", "A2C", "TRPO", "MaskablePPO"),
    "sb3_contrib.common.maskable.policies": ("MaskablePPO", "PPO"),
    "sb3_contrib.common.recurrent.policies": ("RecurrentPPO",),
    "stable_baselines3.dqn.policies": ("DQN",),
    "stable_baselines3.sac.policies": ("SAC",),
    "stable_baselines3.td3.policies": ("TD3",),
    "sb3_contrib.qrdqn.policies": ("QRDQN",),
    "sb3_contrib.tqc.policies": ("TQC",),
    "sb3_contrib.crossq.policies": ("CrossQ",),
    "sb3_contrib.ars.policies": ("ARS",),
    "sb3_contrib.trpo.policies": ("TRPO", "PPO", "A2C"),
}
"""The module of a policy class -> the algorithms whose networks it is, the
first the one ``algo=auto`` takes. PPO, A2C, TRPO and MaskablePPO share
their actor-critic network, so a policy one trained another continues."""

SAME_NETWORK = frozenset({"PPO", "MaskablePPO"})
"""Algorithms a run may swap for a model's own: PPO on an env with action
masks is MaskablePPO here (``engine.rl.config``)."""


@dataclass(frozen=True)
class StartModel:
    """The policy a run starts from, as validation sees it."""

    path: str
    """The model file, absolute: what the checked config records."""
    algo: str
    """The algorithm that trained it ('' = unknown: a bare zip)."""
    env: str
    """The env it was trained on ('' = unknown)."""
    saved: SavedPolicy

    @property
    def algos(self) -> tuple[str, ...]:
        """The algorithms whose network the policy is."""
        module = self.saved.policy_class.rpartition(".")[0]
        return POLICY_ALGOS.get(module, ())

    @property
    def policy_kind(self) -> str:
        """``MlpPolicy``, ``CnnPolicy`` or ``MultiInputPolicy``."""
        name = self.saved.policy_class.rpartition(".")[2]
        if "Cnn" in name:
            return "CnnPolicy"
        return "MultiInputPolicy" if "MultiInput" in name else "MlpPolicy"

    def fill(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """``config`` with the model's facts where it gives none: its file
        (resolved), env, algorithm, policy kind and normalization."""
        out = {**config, FIELD: self.path}
        if not out.get("env") and self.env:
            out["env"] = self.env
        if out.get("algo", "auto") == "auto" and not out.get("preset"):
            out["algo"] = self.algo or (self.algos[0] if self.algos else "auto")
        if out.get("policy") is None:
            out["policy"] = self.policy_kind
        if out.get("vec_normalize") is None:
            out["vec_normalize"] = self.saved.normalizes
        return out

    def check(
        self, algo: str, env_id: str, env_kwargs: dict[str, Any], normalizes: bool
    ) -> None:
        """Refuse, in one sentence, a run whose algorithm, normalization or
        env spaces differ from the model's."""
        name = self.saved.path.name
        algos = self.algos
        if not algos:
            raise ConfigError(
                FIELD,
                f"{name} holds a {self.saved.policy_class} policy, which no "
                "algorithm here trains.",
            )
        if algo not in algos and "RecurrentPPO" in algos:
            raise ConfigError(
                FIELD,
                f"{name} is a recurrent policy (RecurrentPPO's LSTM), which a "
                f"{algo} run cannot continue; set algo to RecurrentPPO.",
            )
        trained_by = self.algo or algos[0]
        if algo not in algos or (
            self.algo and algo != self.algo and {algo, self.algo} != SAME_NETWORK
        ):
            raise ConfigError(
                FIELD,
                f"{name} was trained by {trained_by}, not {algo}; set algo to "
                f"{trained_by} (or auto) to continue it.",
            )
        if normalizes != self.saved.normalizes:
            has = "normalizes" if self.saved.normalizes else "does not normalize"
            raise ConfigError(
                "vec_normalize",
                f"{name} {has} observations (vecnormalize.pkl) but this run "
                f"{'does' if normalizes else 'does not'}; set vec_normalize to "
                f"{str(self.saved.normalizes).lower()} to continue it.",
            )
        self._check_spaces(env_id, env_kwargs)

    def _check_spaces(self, env_id: str, env_kwargs: dict[str, Any]) -> None:
        import gymnasium as gym

        from engine.envs.families import is_atari

        env = gym.make(env_id, **env_kwargs)
        try:
            # An Atari game's frames are preprocessed (84x84, stacked) in
            # training: the run's build checks those, against its env copies.
            if is_atari(env):
                return
            mismatch = check_spaces(self.saved, env, env_id)
        finally:
            env.close()
        if mismatch:
            raise ConfigError(FIELD, mismatch)


def _shown(space: Any) -> str:
    """A space in a few words (a Box's bounds would fill a screen)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        return f"Box{space.shape} of {space.dtype}"
    return str(space)


def check_spaces(saved: SavedPolicy | Any, env: Any, env_id: str) -> str:
    """One sentence when ``env``'s spaces are not the policy's, else ''."""
    name = Path(saved.path).name
    policy_obs, policy_act = saved.observation_space, saved.action_space
    if not observations_fit(policy_obs, env.observation_space):
        shown = _shown(policy_obs), _shown(env.observation_space)
        if shown[0] == shown[1]:  # the same shape, other bounds
            shown = str(policy_obs), str(env.observation_space)
        return f"{name} takes observations {shown[0]} but {env_id} gives {shown[1]}."
    if policy_act != env.action_space:
        return (
            f"{name} acts in {_shown(policy_act)} but {env_id} expects "
            f"{_shown(env.action_space)}."
        )
    return ""


def _registered(project_dir: Path, ref: str) -> tuple[str, str, str] | None:
    """(file, env, algo) of the project's SB3 policy whose id or name is
    ``ref``; None when the project has none; ConfigError when several or
    another kind of model match. Read from ``studio.sqlite`` without opening
    the project (which writes): validation only looks."""
    db_file = project_dir / "studio.sqlite"
    if not db_file.is_file():
        return None
    db = sqlite3.connect(f"{db_file.as_uri()}?mode=ro", uri=True, timeout=10.0)
    try:
        rows = db.execute(
            "SELECT id, kind, path, env, algo FROM models WHERE id = ? OR name = ?",
            (ref, ref),
        ).fetchall()
    except sqlite3.Error:
        return None
    finally:
        db.close()
    policies = [r for r in rows if r[1] in POLICY_KINDS]
    if not policies and rows:
        raise ConfigError(
            FIELD, f"The model {quoted(ref)} is a {rows[0][1]}, not an SB3 policy."
        )
    if len(policies) > 1:
        ids = ", ".join(r[0] for r in policies)
        raise ConfigError(
            FIELD,
            f"{len(policies)} SB3 policies of the project are named {quoted(ref)} "
            f"({ids}); give the id of one.",
        )
    if not policies:
        return None
    _, _, rel, env, algo = policies[0]
    # engine.store.project keeps a model's path relative to the project.
    return str(project_dir / rel), str(env or ""), str(algo or "")


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False for a name the system refuses (too long,
    a NUL character) instead of its OSError."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def resolve(value: Any, project_dir: str | None) -> StartModel | None:
    """The model ``start_from`` names (None for ''): an existing file, or
    the id or name of one of the project's SB3 policies; ConfigError in one
    sentence otherwise."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(FIELD, f"start_from must be text, not {quoted(value)}.")
    ref = value.strip()
    path = Path(ref).expanduser()
    found = _registered(Path(project_dir), ref) if project_dir else None
    if found is not None:
        file, env, algo = found
    elif _is_file(path):
        file, env, algo = str(path.resolve()), "", ""
    elif path.suffix == ".zip" or "/" in ref or "\\" in ref:
        raise ConfigError(FIELD, f"The model file {path} does not exist.")
    else:
        where = "the project" if project_dir else "no project is open, and it"
        raise ConfigError(
            FIELD,
            f"{quoted(ref)} is neither a model file nor the id or name of an SB3 "
            f"policy of {where} (Models lists them).",
        )
    try:
        saved = describe_policy(file)
    except EngineError as exc:
        raise ConfigError(FIELD, str(exc)) from None
    if not (env and algo):
        from engine.rl.policy import state_beside

        state = state_beside(Path(file))
        env = env or str(state.get("env") or "")
        algo = algo or str(state.get("algo") or "")
    return StartModel(path=str(Path(file).resolve()), algo=algo, env=env, saved=saved)


def build_model(
    make: Callable[[dict[str, Any]], Any],
    start_from: str,
    *,
    venv: Any,
    env_id: str,
    project_dir: str | None,
    log: Callable[[str], None],
) -> Any:
    """The run's model built by ``make(policy_kwargs)`` with the saved
    policy's network, its weights copied in (and, for a ``VecNormalize``
    ``venv``, its observation statistics); EngineError in one sentence when
    they do not fit."""
    from stable_baselines3.common.vec_env import VecNormalize

    from engine.rl.policy import load_policy, restore_normalization

    loaded = load_policy(start_from, project_dir=project_dir)
    mismatch = check_spaces(loaded, venv, env_id)
    if mismatch:
        raise EngineError(mismatch)
    model = make(dict(loaded.policy_kwargs))
    try:
        model.policy.load_state_dict(loaded.policy.state_dict())
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0]
        raise EngineError(
            f"The weights of {loaded.path.name} do not fit this run's network "
            f"({first})."
        ) from None
    if isinstance(venv, VecNormalize):
        restore_normalization(venv, loaded.path)
    saved = describe_policy(start_from)
    log(
        f"started from {start_from} ({saved.num_timesteps:,} steps trained before): "
        "its weights"
        + (" and normalization statistics" if isinstance(venv, VecNormalize) else "")
        + ", a fresh optimizer; this run counts its own steps from 0"
    )
    if loaded.notice:
        log(loaded.notice)
    return model
