"""stable-baselines3 policies to ONNX: observation in, deterministic action out.

The policy comes from :func:`engine.rl.policy.load_policy`, the one loader
every player of saved policies uses: rebuilt from the zip alone (PPO, A2C,
DQN, SAC, TD3 and sb3-contrib's MaskablePPO, TQC, TRPO, QRDQN, ARS and
CrossQ alike), without running code stored in the file, with the
``vecnormalize.pkl`` beside it. A recurrent policy (RecurrentPPO) is refused:
its LSTM state would have to be the graph's input and output. The exported
graph holds the whole pipeline a trained policy runs in:

* the observation normalization of ``VecNormalize`` (running mean and
  variance, epsilon, ``clip_obs``), when the policy was trained with it;
* SB3's observation preprocessing and the policy network;
* for MaskablePPO, a second input ``action_mask`` (bool, one row per
  observation): masked-out actions are never chosen;
* SB3's post-processing of actions (clipping to a Box, or unscaling a
  squashed action).

So ``session.run`` gives what normalize-then-``predict(deterministic=True)``
gives. After export the file is run with onnxruntime on sampled observations
(and random masks) and compared with that pipeline (max absolute difference,
mismatched discrete actions); a file that disagrees is not written.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import EngineError
from engine.store.atomic import make_parent_folder, temp_path


@dataclass
class OnnxReport:
    path: str
    policy_class: str
    observation_shape: list[int]
    action_shape: list[int]
    discrete: bool
    samples: int
    max_abs_diff: float
    """Largest |onnx - sb3| over the sampled observations (0 for discrete)."""
    mismatches: int
    """Discrete actions that differ (should be 0)."""
    size_bytes: int
    seconds: float
    opset: int
    verified: bool
    normalized: bool = False
    """The graph normalizes observations with the saved VecNormalize statistics."""
    action_mask_input: bool = False
    """The graph takes an ``action_mask`` input (MaskablePPO)."""
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        return (
            f"Wrote {self.path} ({self.size_bytes / 1e3:.0f} kB, {self.policy_class}, "
            f"obs {self.observation_shape}"
            + (" + action_mask" if self.action_mask_input else "")
            + f" -> action {self.action_shape}"
            + (", observation normalization included" if self.normalized else "")
            + f"). onnxruntime vs SB3 on {self.samples} observations"
            + (" (normalized as in training)" if self.normalized else "")
            + f": max |diff| {self.max_abs_diff:.2e}, {self.mismatches} "
            "mismatched actions; verified: "
            + ("yes" if self.verified else "NO")
            + "."
            + "".join(f" {w}" for w in self.warnings)
        )


def _module(loaded: Any) -> Any:
    """The torch module that is exported: normalize, act, post-process."""
    import numpy as np
    import torch
    from gymnasium import spaces

    policy = loaded.policy
    action_space = policy.action_space
    box = isinstance(action_space, spaces.Box)
    squash = bool(getattr(policy, "squash_output", False))
    norm = loaded.normalization

    def f32(x: Any) -> Any:
        return torch.as_tensor(np.asarray(x, dtype=np.float32))

    class Exported(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.policy = policy
            # Constants of the graph (plain tensors: the module is traced once).
            self.obs_mean: Any = None
            self.obs_std: Any = None
            if norm is not None:
                self.obs_mean = f32(norm.mean)
                self.obs_std = f32(np.sqrt(norm.var + norm.epsilon))
            self.low: Any = f32(action_space.low) if box else None
            self.high: Any = f32(action_space.high) if box else None

        def forward(self, obs: Any, action_mask: Any = None) -> Any:
            if norm is not None:
                obs = torch.clamp(
                    (obs - self.obs_mean) / self.obs_std, -norm.clip_obs, norm.clip_obs
                )
            if action_mask is not None:
                action = self.policy._predict(
                    obs, deterministic=True, action_masks=action_mask
                )
            else:
                action = self.policy._predict(obs, deterministic=True)
            if box:
                action = action.reshape((-1, *action_space.shape))
                if squash:
                    action = self.low + 0.5 * (action + 1.0) * (self.high - self.low)
                else:
                    action = torch.clamp(action, self.low, self.high)
            return action

    return Exported().eval()


def _random_masks(n: int, actions: int, rng: Any) -> Any:
    """Random action masks, each row with at least one valid action."""
    import numpy as np

    masks = rng.random((n, actions)) < 0.5
    masks[np.arange(n), rng.integers(0, actions, n)] = True
    return masks


def export_onnx(
    zip_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    samples: int = 64,
    seed: int = 0,
    opset: int = 17,
    tolerance: float = 1e-4,
    project_dir: str | os.PathLike[str] | None = None,
) -> OnnxReport:
    """Export the SB3 policy in ``zip_path`` to ``out_path`` and check it with
    onnxruntime on ``samples`` observations drawn from the observation space
    (and random action masks for MaskablePPO) against normalize-then-predict.
    ``project_dir`` makes the report say when the file came from outside it."""
    from engine.rl.policy import load_policy

    t0 = time.perf_counter()
    zip_path = Path(zip_path)
    out_path = Path(out_path)
    loaded = load_policy(zip_path, project_dir=project_dir)
    if loaded.recurrent:
        raise EngineError(
            f"{zip_path.name} holds a recurrent policy (RecurrentPPO), whose "
            "actions depend on an LSTM state an exported graph does not take as "
            "input yet, so it cannot be exported to ONNX."
        )
    policy = loaded.policy
    obs_space, act_space = _exportable_spaces(policy)
    inputs, example = _sample_inputs(loaded, samples, seed)
    module = _module(loaded)

    make_parent_folder(out_path)
    tmp = temp_path(out_path)
    try:
        _trace_to_onnx(module, example, tmp, list(inputs), opset)
        discrete, mismatches, diff = _compare_with_sb3(tmp, inputs, loaded)
        ok = mismatches == 0 and diff <= tolerance
        if not ok:
            raise EngineError(
                f"The ONNX export of {zip_path.name} does not match the SB3 policy "
                f"(max |diff| {diff:.3g}, {mismatches} mismatched actions); "
                "nothing was written."
            )
        os.replace(tmp, out_path)
    except EngineError:
        raise
    except OSError as exc:
        raise EngineError(
            f"Could not write {out_path}: {exc.strerror or exc}."
        ) from None
    except Exception as exc:
        raise EngineError(
            f"ONNX export of {zip_path.name} failed: {type(exc).__name__}: {exc}."
        ) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return OnnxReport(
        path=str(out_path),
        policy_class=type(policy).__name__,
        observation_shape=[int(x) for x in (obs_space.shape or ())],
        action_shape=[int(x) for x in (act_space.shape or ())],
        discrete=discrete,
        samples=samples,
        max_abs_diff=diff,
        mismatches=mismatches,
        size_bytes=out_path.stat().st_size,
        seconds=time.perf_counter() - t0,
        opset=opset,
        verified=ok,
        normalized=loaded.normalization is not None,
        action_mask_input=loaded.masked,
        warnings=[loaded.notice] if loaded.notice else [],
    )


def _exportable_spaces(policy: Any) -> tuple[Any, Any]:
    """The policy's observation and action spaces; refuses those the graph
    cannot take (dict or tuple observations, actions other than Box and
    Discrete)."""
    from gymnasium import spaces

    obs_space = policy.observation_space
    if isinstance(obs_space, (spaces.Dict, spaces.Tuple)):
        raise EngineError(
            "Policies with dict or tuple observations cannot be exported to ONNX yet; "
            "flatten the observation."
        )
    act_space = policy.action_space
    if not isinstance(act_space, (spaces.Box, spaces.Discrete)):
        raise EngineError(
            f"Only Box and Discrete action spaces export to ONNX, not "
            f"{type(act_space).__name__}."
        )
    return obs_space, act_space


def _sample_inputs(
    loaded: Any, samples: int, seed: int
) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """``samples`` observations from the observation space (and random masks
    for a masked policy), by input name, and the first two as the example
    the exporter traces with."""
    import numpy as np
    import torch
    from gymnasium import spaces

    obs_space = loaded.policy.observation_space
    act_space = loaded.policy.action_space
    obs_space.seed(seed)
    obs = np.stack([obs_space.sample() for _ in range(samples)]).astype(np.float32)
    if isinstance(obs_space, spaces.Discrete):
        obs = obs.reshape(samples)
    inputs = {"observation": obs}
    example: tuple[Any, ...] = (torch.as_tensor(obs[:2]),)
    if loaded.masked:
        n_actions = int(act_space.n) if isinstance(act_space, spaces.Discrete) else 0
        masks = _random_masks(samples, n_actions, np.random.default_rng(seed))
        inputs["action_mask"] = masks
        example = (*example, torch.as_tensor(masks[:2]))
    return inputs, example


def _trace_to_onnx(
    module: Any, example: tuple[Any, ...], path: Path, names: list[str], opset: int
) -> None:
    """Write ``module`` as ONNX with the TorchScript exporter, batch size
    dynamic, quietly."""
    import torch

    with (
        torch.no_grad(),
        contextlib.redirect_stdout(None),
        warnings.catch_warnings(),
    ):
        # The TorchScript exporter is deprecated but needs no onnxscript;
        # distribution argument checks trace as constants, which is fine.
        warnings.simplefilter("ignore", DeprecationWarning)
        # torch.jit defines TracerWarning but leaves it out of __all__.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # type: ignore[attr-defined]
        torch.onnx.export(
            module,
            example,
            str(path),
            input_names=names,
            output_names=["action"],
            dynamic_axes={name: {0: "batch"} for name in [*names, "action"]},
            opset_version=opset,
            dynamo=False,
        )


def _compare_with_sb3(
    path: Path, inputs: dict[str, Any], loaded: Any
) -> tuple[bool, int, float]:
    """Run the file with onnxruntime and the policy with SB3 on ``inputs``:
    whether actions are discrete, how many differ, the largest difference."""
    import numpy as np
    import onnxruntime as ort
    from gymnasium import spaces

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    onnx_actions = sess.run(["action"], inputs)[0]
    sb3_actions, _ = loaded.predict(
        inputs["observation"],
        deterministic=True,
        action_masks=inputs.get("action_mask"),
    )
    discrete = isinstance(loaded.policy.action_space, spaces.Discrete)
    onnx_actions = np.asarray(onnx_actions).reshape(np.asarray(sb3_actions).shape)
    if discrete:
        mismatches = int(np.sum(onnx_actions.astype(np.int64) != sb3_actions))
        diff = float(np.max(np.abs(onnx_actions.astype(np.float64) - sb3_actions)))
    else:
        mismatches = 0
        diff = float(np.max(np.abs(onnx_actions - sb3_actions)))
    return discrete, mismatches, diff
