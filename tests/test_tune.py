"""``rl-studio-engine tune``: Optuna sweeps with a real SQLite storage and real
SB3 CartPole trials (tiny budgets); every trial is a run of the project, a
pruned one ends ``stopped`` with the reason, the best trial becomes a preset
that ``train --preset`` uses, and bad input exits 2 with one sentence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from engine import cli
from engine.rl import tune, tune_space, tune_storage, tune_study
from engine.store.metrics import read_metrics
from engine.store.project import Project

REPO = Path(__file__).resolve().parents[1]
STEPS = 1024
SEARCH = ["--search", "learning_rate=1e-4:1e-2:log"]
FIXED = ["--set", "eval_episodes=2", "--seed", "7"]


def _tune(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real command, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "engine", "tune", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _study(url: str, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=tune_storage.open_storage(url))


@pytest.mark.slow
def test_two_workers_share_one_study_every_trial_a_run_and_best_is_a_preset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project_dir = tmp_path / "p"
    done = _tune(
        "--env", "CartPole-v1", "--algo", "PPO", "--trials", "4",
        "--steps", str(STEPS), "--project", str(project_dir), "--workers", "2",
        "--study", "cart", "--prune-startup", "4", *SEARCH, *FIXED,
        "--save-preset", "cart-best",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    progress = [ln for ln in done.stderr.splitlines() if ln.startswith("trial ")]
    assert [ln.split()[1] for ln in progress] == ["1/4", "2/4", "3/4", "4/4"]
    assert "best" in progress[-1]
    assert summary["finished"] == 4 and summary["completed"] >= 1
    url = f"sqlite:///{project_dir / 'data' / 'sweeps.db'}"
    assert summary["storage"] == url
    study = _study(url, "cart")
    trials = study.get_trials()
    assert len(trials) == 4  # racing workers took queued trials, made none

    project = Project.open(project_dir)
    try:
        runs = {r.id: r for r in project.list_runs()}
        assert {t.user_attrs["run_id"] for t in trials} == set(runs)
        for t in trials:
            run = runs[t.user_attrs["run_id"]]
            assert run.kind == "rl.train" and run.status in ("completed", "stopped")
            assert run.config["hyperparameters"]["learning_rate"] == pytest.approx(
                t.params["learning_rate"]
            )
            assert run.summary["sweep"] == {"study": "cart", "trial": t.number,
                                            "storage": url}  # fmt: skip
            assert read_metrics(Path(run.run_dir) / "metrics.jsonl")
        # Two worker processes shared the study.
        assert len({r.pid for r in runs.values()}) == 2
        best_run = runs[summary["best_run_id"]]
        assert best_run.summary["last_eval_reward"] == summary["best_value"]
        assert {m.source_run for m in project.list_models()} == set(runs)
    finally:
        project.close()

    # The best trial's settings are a preset a train run uses.
    preset_file = project_dir / "presets" / "cart-best.preset.json"
    assert summary["preset"] == str(preset_file)
    preset = json.loads(preset_file.read_text())
    assert preset["env"] == "CartPole-v1" and preset["algo"] == "PPO"
    assert (
        preset["settings"]["learning_rate"] == summary["best_params"]["learning_rate"]
    )
    assert preset["provenance"]["study"] == "cart"
    assert preset["provenance"]["run_id"] == summary["best_run_id"]
    code = cli.main(
        ["train", "--preset", "cart-best", "--project", str(project_dir),
         "--steps", "256", "--quiet"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    run_id = json.loads(out)["models"][0]["file"].split("/runs/")[1].split("/")[0]
    project = Project.open(project_dir)
    try:
        config = project.get_run(run_id).config
    finally:
        project.close()
    assert config["preset"] == "cart-best" and config["env"] == "CartPole-v1"
    hp = config["hyperparameters"]
    assert hp["learning_rate"] == summary["best_params"]["learning_rate"]
    assert hp["n_epochs"] == preset["settings"]["n_epochs"]
    assert config["eval_episodes"] == 2  # a fixed setting of the sweep
    # The run's log says where its preset comes from.
    log = (project_dir / "runs" / run_id / "log.txt").read_text()
    assert "The project preset 'cart-best': tuned by the sweep 'cart', 4 trials" in log

    # Another machine joins with --study and --storage; this study is done.
    joined = _tune("--study", "cart", "--storage", url,
                   "--project", str(tmp_path / "other"))  # fmt: skip
    assert joined.returncode == 0, joined.stderr
    assert json.loads(joined.stdout)["best_run_id"] == summary["best_run_id"]


def test_a_trial_below_the_median_is_pruned_and_its_run_stopped(
    tmp_path: Path,
) -> None:
    project_dir = tmp_path / "p"
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    args = cli.build_parser("tune").parse_args(
        ["tune", "--env", "CartPole-v1", "--algo", "PPO", "--trials", "3",
         "--steps", str(STEPS), "--prune-startup", "2", *SEARCH, *FIXED]
    )  # fmt: skip
    settings = tune._new_settings(args, project_dir)
    study = optuna.create_study(
        study_name="prune", storage=tune_storage.open_storage(url), direction="maximize"
    )
    study.set_user_attr(tune_study.SETTINGS_ATTR, settings.to_json())
    # Two earlier trials that balanced the pole from the first evaluation
    # on: the median every later trial is held to.
    for lr in (1e-3, 2e-3):
        study.add_trial(
            optuna.trial.create_trial(
                value=500.0,
                params={"learning_rate": lr},
                distributions={
                    "learning_rate": FloatDistribution(1e-4, 1e-2, log=True)
                },
                intermediate_values={s: 500.0 for s in range(0, 2 * STEPS, 8)},
            )
        )
    tune_study.queue_trials(study, settings)  # the third
    done = _tune("--study", "prune", "--storage", url, "--project", str(project_dir))
    assert done.returncode == 0, done.stderr
    assert "trial 3/3 (#2) pruned" in done.stderr
    trial = _study(url, "prune").trials[2]
    assert trial.state == TrialState.PRUNED
    project = Project.open(project_dir)
    try:
        run = project.get_run(trial.user_attrs["run_id"])
    finally:
        project.close()
    assert run.status == "stopped"
    assert run.summary["stopped_by"] == "pruned"
    assert run.reason.startswith("Pruned by the sweep 'prune': eval mean reward")
    assert run.reason.endswith("below the median of earlier trials at that step.")
    first_eval = min(trial.intermediate_values)
    assert run.summary["total_steps"] == first_eval < STEPS  # stopped right there
    log = (Path(run.run_dir) / "log.txt").read_text()
    assert "Pruned by the sweep" in log


def _existing_study(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    args = cli.build_parser("tune").parse_args(
        ["tune", "--env", "CartPole-v1", "--algo", "PPO", "--trials", "3",
         "--steps", "512", *SEARCH]
    )  # fmt: skip
    settings = tune._new_settings(args, tmp_path / "elsewhere")
    study = optuna.create_study(
        study_name="taken", storage=tune_storage.open_storage(url), direction="maximize"
    )
    study.set_user_attr(tune_study.SETTINGS_ATTR, settings.to_json())
    return url


def _written(folder: Path) -> list[Path]:
    """Files under ``folder``, less SQLite's -wal and -shm journal files,
    which come and go with connections (the last one to close removes them,
    whenever the collector gets to it)."""
    return sorted(p for p in folder.rglob("*") if not p.name.endswith(("-wal", "-shm")))


BASE = ["--env", "CartPole-v1", "--algo", "PPO", "--trials", "2", "--steps", "512"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            [*BASE, "--search", "learning_rate=0.1:0.01"],
            "--search learning_rate: the low end 0.1 is above the high end 0.01.",
        ),
        (
            [*BASE, "--search", "ent_coef=0:0.1:log"],
            "--search ent_coef: a log scale needs a low end above 0, not 0.",
        ),
        (
            [*BASE, "--search", "learning_rate=-1:0.1:log"],
            "learning_rate must be greater than 0, not -1.",
        ),
        (
            [*BASE, "--search", "lerning_rate=1e-4:1e-3"],
            "'lerning_rate' is no setting a sweep of PPO can search; "
            "did you mean 'learning_rate'?",
        ),
        ([*BASE, "--search", "activation=a:b"], "activation takes choices"),
        ([*BASE, "--search", "activation=tanh,sigmoid"], "activation must be one of"),
        ([*BASE, "--search", "seed=1:9"], "'seed' is no setting a sweep of PPO"),
        (
            [*BASE, "--search", "net_arch=[64,64],[256"],
            "--search net_arch takes lists of whole numbers, like "
            "net_arch=[64,64],[256,256], not '[64,64],[256'.",
        ),
        ([*BASE, "--search", "net_arch=64,64"], "takes lists of whole numbers"),
        (
            [*BASE, "--search", "net_arch=[64,0]"],
            "Each item of net_arch must be at least 1, not 0.",
        ),
        ([*BASE, "--search", "net_arch"], "net_arch has no default choices"),
        ([*BASE, "--storage", "sqlite:////no/such/folder/s.db"], "cannot be opened"),
        ([*BASE, "--storage", "nosuchdb://host/x"], "cannot be opened"),
        (
            [*BASE, "--study", "taken", "--storage", "EXISTING"],
            "searches other settings (its env, trials, search differ)",
        ),
        (["--study", "nothing", "--storage", "EXISTING"], "There is no study"),
        ([*BASE, "--save-preset", "../up"], "The preset"),
        ([*BASE, "--workers", "0"], "--workers must be at least 1, not 0."),
        (["--env", "CartPole-v1", "--trials", "2"], "A new sweep needs --steps."),
    ],
)
def test_bad_input_exits_2_with_one_sentence_and_writes_nothing(
    argv: list[str], words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _existing_study(tmp_path)
    argv = [url if a == "EXISTING" else a for a in argv]
    if "taken" in argv:  # another env and search space than the study's
        argv[argv.index("CartPole-v1")] = "Acrobot-v1"
        argv += ["--search", "gamma"]
    before = _written(tmp_path)
    code = cli.main(["tune", *argv, "--project", str(tmp_path / "p")])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("rl-studio-engine tune: ")
    assert words in lines[0] and lines[0][-1] in ".?"
    assert _written(tmp_path) == before  # nothing written


def test_a_preset_for_another_env_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.rl.config import save_preset

    save_preset(tmp_path, "cart", env="CartPole-v1", algo="PPO",
                settings={"learning_rate": 1e-3}, provenance={})  # fmt: skip
    code = cli.main(["train", "--preset", "cart", "--env", "Acrobot-v1",
                     "--project", str(tmp_path)])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == (
        "rl-studio-engine train: The preset 'cart' was tuned for PPO on "
        "CartPole-v1, not PPO on Acrobot-v1."
    )
    code = cli.main(["train", "--preset", "none", "--project", str(tmp_path)])
    assert code == 2
    assert "There is no preset 'none'" in capsys.readouterr().err


def test_default_search_space_comes_from_the_field_declarations() -> None:
    space = {d.name: d for d in tune_space.default_space("PPO")}
    assert space["learning_rate"] == tune_space.Dimension(
        "learning_rate", "float", 1e-5, 1e-2, log=True
    )
    assert space["n_epochs"].kind == "int"
    assert "net_arch" not in space and "n_envs" not in space
    assert {d.name for d in tune_space.default_space("DQN")} >= {"exploration_fraction"}
    dims = tune_space.parse_search(
        ["gamma", "activation=tanh,relu", "n_envs=4,8"], "PPO"
    )
    assert [d.kind for d in dims] == ["float", "choice", "choice"]
    assert dims[2].top and dims[2].choices == (4, 8)


def test_list_settings_are_searched_as_choices_of_lists() -> None:
    (dim,) = tune_space.parse_search(["net_arch=[64,64], [256,256],[64, 64]"], "PPO")
    assert dim == tune_space.Dimension(
        "net_arch", "choice", choices=([64, 64], [256, 256])
    )
    assert tune_space.Dimension.from_json(json.loads(json.dumps(dim.to_json()))) == dim
    assert dim.value("[256,256]") == [256, 256] and dim.value(3) == 3
    assert (
        tune_space.choice_key([64, 64]) == "[64,64]"
        and tune_space.choice_key(0.5) == 0.5
    )


def test_a_sweep_over_net_arch_trains_each_choice_and_saves_the_best_as_a_list(
    tmp_path: Path,
) -> None:
    project_dir = tmp_path / "p"
    done = _tune(
        "--env", "CartPole-v1", "--algo", "PPO", "--trials", "3",
        "--steps", "512", "--project", str(project_dir), "--study", "arch",
        "--search", "net_arch=[8],[16,16]", *FIXED, "--save-preset", "arch-best",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["finished"] == 3 and summary["completed"] >= 1
    url = f"sqlite:///{project_dir / 'data' / 'sweeps.db'}"
    trials = _study(url, "arch").get_trials()
    # Optuna keeps each choice as its text; the run got the list.
    assert {t.params["net_arch"] for t in trials} <= {"[8]", "[16,16]"}
    project = Project.open(project_dir)
    try:
        for t in trials:
            config = project.get_run(t.user_attrs["run_id"]).config
            assert config["hyperparameters"]["net_arch"] == json.loads(
                t.params["net_arch"]
            )
    finally:
        project.close()
    best = summary["best_params"]["net_arch"]
    assert best in ([8], [16, 16])
    preset = json.loads((project_dir / "presets" / "arch-best.preset.json").read_text())
    assert preset["settings"]["net_arch"] == best
