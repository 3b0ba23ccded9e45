"""A ``jax`` run's ``model.zip`` written from a template without torch
(:mod:`engine.rl.compiled.sb3_file`) is the file its SB3 model would have
saved: the same weights, Adam state, counts and seed, loaded by SB3 as any
other; a template that is damaged or of other settings is never written
from, and a run with one builds the SB3 model and replaces it."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import torch
from stable_baselines3 import PPO

from engine.jobs.context import JobContext
from engine.rl.compiled import ppo, sb3_file
from engine.rl.compiled.envs import compiled_env
from engine.rl.compiled.learner import settings_of
from engine.rl.compiled.sb3 import copy_from_sb3, copy_to_sb3
from engine.rl.config import TrainConfig, validate
from engine.rl.train import Trainer
from engine.settings import load
from tests.test_compiled_training import SMALL, LoggedContext, _run

pytestmark = pytest.mark.timeout(300)

CASES = {
    "CartPole-v1": {},
    "Pendulum-v1": {"net_arch": [32, 16], "log_std_init": -0.5, "use_sde": False},
}


def _config(env: str, hp: dict[str, Any]) -> TrainConfig:
    return _validated({
        "env": env, "algo": "PPO", "backend": "jax", "n_envs": 2, "seed": 3,
        "eval_every_steps": 0,
        "hyperparameters": {"n_steps": 16, "batch_size": 32, "n_epochs": 2, **hp},
    })  # fmt: skip


def _validated(config: dict[str, Any]) -> TrainConfig:
    return load(TrainConfig, validate(config))


def _moved(tree: Any, rng: np.random.Generator) -> Any:
    """``tree`` with every array changed, as training changes it."""
    return jax.tree_util.tree_map(
        lambda x: (np.asarray(x) + rng.normal(size=np.shape(x))).astype(np.float32),
        tree,
    )


@pytest.mark.parametrize("env", sorted(CASES))
def test_the_file_written_without_torch_is_the_one_sb3_saves(
    env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sb3_file, "templates_dir", lambda: tmp_path / "templates")
    cfg = _config(env, CASES[env])
    trainer = Trainer(
        JobContext("t", tmp_path / "run", "rl.train", cfg, events=None), cfg
    )
    trainer.ensure_built()
    model = trainer.model
    twin = compiled_env(env)
    assert twin is not None
    state = ppo.init_state(twin, settings_of(cfg)[0], 0)
    first = jax.device_get((state.params, state.adam_m, state.adam_v))
    copy_to_sb3(model, first[0], (first[1], first[2], 1))
    sb3_file.keep_template(cfg, model)
    # Later in the run (and in another run, of another seed): all changed.
    rng = np.random.default_rng(0)
    params, m, v = (_moved(tree, rng) for tree in first)
    adam = (m, jax.tree_util.tree_map(np.abs, v), 77)  # second moments >= 0
    copy_to_sb3(model, params, adam)
    model.num_timesteps, model._n_updates, model.seed = 4096, 40, 9
    model.save(tmp_path / "sb3.zip")
    written = sb3_file.FileModel(sb3_file.template_path(cfg), seed=9)
    written.hold(params, adam)
    written.num_timesteps, written._n_updates = 4096, 40
    written.save(tmp_path / "file.zip")

    with (
        zipfile.ZipFile(tmp_path / "sb3.zip") as a,
        zipfile.ZipFile(tmp_path / "file.zip") as b,
    ):
        assert a.namelist() == b.namelist()
        data_a, data_b = json.loads(a.read("data")), json.loads(b.read("data"))
    # The action space's pickled random state is the template's; SB3
    # reseeds it from ``seed`` on load.
    for data in (data_a, data_b):
        data["action_space"].pop(":serialized:")
        data["action_space"].pop("_np_random", None)
    assert data_a == data_b
    saved, ours = (
        PPO.load(tmp_path / name, device="cpu") for name in ("sb3.zip", "file.zip")
    )
    assert (ours.num_timesteps, ours._n_updates, ours.seed) == (4096, 40, 9)
    for key, tensor in saved.policy.state_dict().items():
        assert torch.equal(tensor, ours.policy.state_dict()[key]), key
    opt_a, opt_b = (x.policy.optimizer.state_dict() for x in (saved, ours))
    assert opt_a["param_groups"] == opt_b["param_groups"]
    assert opt_a["state"].keys() == opt_b["state"].keys()
    for index, moments in opt_a["state"].items():
        for name, tensor in moments.items():
            assert torch.equal(tensor, opt_b["state"][index][name]), (index, name)
    # and the compiled policy reads back as it was held
    back, back_adam = copy_from_sb3(ours, first[0])
    assert back_adam is not None and back_adam[2] == 77
    for x, y in zip(
        jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(params), strict=True
    ):
        assert np.array_equal(np.asarray(x), y)


def test_a_template_of_other_settings_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sb3_file, "templates_dir", lambda: tmp_path / "templates")
    cfg = _config("CartPole-v1", {"net_arch": [32, 16]})
    trainer = Trainer(
        JobContext("t", tmp_path / "run", "rl.train", cfg, events=None), cfg
    )
    trainer.ensure_built()
    twin = compiled_env("CartPole-v1")
    assert twin is not None
    state = jax.device_get(ppo.init_state(twin, settings_of(cfg)[0], 0))
    copy_to_sb3(trainer.model, state.params, (state.adam_m, state.adam_v, 1))
    sb3_file.keep_template(cfg, trainer.model)
    wider = ppo.init_params(
        jax.random.PRNGKey(0), twin, settings_of(_config("CartPole-v1", {}))[0]
    )
    written = sb3_file.FileModel(sb3_file.template_path(cfg), seed=3)
    written.hold(wider, (wider, wider, 1))
    with pytest.raises(ValueError, match="shape"):
        written.save(tmp_path / "file.zip")
    assert not (tmp_path / "file.zip").exists() or zipfile.is_zipfile(
        tmp_path / "file.zip"
    )


@pytest.fixture(scope="module")
def templated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A short run of SMALL's settings: it keeps their template (or finds
    it kept by an earlier test's run of them)."""
    project = tmp_path_factory.mktemp("templated")
    config = {**SMALL, "total_steps": 1024, "eval_every_steps": 1024}
    return project, config


def test_a_run_with_a_template_never_imports_torch(
    templated: tuple[Path, dict[str, Any]],
) -> None:
    project, config = templated
    _run(project, "first", config)
    assert sb3_file.template_path(_validated(config)).exists()
    script = f"""
import json, pathlib, sys
from tests.test_compiled_training import LoggedContext, _run
config = {{**{config!r}, "seed": 6}}
_, summary = _run(pathlib.Path({str(project)!r}), "second", config, LoggedContext)
file = summary["models"][0]["file"]
steps = summary["total_steps"]
print(json.dumps({{"torch": "torch" in sys.modules, "file": file, "steps": steps}}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["torch"] is False and out["steps"] == 1024
    log = (project / "runs" / "second" / "lines.txt").read_text()
    assert "without importing torch" in log
    model = PPO.load(out["file"], device="cpu")
    assert model.num_timesteps == 1024 and model.seed == 6
    # it acts as the compiled policy it holds
    twin = compiled_env("CartPole-v1")
    assert twin is not None
    like = ppo.init_params(
        jax.random.PRNGKey(0), twin, settings_of(_validated(config))[0]
    )
    params, adam = copy_from_sb3(model, like)
    assert adam is not None and adam[2] > 0
    obs = np.random.default_rng(0).uniform(-2, 2, (500, 4)).astype(np.float32)
    actions, _ = ppo.policy_outputs(params, jax.numpy.asarray(obs), "tanh", False)
    assert np.array_equal(
        np.asarray(actions), model.predict(obs, deterministic=True)[0]
    )


def test_a_damaged_template_is_replaced_and_the_run_saves_as_ever(
    templated: tuple[Path, dict[str, Any]],
) -> None:
    project, config = templated
    path = sb3_file.template_path(_validated(config))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"PK\x03\x04 not a whole zip")
    run_dir, summary = _run(
        project, "damaged", {**config, "seed": 8}, ctx_cls=LoggedContext
    )
    log = (run_dir / "lines.txt").read_text()
    assert f"template {path.name} could not be used" in log, log
    assert "without importing torch" not in log
    assert PPO.load(summary["models"][0]["file"], device="cpu").num_timesteps == 1024
    with zipfile.ZipFile(path) as kept:  # a good one in its place
        assert "policy.pth" in kept.namelist()
