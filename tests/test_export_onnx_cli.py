"""SB3 -> ONNX round trip with onnxruntime, the export CLI subcommands and the
export job kinds run in-process through a JobContext."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import ConfigError, EngineError
from engine.jobs.context import JobContext
from engine.jobs.registry import get_kind, kinds, validate_config

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def policies(tmp_path_factory) -> dict[str, Path]:
    from stable_baselines3 import PPO

    root = tmp_path_factory.mktemp("onnx")
    out = {}
    for env in ("CartPole-v1", "Pendulum-v1"):
        model = PPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0)
        model.learn(64)
        out[env] = root / f"ppo-{env}.zip"
        model.save(out[env])
    return out


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_onnx_round_trip(policies: dict[str, Path], tmp_path: Path, env: str) -> None:
    import numpy as np
    import onnxruntime as ort
    from stable_baselines3 import PPO

    from engine.export.onnx_export import export_onnx

    out = tmp_path / "policy.onnx"
    report = export_onnx(policies[env], out, samples=32)
    assert report.verified and report.mismatches == 0 and report.max_abs_diff < 1e-4
    # Independent check on fresh observations, against the algorithm's predict.
    model = PPO.load(policies[env], device="cpu")
    space = model.observation_space
    space.seed(123)
    obs = np.stack([space.sample() for _ in range(50)]).astype(np.float32)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"observation": obs})[0]
    want, _ = model.predict(obs, deterministic=True)
    if env == "CartPole-v1":
        assert got.shape == (50,) and (got == want).all()
    else:
        assert np.abs(got.reshape(want.shape) - want).max() < 1e-4
        assert (got >= -2.0).all() and (got <= 2.0).all()  # clipped to the Box


def test_onnx_bad_input(tmp_path: Path, policies: dict[str, Path]) -> None:
    from engine.export.onnx_export import export_onnx

    (tmp_path / "afile").write_text("x")
    with pytest.raises(EngineError, match=r"afile cannot be made a folder"):
        export_onnx(policies["CartPole-v1"], tmp_path / "afile" / "p.onnx")

    with pytest.raises(EngineError, match="does not exist"):
        export_onnx(tmp_path / "nope.zip", tmp_path / "p.onnx")
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(EngineError, match="not a stable-baselines3 model zip"):
        export_onnx(bad, tmp_path / "p.onnx")
    assert not (tmp_path / "p.onnx").exists()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_errors_are_one_sentence(tmp_path: Path) -> None:
    from tiny_models import build_tiny_model

    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(
        json.dumps({"architectures": ["GPT2LMHeadModel"]})
    )
    r = _cli("export-gguf", str(tmp_path / "gpt2"), "--out", str(tmp_path / "x.gguf"))
    assert r.returncode == 2
    assert r.stderr.strip().startswith("rl-studio-engine export-gguf: Cannot export")
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.gguf").exists()
    r = _cli(
        "export-onnx", str(tmp_path / "none.zip"), "--out", str(tmp_path / "p.onnx")
    )
    assert r.returncode == 2 and "does not exist" in r.stderr
    # A folder with no config.json, and a model whose weights are cut short.
    (tmp_path / "empty").mkdir()
    r = _cli("export-gguf", str(tmp_path / "empty"), "--out", str(tmp_path / "y.gguf"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "has no config.json, so it is not a Hugging Face model folder" in r.stderr
    (tmp_path / "gpt2" / "config.json").write_text(
        json.dumps({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64})
    )
    r = _cli("export-gguf", str(tmp_path / "gpt2"), "--out", str(tmp_path / "z.gguf"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "lacks num_attention_heads, num_hidden_layers" in r.stderr
    assert "so it is not a complete Qwen2ForCausalLM config." in r.stderr
    cfg = {"architectures": ["Qwen2ForCausalLM"], "vocab_size": 8}
    cfg |= dict.fromkeys(("hidden_size", "num_attention_heads", "num_hidden_layers"), 4)
    (tmp_path / "gpt2" / "config.json").write_text(
        json.dumps({**cfg, "intermediate_size": 8})
    )
    (tmp_path / "gpt2" / "model.safetensors").write_bytes(b"\x10\x00" + bytes(30))
    r = _cli("export-gguf", str(tmp_path / "gpt2"), "--out", str(tmp_path / "z.gguf"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "is not a valid safetensors file" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "gpt2"]
    # --out inside a file, not a folder.
    folder = build_tiny_model(tmp_path / "tiny", "qwen2")
    (tmp_path / "afile").write_text("x")
    r = _cli("export-gguf", str(folder), "--out", str(tmp_path / "afile" / "m.gguf"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert f"{tmp_path / 'afile'} cannot be made a folder (File exists)." in r.stderr


def test_cli_export_and_bundle(policies: dict[str, Path], tmp_path: Path) -> None:
    from tiny_models import build_tiny_model

    folder = build_tiny_model(tmp_path / "m", "qwen2", tie_embeddings=True)
    out = tmp_path / "tiny-q8.gguf"
    r = _cli("export-gguf", str(folder), "--out", str(out), "--type", "q8_0")
    assert r.returncode == 0, r.stderr
    assert "Verified: yes" in r.stdout and "export-gguf" in r.stderr  # progress
    r = _cli(
        "deploy-ollama",
        str(out),
        "--name",
        "tiny",
        "--host",
        "http://127.0.0.1:9",
        "--bundle-dir",
        str(tmp_path / "bundle"),
        "--param",
        "temperature=0.2",
    )
    assert r.returncode == 3, r.stderr  # only a bundle: no Ollama answered
    assert "ollama create tiny -f Modelfile" in r.stdout
    mf = (tmp_path / "bundle" / "Modelfile").read_text()
    assert "PARAMETER temperature 0.2" in mf and "<|im_start|>" in mf
    r = _cli(
        "export-onnx", str(policies["CartPole-v1"]), "--out", str(tmp_path / "p.onnx")
    )
    assert r.returncode == 0, r.stderr
    assert "verified: yes" in r.stdout


def _run_job(kind: str, config: dict, project: Path) -> dict:
    cfg = validate_config(kind, config)
    run_dir = project / "runs" / f"r-{kind}"
    run_dir.mkdir(parents=True)
    ctx = JobContext(f"r-{kind}", run_dir, kind, cfg)
    try:
        return get_kind(kind).entry(ctx)
    finally:
        ctx.close()


def test_job_kinds(policies: dict[str, Path], tmp_path: Path) -> None:
    from tiny_models import build_tiny_model

    assert {"export.gguf", "deploy.ollama", "export.onnx"} <= set(kinds())
    folder = build_tiny_model(tmp_path / "m", "llama")
    project = tmp_path / "project"
    summary = _run_job(
        "export.gguf",
        {"model_dir": str(folder), "type": "q4_0", "parents": ["m-1"]},
        project,
    )
    (model,) = summary["models"]
    assert model["kind"] == "gguf" and model["parents"] == ["m-1"]
    assert Path(model["file"]).is_file() and model["metrics"]["verified"] is True
    summary = _run_job(
        "deploy.ollama",
        {"gguf": model["file"], "name": "tiny-llama", "host": "http://127.0.0.1:9"},
        project,
    )
    assert summary["deploy"]["deployed"] is False
    assert summary["models"][0]["kind"] == "ollama-bundle"
    assert (Path(summary["models"][0]["file"]) / "Modelfile").is_file()
    assert "<|start_header_id|>" in summary["deploy"]["modelfile"]
    summary = _run_job("export.onnx", {"policy": str(policies["CartPole-v1"])}, project)
    assert summary["models"][0]["kind"] == "onnx"

    with pytest.raises(ConfigError) as exc:
        validate_config("export.gguf", {"model_dir": str(tmp_path / "nope")})
    assert exc.value.field == "model_dir"
    with pytest.raises(ConfigError) as exc:
        validate_config("export.gguf", {"model_dir": str(folder), "type": "q4_k"})
    assert exc.value.field == "type"
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(
        json.dumps({"architectures": ["GPT2LMHeadModel"]})
    )
    with pytest.raises(ConfigError) as exc:
        validate_config("export.gguf", {"model_dir": str(tmp_path / "gpt2")})
    assert exc.value.field == "model_dir"
    assert str(exc.value).startswith("Cannot export GPT2LMHeadModel to GGUF")
    assert "LlamaForCausalLM" in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        validate_config("deploy.ollama", {"gguf": model["file"], "name": "bad name"})
    assert exc.value.field == "name"
    with pytest.raises(ConfigError) as exc:
        validate_config("export.onnx", {"policy": str(tmp_path / "x.zip")})
    assert exc.value.field == "policy"
