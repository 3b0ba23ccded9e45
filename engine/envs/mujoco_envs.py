"""Imported by ``gym.make("engine.envs.mujoco_envs:<id>")`` for a MuJoCo
env in any process, a subprocess env worker's included: as
:mod:`engine.envs.family_envs`, and MuJoCo's warnings sent to the log. Apart
from it because importing mujoco takes a run about 0.2 s, which runs of
other families need not pay (see :func:`engine.envs.families.vec_env_id`)."""

from engine.envs.families import load_families, quiet_mujoco

load_families()
quiet_mujoco()
