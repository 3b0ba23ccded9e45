"""The compiled trainer's parameters and Adam moments in and out of a
stable-baselines3 PPO model, so that a ``jax`` run saves the same
``model.zip`` an ``sb3`` run does (Evaluate, Play, ONNX export and the HTTP
``act`` route load it unchanged) and resumes from one (its optimizer state
included)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from engine.rl.compiled.ppo import Params


def _linears(model: Any) -> dict[str, list[Any]]:
    """SB3's ``ActorCriticPolicy`` Linear layers, as this package names them."""
    from torch import nn

    policy = model.policy
    extractor = policy.mlp_extractor
    return {
        "pi": [m for m in extractor.policy_net if isinstance(m, nn.Linear)],
        "vf": [m for m in extractor.value_net if isinstance(m, nn.Linear)],
        "action": [policy.action_net],
        "value": [policy.value_net],
    }


def torch_layout(tree: Params) -> list[np.ndarray]:
    """``tree``'s arrays as SB3's policy holds them (weights transposed), in
    the order of :func:`_linears`' layers, weight then bias, and
    ``log_std`` last."""
    out: list[np.ndarray] = []
    for name in ("pi", "vf", "action", "value"):
        for p in tree[name] if name in ("pi", "vf") else [tree[name]]:
            out += [np.asarray(p["w"]).T, np.asarray(p["b"])]
    if "log_std" in tree:
        out.append(np.asarray(tree["log_std"]))
    return out


def _pairs(model: Any, tree: Params) -> list[tuple[Any, np.ndarray]]:
    """(torch parameter, array in torch layout) for every parameter."""
    params: list[Any] = []
    for name, layers in _linears(model).items():
        mine = len(tree[name]) if name in ("pi", "vf") else 1
        if mine != len(layers):
            raise ValueError(f"{name}: {mine} layers here, {len(layers)} in SB3")
        for layer in layers:
            params += [layer.weight, layer.bias]
    if "log_std" in tree:
        params.append(model.policy.log_std)
    return list(zip(params, torch_layout(tree), strict=True))


def copy_to_sb3(
    model: Any, params: Params, adam: tuple[Params, Params, int] | None = None
) -> None:
    """Write ``params`` (and the Adam moments and step count) into ``model``."""
    import torch

    with torch.no_grad():
        for param, value in _pairs(model, params):
            param.copy_(torch.from_numpy(np.array(value, dtype=np.float32)))
    if adam is None:
        return
    m, v, t = adam
    optimizer = model.policy.optimizer
    moments = zip(_pairs(model, m), _pairs(model, v), strict=True)
    for (param, m_value), (_, v_value) in moments:
        optimizer.state[param] = {
            "step": torch.tensor(float(t)),
            "exp_avg": torch.tensor(np.array(m_value, dtype=np.float32)),
            "exp_avg_sq": torch.tensor(np.array(v_value, dtype=np.float32)),
        }


def copy_from_sb3(
    model: Any, like: Params
) -> tuple[Params, tuple[Params, Params, int] | None]:
    """``model``'s parameters shaped as ``like`` (and its Adam state where
    the optimizer has one)."""

    def read(values: list[np.ndarray]) -> Params:
        it = iter(values)

        def layer() -> dict[str, Any]:
            w = next(it).T
            return {"w": jnp.asarray(w), "b": jnp.asarray(next(it))}

        tree: Params = {
            "pi": [layer() for _ in like["pi"]],
            "vf": [layer() for _ in like["vf"]],
            "action": layer(),
            "value": layer(),
        }
        if "log_std" in like:
            tree["log_std"] = jnp.asarray(next(it))
        return tree

    pairs = _pairs(model, like)
    params = read([p.detach().cpu().numpy().copy() for p, _ in pairs])
    state = model.policy.optimizer.state
    if not all(p in state and "exp_avg" in state[p] for p, _ in pairs):
        return params, None
    m = read([state[p]["exp_avg"].cpu().numpy().copy() for p, _ in pairs])
    v = read([state[p]["exp_avg_sq"].cpu().numpy().copy() for p, _ in pairs])
    t = int(float(state[pairs[0][0]]["step"]))
    return params, (m, v, t)
