"""stable-baselines3 policies to ONNX: observation in, deterministic action out.

The policy is rebuilt from the zip alone (its class, spaces and kwargs are in
the zip's ``data``, the weights in ``policy.pth``), so PPO, A2C, DQN, SAC, TD3
and MaskablePPO all work without knowing the algorithm. The exported graph
includes SB3's observation preprocessing and its post-processing of actions
(clipping to a Box, or unscaling a squashed action), so ``session.run`` gives
what ``model.predict(obs, deterministic=True)`` gives. After export the file
is run with onnxruntime on sampled observations and compared with the SB3
policy (max absolute difference).
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
from engine.store.atomic import TMP_MARK, make_parent_folder


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
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        return (
            f"Wrote {self.path} ({self.size_bytes / 1e3:.0f} kB, {self.policy_class}, "
            f"obs {self.observation_shape} -> action {self.action_shape}). "
            f"onnxruntime vs SB3 on {self.samples} observations: max |diff| "
            f"{self.max_abs_diff:.2e}, {self.mismatches} mismatched actions; verified: "
            + ("yes" if self.verified else "NO")
            + "."
        )


def load_policy(zip_path: Path) -> Any:
    """The SB3 policy stored in ``zip_path``, on the CPU, in eval mode."""
    from stable_baselines3.common.save_util import load_from_zip_file

    if not zip_path.is_file():
        raise EngineError(f"The policy file {zip_path} does not exist.")
    try:
        data, params, _ = load_from_zip_file(
            zip_path, device="cpu", print_system_info=False
        )
    except Exception as exc:
        raise EngineError(
            f"{zip_path} is not a stable-baselines3 model zip "
            f"({type(exc).__name__}: {exc})."
        ) from None
    if not data or "policy_class" not in data or not params or "policy" not in params:
        raise EngineError(f"{zip_path} holds no stable-baselines3 policy.")
    policy_class = data["policy_class"]
    if isinstance(policy_class, dict):
        raise EngineError(
            f"The policy class of {zip_path} cannot be imported here; install the "
            "library "
            "that trained it (e.g. sb3-contrib)."
        )
    kwargs = dict(data.get("policy_kwargs") or {})
    if data.get("use_sde"):
        kwargs["use_sde"] = True
    policy = policy_class(
        data["observation_space"], data["action_space"], lambda _: 0.0, **kwargs
    )
    policy.load_state_dict(params["policy"])
    policy.to("cpu")
    policy.set_training_mode(False)
    return policy


def _wrap(policy: Any) -> Any:
    import numpy as np
    import torch
    from gymnasium import spaces

    action_space = policy.action_space
    box = isinstance(action_space, spaces.Box)
    low = (
        torch.as_tensor(np.asarray(action_space.low, dtype=np.float32)) if box else None
    )
    high = (
        torch.as_tensor(np.asarray(action_space.high, dtype=np.float32))
        if box
        else None
    )
    squash = bool(getattr(policy, "squash_output", False))

    class DeterministicPolicy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.policy = policy

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            action = self.policy._predict(obs, deterministic=True)
            if box:
                assert low is not None and high is not None
                action = action.reshape((-1, *action_space.shape))
                if squash:
                    action = low + 0.5 * (action + 1.0) * (high - low)
                else:
                    action = torch.clamp(action, low, high)
            return action

    return DeterministicPolicy().eval()


def export_onnx(
    zip_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    samples: int = 64,
    seed: int = 0,
    opset: int = 17,
    tolerance: float = 1e-4,
) -> OnnxReport:
    """Export the SB3 policy in ``zip_path`` to ``out_path`` and check it with
    onnxruntime on ``samples`` observations drawn from the observation space."""
    import numpy as np
    import torch
    from gymnasium import spaces

    t0 = time.perf_counter()
    zip_path = Path(zip_path)
    out_path = Path(out_path)
    policy = load_policy(zip_path)
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
    obs_space.seed(seed)
    obs = np.stack([obs_space.sample() for _ in range(samples)]).astype(np.float32)
    if isinstance(obs_space, spaces.Discrete):
        obs = obs.reshape(samples)
    module = _wrap(policy)
    example = torch.as_tensor(obs[:2])

    make_parent_folder(out_path)
    tmp = out_path.with_name(f".{out_path.name}{TMP_MARK}{os.getpid()}")
    try:
        with (
            torch.no_grad(),
            contextlib.redirect_stdout(None),
            warnings.catch_warnings(),
        ):
            # The TorchScript exporter is deprecated but needs no onnxscript;
            # distribution argument checks trace as constants, which is fine.
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            torch.onnx.export(
                module,
                (example,),
                str(tmp),
                input_names=["observation"],
                output_names=["action"],
                dynamic_axes={"observation": {0: "batch"}, "action": {0: "batch"}},
                opset_version=opset,
                dynamo=False,
            )
        import onnxruntime as ort

        sess = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
        onnx_actions = sess.run(["action"], {"observation": obs})[0]
        sb3_actions, _ = policy.predict(obs, deterministic=True)
        discrete = isinstance(act_space, spaces.Discrete)
        onnx_actions = np.asarray(onnx_actions).reshape(np.asarray(sb3_actions).shape)
        if discrete:
            mismatches = int(np.sum(onnx_actions.astype(np.int64) != sb3_actions))
            diff = float(np.max(np.abs(onnx_actions.astype(np.float64) - sb3_actions)))
        else:
            mismatches = 0
            diff = float(np.max(np.abs(onnx_actions - sb3_actions)))
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
    )
