"""The gymnasium env of a ``workflow`` spec, stepping from precomputed tables.

Observation (``Box(0, 1, float32)``), see ``observation_labels()``:
step fraction, done flag, one-hot of the last tool, valid flag, resolved
flag, one-hot of the current status, and (when ``tasks.use_task_target``)
one-hot of the task's target status.

``info`` carries ``reward_breakdown`` (reward by rule, see
:mod:`engine.envs.workflow_model`), ``is_success``, ``valid``, ``status``,
``tool`` and ``task_id`` (plus ``text`` with ``text_in_info=True``).
``get_state()`` / ``set_state()`` save and restore everything, random
generator included, as JSON, so a language-model reward function can replay
one completion's tool from a saved state.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from engine.envs.spec import EnvSpec, coerce_spec
from engine.envs.workflow_model import REWARD_RULES, Task, WorkflowBatch, WorkflowModel


class WorkflowEnv(gym.Env[np.ndarray, np.int64]):
    """A designed workflow (state machine) as a gymnasium env."""

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def __init__(
        self,
        spec: EnvSpec | dict[str, Any] | str,
        source: str | None = None,
        render_mode: str | None = None,
        text_in_info: bool = False,
        max_steps: int | None = None,
        difficulty: dict[str, Any] | None = None,
    ) -> None:
        self.spec_doc = coerce_spec(spec, source)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be 'ansi', 'rgb_array' or None, not {render_mode!r}"
            )
        self.render_mode = render_mode
        self.text_in_info = text_in_info
        self._max_steps = max_steps
        self._compile(difficulty)
        m = self.model
        self.observation_space = spaces.Box(0.0, 1.0, (m.obs_size,), np.float32)
        self.action_space = spaces.Discrete(m.n_tools)
        self._task_i = 0
        self._task: Task = m.tasks[0]
        self._status = m.start
        self._target = -1
        self._steps = 0
        self._last_tool = -1
        self._valid = True
        self._done = False
        self._resolved = False
        self._rng = self.np_random

    def set_difficulty(self, difficulty: dict[str, Any] | None) -> None:
        """Play at ``difficulty`` (:class:`~engine.envs.curriculum.
        WorkflowDifficulty` settings; None: as designed) from the next
        reset on; the spaces stay the same."""
        self._compile(difficulty)

    def _compile(self, difficulty: dict[str, Any] | None) -> None:
        self.model = m = WorkflowModel(self.spec_doc, difficulty)
        if self._max_steps is not None:
            m.max_steps = int(self._max_steps)

        # Python-level tables: indexing lists beats indexing numpy for one env.
        names = REWARD_RULES
        self._out: list[list[Any]] = []
        for s in range(m.n_statuses):
            row: list[Any] = []
            for a in range(m.n_tools):
                outs = m.outcomes[s][a]
                n = max(1, len(outs))
                row.append(
                    tuple(
                        (
                            float(m.cum_table[s, a, k]),
                            int(m.next_table[s, a, k]),
                            float(m.reward_table[s, a, k]),
                            dict(
                                zip(
                                    names,
                                    m.breakdown_table[s, a, k].tolist(),
                                    strict=True,
                                )
                            ),
                        )
                        for k in range(n)
                    )
                )
            self._out.append(row)
        self._valid_py = m.valid.tolist()
        self._terminal = m.terminal.tolist()
        self._success = m.success.tolist()
        self._end_potential = m.end_potential.tolist()
        self._status_obs = []
        for s in range(m.n_statuses):
            o = np.zeros(m.obs_size, dtype=np.float32)
            o[m.obs_status + s] = 1.0
            self._status_obs.append(o)
        self._inv_max = 1.0 / m.max_steps
        self._tool_pattern = re.compile(
            r"\b("
            + "|".join(
                re.escape(t) for t in sorted(m.tool_names, key=len, reverse=True)
            )
            + r")\b"
        )

    # ------------------------------------------------------------ gymnasium

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._rng = self.np_random
        m = self.model
        if options and "task" in options:
            self._task_i = int(options["task"]) % len(m.tasks)
        else:
            self._task_i = m.sample_tasks(self._rng) if len(m.tasks) > 1 else 0
        self._task = m.tasks[self._task_i]
        self._status = m.start_of(self._task)
        self._target = -1 if self._task.target is None else self._task.target
        self._steps = 0
        self._last_tool = -1
        self._valid = True
        self._done = False
        self._resolved = False
        info = {"task_id": self._task.id, "status": m.statuses[self._status]}
        if self.text_in_info:
            info["text"] = self.render_text()
        return self._observation(), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = int(action)
        s = self._status
        outs = self._out[s][a]
        if len(outs) == 1:
            _, nxt, reward, bd = outs[0]
        else:
            u = self._rng.random()
            for cum, nxt, reward, bd in outs:  # noqa: B007 - the last one stays
                if u < cum:
                    break
        bd = dict(bd)
        target = self._target
        success = nxt == target if target >= 0 else self._success[nxt]
        if success and self.model.success_bonus:
            bd["success"] = self.model.success_bonus
            reward += self.model.success_bonus
        if success and self._end_potential[nxt]:
            # the episode ends here: the target's potential drops to 0
            bd["status"] -= self._end_potential[nxt]
            reward -= self._end_potential[nxt]
        valid = self._valid_py[s][a]
        self._status = nxt
        self._last_tool = a
        self._valid = valid
        self._steps += 1
        terminated = success or self._terminal[nxt]
        truncated = not terminated and self._steps >= self.model.max_steps
        self._done = terminated or truncated
        self._resolved = success
        obs = self._status_obs[nxt].copy()
        obs[0] = self._steps * self._inv_max
        obs[1] = self._done
        obs[2 + a] = 1.0
        obs[self.model.obs_valid] = valid
        obs[self.model.obs_resolved] = success
        if target >= 0:
            obs[self.model.obs_target + target] = 1.0
        info = {
            "reward_breakdown": bd,
            "is_success": success,
            "valid": valid,
            "status": self.model.statuses[nxt],
            "tool": self.model.tool_names[a],
            "task_id": self._task.id,
        }
        if self.text_in_info:
            info["text"] = self.render_text()
        return obs, reward, terminated, truncated, info

    def render(self) -> str | np.ndarray | None:
        if self.render_mode == "ansi":
            return self.render_text()
        if self.render_mode == "rgb_array":
            return self.render_rgb()
        return None

    def render_rgb(self, cell: int = 24) -> np.ndarray:
        """A strip with one square per status: the current one blue, terminal
        ones dark, the target (or success statuses) with a green frame."""
        m = self.model
        img = np.full((cell, cell * m.n_statuses, 3), 255, dtype=np.uint8)
        for s in range(m.n_statuses):
            x = slice(s * cell + 1, (s + 1) * cell - 1)
            goal = s == self._target if self._target >= 0 else m.success[s]
            if goal:
                img[:, x] = (80, 180, 90)
            inner = slice(s * cell + 4, (s + 1) * cell - 4)
            color = (
                (40, 90, 200)
                if s == self._status
                else ((110, 110, 120) if m.terminal[s] else (225, 225, 225))
            )
            img[4:-4, inner] = color
        return img

    # ------------------------------------------------------------ extras

    def _observation(self) -> np.ndarray:
        m = self.model
        obs = self._status_obs[self._status].copy()
        obs[0] = self._steps * self._inv_max
        obs[1] = self._done
        if self._last_tool >= 0:
            obs[m.obs_tool + self._last_tool] = 1.0
        obs[m.obs_valid] = self._valid
        obs[m.obs_resolved] = self._resolved
        if self._target >= 0:
            obs[m.obs_target + self._target] = 1.0
        return obs

    def action_masks(self) -> np.ndarray:
        """Tools with a transition from the current status (all when none has)."""
        mask: np.ndarray = self.model.valid[self._status].copy()
        if not mask.any():
            mask[:] = True
        return mask

    def valid_tools(self) -> list[str]:
        return [
            t
            for t, ok in zip(
                self.model.tool_names, self._valid_py[self._status], strict=True
            )
            if ok
        ]

    def observation_labels(self) -> list[str]:
        return self.model.observation_labels()

    def render_text(self) -> str:
        """The observation and the available tools as text, for language models."""
        m = self.model
        task = self._task
        lines = []
        if task.id != "default":
            title = f"Task {task.id}"
            if task.summary:
                title += f": {task.summary}"
            lines.append(title)
        if self._target >= 0:
            lines.append(
                f"Goal: move the issue to status '{m.statuses[self._target]}'."
            )
        lines.append(
            f"Step {self._steps} of {m.max_steps}. Current status: "
            f"'{m.statuses[self._status]}'."
        )
        if self._last_tool >= 0:
            outcome = "valid" if self._valid else "not valid in that status"
            lines.append(f"Last tool: {m.tool_names[self._last_tool]} ({outcome}).")
        if self._done:
            lines.append(
                "The episode is over" + (" (resolved)." if self._resolved else ".")
            )
        lines.append("Available tools:")
        valid = self._valid_py[self._status]
        for tool, ok in zip(m.tools, valid, strict=True):
            if ok:
                desc = tool.get("description", "")
                lines.append(f"- {tool['name']}" + (f": {desc}" if desc else ""))
        if not any(valid):
            lines.append("- (none)")
        lines.append("Answer with the name of one tool.")
        return "\n".join(lines)

    def action_from_text(self, text: str) -> int | None:
        """The first tool named in ``text`` (a language model's answer), or None."""
        match = self._tool_pattern.search(text)
        return None if match is None else self.model.tool_index[match.group(1)]

    def step_text(
        self, text: str
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Step with the tool a language model named in ``text``.

        Text that names no tool counts as an invalid tool (the status stays,
        ``rewards.invalid_tool`` applies) with ``info["tool"] = None``.
        """
        action = self.action_from_text(text)
        if action is not None:
            return self.step(action)
        m = self.model
        bd = dict.fromkeys(REWARD_RULES, 0.0)
        bd["step"], bd["invalid_tool"] = m.per_step, m.invalid_penalty
        self._steps += 1
        self._valid = False
        self._last_tool = -1
        truncated = self._steps >= m.max_steps
        self._done = truncated
        self._resolved = False
        info = {
            "reward_breakdown": bd,
            "is_success": False,
            "valid": False,
            "status": m.statuses[self._status],
            "tool": None,
            "task_id": self._task.id,
        }
        if self.text_in_info:
            info["text"] = self.render_text()
        return (
            self._observation(),
            m.per_step + m.invalid_penalty,
            False,
            truncated,
            info,
        )

    def replay(
        self, state: dict[str, Any], text_or_action: str | int
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Restore ``state`` and take one step: how a language-model reward
        function scores a completion against the prompt's saved state."""
        self.set_state(state)
        if isinstance(text_or_action, str):
            return self.step_text(text_or_action)
        return self.step(text_or_action)

    def get_state(self) -> dict[str, Any]:
        """Everything needed to continue this episode exactly, as JSON data."""
        m = self.model
        return {
            "env": self.spec_doc.name,
            "task": self._task_i,
            "status": m.statuses[self._status],
            "target": None if self._target < 0 else m.statuses[self._target],
            "steps": self._steps,
            "last_tool": None if self._last_tool < 0 else m.tool_names[self._last_tool],
            "valid": self._valid,
            "done": self._done,
            "resolved": self._resolved,
            "rng": self.np_random.bit_generator.state,
        }

    def set_state(self, state: dict[str, Any]) -> np.ndarray:
        """Restore a :meth:`get_state` snapshot; returns the observation."""
        m = self.model
        try:
            self._task_i = int(state["task"])
            self._task = m.tasks[self._task_i]
            self._status = m.status_index[state["status"]]
            self._target = (
                -1 if state["target"] is None else m.status_index[state["target"]]
            )
            self._steps = int(state["steps"])
            lt = state["last_tool"]
            self._last_tool = -1 if lt is None else m.tool_index[lt]
            self._valid = bool(state["valid"])
            self._done = bool(state["done"])
            self._resolved = bool(state["resolved"])
        except (KeyError, IndexError, TypeError) as exc:
            raise ValueError(
                f"The saved state does not fit this env ({exc!r})."
            ) from None
        try:
            bitgen = getattr(np.random, state["rng"]["bit_generator"])()
            bitgen.state = state["rng"]
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"The saved random state is damaged ({exc!r}).") from None
        rng = np.random.Generator(bitgen)
        self.np_random = rng
        self._rng = rng
        return self._observation()


class WorkflowVectorEnv(VectorEnv):
    """``num_envs`` copies of a workflow env as a gymnasium ``VectorEnv``,
    stepped together with numpy (:class:`WorkflowBatch`).

    Autoreset is ``SAME_STEP``: an ended episode's last observation is in
    ``infos["final_obs"]`` (masked by ``infos["_final_obs"]``) and the
    returned row already starts the next episode. ``infos["is_success"]``
    and ``infos["valid"]`` are arrays. ``action_masks()`` gives
    ``(num_envs, n_tools)``. Also made by ``gym.make_vec("rlstudio/<name>-v0",
    num_envs, vectorization_mode="vector_entry_point")``.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        spec: EnvSpec | dict[str, Any] | str,
        num_envs: int,
        source: str | None = None,
        seed: int | None = None,
    ) -> None:
        self.spec_doc = coerce_spec(spec, source)
        self.batch = WorkflowBatch(WorkflowModel(self.spec_doc), num_envs, seed)
        m = self.batch.model
        self.num_envs = num_envs
        self.single_observation_space = spaces.Box(0.0, 1.0, (m.obs_size,), np.float32)
        self.single_action_space = spaces.Discrete(m.n_tools)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._all = np.ones(num_envs, dtype=bool)

    def set_difficulty(self, difficulty: dict[str, Any] | None) -> None:
        """Every copy plays at ``difficulty`` from its next episode on."""
        self.batch.set_model(WorkflowModel(self.spec_doc, difficulty))

    def reset(
        self,
        *,
        seed: int | list[int] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if isinstance(seed, list):
            seed = seed[0]
        if seed is not None:
            self._np_random_seed = seed
        return self.batch.reset(seed), {}

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.batch.step(actions)
        infos: dict[str, Any] = {
            "is_success": info["is_success"],
            "_is_success": self._all,
            "valid": info["valid"],
            "_valid": self._all,
        }
        done = terminated | truncated
        if done.any():
            final = np.full(self.num_envs, None, dtype=object)
            for row, i in zip(
                info["final_observation"], np.flatnonzero(done), strict=True
            ):
                final[i] = row
            infos["final_obs"] = final
            infos["_final_obs"] = done
        return obs, reward, terminated, truncated, infos

    def action_masks(self) -> np.ndarray:
        return self.batch.action_masks()


def make_vector_from_spec(
    num_envs: int,
    spec: dict[str, Any],
    source: str | None = None,
    seed: int | None = None,
    **_: Any,
) -> WorkflowVectorEnv:
    """Gymnasium ``vector_entry_point`` of workflow specs."""
    return WorkflowVectorEnv(spec, num_envs, source=source, seed=seed)
