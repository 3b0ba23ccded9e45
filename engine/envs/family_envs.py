"""Imported by ``gym.make("engine.envs.family_envs:<id>")`` in any process,
a subprocess env worker's included: the families are loaded first (the
Atari games registered, MuJoCo pointed at headless rendering), see
:func:`engine.envs.families.vec_env_id`."""

from engine.envs.families import load_families

load_families()
