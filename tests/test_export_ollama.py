"""Modelfile templates and the Ollama client, against a local fake server that
follows Ollama's documented REST API (not against Ollama itself: no Ollama
binary exists for these machines)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from engine.errors import EngineError
from engine.export import modelfile as mfx
from engine.export.ollama import deploy_gguf
from engine.ollama import OllamaClient, OllamaUnreachable

# ------------------------------------------------------------------ Modelfile

CHATML_JINJA = (
    "{% for m in messages %}<|im_start|>{{ m.role }}...<|im_end|>{% endfor %}"
)
TEMPLATES = {
    "chatml": CHATML_JINJA,
    "llama3": "{{ bos_token }}<|start_header_id|>{{ m.role }}<|end_header_id|>"
    "<|eot_id|>",
    "mistral": "{{ bos_token }}{% if m.role == 'user' %}[INST] {{ m.content }} [/INST]",
    "phi3": "{% for m in messages %}<|user|>\n{{ m.content }}<|end|>\n<|assistant|>",
    "gemma": "{{ bos_token }}<start_of_turn>user\n{{ m.content }}<end_of_turn>\n",
}


@pytest.mark.parametrize("family", mfx.FAMILIES)
def test_family_detection_and_modelfile(family: str) -> None:
    assert mfx.detect_family(TEMPLATES[family]) == family
    mf = mfx.build_modelfile(
        "./model.gguf",
        chat_template=TEMPLATES[family],
        system="You manage Jira issues.",
        parameters={"temperature": 0.2, "num_ctx": 2048},
    )
    assert mf.family == family and not mf.warnings
    lines = mf.text.splitlines()
    assert lines[0] == "FROM ./model.gguf"
    assert 'SYSTEM """You manage Jira issues."""' in mf.text
    assert f'TEMPLATE """{mfx.TEMPLATES[family]}"""' in mf.text
    for stop in mfx.STOPS[family]:
        assert f"PARAMETER stop {json.dumps(stop)}" in lines
    assert "PARAMETER temperature 0.2" in lines and "PARAMETER num_ctx 2048" in lines
    assert mf.parameters["stop"] == list(mfx.STOPS[family])
    # Go template sanity: balanced actions, every block closed.
    tpl = mfx.TEMPLATES[family]
    assert tpl.count("{{") == tpl.count("}}")
    opens = sum(tpl.count(k) for k in ("{{- range", "{{ range", "{{- if", "{{ if"))
    assert opens == tpl.count("end }}")
    assert ".Messages" in tpl and ".Content" in tpl


def test_exact_templates_from_facts() -> None:
    assert mfx.TEMPLATES["chatml"].endswith(
        "<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n"
        "{{ end }}<|im_start|>assistant\n"
    )
    assert (
        "<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>"
        in mfx.TEMPLATES["llama3"]
    )


def test_family_from_special_tokens_and_unknown() -> None:
    assert mfx.detect_family(None, ["<|im_start|>", "<|im_end|>"]) == "chatml"
    assert mfx.detect_family(None, ["<start_of_turn>"]) == "gemma"
    mf = mfx.build_modelfile("x.gguf", chat_template="{{ messages }} ### Human:")
    assert mf.family is None and mf.template is None
    assert "TEMPLATE" not in mf.text and mf.warnings
    mf = mfx.build_modelfile("x.gguf", family="chatml", adapter="./a.gguf")
    assert "ADAPTER ./a.gguf" in mf.text
    with pytest.raises(EngineError, match="family"):
        mfx.build_modelfile("x.gguf", family="vicuna")
    with pytest.raises(EngineError, match="SYSTEM"):
        mfx.build_modelfile("x.gguf", family="chatml", system='say """hi"""')


# ---------------------------------------------------------------- fake server


class FakeOllama:
    """Blobs (HEAD/POST with digest check), streaming create with an error
    case, show, generate, tags, delete and version, as documented."""

    def __init__(self, version: str = "0.6.2") -> None:
        self.version = version
        self.blobs: dict[str, bytes] = {}
        self.models: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.creates: list[dict[str, Any]] = []
        self.fail_create: str | None = None
        self.drop_create: str | None = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: Any = None, stream: list | None = None):
                if stream is not None:
                    data = b"".join(json.dumps(x).encode() + b"\n" for x in stream)
                    ctype = "application/x-ndjson"
                else:
                    data = b"" if body is None else json.dumps(body).encode()
                    ctype = "application/json"
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _body(self) -> bytes:
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def do_HEAD(self) -> None:
                fake.requests.append(("HEAD", self.path))
                digest = self.path.removeprefix("/api/blobs/")
                self._send(200 if digest in fake.blobs else 404)

            def do_GET(self) -> None:
                fake.requests.append(("GET", self.path))
                if self.path == "/api/version":
                    self._send(200, {"version": fake.version})
                elif self.path == "/api/tags":
                    self._send(
                        200,
                        {
                            "models": [
                                {"name": n, "model": n, "size": 1} for n in fake.models
                            ]
                        },
                    )
                else:
                    self._send(404, {"error": "not found"})

            def do_DELETE(self) -> None:
                fake.requests.append(("DELETE", self.path))
                name = json.loads(self._body())["model"]
                if name not in fake.models:
                    self._send(404, {"error": f"model '{name}' not found"})
                else:
                    del fake.models[name]
                    self._send(200)

            def do_POST(self) -> None:
                fake.requests.append(("POST", self.path))
                raw = self._body()
                if self.path.startswith("/api/blobs/"):
                    digest = self.path.removeprefix("/api/blobs/")
                    if "sha256:" + hashlib.sha256(raw).hexdigest() != digest:
                        self._send(400, {"error": "digest mismatch"})
                        return
                    fake.blobs[digest] = raw
                    self._send(201)
                    return
                body = json.loads(raw or b"{}")
                if self.path == "/api/create":
                    fake.creates.append(body)
                    name = body["model"]
                    if fake.drop_create:
                        # Send one status line, then hang up (a crash
                        # mid-create): Ollama streams chunked, without the
                        # last chunk here; or a sized body cut short.
                        line = json.dumps({"status": "parsing GGUF"}).encode() + b"\n"
                        self.send_response(200)
                        self.send_header("Content-Type", "application/x-ndjson")
                        if fake.drop_create == "chunked":
                            self.send_header("Transfer-Encoding", "chunked")
                            line = b"%x\r\n%s\r\n" % (len(line), line)
                        else:
                            self.send_header("Content-Length", str(len(line) + 99))
                        self.end_headers()
                        self.wfile.write(line)
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    if fake.fail_create:
                        self._send(
                            200,
                            stream=[
                                {"status": "parsing GGUF"},
                                {"error": fake.fail_create},
                            ],
                        )
                        return
                    refs = list((body.get("files") or {}).values())
                    refs += list((body.get("adapters") or {}).values())
                    if "modelfile" in body:
                        refs = [
                            ln.split("@", 1)[1]
                            for ln in body["modelfile"].splitlines()
                            if ln.startswith(("FROM @", "ADAPTER @"))
                        ]
                    missing = [r for r in refs if r not in fake.blobs]
                    if missing:
                        self._send(400, {"error": f"blob {missing[0]} not found"})
                        return
                    fake.models[name] = body
                    self._send(
                        200,
                        stream=[
                            {"status": "parsing GGUF"},
                            {"status": "using existing layer sha256:abc"},
                            {"status": "writing manifest"},
                            {"status": "success"},
                        ],
                    )
                elif self.path == "/api/show":
                    name = body["model"]
                    if name not in fake.models:
                        self._send(404, {"error": f"model '{name}' not found"})
                        return
                    m = fake.models[name]
                    self._send(
                        200,
                        {
                            "template": m.get("template", ""),
                            "parameters": json.dumps(m.get("parameters", {})),
                            "details": {"format": "gguf"},
                        },
                    )
                elif self.path == "/api/generate":
                    if body["model"] not in fake.models:
                        self._send(404, {"error": "model not found"})
                        return
                    self._send(200, {"response": "In Progress", "done": True})
                else:
                    self._send(404, {"error": "not found"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeOllama:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def model_gguf(tmp_path_factory) -> Path:
    """A small F16 GGUF with a ChatML template, written directly with gguf
    (no torch): the client only uploads and describes it."""
    import gguf
    import numpy as np

    out = tmp_path_factory.mktemp("ollama") / "tiny-f16.gguf"
    w = gguf.GGUFWriter(out, "qwen2")
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
    w.add_chat_template(CHATML_JINJA)
    w.add_token_list(["a", "b", "<|im_start|>", "<|im_end|>"])
    w.add_token_types([1, 1, 3, 3])
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((4, 64)).astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_deploy_uploads_creates_and_verifies(model_gguf: Path) -> None:
    progress: list[tuple[int, int]] = []
    with FakeOllama() as fake:
        result = deploy_gguf(
            model_gguf,
            "jira-agent:f16",
            host=fake.url,
            system="You manage Jira issues.",
            parameters={"temperature": 0.1},
            quantize="q4_K_M",
            progress=lambda d, t, m: progress.append((d, t)),
        )
        assert result.deployed and result.server_version == "0.6.2"
        assert result.family == "chatml"
        assert result.statuses[-1] == "success"
        assert result.sample == "In Progress"
        assert result.command == "ollama run jira-agent:f16"
        digest = "sha256:" + hashlib.sha256(model_gguf.read_bytes()).hexdigest()
        assert digest in fake.blobs and result.uploaded == [model_gguf.name]
        body = fake.creates[-1]
        assert body["files"] == {model_gguf.name: digest}
        assert body["template"] == mfx.TEMPLATES["chatml"]
        assert body["parameters"]["stop"] == ["<|im_start|>", "<|im_end|>"]
        assert body["parameters"]["temperature"] == 0.1
        assert body["system"] == "You manage Jira issues."
        assert body["quantize"] == "q4_K_M"
        assert progress[-1][0] == progress[-1][1] == model_gguf.stat().st_size

        # Again: the blob is already there, so it is not sent twice.
        posts = sum(1 for m, p in fake.requests if m == "POST" and "blobs" in p)
        again = deploy_gguf(model_gguf, "jira-agent:v2", host=fake.url)
        assert again.skipped == [model_gguf.name] and not again.uploaded
        assert posts == sum(1 for m, p in fake.requests if m == "POST" and "blobs" in p)

        client = OllamaClient(fake.url)
        names = [m["name"] for m in client.list_models()]
        assert names == ["jira-agent:f16", "jira-agent:v2"]
        client.delete("jira-agent:v2")
        assert [m["name"] for m in client.list_models()] == ["jira-agent:f16"]
        with pytest.raises(EngineError, match="no model named jira-agent:v2"):
            client.delete("jira-agent:v2")
        with pytest.raises(EngineError, match="no model named ghost"):
            client.show("ghost")


def test_old_server_gets_a_modelfile(model_gguf: Path) -> None:
    with FakeOllama(version="0.5.1") as fake:
        result = deploy_gguf(model_gguf, "old-agent", host=fake.url, verify_prompt=None)
        assert result.deployed
        body = fake.creates[-1]
        assert "files" not in body
        digest = "sha256:" + hashlib.sha256(model_gguf.read_bytes()).hexdigest()
        assert body["modelfile"].startswith(f"FROM @{digest}\n")
        assert 'PARAMETER stop "<|im_end|>"' in body["modelfile"]


def test_create_error_mid_stream_is_one_sentence(model_gguf: Path, tmp_path) -> None:
    with FakeOllama() as fake:
        fake.fail_create = "unsupported architecture"
        with pytest.raises(EngineError) as exc:
            deploy_gguf(model_gguf, "broken", host=fake.url, bundle_dir=tmp_path / "b")
        msg = str(exc.value)
        assert msg == "Ollama could not create broken: unsupported architecture."
        assert "\n" not in msg
        assert "broken" not in fake.models


@pytest.mark.parametrize("body", ["chunked", "sized"])
def test_server_gone_mid_stream_is_one_sentence(
    model_gguf: Path, tmp_path: Path, body: str
) -> None:
    with FakeOllama() as fake:
        fake.drop_create = body
        with pytest.raises(EngineError) as exc:
            deploy_gguf(model_gguf, "cut", host=fake.url, bundle_dir=tmp_path / "b")
        msg = str(exc.value)
        assert msg == (
            f"Ollama could not create cut: the connection to {fake.url} broke off "
            "before the server said it was done."
        )
        assert "cut" not in fake.models
    # A failed deployment leaves no bundle behind: nothing half made.
    assert not (tmp_path / "b").exists()


def test_cli_reports_a_refused_create_in_one_line(model_gguf: Path) -> None:
    with FakeOllama() as fake:
        fake.fail_create = "unsupported architecture"
        r = subprocess.run(
            [
                *(sys.executable, "-m", "engine.cli", "deploy-ollama"),
                *(str(model_gguf), "--name", "broken", "--host", fake.url, "--quiet"),
            ],
            cwd=Path(__file__).resolve().parents[1],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (
        "rl-studio-engine deploy-ollama: Ollama could not create broken: "
        "unsupported architecture."
    )
    assert "broken" not in fake.models


def test_no_server_writes_a_bundle(model_gguf: Path, tmp_path: Path) -> None:
    host = f"http://127.0.0.1:{_free_port()}"
    result = deploy_gguf(
        model_gguf,
        "jira-agent",
        host=host,
        system="Be brief.",
        bundle_dir=tmp_path / "b",
    )
    assert not result.deployed and result.bundle_dir == str(tmp_path / "b")
    assert "No Ollama server answers" in result.message
    assert result.command == "ollama create jira-agent -f Modelfile"
    files = sorted(p.name for p in (tmp_path / "b").iterdir())
    assert files == ["Modelfile", "README.md", model_gguf.name]
    mf = (tmp_path / "b" / "Modelfile").read_text()
    assert mf.startswith(f"FROM ./{model_gguf.name}\n")
    assert "TEMPLATE" in mf and 'SYSTEM """Be brief."""' in mf
    assert result.command in (tmp_path / "b" / "README.md").read_text()
    assert (
        tmp_path / "b" / model_gguf.name
    ).stat().st_size == model_gguf.stat().st_size


def test_no_server_and_a_full_disk_leaves_no_bundle(
    model_gguf: Path, tmp_path: Path, monkeypatch
) -> None:
    host = f"http://127.0.0.1:{_free_port()}"

    def full(fd: int) -> None:
        # Delayed allocation: a full disk often shows first at fsync.
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    bundle = tmp_path / "b"
    with pytest.raises(EngineError) as exc:
        deploy_gguf(model_gguf, "jira-agent", host=host, bundle_dir=bundle)
    assert str(exc.value) == (
        f"The disk holding {bundle} is full; free about 1 MB and write the Ollama "
        "bundle again."
    )
    # No bundle with a GGUF but no Modelfile, no temporary file.
    assert list(tmp_path.iterdir()) == []

    # A folder the user named keeps what it held before.
    bundle.mkdir()
    (bundle / "notes.txt").write_text("mine")
    with pytest.raises(EngineError):
        deploy_gguf(model_gguf, "jira-agent", host=host, bundle_dir=bundle)
    assert [p.name for p in bundle.iterdir()] == ["notes.txt"]


def test_unreachable_host_is_one_sentence() -> None:
    client = OllamaClient(f"127.0.0.1:{_free_port()}", timeout=2)
    with pytest.raises(OllamaUnreachable) as exc:
        client.version()
    msg = str(exc.value)
    assert msg.startswith("No Ollama server answers at http://127.0.0.1:")
    assert msg.endswith("check the address.") and "\n" not in msg
    assert client.available() is None


def test_deploy_bad_input(model_gguf: Path, tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="does not exist"):
        deploy_gguf(tmp_path / "nope.gguf", "x")
    with pytest.raises(EngineError, match="not a valid Ollama model name"):
        deploy_gguf(model_gguf, "bad name!")
    with pytest.raises(EngineError, match="cannot quantize"):
        deploy_gguf(model_gguf, "x", quantize="q2_K")
    # A download cut short: the header lies past the end of the file.
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(model_gguf.read_bytes()[:40])
    with pytest.raises(EngineError) as exc:
        deploy_gguf(cut, "x", bundle_dir=tmp_path / "b")
    assert str(exc.value).startswith(f"{cut} is not a readable GGUF file (")
    assert not (tmp_path / "b").exists()
