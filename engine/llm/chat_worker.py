"""Chat with a local Hugging Face model in a worker process, never in the
supervisor.

:class:`ChatWorker` (used by ``engine serve`` and ``serve-http``) keeps a
:class:`engine.line_worker.LineWorker` running ``python -m
engine.llm.chat_worker`` with the last model loaded, for the next turns: a
request ``{"folder", "messages", "max_new_tokens"}`` gets ``{"reply": text}``
or ``{"error": sentence}``. A worker idle for :data:`CHAT_IDLE_S` is closed,
so the memory its model holds comes back.

This module imports nothing heavy at the top: torch and transformers load in
the worker only.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, TextIO

from engine import line_worker
from engine.errors import EngineError

CHAT_TIMEOUT_S = 600.0
"""Longest a turn may take (loading the model included)."""
CHAT_IDLE_S = 600.0
"""A worker left without a turn this long is closed (its model unloaded)."""


class ChatWorker:
    """The supervisor's handle on the chat worker process (thread-safe: one
    turn at a time)."""

    def __init__(
        self, timeout_s: float = CHAT_TIMEOUT_S, idle_s: float | None = CHAT_IDLE_S
    ) -> None:
        self._worker = line_worker.LineWorker(
            "engine.llm.chat_worker",
            [],
            label="chat worker",
            timeout_s=timeout_s,
            idle_s=idle_s,
            lost_hint="out of memory?",
        )

    @property
    def pid(self) -> int | None:
        return self._worker.pid

    def chat(
        self, folder: Path, messages: list[dict[str, str]], max_new_tokens: int
    ) -> str:
        return str(self.chat_turn(folder, messages, max_new_tokens)["reply"])

    def chat_turn(
        self, folder: Path, messages: list[dict[str, str]], max_new_tokens: int
    ) -> dict[str, Any]:
        """The answer with what it cost: ``{"reply", "tokens", "seconds",
        "load_seconds"}`` (``load_seconds`` 0 when the model was loaded)."""
        return self._worker.request(
            {
                "folder": str(folder),
                "messages": messages,
                "max_new_tokens": max_new_tokens,
            }
        )

    def close(self) -> None:
        self._worker.close()


# ------------------------------------------------------------ the worker
def generate(
    folder: Path,
    messages: list[dict[str, str]],
    max_new_tokens: int,
    cache: dict[str, Any],
) -> dict[str, Any]:
    """Greedy completion of ``messages`` by the model (or LoRA adapter, merged
    in memory) in ``folder``, with its token count and the seconds it and
    loading the model took; ``cache`` keeps the last model loaded."""
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
    started = time.perf_counter()
    if key not in cache:
        cache.clear()  # keep one model in memory at most
        try:
            model, tok = load_model(key)
        except ValueError as exc:
            raise EngineError(str(exc)) from None
        cache[key] = (tok, model)
    tok, model = cache[key]
    loaded = time.perf_counter()
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
    return {
        "reply": str(tok.decode(new, skip_special_tokens=True)).strip(),
        "tokens": int(new.shape[0]),
        "seconds": time.perf_counter() - loaded,
        "load_seconds": loaded - started,
    }


def serve(lines: TextIO, out: TextIO) -> None:
    cache: dict[str, Any] = {}
    line_worker.serve(
        lines,
        out,
        lambda req: generate(
            Path(req["folder"]),
            list(req["messages"]),
            int(req["max_new_tokens"]),
            cache,
        ),
        failure="The model could not answer",
    )


if __name__ == "__main__":
    from engine.jobs.context import private_event_stream

    serve(sys.stdin, private_event_stream())
