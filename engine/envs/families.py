"""Environment families beyond Gymnasium's own: Box2D, MuJoCo and Atari.

Each family is a simulator package of the default install (``box2d``,
``mujoco`` 3.x, ``ale-py`` with its bundled ROMs). This module declares once
what the rest of the engine needs to know of them:

- :func:`load_families` registers the Atari games (ale-py registers them on
  import; Gymnasium 1.x no longer does it by itself) and points MuJoCo at
  EGL where no display is set, so its ``rgb_array`` frames render headless;
- :func:`family` tells an env's family from its registered entry point,
  without making it; :func:`check_loads` refuses, in one sentence, an env
  whose simulator failed to load or whose Atari ROM is missing;
- :func:`wrap` applies RL Zoo's Atari preprocessing (``AtariWrapper``: noop
  reset, frame skip 4, episodic life, clipped reward, 84x84 grey; then a
  stack of the last :data:`FRAME_STACK` frames, channels last, as
  ``VecFrameStack(4)`` gives), for training and, without episodic life and
  clipping, for playing: every player of a policy (training's evaluation,
  Play, preview, recording) sees the observations it was trained on;
- :func:`vec_env_class` chooses subprocess vectorized envs for the slow
  simulators when the machine has the cores (:data:`VEC_ENV_CHOICES`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import os
from typing import Any

from engine.errors import EngineError, quoted

log = logging.getLogger(__name__)

ATARI = "atari"
MUJOCO = "mujoco"
BOX2D = "box2d"

_ENTRY_PREFIXES = {
    "ale_py.": ATARI,
    "gymnasium.envs.mujoco.": MUJOCO,
    "gymnasium.envs.box2d.": BOX2D,
}
"""Family of an env by the module of its registered entry point."""

SIMULATORS = {
    ATARI: ("ale_py", "the Arcade Learning Environment (ale-py)"),
    MUJOCO: ("mujoco", "the MuJoCo simulator (mujoco 3.x)"),
    BOX2D: ("Box2D", "the Box2D physics engine (box2d)"),
}
"""Family -> (module to import, the simulator named for a user)."""

SLOW_FAMILIES = frozenset({MUJOCO, BOX2D})
"""Families whose steps cost enough to pay for a process per env copy."""

SUBPROC_MIN_CPUS = 4
"""``vec_env=auto`` runs slow simulators in subprocesses from this many CPUs."""

VEC_ENV_CHOICES = ("auto", "dummy", "subproc")
"""How env copies are stepped: ``dummy`` (one process, in turn), ``subproc``
(a process each) or ``auto``."""

FRAME_STACK = 4
"""Atari frames stacked into one observation (RL Zoo's ``frame_stack``)."""
FRAME_SKIP = 4
"""Emulator frames per agent step on Atari (RL Zoo's ``AtariWrapper``)."""

MUJOCO_GL = "egl"
"""MuJoCo's renderer where no display is set: EGL draws without one."""


class EnvFamilyError(EngineError):
    """An env whose simulator failed to load, or an Atari game without a ROM."""


@functools.cache
def load_families() -> None:
    """Register the Atari games with Gymnasium and point MuJoCo at headless
    rendering (once per process; a family whose package is missing is left
    out, and :func:`check_loads` names it when one of its envs is asked for)."""
    if not os.environ.get("DISPLAY"):
        # Read by mujoco when it is imported; a value the user set wins.
        os.environ.setdefault("MUJOCO_GL", MUJOCO_GL)
        os.environ.setdefault("PYOPENGL_PLATFORM", MUJOCO_GL)
    try:
        import ale_py
        import gymnasium as gym
    except ImportError:
        return
    gym.register_envs(ale_py)


@functools.cache
def quiet_mujoco() -> None:
    """Send MuJoCo's warnings to the log: it writes them (Gymnasium's Ant
    model uses a deprecated attribute) to a MUJOCO_LOG.TXT in the current
    folder, a project's or the user's. Done when a MuJoCo env is first
    asked for (:func:`family`), so other runs do not import mujoco."""
    load_families()
    if importlib.util.find_spec("mujoco") is None:
        return
    try:
        # Untyped (no stubs): imported by name.
        mujoco = importlib.import_module("mujoco")
    except Exception:  # check_loads names it for the env asked for
        return
    mujoco.set_mju_user_warning(lambda text: log.debug("mujoco: %s", text))


def family(env_id: str) -> str | None:
    """``atari``, ``mujoco``, ``box2d`` or None (another env, an unknown id)."""
    import gymnasium as gym

    load_families()
    try:
        entry = gym.spec(env_id).entry_point
    except gym.error.Error:
        return None
    name = entry if isinstance(entry, str) else getattr(entry, "__module__", "")
    kind = next((f for p, f in _ENTRY_PREFIXES.items() if name.startswith(p)), None)
    if kind == MUJOCO:
        quiet_mujoco()
    return kind


def check_loads(env_id: str) -> None:
    """Refuse ``env_id`` in one sentence when its simulator cannot be
    imported or, for an Atari game, when ale-py holds no ROM for it."""
    kind = family(env_id)
    if kind is None:
        return
    module, simulator = SIMULATORS[kind]
    try:
        importlib.import_module(module)
    except Exception as exc:  # ImportError, or a broken binary's OSError
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise EnvFamilyError(
            f"Environment {quoted(env_id)} needs {simulator}, which failed to "
            f"load ({type(exc).__name__}{': ' + why if why else ''})."
        ) from None
    if kind == ATARI:
        import gymnasium as gym
        from ale_py import roms

        game = str(gym.spec(env_id).kwargs.get("game", ""))
        if game and roms.get_rom_path(game) is None:
            raise EnvFamilyError(
                f"Environment {quoted(env_id)} has no ROM: ale-py holds none for "
                f"the game {quoted(game)} (it bundles {len(roms.get_all_rom_ids())} "
                "games' ROMs)."
            )


WORKER_MODULES = {
    ATARI: "engine.envs.family_envs",
    MUJOCO: "engine.envs.mujoco_envs",
}
"""What a process must import before it makes an env of a family: the
Atari games are registered by ale-py, MuJoCo is made headless and quiet.
Box2D's envs are Gymnasium's own and need nothing."""


def vec_env_id(env_id: str) -> str:
    """The id that makes ``env_id`` in any process: prefixed with its
    family's :data:`WORKER_MODULES` entry, which Gymnasium imports first, so
    a subprocess worker loads the family before making one."""
    module = WORKER_MODULES.get(family(env_id) or "")
    return env_id if module is None else f"{module}:{env_id}"


def vec_env_class(choice: str, env_id: str, n_envs: int) -> tuple[str, str]:
    """``dummy`` or ``subproc`` for a run's ``vec_env`` setting, and why (a
    phrase for the run log)."""
    if choice != "auto":
        return choice, "as set"
    kind = family(env_id)
    cpus = os.cpu_count() or 1
    if n_envs < 2:
        return "dummy", "one env copy"
    if kind not in SLOW_FAMILIES:
        return "dummy", "a fast simulator"
    if cpus < SUBPROC_MIN_CPUS:
        return "dummy", f"{cpus} CPUs, subprocesses from {SUBPROC_MIN_CPUS}"
    return "subproc", f"a {kind} simulator and {cpus} CPUs"


def is_atari(env: Any) -> bool:
    """Whether ``env`` (any wrapping) is an ale-py game."""
    return type(env.unwrapped).__module__.startswith("ale_py.")


def wrap(env: Any, training: bool = True) -> Any:
    """``env`` with its family's preprocessing: RL Zoo's for an Atari game
    (``training`` adds episodic life and reward clipping), else ``env``."""
    if not is_atari(env):
        return env
    from stable_baselines3.common.atari_wrappers import AtariWrapper

    # ALE/...-v5 games skip frames themselves: skip the rest of FRAME_SKIP.
    own_skip = getattr(env.unwrapped, "_frameskip", 1)
    skip = FRAME_SKIP if not isinstance(own_skip, int) or own_skip <= 1 else 1
    env = AtariWrapper(
        env,
        frame_skip=skip,
        terminal_on_life_loss=training,
        clip_reward=training,
    )
    from engine.envs.frame_stack import FrameStack

    return FrameStack(env, FRAME_STACK)
