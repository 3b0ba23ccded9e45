"""Whether the ``jax`` backend can train a validated ``rl.train`` config,
asked without importing JAX (validation runs in the supervisor too)."""

from __future__ import annotations

import importlib.util
from typing import Any

from engine.rl.compiled import TWIN_IDS, compiles

BACKENDS = ("auto", "sb3", "jax")
"""``auto``: ``jax`` where it can train the run and the run is long enough to
pay for compiling (:data:`AUTO_JAX_MIN_STEPS`), else ``sb3``."""

ALGOS = ("PPO", "MaskablePPO")
"""What the compiled PPO trains: MaskablePPO is PPO with the env's action
masks applied to the logits."""

AUTO_JAX_MIN_STEPS = 100_000
"""The shortest run ``auto`` compiles: compiling takes about 5 s on a CPU,
which SB3 spends on about 10,000 CartPole steps; below this the saving is
too small to be worth a second code path."""


def jax_problem(cfg: dict[str, Any]) -> tuple[str, str] | None:
    """(setting, one sentence) why the ``jax`` backend cannot train ``cfg``
    (a validated ``rl.train`` config); None when it can."""
    hp = cfg["hyperparameters"]
    if cfg["algo"] not in ALGOS:
        return "algo", (
            f"The jax backend trains PPO and MaskablePPO only, not {cfg['algo']}; "
            "use backend sb3."
        )
    twinned = compiles(cfg["env"])
    if not twinned or cfg["env_kwargs"]:
        what = "with env_kwargs" if twinned else "yet"
        return "env", (
            f"{cfg['env']} has no compiled twin {what} (the jax backend trains "
            f"{', '.join(TWIN_IDS)}, designed grids and designed workflows); use "
            "backend sb3."
        )
    refused = {
        "hyperparameters.use_sde": hp.get("use_sde"),
        "hyperparameters.target_kl": hp.get("target_kl") is not None,
        "vec_normalize": cfg["vec_normalize"],
        "learned_reward": bool(cfg["learned_reward"]),
        "curriculum": cfg["curriculum"] is not None,
        "policy": cfg["policy"] != "MlpPolicy",
    }
    for name, used in refused.items():
        if used:
            short = name.rsplit(".", 1)[-1]
            return name, (
                f"The jax backend does not support {short} (set to "
                f"{cfg['hyperparameters'].get(short, cfg.get(short))!r}); use backend "
                f"sb3 or leave {short} at its default."
            )
    rollout = cfg["n_envs"] * hp["n_steps"]
    if rollout % hp["batch_size"]:
        return "hyperparameters.batch_size", (
            f"The jax backend needs batch_size ({hp['batch_size']}) to divide "
            f"n_steps x n_envs ({rollout}), so every minibatch is full."
        )
    if importlib.util.find_spec("jax") is None:
        return "backend", (
            "JAX is not installed; install rl-studio[jax] or use backend sb3."
        )
    return None


def resolve_backend(cfg: dict[str, Any]) -> tuple[str, str]:
    """(backend, why) for a validated config whose ``backend`` is ``auto``,
    ``sb3`` or ``jax``; raises ConfigError for ``jax`` where it cannot train."""
    from engine.errors import ConfigError

    wanted = cfg["backend"]
    problem = jax_problem(cfg) if wanted != "sb3" else None
    if wanted == "jax":
        if problem is not None:
            raise ConfigError(*problem)
        return "jax", "asked for"
    if wanted == "sb3":
        return "sb3", "asked for"
    if problem is not None:
        return "sb3", problem[1].split(";")[0]
    if cfg["total_steps"] < AUTO_JAX_MIN_STEPS:
        return "sb3", (
            f"{cfg['total_steps']:,} steps are too few to pay for compiling "
            f"(auto compiles runs of {AUTO_JAX_MIN_STEPS:,} steps or more)"
        )
    return "jax", f"{cfg['env']} and PPO compile"
