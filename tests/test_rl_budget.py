"""Defaults that fit the budget: a short run started with the run form's
defaults trains about the steps asked, and the log says what was fitted."""

from __future__ import annotations

from pathlib import Path

from engine_harness import EngineProcess

from engine import protocol

# A bundled env with no built-in PPO preset, so the form shows PPO's own
# defaults (the maze has one since its sweep).
ENV = "rlstudio/cartpole-v0"


def test_short_ppo_run_with_schema_defaults_trains_about_the_steps_asked(
    tmp_path: Path,
) -> None:
    engine = EngineProcess()
    try:
        engine.call(protocol.Hello())
        engine.call(protocol.OpenProject(path=str(tmp_path / "p"), create=True))
        fields = engine.call(
            protocol.GetRunSchema(kind="rl.train", values={"env": ENV, "algo": "PPO"})
        )["fields"]
        defaults = {f["name"]: f["default"] for f in fields}
        assert defaults["hyperparameters.n_steps"] == 2048
        # What the run dialog sends: the fields changed from the form's
        # defaults, and the env and algorithm.
        values = {**defaults, "total_steps": 3000, "eval_every_steps": 0}
        config = {
            "env": ENV,
            "algo": "PPO",
            **{
                k: v
                for k, v in values.items()
                if v is not None and v != defaults.get(k)
            },
        }
        assert set(config) == {"env", "algo", "total_steps", "eval_every_steps"}
        run_id = engine.call(protocol.StartRun(kind="rl.train", config=config))[
            "run_id"
        ]
        finished = engine.wait_for(
            lambda m: (
                isinstance(m, protocol.RunFinished | protocol.RunFailed)
                and m.run_id == run_id
            ),
            timeout=240,
        )
        assert isinstance(finished, protocol.RunFinished), finished
        assert 3000 <= finished.summary["total_steps"] <= 6000
        log = next((tmp_path / "p" / "runs").glob("*/log.txt")).read_text()
        assert "fitted to this run: n_steps" in log
    finally:
        engine.close()
