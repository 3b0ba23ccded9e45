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

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from engine.rl.compiled import TWIN_IDS, is_designed_grid

Array = Any
State = tuple[Array, Array]
"""``(physics, t)``: the env's own state vector and the steps taken."""


@dataclass(frozen=True)
class CompiledEnv:
    """A Gymnasium env as pure functions of one env copy."""

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

    return CompiledEnv(env_id, n, 4, (), (), int(grid.max_steps), reset, step, observe)


TWINS: dict[str, Callable[[], CompiledEnv]] = {
    "CartPole-v1": _cartpole,
    "Acrobot-v1": _acrobot,
    "MountainCar-v0": _mountain_car,
    "Pendulum-v1": _pendulum,
}
"""Gymnasium ids with a compiled twin."""
assert tuple(TWINS) == TWIN_IDS


def compiled_env(
    env_id: str, env_kwargs: dict[str, Any] | None = None
) -> CompiledEnv | None:
    """The compiled twin of ``env_id`` made with ``env_kwargs``, or None
    where there is none (twins take no keyword arguments; a designed grid
    must be registered, as validation does)."""
    if env_kwargs:
        return None
    if env_id in TWINS:
        return TWINS[env_id]()
    if not is_designed_grid(env_id):
        return None
    import gymnasium as gym

    env = gym.make(env_id)
    try:
        return grid_twin(env_id, env.unwrapped)
    finally:
        env.close()
