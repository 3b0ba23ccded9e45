"""Helpers of the Models workspace tests: a fake Ollama server following the
documented REST API, a real SB3 zip, and a project with a model lineage."""

from __future__ import annotations

import atexit
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

MAKE_PPO = """
import sys
import tempfile
from stable_baselines3 import PPO
model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, n_epochs=1,
            seed=0, device="cpu")
model.learn(64)
model.save(sys.argv[1])
"""


_PPO_ZIP: list[Path] = []


def make_ppo_zip(path: Path) -> Path:
    """Train PPO on CartPole for 64 steps (in a subprocess, once per test
    session: cached in a temporary folder removed when the process exits) and
    save it at ``path``."""
    if not _PPO_ZIP or not _PPO_ZIP[0].is_file():
        folder = Path(tempfile.mkdtemp(prefix="rl-studio-ppo-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        cached = folder / "ppo.zip"
        subprocess.run(
            [sys.executable, "-c", MAKE_PPO, str(cached)],
            check=True,
            cwd=ROOT,
            timeout=120,
        )
        _PPO_ZIP[:] = [cached]
    shutil.copyfile(_PPO_ZIP[0], path)
    return path


class FakeOllama:
    """``/api/version``, ``/api/tags``, ``/api/delete``, ``/api/chat``,
    ``/api/show``, ``/api/generate``, blobs and a streamed ``/api/create``,
    on 127.0.0.1 in a thread. Not Ollama itself."""

    def __init__(self, version: str = "0.6.2") -> None:
        self.version = version
        self.models: dict[str, dict[str, Any]] = {}
        self.blobs: set[str] = set()
        self.requests: list[tuple[str, str, Any]] = []
        self.fail_create: str | None = None
        """An error ``/api/create`` streams after its first status line."""
        self.chat_reply: Callable[[dict[str, Any]], str] | None = None
        """The assistant's answer to a ``/api/chat`` body (default: an echo
        of the last message, for a known model)."""
        self.chat_status = 200
        """The status ``/api/chat`` answers with (500: Ollama's error body)."""
        self.chat_hold = threading.Event()
        """Set by default; cleared, ``/api/chat`` answers only once it is set
        again (a server that takes too long)."""
        self.chat_hold.set()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _body(self) -> Any:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                if self.headers.get("Content-Type") == "application/json" and raw:
                    return json.loads(raw)
                return raw

            def _send(self, code: int, obj: Any = None) -> None:
                data = b"" if obj is None else json.dumps(obj).encode()
                # a client that gave up (a judge past its timeout) is gone
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

            def do_GET(self) -> None:
                fake.requests.append(("GET", self.path, None))
                if self.path == "/api/version":
                    self._send(200, {"version": fake.version})
                elif self.path == "/api/tags":
                    self._send(200, {"models": list(fake.models.values())})
                else:
                    self._send(404, {"error": "not found"})

            def do_HEAD(self) -> None:
                fake.requests.append(("HEAD", self.path, None))
                digest = self.path.rsplit("/", 1)[-1]
                self.send_response(200 if digest in fake.blobs else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_DELETE(self) -> None:
                body = self._body()
                fake.requests.append(("DELETE", self.path, body))
                name = body.get("model") or body.get("name")
                if fake.models.pop(name, None) is None:
                    self._send(404, {"error": f"model '{name}' not found"})
                else:
                    self._send(200)

            def do_POST(self) -> None:
                body = self._body()
                fake.requests.append(("POST", self.path, body))
                if self.path.startswith("/api/blobs/"):
                    fake.blobs.add(self.path.rsplit("/", 1)[-1])
                    self._send(201)
                elif self.path == "/api/create":
                    name = body["model"]
                    if fake.fail_create:
                        # Ollama reports a failed create inside the stream.
                        lines = [
                            {"status": "parsing GGUF"},
                            {"error": fake.fail_create},
                        ]
                    else:
                        fake.models[name + ":latest"] = fake_entry(name + ":latest")
                        lines = [{"status": "creating model"}, {"status": "success"}]
                    data = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-ndjson")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                elif self.path == "/api/show":
                    self._send(200, {"modelfile": "FROM x", "details": {}})
                elif self.path == "/api/generate":
                    self._send(200, {"response": "hi", "done": True})
                elif self.path == "/api/chat":
                    name = body["model"]
                    fake.chat_hold.wait(timeout=600)
                    if fake.chat_status != 200:
                        self._send(fake.chat_status, {"error": "model runner crashed"})
                        return
                    if name not in fake.models and name + ":latest" not in fake.models:
                        self._send(404, {"error": f"model '{name}' not found"})
                        return
                    if fake.chat_reply is not None:
                        content = fake.chat_reply(body)
                        self._send(200, {"message": {"content": content}, "done": True})
                        return
                    last = body["messages"][-1]["content"]
                    self._send(
                        200,
                        {
                            "model": name,
                            "message": {
                                "role": "assistant",
                                "content": f"echo: {last}",
                            },
                            "done": True,
                            # Ollama's counts: tokens, and durations in ns
                            "eval_count": 3,
                            "eval_duration": 500_000_000,
                            "load_duration": 1_200_000_000,
                        },
                    )
                else:
                    self._send(404, {"error": "not found"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeOllama:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.chat_hold.set()
        self.server.shutdown()
        self.server.server_close()


def fake_entry(name: str, size: int = 397_000_000) -> dict[str, Any]:
    return {
        "name": name,
        "model": name,
        "modified_at": "2026-11-20T10:11:12.123456789+01:00",
        "size": size,
        "digest": "a" * 64,
        "details": {
            "format": "gguf",
            "family": "qwen2",
            "parameter_size": "494M",
            "quantization_level": "Q8_0",
        },
    }


def write_trace_file(path: Path) -> Path:
    """Two episodes of a language-model policy, and one broken line."""
    episodes = []
    for e in range(2):
        steps = [
            {
                "t": 0,
                "messages": [
                    {"role": "system", "content": "You resolve Jira issues."},
                    {"role": "user", "content": "Status: To Do. Tools: start, close"},
                ],
                "completion": "start",
                "tool": "start",
                "action": 0,
                "parsed": True,
                "valid": True,
                "reward": 0.5,
                "reward_breakdown": {"status": 0.51, "step": -0.01},
            },
            {
                "t": 1,
                "messages": [{"role": "user", "content": "Status: In Progress."}],
                "completion": "I would like to dance",
                "tool": None,
                "action": 1,
                "parsed": False,
                "valid": e == 0,
                "reward": 1.0 if e == 0 else -0.5,
                "reward_breakdown": {"invalid": 0.0 if e == 0 else -0.5},
            },
        ]
        episodes.append(
            {
                "episode": e,
                "env": "envs/jira_status_update.env.json",
                "task_id": f"RLHUB-{101 + e}",
                "policy": "llm:tiny",
                "steps": steps,
                "return": sum(s["reward"] for s in steps),
                "length": 2,
                "success": e == 0,
                "truncated": False,
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(ep) + "\n" for ep in episodes) + "{broken\n")
    return path


REPORT = {
    "env": "envs/jira_status_update.env.json",
    "episodes": 20,
    "models": {"before": "/models/base", "after": "/models/tuned"},
    "results": {
        "before": {
            "success_rate": 0.25,
            "mean_return": 0.4,
            "invalid_action_rate": 0.3,
            "unparsed_rate": 0.1,
        },
        "after": {
            "success_rate": 0.75,
            "mean_return": 1.2,
            "invalid_action_rate": 0.05,
            "unparsed_rate": 0.0,
        },
    },
}


def fill_run_form(qtbot, dialog: Any, **values: str) -> None:  # type: ignore[no-untyped-def]
    """Wait for a run dialog's form (the engine's), then set ``values``: a
    choice is picked (and the form the engine sends for it awaited), other
    fields typed."""
    from PySide6.QtWidgets import QComboBox, QLineEdit

    qtbot.waitUntil(dialog.is_loaded, timeout=30_000)
    for name, value in values.items():
        editor = dialog.form.editor(name)
        if isinstance(editor, QComboBox) and not editor.isEditable():
            editor.setCurrentIndex(editor.findData(value))
            if name in dialog.shaping_fields:
                qtbot.waitUntil(
                    lambda n=name, e=editor: dialog.form.editor(n) is not e,
                    timeout=30_000,
                )
            continue
        line = editor if isinstance(editor, QLineEdit) else editor.property("line_edit")
        assert isinstance(line, QLineEdit), name
        line.setText(value)


def submit_run_form(qtbot, dialog: Any) -> str:  # type: ignore[no-untyped-def]
    """Click OK and wait until the engine started the run; its id."""
    from PySide6.QtWidgets import QDialogButtonBox

    with qtbot.waitSignal(dialog.run_started, timeout=30_000) as started:
        dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    return str(started.args[0])
