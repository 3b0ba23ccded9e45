"""The bundled Jira flow headless: a designed workflow env (copied into a
fresh project with the examples), MaskablePPO with action masks, and an
evaluation that reports the success rate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "resources" / "examples" / "flows" / "jira_maskable_ppo.flow.json"


def test_the_jira_flow_runs_headless_in_a_fresh_project(tmp_path: Path) -> None:
    project = tmp_path / "project"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine",
            "run",
            str(EXAMPLE),
            "--project",
            str(project),
            "--set",
            "train.total_steps=256",
            "--set",
            "train.n_steps=32",
            "--set",
            "train.batch_size=64",
            "--set",
            "train.n_epochs=2",
            "--set",
            "evaluate.episodes=4",
            "--quiet",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    env = summary["nodes"]["env"]["outputs"]["env"]
    assert env["id"] == "rlstudio/jira_issue_resolution-v0"
    assert env["designed"] and env["has_action_masks"]
    assert Path(env["spec_file"]) == project / "envs" / "jira_issue_resolution.env.json"
    assert env["fingerprint"]
    policy = summary["nodes"]["train"]["outputs"]["policy"]
    assert policy["algo"] == "MaskablePPO" and policy["total_steps"] == 256
    report = summary["nodes"]["evaluate"]["outputs"]["report"]
    assert report["episodes"] == 4
    # the workflow env reports is_success, so the success rate is a number
    assert 0.0 <= report["success_rate"] <= 1.0
    assert summary["models"] == []  # this flow has no Register node
