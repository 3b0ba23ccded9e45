"""check_spec on the bundled examples and on broken designs; the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import main as cli_main
from engine.envs import check_spec

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "resources" / "examples"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLES / "envs", tmp_path / "envs")
    shutil.copytree(EXAMPLES / "data", tmp_path / "data")
    return tmp_path


def _doc(project: Path, name: str) -> dict:
    return json.loads((project / "envs" / f"{name}.env.json").read_text())


def _save(project: Path, doc: dict, name: str = "variant") -> Path:
    doc["name"] = name
    path = project / "envs" / f"{name}.env.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "name",
    [
        "cartpole",
        "jira_comment_management",
        "jira_issue_resolution",
        "jira_release_pipeline",
        "jira_status_update",
        "maze",
    ],
)
def test_bundled_example_passes_every_check(project: Path, name: str) -> None:
    report = check_spec(project / "envs" / f"{name}.env.json")
    assert report.ok, report.format_text()
    assert report.stats["determinism_steps"] == 200
    if name != "cartpole":
        assert not report.warnings, report.format_text()
    checks = {p.check for p in report.problems}
    assert not checks & {"determinism", "replay", "make"}
    json.dumps(report.to_dict())  # the GUI gets it as JSON


def test_unreachable_terminal_status(project: Path) -> None:
    doc = _doc(project, "jira_issue_resolution")
    w = doc["workflow"]
    w["transitions"] = [
        t for t in w["transitions"] if t["tool"] not in ("merge", "close_wont_do")
    ]
    w["tasks"] = {}
    report = check_spec(_save(project, doc))
    assert not report.ok
    err = report.errors[0]
    assert err.path == "workflow.terminal" and err.check == "reachability"
    assert "No terminal status can be reached from the start ('To Do')" in err.message
    paths = {p.path for p in report.warnings}
    assert {"workflow.terminal[0]", "workflow.terminal[1]"} <= paths
    assert "workflow.tools[4]" in paths  # 'merge' has no transition left


def test_unused_tool_and_unreachable_status(project: Path) -> None:
    doc = _doc(project, "jira_comment_management")
    w = doc["workflow"]
    w["statuses"].append("Archived")
    w["tools"].append({"name": "archive"})
    w["transitions"].append({"from": "Archived", "tool": "reply", "to": "Closed"})
    report = check_spec(_save(project, doc), env_checks=False)
    assert report.ok
    by_path = {p.path: p for p in report.warnings}
    assert "cannot be reached" in by_path["workflow.statuses[7]"].message
    assert "'archive' has no transition" in by_path["workflow.tools[8]"].message


def test_reward_farming_cycle_is_flagged(project: Path) -> None:
    doc = _doc(project, "jira_issue_resolution")
    doc["workflow"]["rewards"]["status_mode"] = "enter"
    report = check_spec(_save(project, doc), env_checks=False)
    assert [p.path for p in report.warnings] == ["workflow.rewards.status"]
    assert "farm reward" in report.warnings[0].message
    assert report.stats["step_reward_range"] == [-0.52, 1.98]


NONDETERMINISTIC = '''
import random
import gymnasium as gym
import numpy as np


class Coin(gym.Env):
    """Draws from the global random module after a few steps: Gymnasium's
    one-step determinism check passes, a longer one does not."""

    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        x = np.array([random.random() if self.t > 3 else 0.5], np.float32)
        return x, float(x[0] > 0.5), False, self.t >= 30, {}
'''


def test_nondeterministic_python_env_is_caught(project: Path) -> None:
    (project / "envs" / "coin.py").write_text(NONDETERMINISTIC)
    doc = {
        "format": 1,
        "name": "coin",
        "kind": "python",
        "python": {"file": "envs/coin.py", "class": "Coin", "max_episode_steps": 30},
    }
    report = check_spec(_save(project, doc, "coin"))
    assert not report.ok
    (err,) = report.errors  # gymnasium's own check_env let it through
    assert err.check == "determinism" and err.path == "python"
    assert "different observation at step 4 (episode 1)" in err.message


def test_python_env_with_np_random_passes(project: Path) -> None:
    fixed = NONDETERMINISTIC.replace("random.random()", "self.np_random.random()")
    (project / "envs" / "coin.py").write_text(fixed)
    doc = {
        "format": 1,
        "name": "coin",
        "kind": "python",
        "python": {"file": "coin.py", "class": "Coin"},
    }
    report = check_spec(_save(project, doc, "coin"))
    assert report.ok, report.format_text()


def test_python_import_failure_and_wrong_class(project: Path) -> None:
    (project / "envs" / "bad.py").write_text("def broken(:\n    pass\n")
    doc = {
        "format": 1,
        "name": "bad",
        "kind": "python",
        "python": {"file": "bad.py", "class": "Bad"},
    }
    report = check_spec(_save(project, doc, "bad"))
    (err,) = report.errors
    assert err.path == "python.file" and "SyntaxError" in err.message
    assert "line 1" in err.message
    (project / "envs" / "bad.py").write_text("class Bad:\n    pass\n")
    (err,) = check_spec(_save(project, doc, "bad")).errors
    assert err.path == "python.class" and "not a gymnasium.Env subclass" in err.message


def test_unknown_gymnasium_id(project: Path) -> None:
    doc = {
        "format": 1,
        "name": "g",
        "kind": "gymnasium",
        "gymnasium": {"id": "Nope-v9"},
    }
    (err,) = check_spec(_save(project, doc, "g")).errors
    assert err.path == "gymnasium.id" and "'Nope-v9'" in err.message


def test_walled_off_goal(project: Path) -> None:
    doc = _doc(project, "maze")
    doc["grid"]["walls"] += [[0, 1], [1, 0]]
    (err,) = check_spec(_save(project, doc), env_checks=False).errors
    assert err.path == "grid.goals" and "No goal can be reached" in err.message


def test_cli_exit_codes(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = project / "envs" / "jira_comment_management.env.json"
    assert cli_main(["env", "check", str(good)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "jira_comment_management (rlstudio/jira_comment_management-v0"
    )
    assert "OK, 0 error(s)" in out

    doc = _doc(project, "jira_issue_resolution")
    doc["workflow"]["transitions"][3]["to"] = "Shipped"
    bad = _save(project, doc)
    assert cli_main(["env", "check", "--json", str(bad)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert report["problems"][0]["path"] == "workflow.transitions[3].to"

    doc = _doc(project, "jira_issue_resolution")
    doc["workflow"]["rewards"]["status_mode"] = "enter"
    warn = _save(project, doc, "warned")
    assert cli_main(["env", "check", "--static", str(warn)]) == 0
    assert cli_main(["env", "check", "--static", "--strict", str(warn)]) == 1
    capsys.readouterr()

    assert cli_main(["env", "check", str(project / "envs" / "missing.env.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("does not exist.") and "\n" not in err


def test_cli_malformed_file_in_a_real_process(tmp_path: Path) -> None:
    bad = tmp_path / "broken.env.json"
    bad.write_text('{"format": 1,,}')
    out = subprocess.run(
        [sys.executable, "-m", "engine.cli", "env", "check", str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 2
    assert out.stdout == ""
    line = out.stderr.strip()
    assert "\n" not in line and "is not valid JSON (line 1, column 14" in line


def test_gymnasium_module_from_the_project_is_refused(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared spec's ``module:Id`` must not import the project's own code
    unconfined in the engine, even where the project folder is on sys.path:
    nothing of the module runs, one sentence says why."""
    marker = project / "ran.txt"
    (project / "envs" / "evilmod.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
    )
    monkeypatch.syspath_prepend(str(project / "envs"))
    for module in ("evilmod", "not_a_module_xyz", "os; rm"):
        doc = {
            "format": 1,
            "name": "g",
            "kind": "gymnasium",
            "gymnasium": {"id": f"{module}:CartPole-v1"},
        }
        (err,) = check_spec(_save(project, doc, "g")).errors
        assert err.path == "gymnasium.id", err.message
        assert "module" in err.message
    assert not marker.exists()


def test_gymnasium_module_that_is_installed_is_imported(project: Path) -> None:
    doc = {
        "format": 1,
        "name": "g",
        "kind": "gymnasium",
        "gymnasium": {"id": "gymnasium.envs.classic_control:CartPole-v1"},
    }
    assert not check_spec(_save(project, doc, "g"), env_checks=False).errors


def test_farmable_cell_reward_is_flagged_until_it_pays_once(project: Path) -> None:
    # The maze as first designed: its 0.1 cell paid each time it was entered,
    # so stepping on and off it out-earned the goal over an episode.
    doc = _doc(project, "maze")
    del doc["grid"]["cell_rewards"][0]["once"]
    report = check_spec(_save(project, doc), env_checks=False)
    (warning,) = report.warnings
    assert warning.path == "grid.cell_rewards[0]"
    assert warning.message == (
        "The cell [4, 7] pays 0.1 each time it is entered, so stepping on and off "
        "it earns about 3.4 in an episode against 0.86 for reaching the goal; "
        "make it pay once an episode (tick 'once' on the reward tool and paint it "
        'again, or "once": true in the JSON) or lower it.'
    )
    doc["grid"]["cell_rewards"][0]["once"] = True
    assert not check_spec(_save(project, doc), env_checks=False).warnings
    # A round trip that costs more than it pays is no farm.
    doc["grid"]["cell_rewards"][0] = {"cell": [4, 7], "reward": 0.01}
    assert not check_spec(_save(project, doc), env_checks=False).warnings
