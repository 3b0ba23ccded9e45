"""The rule policy ``act`` falls back to last: the env's expert action
(:func:`engine.llm.policy.expert_action`, the tool with the fewest expected
steps to the goal of a designed workflow), where the env has one.

It answers from the request: a workflow state (``{"status": ..., "target":
...}``, the names :meth:`WorkflowEnv.get_state` uses) or an observation,
whose one-hot status (and target) blocks say the same. An env is built once
per id and kept; numpy and Gymnasium only, so the service still imports no
torch.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from engine import contract
from engine.errors import ConfigError, EngineError


class NoRulePolicy(EngineError):
    """The agent's env has no expert action to answer with."""


class RulePolicies:
    """Thread-safe: one env per id, used under a lock (acting resets it).
    An env with no expert is remembered too: ``act`` asks on every request
    whether its chain ends with a rule policy, and building CartPole each
    time to learn it has none would cost more than the answer."""

    def __init__(self, project_dir: Path) -> None:
        self.project_dir = project_dir
        self._envs: dict[str, Any] = {}
        self._missing: dict[str, str] = {}
        """Env id -> why it has no rule policy."""
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            for env in self._envs.values():
                env.close()
            self._envs.clear()

    def _env(self, env_id: str) -> Any:
        import gymnasium as gym

        from engine.llm.policy import has_expert
        from engine.rl.env_info import register_designed_envs

        if "/" not in env_id and contract.spec_file(self.project_dir, env_id).is_file():
            env_id = contract.env_id(env_id)  # a designed env by its name
        env = self._envs.get(env_id)
        if env is not None:
            return env
        if env_id in self._missing:
            raise NoRulePolicy(self._missing[env_id])
        register_designed_envs(str(self.project_dir))
        if env_id not in gym.registry:
            # Not remembered: the env's file may yet be saved.
            raise NoRulePolicy(f"There is no env {env_id!r} for the rule policy.")
        env = gym.make(env_id)
        if not has_expert(env):
            env.close()
            self._missing[env_id] = (
                f"The env {env_id!r} has no expert action to use as a rule policy."
            )
            raise NoRulePolicy(self._missing[env_id])
        self._envs[env_id] = env
        return env

    def check(self, env_id: str) -> None:
        """NoRulePolicy unless ``env_id`` has an expert action."""
        with self._lock:
            self._env(env_id)

    def act(self, env_id: str, observation: Any, state: Any) -> dict[str, Any]:
        """``action`` (an index) and ``tool`` (its name) for the situation
        the request describes."""
        import numpy as np

        from engine.llm.policy import env_tools, expert_action, unwrap

        with self._lock:
            env = self._env(env_id)
            env.reset(seed=0)
            u = unwrap(env)
            model = u.model
            snapshot = u.get_state()
            if isinstance(state, dict) and state:
                for key in ("status", "target"):
                    value = state.get(key)
                    if key in state and value not in (*model.statuses, None):
                        raise ConfigError(
                            f"state.{key}",
                            f"state.{key} must be a status of {env_id!r}, "
                            f"not {str(value)[:60]!r}.",
                        )
                    if key in state:
                        snapshot[key] = value
            elif observation is not None:
                try:
                    obs = np.asarray(observation, dtype=np.float64).reshape(-1)
                except (TypeError, ValueError):
                    obs = np.zeros(0)
                if obs.shape != (model.obs_size,):
                    raise ConfigError(
                        "observation",
                        f"observation must be {model.obs_size} numbers for "
                        f"the rule policy of {env_id!r}.",
                    )
                status = obs[model.obs_status : model.obs_status + model.n_statuses]
                snapshot["status"] = model.statuses[int(np.argmax(status))]
                if model.obs_size > model.obs_target:
                    target = obs[model.obs_target : model.obs_target + model.n_statuses]
                    snapshot["target"] = (
                        model.statuses[int(np.argmax(target))] if target.any() else None
                    )
            else:
                raise ConfigError(
                    "state",
                    "The rule policy needs the observation or the workflow "
                    "state (status, target).",
                )
            u.set_state(snapshot)
            action = expert_action(env)
            return {"action": action, "tool": env_tools(env)[action]}
