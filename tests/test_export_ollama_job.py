"""``rl-studio-engine export-ollama``: the one-click export headless (GGUF →
deploy in one command, against a local fake Ollama server that follows
Ollama's documented API), its exit codes, and ``deploy-ollama``'s code 3
when it only wrote a bundle."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from models_workspace_support import FakeOllama

REPO = Path(__file__).resolve().parents[1]

pytest.importorskip("transformers")


def engine(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def unreachable() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tiny_models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("m") / "tiny", "qwen2")


def test_export_ollama_exports_and_deploys_in_one_command(
    model_dir: Path, tmp_path: Path
) -> None:
    with FakeOllama() as fake:
        r = engine(
            "export-ollama",
            str(model_dir),
            *("--name", "tiny-agent", "--host", fake.host, "--quiet"),
            *("--type", "OLLAMA-Q4_K_M", "--out", str(tmp_path / "out")),
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[-1] == "ollama run tiny-agent"
        assert "tiny-agent:latest" in fake.models
        create = next(b for m, p, b in fake.requests if p == "/api/create")
    # The server's quantize: an F16 export that Ollama quantizes.
    assert create["quantize"] == "q4_K_M"
    assert list(create["files"]) == ["tiny-agent-f16.gguf"]
    assert (tmp_path / "out" / "tiny-agent-f16.gguf").is_file()


def test_without_a_server_it_writes_a_bundle_and_exits_3(
    model_dir: Path, tmp_path: Path
) -> None:
    host = unreachable()
    out = tmp_path / "out"
    r = engine(
        "export-ollama",
        str(model_dir),
        *("--name", "tiny-agent", "--type", "q8_0", "--host", host, "--quiet"),
        *("--out", str(out)),
    )
    assert r.returncode == 3, r.stderr
    bundle = out / "tiny-agent-ollama"
    assert r.stderr.strip() == (
        f"rl-studio-engine export-ollama: deployed nothing; the bundle is in {bundle}."
    )
    assert r.stdout.splitlines()[-1] == "ollama create tiny-agent -f Modelfile"
    assert sorted(p.name for p in bundle.iterdir()) == [
        "Modelfile",
        "README.md",
        "tiny-agent-q8_0.gguf",
    ]

    # deploy-ollama of that GGUF: the same bundle, the same code.
    r = engine(
        "deploy-ollama",
        str(out / "tiny-agent-q8_0.gguf"),
        *("--name", "tiny-agent", "--host", host, "--quiet"),
        *("--bundle-dir", str(tmp_path / "b2")),
    )
    assert r.returncode == 3, r.stderr
    assert "No Ollama server answers at" in r.stdout
    assert (tmp_path / "b2" / "Modelfile").is_file()


def test_bad_input_is_one_sentence_and_writes_nothing(tmp_path: Path) -> None:
    r = engine("export-ollama", str(tmp_path / "nope"), "--name", "x", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"rl-studio-engine export-ollama: The model {tmp_path / 'nope'} does not exist."
    )
    (tmp_path / "notes").mkdir()
    r = engine("export-ollama", str(tmp_path / "notes"), "--name", "x", cwd=tmp_path)
    assert r.returncode == 2
    assert "is neither a LoRA adapter folder, a model folder nor a .gguf" in r.stderr
    r = engine(
        "export-ollama", str(tmp_path / "notes"), "--name", "bad name!", cwd=tmp_path
    )
    assert r.returncode == 2 and "\n" not in r.stderr.strip()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]


def test_a_stop_ends_the_export_inside_a_stage_and_leaves_no_partial_file(
    model_dir: Path, tmp_path: Path
) -> None:
    from engine.export.ollama_job import export_to_ollama, validate

    cfg = validate({"model": str(model_dir), "name": "tiny", "type": "q8_0"})
    assert cfg.stages == ["gguf", "deploy"]
    reports: list[str] = []
    logged: list[str] = []
    result = export_to_ollama(
        cfg,
        tmp_path,
        progress=lambda d, t, m: reports.append(m),
        log=logged.append,
        # Stop once the GGUF export has reported a tensor written.
        should_stop=lambda: any(m.startswith("Export GGUF: ") for m in reports[1:]),
    )
    assert result.stopped and result.models == [] and result.deploy == {}
    assert logged[-1] == "Stopped during export gguf."
    assert list(tmp_path.iterdir()) == []  # no GGUF, no temporary file


def test_the_job_refuses_bad_input_through_the_protocol(tmp_path: Path) -> None:
    from engine_harness import EngineProcess

    from engine import protocol

    engine = EngineProcess()
    try:
        engine.call(protocol.OpenProject(path=str(tmp_path / "p"), create=True))
        reply = engine.reply_to(
            engine.send(
                protocol.StartRun(
                    kind="export.ollama",
                    config={"model": str(tmp_path / "nope"), "name": "x"},
                )
            )
        )
    finally:
        engine.close()
    assert isinstance(reply, protocol.Error)
    assert reply.field == "model"
    assert reply.message == f"The model {tmp_path / 'nope'} does not exist."


def test_a_deployment_registers_the_ollama_model_with_its_lineage(
    model_dir: Path, tmp_path: Path
) -> None:
    """The one-click export and the deploy job list the deployed model
    (its Ollama name and server) for the project, child of its GGUF."""
    from engine.export.jobs import run_ollama, validate_ollama
    from engine.export.ollama_job import export_to_ollama, validate
    from engine.jobs.context import JobContext
    from engine.settings import as_dict
    from engine.store.project import Project

    project = Project.open(tmp_path / "p", create=True)
    try:
        src = project.register_model(name="tiny", kind="hf-merged", files=[model_dir])
        with FakeOllama() as fake:
            cfg = validate(
                {
                    "model": src.path,
                    "name": "tiny-agent",
                    "type": "q8_0",
                    "host": fake.host,
                    "parents": [src.id],
                }
            )
            result = export_to_ollama(cfg, tmp_path / "out")
            gguf_entry, deployed = result.models
            assert gguf_entry["kind"] == "gguf" and deployed["kind"] == "ollama"
            facts = {"ollama_model": "tiny-agent", "host": cfg.host}
            assert deployed["name"] == "tiny-agent"
            assert {k: deployed["metrics"][k] for k in facts} == facts
            assert json.loads(Path(deployed["file"]).read_text()) == facts
            ids, problems = project.register_run_models("r-1", result.to_dict())
            assert problems == []
            gguf_id, ollama_id = ids
            assert (src.id, gguf_id, "derived") in project.lineage(gguf_id)
            assert (gguf_id, ollama_id, "derived") in project.lineage(ollama_id)
            record = next(m for m in project.list_models() if m.id == ollama_id)
            assert (record.kind, record.name, record.source_run) == (
                "ollama",
                "tiny-agent",
                "r-1",
            )

            # deploy.ollama of that GGUF: the same kind of entry.
            config = validate_ollama(
                {
                    "gguf": gguf_entry["file"],
                    "name": "tiny-two",
                    "host": fake.host,
                    "parents": [gguf_id],
                    "verify_prompt": None,
                }
            )
            run_dir = project.path / "runs" / "r-2"
            run_dir.mkdir(parents=True)
            ctx = JobContext(
                "r-2", run_dir, "deploy.ollama", as_dict(config), events=None
            )
            try:
                summary = run_ollama(ctx, config)
            finally:
                ctx.close()
        (entry,) = summary["models"]
        assert entry["kind"] == "ollama" and entry["parents"] == [gguf_id]
        assert entry["metrics"]["ollama_model"] == "tiny-two"
        assert Path(entry["file"]).parent == run_dir / "output"
    finally:
        project.close()
