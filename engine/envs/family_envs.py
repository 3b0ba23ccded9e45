"""Imported by ``gym.make("engine.envs.family_envs:<id>")`` in any process,
a subprocess env worker's included: the families are loaded first (the
Atari games registered, MuJoCo headless and its warnings logged), see
:func:`engine.envs.families.vec_env_id`."""

from engine.envs.families import load_families, quiet_mujoco

load_families()
quiet_mujoco()
