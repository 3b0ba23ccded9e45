"""Chat with a local Hugging Face model in a worker process, never in the
supervisor.

``ChatWorker`` (used by ``engine serve``) starts ``python -m
engine.llm.chat_worker`` the first time a local model is asked, and keeps it,
with the last model loaded, for the next turns. They talk JSON Lines: a
request ``{"folder", "messages", "max_new_tokens"}`` gets ``{"reply": text}``
or ``{"error": sentence}``. A worker that dies (out of memory, a crash) costs
one turn an error naming its exit; the next turn starts a fresh one.

This module imports nothing heavy at the top: torch and transformers load in
the worker only.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from engine.errors import EngineError

CHAT_TIMEOUT_S = 600.0
"""Longest a turn may take (loading the model included)."""


class ChatWorker:
    """The supervisor's handle on the chat worker process (thread-safe: one
    turn at a time)."""

    def __init__(self, timeout_s: float = CHAT_TIMEOUT_S) -> None:
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def _start(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            # stderr is inherited: the worker's warnings reach the log panel.
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "engine.llm.chat_worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                encoding="utf-8",
                bufsize=1,
            )
        return self._proc

    def chat(
        self, folder: Path, messages: list[dict[str, str]], max_new_tokens: int
    ) -> str:
        request = {
            "folder": str(folder),
            "messages": messages,
            "max_new_tokens": max_new_tokens,
        }
        with self._lock:
            proc = self._start()
            assert proc.stdin is not None and proc.stdout is not None
            # A turn that outlives the deadline kills the worker, which ends
            # the read below.
            timed_out = threading.Event()

            def kill() -> None:
                timed_out.set()
                proc.kill()

            timer = threading.Timer(self._timeout_s, kill)
            timer.start()
            try:
                proc.stdin.write(json.dumps(request) + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except OSError:
                line = ""
            finally:
                timer.cancel()
            if not line:
                code = proc.wait()
                self._proc = None
                if timed_out.is_set():
                    why = f"took longer than {self._timeout_s:.0f} s and was stopped"
                else:
                    why = f"stopped with exit code {code} (out of memory?)"
                raise EngineError(
                    f"The chat worker {why}; the next message starts a new one."
                )
        try:
            answer: dict[str, Any] = json.loads(line)
        except ValueError:
            raise EngineError("The chat worker sent an unreadable answer.") from None
        if "error" in answer:
            raise EngineError(str(answer["error"]))
        return str(answer.get("reply", ""))

    def close(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()  # the worker ends when its input does
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------ the worker
def generate(
    folder: Path,
    messages: list[dict[str, str]],
    max_new_tokens: int,
    cache: dict[str, Any],
) -> str:
    """Greedy completion of ``messages`` by the model (or LoRA adapter, merged
    in memory) in ``folder``; ``cache`` keeps the last model loaded."""
    import torch

    from engine.llm.policy import load_model

    if (
        not (folder / "config.json").is_file()
        and not (folder / "adapter_config.json").is_file()
    ):
        raise EngineError(
            f"{folder} holds neither a model (config.json) nor a LoRA adapter "
            "(adapter_config.json) to chat with."
        )
    key = str(folder.resolve())
    if key not in cache:
        cache.clear()  # keep one model in memory at most
        try:
            model, tok = load_model(key)
        except ValueError as exc:
            raise EngineError(str(exc)) from None
        cache[key] = (tok, model)
    tok, model = cache[key]
    if getattr(tok, "chat_template", None):
        prompt = tok.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
    else:
        prompt = (
            "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
        )
    inputs = tok(prompt, return_tensors="pt")
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    with torch.no_grad():
        out = model.generate(
            **inputs, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad
        )
    new = out[0, inputs["input_ids"].shape[1] :]
    return str(tok.decode(new, skip_special_tokens=True)).strip()


def serve(lines: TextIO, out: TextIO) -> None:
    cache: dict[str, Any] = {}
    for line in lines:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            answer: dict[str, Any] = {
                "reply": generate(
                    Path(req["folder"]),
                    list(req["messages"]),
                    int(req["max_new_tokens"]),
                    cache,
                )
            }
        except EngineError as exc:
            answer = {"error": str(exc)}
        except Exception as exc:  # a model that fails to load or generate
            answer = {"error": f"The model could not answer: {exc}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    from engine.jobs.context import private_event_stream

    serve(sys.stdin, private_event_stream())
