"""Gymnasium's classic-control environments as pure JAX functions.

Each twin follows the Gymnasium 1.x source of its env step for step (same
constants, integrator, termination and time limit), so that a policy trained
on the twin is evaluated on the Gymnasium env it was asked for, and the
equivalence test (``tests/test_compiled_envs.py``) can drive both from the
same state. They are written here rather than taken from gymnax, whose
CartPole and Acrobot differ from Gymnasium's in the reward of the last step
and in truncation, and which pulls flax and seaborn in.

An env is a :class:`CompiledEnv`: ``reset(key) -> state`` and
``step(state, action) -> (state, obs, reward, terminated, truncated)``,
each on one env copy (``vmap`` makes them vectorized); ``state`` is a
``(physics, t)`` pair, ``t`` the steps taken in the episode.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from engine.rl.compiled import TWIN_IDS, designed_kind

Array = Any
State = tuple[Array, Array]
"""``(physics, t)``: the env's own state vector and the steps taken."""


@dataclass(frozen=True, eq=False)
class CompiledEnv:
    """A Gymnasium env as pure functions of one env copy. Two are equal when
    their :attr:`identity` is: the programs compiled for one serve the other
    (``jax.jit``'s static arguments and :mod:`~engine.rl.compiled.learner`'s
    in-process programs are looked up by it)."""

    env_id: str
    obs_size: int
    n_actions: int
    """Discrete actions; 0 for a continuous (Box) action."""
    action_low: tuple[float, ...]
    action_high: tuple[float, ...]
    max_episode_steps: int
    reset_physics: Callable[[Array], Array]
    """``key -> physics``: the start state Gymnasium's ``reset`` draws."""
    physics_step: Callable[[Array, Array, Array], tuple[Array, Array, Array]]
    """``(physics, action, key) -> (physics, reward, terminated)``; ``key``
    draws what is random in a transition (a grid's slip)."""
    observe: Callable[[Array], Array]
    """``physics -> observation`` (float32)."""
    action_mask: Callable[[Array], Array] | None = None
    """``physics -> bool[n_actions]``, the actions allowed (an env's
    ``action_masks()``, which MaskablePPO reads); None: all, always."""
    is_success: Callable[[Array], Array] | None = None
    """``physics -> bool``: the ``info["is_success"]`` of the Gymnasium env
    after the step that led there; None where the env reports none."""
    digest: str = ""
    """What a designed env's twin was made from (a digest of its tables);
    empty for a classic twin, which its id says all of."""

    @property
    def identity(self) -> tuple[str, str]:
        return self.env_id, self.digest

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CompiledEnv) and other.identity == self.identity

    def __hash__(self) -> int:
        return hash(self.identity)

    @property
    def continuous(self) -> bool:
        return self.n_actions == 0

    def reset(self, key: Array) -> State:
        return self.reset_physics(key), jnp.int32(0)

    def step(
        self, state: State, action: Array, key: Array
    ) -> tuple[State, Array, Array, Array, Array]:
        physics, t = state
        physics, reward, terminated = self.physics_step(physics, action, key)
        t = t + 1
        truncated = jnp.logical_and(t >= self.max_episode_steps, ~terminated)
        obs = self.observe(physics)
        return (physics, t), obs, reward.astype(jnp.float32), terminated, truncated


# ----------------------------------------------------------------- CartPole


def _cartpole() -> CompiledEnv:
    gravity, masscart, masspole, length = 9.8, 1.0, 0.1, 0.5
    total_mass = masspole + masscart
    polemass_length = masspole * length
    force_mag, tau = 10.0, 0.02
    theta_threshold = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def reset(key: Array) -> Array:
        return jax.random.uniform(key, (4,), jnp.float32, -0.05, 0.05)

    def step(s: Array, action: Array, key: Array) -> tuple[Array, Array, Array]:
        x, x_dot, theta, theta_dot = s[0], s[1], s[2], s[3]
        force = jnp.where(action == 1, force_mag, -force_mag)
        costheta, sintheta = jnp.cos(theta), jnp.sin(theta)
        temp = (force + polemass_length * theta_dot**2 * sintheta) / total_mass
        thetaacc = (gravity * sintheta - costheta * temp) / (
            length * (4.0 / 3.0 - masspole * costheta**2 / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        # Gymnasium's default "euler" integrator
        x = x + tau * x_dot
        x_dot = x_dot + tau * xacc
        theta = theta + tau * theta_dot
        theta_dot = theta_dot + tau * thetaacc
        s = jnp.stack([x, x_dot, theta, theta_dot])
        terminated = (
            (x < -x_threshold)
            | (x > x_threshold)
            | (theta < -theta_threshold)
            | (theta > theta_threshold)
        )
        # CartPole-v1 pays 1 on every step, the terminating one included.
        return s, jnp.float32(1.0), terminated

    return CompiledEnv("CartPole-v1", 4, 2, (), (), 500, reset, step, lambda s: s)


# ------------------------------------------------------------------ Acrobot


def _acrobot() -> CompiledEnv:
    dt = 0.2
    l1, m1, m2 = 1.0, 1.0, 1.0
    lc1, lc2, i1, i2 = 0.5, 0.5, 1.0, 1.0
    max_vel_1, max_vel_2 = 4 * math.pi, 9 * math.pi
    torques = jnp.array([-1.0, 0.0, 1.0], jnp.float32)

    def dsdt(s: Array) -> Array:
        theta1, theta2, dtheta1, dtheta2, a = s[0], s[1], s[2], s[3], s[4]
        g = 9.8
        d1 = (
            m1 * lc1**2
            + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * jnp.cos(theta2))
            + i1
            + i2
        )
        d2 = m2 * (lc2**2 + l1 * lc2 * jnp.cos(theta2)) + i2
        phi2 = m2 * lc2 * g * jnp.cos(theta1 + theta2 - math.pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2**2 * jnp.sin(theta2)
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * jnp.sin(theta2)
            + (m1 * lc1 + m2 * l1) * g * jnp.cos(theta1 - math.pi / 2)
            + phi2
        )
        # the "book" dynamics, Gymnasium's default
        ddtheta2 = (
            a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * jnp.sin(theta2) - phi2
        ) / (m2 * lc2**2 + i2 - d2**2 / d1)
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return jnp.stack([dtheta1, dtheta2, ddtheta1, ddtheta2, jnp.float32(0.0)])

    def rk4(y0: Array) -> Array:
        # Gymnasium's rk4 over t = [0, dt], its last point
        k1 = dsdt(y0)
        k2 = dsdt(y0 + dt / 2.0 * k1)
        k3 = dsdt(y0 + dt / 2.0 * k2)
        k4 = dsdt(y0 + dt * k3)
        return y0 + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)

    def wrap(x: Array, m: float, big_m: float) -> Array:
        diff = big_m - m
        x = jnp.where(x > big_m, x - diff * jnp.ceil((x - big_m) / diff), x)
        return jnp.where(x < m, x + diff * jnp.ceil((m - x) / diff), x)

    def reset(key: Array) -> Array:
        return jax.random.uniform(key, (4,), jnp.float32, -0.1, 0.1)

    def step(s: Array, action: Array, key: Array) -> tuple[Array, Array, Array]:
        torque = torques[action]
        ns = rk4(jnp.concatenate([s, torque[None]]))[:4]
        ns = jnp.stack([
            wrap(ns[0], -math.pi, math.pi),
            wrap(ns[1], -math.pi, math.pi),
            jnp.clip(ns[2], -max_vel_1, max_vel_1),
            jnp.clip(ns[3], -max_vel_2, max_vel_2),
        ])  # fmt: skip
        terminated = -jnp.cos(ns[0]) - jnp.cos(ns[1] + ns[0]) > 1.0
        reward = jnp.where(terminated, 0.0, -1.0)
        return ns, reward, terminated

    def observe(s: Array) -> Array:
        return jnp.stack(
            [jnp.cos(s[0]), jnp.sin(s[0]), jnp.cos(s[1]), jnp.sin(s[1]), s[2], s[3]]
        )

    return CompiledEnv("Acrobot-v1", 6, 3, (), (), 500, reset, step, observe)


# -------------------------------------------------------------- MountainCar


def _mountain_car() -> CompiledEnv:
    min_position, max_position, max_speed = -1.2, 0.6, 0.07
    goal_position, goal_velocity = 0.5, 0.0
    force, gravity = 0.001, 0.0025

    def reset(key: Array) -> Array:
        position = jax.random.uniform(key, (), jnp.float32, -0.6, -0.4)
        return jnp.stack([position, jnp.float32(0.0)])

    def step(s: Array, action: Array, key: Array) -> tuple[Array, Array, Array]:
        position, velocity = s[0], s[1]
        velocity = velocity + (action - 1) * force + jnp.cos(3 * position) * (-gravity)
        velocity = jnp.clip(velocity, -max_speed, max_speed)
        position = jnp.clip(position + velocity, min_position, max_position)
        velocity = jnp.where((position == min_position) & (velocity < 0), 0.0, velocity)
        terminated = (position >= goal_position) & (velocity >= goal_velocity)
        return jnp.stack([position, velocity]), jnp.float32(-1.0), terminated

    return CompiledEnv("MountainCar-v0", 2, 3, (), (), 200, reset, step, lambda s: s)


# ----------------------------------------------------------------- Pendulum


def _pendulum() -> CompiledEnv:
    max_speed, max_torque, dt = 8.0, 2.0, 0.05
    g, m, length = 10.0, 1.0, 1.0

    def reset(key: Array) -> Array:
        high = jnp.array([math.pi, 1.0], jnp.float32)
        return jax.random.uniform(key, (2,), jnp.float32, -high, high)

    def step(s: Array, action: Array, key: Array) -> tuple[Array, Array, Array]:
        th, thdot = s[0], s[1]
        u = jnp.clip(jnp.reshape(action, ())[()], -max_torque, max_torque)
        angle = ((th + math.pi) % (2 * math.pi)) - math.pi
        costs = angle**2 + 0.1 * thdot**2 + 0.001 * u**2
        newthdot = (
            thdot
            + (3 * g / (2 * length) * jnp.sin(th) + 3.0 / (m * length**2) * u) * dt
        )
        newthdot = jnp.clip(newthdot, -max_speed, max_speed)
        newth = th + newthdot * dt
        return jnp.stack([newth, newthdot]), -costs, jnp.bool_(False)

    def observe(s: Array) -> Array:
        return jnp.stack([jnp.cos(s[0]), jnp.sin(s[0]), s[1]])

    return CompiledEnv(
        "Pendulum-v1", 3, 0, (-max_torque,), (max_torque,), 200, reset, step, observe
    )


# ---------------------------------------------------------------- grids


def _digest(*tables: Any) -> str:
    """A digest of the tables a designed env's twin closes over."""

    h = hashlib.sha256()
    for table in tables:
        a = np.ascontiguousarray(table)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def grid_twin(env_id: str, grid: Any) -> CompiledEnv:
    """The twin of a designed grid env, from the ``engine.envs.grid.GridEnv``
    the same spec file builds (walls, goals, traps, cell rewards, slip and
    step limit read from it, so both follow one spec). The physics is the
    agent's cell and, per cell, whether its ``once`` reward was collected;
    the observation is the cell one-hot, as SB3 feeds a ``Discrete``
    observation to its policy."""
    from engine.envs.grid import MOVES

    rows, cols = grid.rows, grid.cols
    n = rows * cols

    def mask(cells: Any) -> Array:
        out = np.zeros(n, bool)
        for r, c in cells:
            out[r * cols + c] = True
        return jnp.asarray(out)

    walls = jnp.asarray(np.asarray(grid.walls, bool).reshape(-1))
    goals, traps = mask(grid.goals), mask(grid.traps)
    cell = jnp.asarray(np.asarray(grid.cell_reward, np.float32).reshape(-1))
    once = jnp.asarray(np.asarray(grid.once_reward, np.float32).reshape(-1))
    moves = jnp.asarray(MOVES, jnp.int32)
    start = grid.start[0] * cols + grid.start[1]
    slip = float(grid.slip)
    r_step, r_bump = float(grid.r_step), float(grid.r_bump)
    r_goal, r_trap = float(grid.r_goal), float(grid.r_trap)

    def reset(key: Array) -> Array:
        return jnp.zeros(n + 1, jnp.int32).at[0].set(start)

    def step(s: Array, action: Array, key: Array) -> tuple[Array, Array, Array]:
        k_slip, k_side = jax.random.split(key)
        # GridEnv: with probability slip, a perpendicular move, either side
        slipped = jax.random.uniform(k_slip) < slip
        side = jnp.where(jax.random.uniform(k_side) < 0.5, 1, 3)
        a = jnp.where(slipped, (action + side) % 4, action)
        pos, collected = s[0], s[1:]
        r = pos // cols + moves[a, 0]
        c = pos % cols + moves[a, 1]
        inside = (r >= 0) & (r < rows) & (c >= 0) & (c < cols)
        target = jnp.clip(r, 0, rows - 1) * cols + jnp.clip(c, 0, cols - 1)
        blocked = ~inside | walls[target]
        new = jnp.where(blocked, pos, target)
        paid = cell[target] - once[target] * collected[target]
        reward = r_step + jnp.where(blocked, r_bump, paid)
        take = ~blocked & (once[target] != 0)
        collected = collected.at[target].set(jnp.where(take, 1, collected[target]))
        reward = reward + jnp.where(goals[new], r_goal, 0.0)
        reward = reward + jnp.where(traps[new], r_trap, 0.0)
        physics = jnp.concatenate([new[None], collected])
        return physics, reward, goals[new] | traps[new]

    def observe(s: Array) -> Array:
        return jax.nn.one_hot(s[0], n, dtype=jnp.float32)

    def success(s: Array) -> Array:
        return goals[s[0]]

    digest = _digest(
        np.asarray(grid.walls), np.asarray(grid.cell_reward),
        np.asarray(grid.once_reward), np.asarray(sorted(grid.goals)),
        np.asarray(sorted(grid.traps)),
        np.asarray([*grid.start, slip, r_step, r_bump, r_goal, r_trap, grid.max_steps]),
    )  # fmt: skip
    return CompiledEnv(
        env_id, n, 4, (), (), int(grid.max_steps), reset, step, observe,
        is_success=success, digest=digest,
    )  # fmt: skip


# ---------------------------------------------------------------- workflows

WORKFLOW_FIELDS = (
    "status",
    "target",
    "last_tool",
    "valid",
    "resolved",
    "done",
    "steps",
)
"""The physics of a workflow twin, int32 in this order (``target`` and
``last_tool`` are -1 when there is none)."""


@dataclass(frozen=True)
class _WorkflowTables:
    """A :class:`~engine.envs.workflow_model.WorkflowModel`'s tables as
    device arrays, for its twin."""

    next_status: Array
    cum_p: Array
    """float32 draws against float32 cumulative sums; the last outcome's
    bound stays 2.0, so a draw never runs past it."""
    reward: Array
    valid: Array
    allowed: Array
    """The tools a status allows: a status with no transition allows every
    tool (``WorkflowBatch.action_masks``)."""
    terminal: Array
    success: Array
    end_potential: Array
    task_start: Array
    task_target: Array
    task_p: Array | None

    @classmethod
    def of(cls, m: Any) -> _WorkflowTables:
        return cls(
            next_status=jnp.asarray(m.next_table, jnp.int32),
            cum_p=jnp.asarray(m.cum_table, jnp.float32),
            reward=jnp.asarray(m.reward_table, jnp.float32),
            valid=jnp.asarray(m.valid),
            allowed=jnp.asarray(m.valid | ~m.valid.any(axis=1, keepdims=True)),
            terminal=jnp.asarray(m.terminal),
            success=jnp.asarray(m.success),
            end_potential=jnp.asarray(m.end_potential, jnp.float32),
            task_start=jnp.asarray([m.start_of(t) for t in m.tasks], jnp.int32),
            task_target=jnp.asarray(
                [-1 if t.target is None else t.target for t in m.tasks], jnp.int32
            ),
            task_p=None if m.task_p is None else jnp.asarray(m.task_p, jnp.float32),
        )


def workflow_twin(env_id: str, model: Any) -> CompiledEnv:
    """The twin of a designed workflow env, stepping from the tables of its
    :class:`engine.envs.workflow_model.WorkflowModel` (next status,
    cumulative probability and reward per ``[status, tool, outcome]``, valid
    tools, terminal and success statuses, tasks and their start and target
    statuses), as :class:`~engine.envs.workflow_model.WorkflowBatch` does:
    the same observation layout, rewards by rule, success bonus, potential
    shaping, masks and step limit, from the one spec file."""
    m = model
    physics_of = {name: i for i, name in enumerate(WORKFLOW_FIELDS)}
    STATUS, TARGET, LAST, VALID, RESOLVED, DONE, STEPS = physics_of.values()
    t = _WorkflowTables.of(m)
    next_table, cum_table, reward_table = t.next_status, t.cum_p, t.reward
    valid, allowed, terminal, success_status = t.valid, t.allowed, t.terminal, t.success
    end_potential, task_start, task_target, task_p = (
        t.end_potential, t.task_start, t.task_target, t.task_p,
    )  # fmt: skip
    bonus = float(m.success_bonus)
    n_tasks = len(m.tasks)
    stochastic = m.max_outcomes > 1
    max_steps = int(m.max_steps)
    # a table, not arithmetic: XLA turns a division by a constant into a
    # product, which rounds differently from the numpy env's float64 product
    step_fraction = jnp.asarray(
        (np.arange(max_steps + 1) * (1.0 / max_steps)).astype(np.float32)
    )
    obs_size, n_tools = int(m.obs_size), int(m.n_tools)
    obs_valid, obs_resolved = int(m.obs_valid), int(m.obs_resolved)
    obs_status, obs_target = int(m.obs_status), int(m.obs_target)
    use_target = bool(m.use_task_target)

    def reset(key: Array) -> Array:
        if task_p is None:
            k = jax.random.randint(key, (), 0, n_tasks)
        else:
            k = jax.random.choice(key, n_tasks, p=task_p)
        physics = jnp.zeros(len(WORKFLOW_FIELDS), jnp.int32)
        physics = physics.at[STATUS].set(task_start[k]).at[TARGET].set(task_target[k])
        return physics.at[LAST].set(-1).at[VALID].set(1)

    def step(p: Array, action: Array, key: Array) -> tuple[Array, Array, Array]:
        s, a, target = p[STATUS], jnp.asarray(action, jnp.int32), p[TARGET]
        if stochastic:
            u = jax.random.uniform(key)
            k = jnp.sum(u >= cum_table[s, a]).astype(jnp.int32)
        else:
            k = jnp.int32(0)
        nxt = next_table[s, a, k]
        success = jnp.where(target >= 0, nxt == target, success_status[nxt])
        reward = reward_table[s, a, k] + jnp.where(
            success, bonus - end_potential[nxt], 0.0
        )
        steps = p[STEPS] + 1
        terminated = terminal[nxt] | success
        done = terminated | (steps >= max_steps)
        physics = jnp.stack([
            nxt, target, a, valid[s, a].astype(jnp.int32), success.astype(jnp.int32),
            done.astype(jnp.int32), steps,
        ])  # fmt: skip
        return physics, reward, terminated

    def observe(p: Array) -> Array:
        obs = jnp.zeros(obs_size, jnp.float32)
        obs = obs.at[0].set(step_fraction[jnp.minimum(p[STEPS], max_steps)])
        obs = obs.at[1].set(p[DONE].astype(jnp.float32))
        # index n_tools + 2 is the valid flag, set just after: a "no tool yet"
        # (-1) lands there harmlessly instead of on a tool
        obs = obs.at[jnp.where(p[LAST] >= 0, 2 + p[LAST], obs_valid)].set(1.0)
        obs = obs.at[obs_valid].set(p[VALID].astype(jnp.float32))
        obs = obs.at[obs_resolved].set(p[RESOLVED].astype(jnp.float32))
        obs = obs.at[obs_status + p[STATUS]].set(1.0)
        if use_target:
            has = p[TARGET] >= 0
            where = jnp.where(has, obs_target + p[TARGET], 0)
            obs = obs.at[where].set(jnp.where(has, 1.0, obs[where]))
        return obs

    def mask(p: Array) -> Array:
        return allowed[p[STATUS]]

    def success(p: Array) -> Array:
        return p[RESOLVED] == 1

    digest = _digest(
        m.next_table, m.cum_table, m.reward_table, m.valid, m.terminal, m.success,
        m.end_potential, np.asarray(task_start), np.asarray(task_target),
        np.zeros(0) if m.task_p is None else m.task_p,
        np.asarray([bonus, max_steps, obs_size, use_target]),
    )  # fmt: skip
    return CompiledEnv(
        env_id, obs_size, n_tools, (), (), max_steps, reset, step, observe,
        action_mask=mask, is_success=success, digest=digest,
    )  # fmt: skip


TWINS: dict[str, Callable[[], CompiledEnv]] = {
    "CartPole-v1": _cartpole,
    "Acrobot-v1": _acrobot,
    "MountainCar-v0": _mountain_car,
    "Pendulum-v1": _pendulum,
}
"""Gymnasium ids with a compiled twin."""
assert tuple(TWINS) == TWIN_IDS


def compiled_env(
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    difficulty: dict[str, Any] | None = None,
) -> CompiledEnv | None:
    """The compiled twin of ``env_id`` made with ``env_kwargs``, or None
    where there is none (twins take no keyword arguments; a designed grid
    must be registered, as validation does). A designed env's twin is of
    the env at ``difficulty`` (a curriculum stage's settings, applied by the
    env's own ``set_difficulty``: one spec, one reading of it)."""
    if env_kwargs:
        return None
    if env_id in TWINS:
        return None if difficulty is not None else TWINS[env_id]()
    kind = designed_kind(env_id)
    if kind not in ("grid", "workflow"):
        return None
    import gymnasium as gym

    env = gym.make(env_id)
    try:
        designed: Any = env.unwrapped
        if difficulty is not None:
            designed.set_difficulty(difficulty)
        if kind == "workflow":
            return workflow_twin(env_id, designed.model)
        return grid_twin(env_id, designed)
    finally:
        env.close()
