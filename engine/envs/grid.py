"""The gymnasium env of a ``grid`` spec: a painted grid world.

Observation: ``Discrete(rows * cols)``, the agent's cell as ``row * cols +
col``. Actions: 0 up, 1 right, 2 down, 3 left. With probability ``slip`` a
move goes to one of the two perpendicular sides instead. Moving into a wall or
off the grid leaves the agent in place (``rewards.wall_bump`` is added).
Reaching a goal or a trap ends the episode; ``max_steps`` truncates it.
Rewards by rule in ``info["reward_breakdown"]``: step, wall_bump, cell, goal,
trap. A cell reward marked ``once`` pays the first time its cell is entered in
an episode only (a coin); others pay each time.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from engine.envs.spec import EnvSpec, coerce_spec
from engine.errors import ConfigError

MOVES = ((-1, 0), (0, 1), (1, 0), (0, -1))
ACTION_NAMES = ("up", "right", "down", "left")
CELL_PX = 16
COLORS = {
    "floor": (235, 235, 235),
    "wall": (60, 60, 70),
    "goal": (80, 180, 90),
    "trap": (210, 70, 60),
    "start": (150, 190, 230),
    "agent": (40, 90, 200),
    "reward": (240, 210, 110),
}


class GridEnv(gym.Env[np.int64, np.int64]):
    metadata = {"render_modes": ["rgb_array", "ansi"], "render_fps": 8}

    def __init__(
        self,
        spec: EnvSpec | dict[str, Any] | str,
        source: str | None = None,
        render_mode: str | None = None,
        difficulty: dict[str, Any] | None = None,
    ) -> None:
        self.spec_doc = coerce_spec(spec, source)
        self._configure(difficulty)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be rgb_array, ansi or None, not {render_mode!r}"
            )
        self.render_mode = render_mode
        self.observation_space = spaces.Discrete(self.rows * self.cols)
        self.action_space = spaces.Discrete(4)
        self.pos = self.start
        self.steps = 0
        self.collected: set[tuple[int, int]] = set()
        """Cells whose 'once' reward this episode has paid."""

    def set_difficulty(self, difficulty: dict[str, Any] | None) -> None:
        """Play at ``difficulty`` (:class:`~engine.envs.curriculum.
        GridDifficulty` settings; None: as designed) from the next reset on;
        the spaces stay the same."""
        self._configure(difficulty)

    def _configure(self, difficulty: dict[str, Any] | None) -> None:
        d = difficulty or {}
        body = self.spec_doc.body
        self.rows, self.cols = (int(v) for v in body["size"])
        self.walls = np.zeros((self.rows, self.cols), dtype=bool)
        for r, c in body.get("walls", []):
            self.walls[r, c] = True
        self.start = (int(body["start"][0]), int(body["start"][1]))
        self.goals = {tuple(g) for g in body["goals"]}
        keep_traps = d.get("traps", True)
        self.traps = {tuple(t) for t in body.get("traps", [])} if keep_traps else set()
        self.cell_reward = np.zeros((self.rows, self.cols))
        self.once_reward = np.zeros((self.rows, self.cols))
        for item in body.get("cell_rewards", []):
            r, c = item["cell"]
            self.cell_reward[r, c] += float(item["reward"])
            if item.get("once", False):
                self.once_reward[r, c] += float(item["reward"])
        rewards = body.get("rewards", {})
        self.r_step = float(rewards.get("per_step", -0.01))
        self.r_goal = float(rewards.get("goal", 1.0))
        self.r_trap = float(rewards.get("trap", -1.0))
        self.r_bump = float(rewards.get("wall_bump", 0.0))
        self.slip = float(body.get("slip", 0.0))
        self.max_steps = int(body.get("max_steps", 4 * self.rows * self.cols))
        if d.get("slip") is not None:
            self.slip = float(d["slip"])
        if d.get("max_steps") is not None:
            self.max_steps = int(d["max_steps"])
        if d.get("size") is not None:
            self._window(int(d["size"][0]), int(d["size"][1]))

    def _free(self, cell: tuple[int, int]) -> bool:
        r, c = cell
        return 0 <= r < self.rows and 0 <= c < self.cols and not self.walls[r, c]

    def _distances(self, origin: tuple[int, int]) -> dict[tuple[int, int], int]:
        """Moves from ``origin`` to every cell reachable without a trap."""
        from collections import deque

        dist = {origin: 0}
        queue = deque([origin])
        while queue:
            r, c = queue.popleft()
            for dr, dc in MOVES:
                n = (r + dr, c + dc)
                if n not in dist and self._free(n) and n not in self.traps:
                    dist[n] = dist[(r, c)] + 1
                    queue.append(n)
        return dist

    def _window(self, h: int, w: int) -> None:
        """Wall off all but an ``h`` x ``w`` area holding the goal nearest the
        start, and start at the cell of it nearest the spec's start from
        which that goal can be reached."""
        h, w = min(h, self.rows), min(w, self.cols)
        from_start = self._distances(self.start)
        sr, sc = self.start
        goal = min(
            self.goals,
            key=lambda g: (from_start.get(g, 10**9), abs(g[0] - sr) + abs(g[1] - sc)),
        )

        def place(g: int, s: int, size: int, n: int) -> int:
            # the window's first row (col): holds g, centred on s where it can
            low, high = max(0, g - size + 1), min(g, n - size)
            return min(max(s - size // 2, low), high)

        top, left = place(goal[0], sr, h, self.rows), place(goal[1], sc, w, self.cols)
        inside = np.zeros_like(self.walls)
        inside[top : top + h, left : left + w] = True
        self.walls |= ~inside
        self.goals = {g for g in self.goals if inside[g]}
        self.traps = {t for t in self.traps if inside[t]}
        reach = self._distances(goal)
        starts = [c for c in reach if c not in self.goals]
        if not starts:
            raise ConfigError(
                "size",
                f"A {h} x {w} area around the goal {list(goal)} has no free cell "
                "to start from.",
            )
        self.start = min(starts, key=lambda c: (abs(c[0] - sr) + abs(c[1] - sc), c))

    def cell_value(self, cell: tuple[int, int]) -> float:
        """The reward entering ``cell`` pays now: its 'once' part only until
        it has been collected this episode."""
        value = float(self.cell_reward[cell])
        return (
            value - float(self.once_reward[cell]) if cell in self.collected else value
        )

    def _obs(self) -> np.int64:
        return np.int64(self.pos[0] * self.cols + self.pos[1])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.int64, dict[str, Any]]:
        super().reset(seed=seed)
        self.pos = self.start
        self.steps = 0
        self.collected = set()
        return self._obs(), {"cell": list(self.pos)}

    def step(self, action: Any) -> tuple[np.int64, float, bool, bool, dict[str, Any]]:
        a = int(action)
        if self.slip > 0 and self.np_random.random() < self.slip:
            a = (a + (1 if self.np_random.random() < 0.5 else 3)) % 4
        dr, dc = MOVES[a]
        r, c = self.pos[0] + dr, self.pos[1] + dc
        bd = {
            "step": self.r_step,
            "wall_bump": 0.0,
            "cell": 0.0,
            "goal": 0.0,
            "trap": 0.0,
        }
        if not (0 <= r < self.rows and 0 <= c < self.cols) or self.walls[r, c]:
            r, c = self.pos
            bd["wall_bump"] = self.r_bump
        else:
            bd["cell"] = self.cell_value((r, c))
            if self.once_reward[r, c]:
                self.collected.add((r, c))
        self.pos = (r, c)
        self.steps += 1
        success = self.pos in self.goals
        trapped = self.pos in self.traps
        if success:
            bd["goal"] = self.r_goal
        if trapped:
            bd["trap"] = self.r_trap
        terminated = success or trapped
        truncated = not terminated and self.steps >= self.max_steps
        info = {
            "reward_breakdown": bd,
            "is_success": success,
            "cell": [r, c],
            "move": ACTION_NAMES[a],
        }
        return self._obs(), float(sum(bd.values())), terminated, truncated, info

    def render(self) -> Any:
        if self.render_mode == "ansi":
            return self.render_ansi()
        if self.render_mode == "rgb_array":
            return self.render_rgb()
        return None

    def render_ansi(self) -> str:
        lines = []
        for r in range(self.rows):
            row = []
            for c in range(self.cols):
                cell = (r, c)
                if cell == self.pos:
                    ch = "A"
                elif self.walls[r, c]:
                    ch = "#"
                elif cell in self.goals:
                    ch = "G"
                elif cell in self.traps:
                    ch = "X"
                elif cell == self.start:
                    ch = "S"
                elif self.cell_value(cell):
                    ch = "+" if self.cell_value(cell) > 0 else "-"
                else:
                    ch = "."
                row.append(ch)
            lines.append("".join(row))
        return "\n".join(lines) + "\n"

    def render_rgb(self) -> np.ndarray:
        img = np.empty((self.rows, self.cols, 3), dtype=np.uint8)
        img[:] = COLORS["floor"]
        img[self.walls] = COLORS["wall"]
        img[self.cell_reward != 0] = COLORS["reward"]
        for cell in self.collected:
            if not self.cell_value(cell):
                img[cell] = COLORS["floor"]
        img[self.start] = COLORS["start"]
        for g in self.goals:
            img[g] = COLORS["goal"]
        for t in self.traps:
            img[t] = COLORS["trap"]
        img[self.pos] = COLORS["agent"]
        big = img.repeat(CELL_PX, axis=0).repeat(CELL_PX, axis=1)
        big[::CELL_PX, :] = 200  # grid lines
        big[:, ::CELL_PX] = 200
        return big

    def get_state(self) -> dict[str, Any]:
        return {
            "cell": list(self.pos),
            "steps": self.steps,
            "collected": sorted([r, c] for r, c in self.collected),
            "rng": self.np_random.bit_generator.state,
        }

    def set_state(self, state: dict[str, Any]) -> np.int64:
        self.pos = (int(state["cell"][0]), int(state["cell"][1]))
        self.steps = int(state["steps"])
        self.collected = {(int(r), int(c)) for r, c in state.get("collected", [])}
        bitgen = getattr(np.random, state["rng"]["bit_generator"])()
        bitgen.state = state["rng"]
        self.np_random = np.random.Generator(bitgen)
        return self._obs()

    def shortest_path_length(self) -> int | None:
        """Moves from start to the nearest goal ignoring slips, None if walled off."""
        from collections import deque

        seen = {self.start}
        queue = deque([(self.start, 0)])
        while queue:
            (r, c), d = queue.popleft()
            if (r, c) in self.goals:
                return d
            if (r, c) in self.traps:
                continue
            for dr, dc in MOVES:
                n = (r + dr, c + dc)
                if (
                    0 <= n[0] < self.rows
                    and 0 <= n[1] < self.cols
                    and not self.walls[n]
                    and n not in seen
                ):
                    seen.add(n)
                    queue.append((n, d + 1))
        return None
