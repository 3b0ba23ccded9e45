"""PPO as one XLA program: rollouts (``lax.scan`` over steps, ``vmap`` over
env copies), GAE (a reverse ``lax.scan``), epochs of shuffled minibatch
updates, all inside a ``lax.fori_loop`` over updates.

It computes what stable-baselines3's ``PPO`` computes, setting for setting:
the same networks (separate policy and value MLPs, orthogonal init with
SB3's gains), clipped surrogate, unclipped value loss, entropy bonus,
per-minibatch advantage normalization (unbiased std), gradient norm clipping
as torch's ``clip_grad_norm_``, Adam with eps 1e-5, learning rate and clip
range schedules on the progress after each rollout, truncated episodes
bootstrapped with the value of their last observation, and the same logged
quantities (``train/*``). The parameters and Adam moments are plain arrays so
that they can be copied into an SB3 ``model.zip`` (``engine.rl.compiled.sb3``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from engine.rl.compiled.envs import CompiledEnv

Array = Any
Params = dict[str, Any]

ACTIVATIONS = {
    "tanh": jnp.tanh,
    "relu": jax.nn.relu,
    "elu": jax.nn.elu,
    "leaky_relu": jax.nn.leaky_relu,
}

METRIC_KEYS = (
    "train/entropy_loss",
    "train/policy_gradient_loss",
    "train/value_loss",
    "train/approx_kl",
    "train/clip_fraction",
    "train/loss",
    "train/explained_variance",
    "train/clip_range",
    "train/learning_rate",
    "train/std",
)
"""What each update logs, in the order of the metrics array (``train/std``
for continuous actions only, as SB3)."""


@dataclass(frozen=True)
class Settings:
    """The PPO settings the program is compiled for: shapes and structure
    (hashable; a change of any of them is another program)."""

    n_envs: int
    n_steps: int
    batch_size: int
    n_epochs: int
    normalize_advantage: bool
    net_arch: tuple[int, ...]
    activation: str
    ortho_init: bool
    log_std_init: float
    learning_rate_linear: bool
    clip_range_linear: bool
    masked: bool = False
    """MaskablePPO: the env's action mask (``CompiledEnv.action_mask``)
    applied to the logits in rollouts and updates."""

    @property
    def rollout(self) -> int:
        return self.n_envs * self.n_steps


class Hyper(NamedTuple):
    """The continuous settings, values the program takes (float32 scalars):
    runs and sweep trials that differ only in these share one compiled
    program, from the persistent cache."""

    learning_rate: Array
    clip_range: Array
    ent_coef: Array
    vf_coef: Array
    gamma: Array
    gae_lambda: Array
    max_grad_norm: Array
    total_steps: Array
    """The run's total steps, which the linear schedules count down to."""


def hyper(**values: float) -> Hyper:
    """A :class:`Hyper` of float32 scalars."""
    return Hyper(**{k: jnp.float32(v) for k, v in values.items()})


class TrainState(NamedTuple):
    params: Params
    adam_m: Params
    adam_v: Params
    adam_t: Array
    """Adam steps taken (int32)."""
    env_state: Any
    obs: Array
    key: Array
    ep_return: Array
    ep_length: Array


# ------------------------------------------------------------------ network


def _dense(key: Array, n_in: int, n_out: int, gain: float, ortho: bool) -> Any:
    if ortho:
        w = jax.nn.initializers.orthogonal(gain)(key, (n_in, n_out), jnp.float32)
        return {"w": w, "b": jnp.zeros(n_out, jnp.float32)}
    # torch.nn.Linear's own initialisation
    bound = 1.0 / math.sqrt(n_in)
    kw, kb = jax.random.split(key)
    return {
        "w": jax.random.uniform(kw, (n_in, n_out), jnp.float32, -bound, bound),
        "b": jax.random.uniform(kb, (n_out,), jnp.float32, -bound, bound),
    }


def init_params(key: Array, env: CompiledEnv, s: Settings) -> Params:
    """Policy and value MLPs as SB3's ``ActorCriticPolicy`` builds them."""
    sizes = (env.obs_size, *s.net_arch)
    keys = iter(jax.random.split(key, 2 * len(s.net_arch) + 2))
    hidden_gain = math.sqrt(2)
    pi = [
        _dense(next(keys), a, b, hidden_gain, s.ortho_init)
        for a, b in itertools.pairwise(sizes)
    ]
    vf = [
        _dense(next(keys), a, b, hidden_gain, s.ortho_init)
        for a, b in itertools.pairwise(sizes)
    ]
    n_out = env.n_actions or len(env.action_low)
    params: Params = {
        "pi": pi,
        "vf": vf,
        "action": _dense(next(keys), sizes[-1], n_out, 0.01, s.ortho_init),
        "value": _dense(next(keys), sizes[-1], 1, 1.0, s.ortho_init),
    }
    if env.continuous:
        params["log_std"] = jnp.full((n_out,), s.log_std_init, jnp.float32)
    return params


def _mlp(layers: list[Any], x: Array, activation: str) -> Array:
    act = ACTIVATIONS[activation]
    for layer in layers:
        x = act(x @ layer["w"] + layer["b"])
    return x


def forward(params: Params, obs: Array, activation: str) -> tuple[Array, Array]:
    """(action logits or Gaussian means, state values) of ``obs``."""
    h_pi = _mlp(params["pi"], obs, activation)
    h_vf = _mlp(params["vf"], obs, activation)
    out = h_pi @ params["action"]["w"] + params["action"]["b"]
    value = (h_vf @ params["value"]["w"] + params["value"]["b"])[..., 0]
    return out, value


def log_prob_entropy(
    params: Params, out: Array, actions: Array, continuous: bool
) -> tuple[Array, Array]:
    if continuous:
        log_std = params["log_std"]
        var = jnp.exp(2 * log_std)
        logp = (
            -((actions - out) ** 2) / (2 * var) - log_std - 0.5 * math.log(2 * math.pi)
        )
        entropy = 0.5 + 0.5 * math.log(2 * math.pi) + log_std
        return logp.sum(-1), jnp.broadcast_to(entropy.sum(), logp.shape[:-1])
    logits = jax.nn.log_softmax(out)
    logp = jnp.take_along_axis(logits, actions[..., None], -1)[..., 0]
    entropy = -(jnp.exp(logits) * logits).sum(-1)
    return logp, entropy


def sample(params: Params, out: Array, key: Array, continuous: bool) -> Array:
    if continuous:
        noise = jax.random.normal(key, out.shape, jnp.float32)
        return out + jnp.exp(params["log_std"]) * noise
    return jax.random.categorical(key, out)


MASKED_LOGIT = -1e8
"""The logit of a masked action (sb3-contrib's ``MaskableCategorical``)."""


def apply_mask(out: Array, mask: Array | None) -> Array:
    """Logits with the masked actions' set to :data:`MASKED_LOGIT`, as
    MaskablePPO does: their probability is 0, and so their share of the
    entropy."""
    return out if mask is None else jnp.where(mask, out, MASKED_LOGIT)


def deterministic_action(out: Array, continuous: bool) -> Array:
    return out if continuous else jnp.argmax(out, -1)


# ---------------------------------------------------------------- training


@partial(jax.jit, static_argnums=(0, 1))
def init_state(env: CompiledEnv, s: Settings, seed: Array) -> TrainState:
    """The first state of a run: one compiled program (cached like the
    training one), not the dozens of small ones initializing eagerly takes."""
    key = jax.random.PRNGKey(seed)
    key, k_params, k_env = jax.random.split(key, 3)
    params = init_params(k_params, env, s)
    env_state = jax.vmap(env.reset)(jax.random.split(k_env, s.n_envs))
    obs = jax.vmap(env.observe)(env_state[0])
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return TrainState(
        params=params,
        adam_m=zeros,
        adam_v=jax.tree_util.tree_map(jnp.zeros_like, params),
        adam_t=jnp.int32(0),
        env_state=env_state,
        obs=obs,
        key=key,
        ep_return=jnp.zeros(s.n_envs, jnp.float32),
        ep_length=jnp.zeros(s.n_envs, jnp.int32),
    )


@partial(jax.jit, static_argnums=(0, 1))
def new_episodes(env: CompiledEnv, s: Settings, state: TrainState) -> TrainState:
    """``state`` with every env copy starting an episode of ``env`` (a
    curriculum's next stage: same spaces, other tables), drawn from the
    state's own key; the policy and the optimizer are kept."""
    key, k_env = jax.random.split(state.key)
    env_state = jax.vmap(env.reset)(jax.random.split(k_env, s.n_envs))
    return state._replace(
        env_state=env_state,
        obs=jax.vmap(env.observe)(env_state[0]),
        key=key,
        ep_return=jnp.zeros(s.n_envs, jnp.float32),
        ep_length=jnp.zeros(s.n_envs, jnp.int32),
    )


def _rollout(
    env: CompiledEnv, s: Settings, h: Hyper, state: TrainState
) -> tuple[TrainState, dict[str, Array]]:
    low = jnp.asarray(env.action_low, jnp.float32)
    high = jnp.asarray(env.action_high, jnp.float32)

    def one_step(carry: TrainState, keys: Array) -> tuple[TrainState, dict[str, Array]]:
        k_act, k_step, k_reset = keys[0], keys[1 : 1 + n], keys[1 + n :]
        out, value = forward(carry.params, carry.obs, s.activation)
        mask = (
            jax.vmap(env.action_mask)(carry.env_state[0])
            if s.masked and env.action_mask is not None
            else None
        )
        out = apply_mask(out, mask)
        action = sample(carry.params, out, k_act, env.continuous)
        logp, _ = log_prob_entropy(carry.params, out, action, env.continuous)
        # SB3 steps the env with actions clipped to the space, and stores
        # the unclipped ones.
        stepped = jnp.clip(action, low, high) if env.continuous else action
        env_state, next_obs, reward, terminated, truncated = jax.vmap(env.step)(
            carry.env_state, stepped, k_step
        )
        done = terminated | truncated
        ep_return = carry.ep_return + reward
        ep_length = carry.ep_length + 1
        fresh = jax.vmap(env.reset)(k_reset)
        env_state = jax.tree_util.tree_map(
            lambda a, b: jnp.where(
                jnp.reshape(done, (-1,) + (1,) * (a.ndim - 1)), a, b
            ),
            fresh,
            env_state,
        )
        obs = jnp.where(done[:, None], jax.vmap(env.observe)(fresh[0]), next_obs)
        record = {
            "obs": carry.obs,
            "action": action,
            "logp": logp,
            "value": value,
            "reward": reward,
            "done": done,
            "cut": truncated & ~terminated,
            "final_obs": next_obs,
            "ep_return": ep_return,
            "ep_length": ep_length,
        }
        if mask is not None:  # kept for the update, as MaskablePPO's buffer
            record["mask"] = mask
        carry = carry._replace(
            env_state=env_state,
            obs=obs,
            ep_return=jnp.where(done, 0.0, ep_return),
            ep_length=jnp.where(done, 0, ep_length),
        )
        return carry, record

    # Every key of the rollout in one draw (the action's, then each env's
    # step and reset): one call of the generator instead of three a step,
    # which on a CPU costs more than a small env's step itself.
    n = s.n_envs
    key, k_rollout = jax.random.split(state.key)
    keys = jax.random.split(k_rollout, s.n_steps * (1 + 2 * n))
    keys = keys.reshape((s.n_steps, 1 + 2 * n, *keys.shape[1:]))
    state, batch = jax.lax.scan(one_step, state._replace(key=key), keys)
    # A truncated episode goes on in value: its last reward is bootstrapped
    # with the value of the observation it ended in, as SB3 does with the
    # terminal observation (one batched forward pass after the rollout).
    _, final_value = forward(state.params, batch.pop("final_obs"), s.activation)
    cut = batch.pop("cut")
    batch["reward"] = batch["reward"] + h.gamma * final_value * cut
    return state, batch


def _gae(h: Hyper, batch: dict[str, Array], last_value: Array) -> tuple[Array, Array]:
    def back(
        carry: tuple[Array, Array], t: dict[str, Array]
    ) -> tuple[tuple[Array, Array], Array]:
        gae, next_value = carry
        not_done = 1.0 - t["done"].astype(jnp.float32)
        delta = t["reward"] + h.gamma * next_value * not_done - t["value"]
        gae = delta + h.gamma * h.gae_lambda * not_done * gae
        return (gae, t["value"]), gae

    _, adv = jax.lax.scan(
        back,
        (jnp.zeros_like(last_value), last_value),
        {k: batch[k] for k in ("reward", "done", "value")},
        reverse=True,
    )
    return adv, adv + batch["value"]


def _clip_grads(grads: Params, max_norm: Array) -> Params:
    """torch's ``clip_grad_norm_``: scale by max_norm / (norm + 1e-6) when
    that is below 1."""
    leaves = jax.tree_util.tree_leaves(grads)
    norm = jnp.sqrt(sum(jnp.sum(g**2) for g in leaves))
    scale = jnp.minimum(1.0, max_norm / (norm + 1e-6))
    clipped: Params = jax.tree_util.tree_map(lambda g: g * scale, grads)
    return clipped


def _adam(
    state: TrainState, grads: Params, lr: Array
) -> tuple[Params, Params, Params, Array]:
    """torch's Adam (betas 0.9, 0.999; eps 1e-5 as SB3 sets it)."""
    b1, b2, eps = 0.9, 0.999, 1e-5
    t = state.adam_t + 1
    m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state.adam_m, grads)
    v = jax.tree_util.tree_map(
        lambda v, g: b2 * v + (1 - b2) * g * g, state.adam_v, grads
    )
    c1 = 1 - b1 ** t.astype(jnp.float32)
    c2 = 1 - b2 ** t.astype(jnp.float32)
    params = jax.tree_util.tree_map(
        lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps),
        state.params,
        m,
        v,
    )
    return params, m, v, t


def _update(
    env: CompiledEnv,
    s: Settings,
    h: Hyper,
    state: TrainState,
    batch: dict[str, Array],
    lr: Array,
    clip: Array,
) -> tuple[TrainState, Array]:
    n = s.rollout
    flat = {k: v.reshape((n, *v.shape[2:])) for k, v in batch.items()}
    n_mb = n // s.batch_size

    def loss_fn(
        params: Params, mb: dict[str, Array]
    ) -> tuple[Array, tuple[Array, ...]]:
        out, value = forward(params, mb["obs"], s.activation)
        out = apply_mask(out, mb.get("mask"))
        logp, entropy = log_prob_entropy(params, out, mb["action"], env.continuous)
        adv = mb["adv"]
        if s.normalize_advantage and s.batch_size > 1:
            adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
        log_ratio = logp - mb["logp"]
        ratio = jnp.exp(log_ratio)
        pg = -jnp.minimum(adv * ratio, adv * jnp.clip(ratio, 1 - clip, 1 + clip)).mean()
        vf = ((mb["ret"] - value) ** 2).mean()
        ent = -entropy.mean()
        loss = pg + h.ent_coef * ent + h.vf_coef * vf
        kl = jax.lax.stop_gradient(((ratio - 1) - log_ratio).mean())
        clipped = jax.lax.stop_gradient((jnp.abs(ratio - 1) > clip).mean())
        return loss, (pg, vf, ent, kl, clipped)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def epoch(st: TrainState, _: None) -> tuple[TrainState, Array]:
        key, k_perm = jax.random.split(st.key)
        order = jax.random.permutation(k_perm, n)[: n_mb * s.batch_size]
        mbs = jax.tree_util.tree_map(
            lambda v: v[order].reshape((n_mb, s.batch_size, *v.shape[1:])), flat
        )

        def minibatch(st: TrainState, mb: dict[str, Array]) -> tuple[TrainState, Array]:
            (loss, aux), grads = grad_fn(st.params, mb)
            grads = _clip_grads(grads, h.max_grad_norm)
            params, m, v, t = _adam(st, grads, lr)
            st = st._replace(params=params, adam_m=m, adam_v=v, adam_t=t)
            return st, jnp.stack([loss, *aux])

        st, stats = jax.lax.scan(minibatch, st._replace(key=key), mbs)
        return st, stats

    state, stats = jax.lax.scan(epoch, state, None, s.n_epochs)
    # stats: (epochs, minibatches, [loss, pg, vf, ent, kl, clipped])
    values, returns = flat["value"], flat["ret"]
    var_y = returns.var()
    explained = jnp.where(var_y == 0, jnp.nan, 1 - (returns - values).var() / var_y)
    std = jnp.exp(state.params["log_std"]).mean() if env.continuous else jnp.nan
    metrics = jnp.stack([
        stats[:, :, 3].mean(),   # entropy loss, over all epochs (SB3)
        stats[:, :, 1].mean(),   # policy gradient loss
        stats[:, :, 2].mean(),   # value loss
        stats[-1, :, 4].mean(),  # approx KL of the last epoch (SB3)
        stats[:, :, 5].mean(),   # clip fraction
        stats[-1, -1, 0],        # the last minibatch's loss
        explained,
        clip,
        lr,
        std,
    ])  # fmt: skip
    return state, metrics


def make_chunk(env: CompiledEnv, s: Settings, max_updates: int) -> Any:
    """The compiled program: ``chunk(state, n_updates, steps_before, hyper)``
    runs ``n_updates`` (at most ``max_updates``, a value, not a shape)
    rollouts and updates from ``steps_before`` environment steps with the
    :class:`Hyper` values; returns the new state, the metrics of each update
    (``max_updates`` x len(METRIC_KEYS)) and each rollout's ``done``,
    ``ep_return`` and ``ep_length``."""
    if s.rollout % s.batch_size:
        raise ValueError("batch_size must divide n_steps * n_envs")

    def one_update(
        state: TrainState, steps_before: Array, h: Hyper
    ) -> tuple[TrainState, Array, Any]:
        state, batch = _rollout(env, s, h, state)
        _, last_value = forward(state.params, state.obs, s.activation)
        adv, ret = _gae(h, batch, last_value)
        batch = {**batch, "adv": adv, "ret": ret}
        # SB3's schedules read the progress after the rollout.
        remaining = 1.0 - (steps_before + s.rollout) / h.total_steps
        lr = h.learning_rate * (remaining if s.learning_rate_linear else 1.0)
        clip = h.clip_range * (remaining if s.clip_range_linear else 1.0)
        train_batch: dict[str, Array] = {
            k: batch[k]
            for k in ("obs", "mask", "action", "logp", "adv", "ret", "value")
            if k in batch
        }
        state, metrics = _update(env, s, h, state, train_batch, lr, clip)
        episodes = (batch["done"], batch["ep_return"], batch["ep_length"])
        return state, metrics, episodes

    def chunk(
        state: TrainState, n_updates: Array, steps_before: Array, h: Hyper
    ) -> Any:
        metrics = jnp.full((max_updates, len(METRIC_KEYS)), jnp.nan, jnp.float32)
        shape = (max_updates, s.n_steps, s.n_envs)
        episodes = (
            jnp.zeros(shape, jnp.bool_),
            jnp.zeros(shape, jnp.float32),
            jnp.zeros(shape, jnp.int32),
        )

        def body(i: Array, carry: Any) -> Any:
            st, metrics, episodes = carry
            before = steps_before + i.astype(jnp.float32) * s.rollout
            st, m, ep = one_update(st, before, h)
            metrics = metrics.at[i].set(m)
            episodes = tuple(e.at[i].set(x) for e, x in zip(episodes, ep, strict=True))
            return st, metrics, episodes

        return jax.lax.fori_loop(0, n_updates, body, (state, metrics, episodes))

    return jax.jit(chunk)


def make_evaluate(
    env: CompiledEnv, s: Settings, episodes: int, deterministic: bool
) -> Any:
    """The compiled evaluation: ``evaluate(params, key)`` plays ``episodes``
    episodes side by side, each from a fresh reset to its end (at most the
    env's step limit), with the policy's deterministic or sampled actions
    (masked as in training); returns each episode's return, length and
    success (False where the env reports none)."""

    def evaluate(params: Params, key: Array) -> tuple[Array, Array, Array]:
        k_reset, k_play = jax.random.split(key)
        state = jax.vmap(env.reset)(jax.random.split(k_reset, episodes))
        obs = jax.vmap(env.observe)(state[0])
        zeros = jnp.zeros(episodes, jnp.float32)
        alive = jnp.ones(episodes, jnp.bool_)
        carry0 = (state, obs, alive, zeros, jnp.zeros(episodes, jnp.int32), ~alive)

        def one_step(carry: Any, key: Array) -> tuple[Any, None]:
            state, obs, alive, ret, length, success = carry
            k_act, k_step = jax.random.split(key)
            out, _ = forward(params, obs, s.activation)
            if s.masked and env.action_mask is not None:
                out = apply_mask(out, jax.vmap(env.action_mask)(state[0]))
            action = (
                deterministic_action(out, env.continuous)
                if deterministic
                else sample(params, out, k_act, env.continuous)
            )
            if env.continuous:
                low = jnp.asarray(env.action_low, jnp.float32)
                action = jnp.clip(action, low, jnp.asarray(env.action_high))
            state, obs, reward, terminated, truncated = jax.vmap(env.step)(
                state, action, jax.random.split(k_step, episodes)
            )
            ret = ret + jnp.where(alive, reward, 0.0)
            length = length + alive.astype(jnp.int32)
            ended = alive & (terminated | truncated)
            if env.is_success is not None:
                won = jax.vmap(env.is_success)(state[0])
                success = jnp.where(ended, won, success)
            return (state, obs, alive & ~ended, ret, length, success), None

        keys = jax.random.split(k_play, env.max_episode_steps)
        carry, _ = jax.lax.scan(one_step, carry0, keys)
        _, _, _, ret, length, success = carry
        return ret, length, success

    return jax.jit(evaluate)


@partial(jax.jit, static_argnums=(2, 3))
def policy_outputs(
    params: Params,
    obs: Array,
    activation: str,
    continuous: bool,
    mask: Array | None = None,
) -> tuple[Array, Array]:
    """(deterministic actions, action probabilities or means) of ``obs``,
    with the actions ``mask`` allows (all when None)."""
    out, _ = forward(params, obs, activation)
    out = apply_mask(out, mask)
    probs = out if continuous else jax.nn.softmax(out)
    return deterministic_action(out, continuous), probs
