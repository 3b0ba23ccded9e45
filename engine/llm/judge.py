"""An LLM judge as a GRPO reward: RULER-style relative scores for a group.

GRPO samples a group of completions per prompt; the ``judge`` reward shows a
judge model the prompt, the user's rubric and the group's distinct
completions (numbered), and asks for a score in [0, 1] per completion, each
relative to the others (RULER: ranking a group is easier and steadier than
grading one answer alone). The judge is an Ollama model over its HTTP API
(``backend="ollama"``) or a project model loaded in the job's own process
(``backend="project"``: a local folder, a LoRA adapter or a cached hub id).

Answers are cached by a hash of what was asked (backend, model, rubric,
prompt, completions), so a repeated group costs nothing. A judge that fails
(unreachable, an HTTP error, past ``timeout_s``) or answers garbage (no JSON,
the wrong number of scores, a score outside [0, 1]) gives every completion of
that group the ``fallback`` score and one warning sentence in the run log;
training goes on.

:class:`JudgeConfig` is the one declaration of the judge's settings; the
reward, the flow node and validation derive from it. This module's top level
is stdlib-only so the node catalog can import it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from engine.contract import DEFAULT_OLLAMA_HOST
from engine.errors import ConfigError, EngineError
from engine.settings import build, setting

BACKENDS = ("ollama", "project")
CACHE_GROUPS = 4096
"""Judged groups kept in memory (least recently used dropped first)."""


@dataclass(frozen=True)
class JudgeConfig:
    """Settings of the ``judge`` reward (its weight is the reward's own)."""

    rubric: str = setting("", group="Judge", label="Rubric")
    """What a good answer does, in the user's words; the judge scores each
    completion of a group against it, relative to the others."""
    backend: str = setting("ollama", choices=BACKENDS, group="Judge")
    """``ollama``: a model of an Ollama server; ``project``: a model (folder,
    LoRA adapter or cached hub id) loaded in the training process."""
    model: str = setting("", group="Judge", label="Judge model", picker="base_model")
    """The Ollama model name, or the project model's folder or hub id."""
    host: str = setting(DEFAULT_OLLAMA_HOST, group="Judge", label="Ollama address")
    """The Ollama server's address (``backend="ollama"`` only)."""
    timeout_s: float = setting(
        60.0, min=0.1, max=3600, unit="s", group="Judge", label="Timeout"
    )
    """Longest wait for one group's verdict; past it the group gets the
    fallback score."""
    fallback: float = setting(0.5, min=0, max=1, group="Judge")
    """Score of every completion of a group the judge failed to score."""
    max_new_tokens: int = setting(
        256, min=16, max=8192, unit="tokens", group="Judge", label="Verdict length"
    )
    """Longest verdict the judge may write (a score and a reason per
    completion)."""


SYSTEM_PROMPT = (
    "You are a careful judge. You compare several answers to the same task "
    "against a rubric and score each from 0 (worst) to 1 (best), relative to "
    "the others: the best answer should score near 1 and clearly worse ones "
    "lower. Reply with JSON only, in the form "
    '{"scores": [{"id": 1, "score": 0.8}, {"id": 2, "score": 0.1}]}, '
    "one entry per answer."
)


def check_config(params: Mapping[str, Any], path: str = "judge") -> JudgeConfig:
    """The judge's settings with defaults filled, or a ConfigError naming the
    field (``path.field``) in one sentence."""
    try:
        cfg = build(JudgeConfig, params, path)
    except ConfigError as exc:
        raise ConfigError(f"{path}.{exc.field}", str(exc)) from None
    if not cfg.rubric.strip():
        raise ConfigError(
            f"{path}.rubric", "The judge needs a rubric: say what a good answer does."
        )
    if not cfg.model.strip():
        raise ConfigError(
            f"{path}.model",
            "The judge needs a model: an Ollama model name or a project model.",
        )
    if cfg.backend == "ollama":
        from engine.ollama import check_host

        try:
            return replace(cfg, host=check_host(cfg.host))
        except EngineError as exc:
            raise ConfigError(f"{path}.host", str(exc)) from None
    from engine.llm.base import resolve_chat_model

    # Refuse a missing judge at set-up, not at the first group.
    return replace(cfg, model=str(resolve_chat_model(cfg.model, f"{path}.model")))


def message_text(prompt: Any) -> str:
    """A TRL prompt (a string or a message list) as plain text."""
    if isinstance(prompt, list):
        return "\n".join(
            f"{m.get('role', 'user')}: {m.get('content', '')}"
            for m in prompt
            if isinstance(m, dict)
        )
    return str(prompt)


def judge_messages(
    rubric: str, prompt: str, answers: list[str]
) -> list[dict[str, str]]:
    """The chat a judge is asked: the rubric, the task and numbered answers."""
    numbered = "\n\n".join(
        f"Answer {i}:\n{text}" for i, text in enumerate(answers, start=1)
    )
    user = (
        f"Rubric:\n{rubric.strip()}\n\nTask given to every answer:\n{prompt}\n\n"
        f"{numbered}\n\nScore all {len(answers)} answers."
    )
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ]


_JSON_START = re.compile(r"[\[{]")


def _first_json(text: str) -> Any:
    decoder = json.JSONDecoder()
    for match in _JSON_START.finditer(text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except (ValueError, RecursionError):
            continue
        return value
    raise ValueError("the verdict holds no JSON")


def _score(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"a score is {value!r}, not a number")
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"a score is {value!r}, outside 0 to 1")
    return float(value)


def parse_verdict(text: str, n: int) -> list[float]:
    """The ``n`` scores of a verdict, in answer order; ValueError (saying
    what is wrong) for anything else.

    Takes the first JSON value in the text (models like to wrap it in prose
    or a code fence): ``{"scores": [...]}`` or a bare list, of numbers in
    order or of ``{"id": i, "score": s}`` objects (ids 1..n, each once).
    """
    data = _first_json(text)
    if isinstance(data, dict):
        data = data.get("scores")
    if not isinstance(data, list):
        raise ValueError("the verdict has no list of scores")
    if len(data) != n:
        raise ValueError(f"the verdict has {len(data)} scores for {n} answers")
    if all(isinstance(item, dict) for item in data):
        scores: dict[int, float] = {}
        for item in data:
            ident = item.get("id")
            if isinstance(ident, bool) or not isinstance(ident, int):
                raise ValueError(f"a score's id is {ident!r}, not a whole number")
            if not 1 <= ident <= n or ident in scores:
                raise ValueError(f"the verdict's ids are not 1 to {n}, each once")
            scores[ident] = _score(item.get("score"))
        return [scores[i] for i in range(1, n + 1)]
    return [_score(item) for item in data]


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


def _warn(text: str) -> None:
    # The job's stderr is its run log (``JobContext.log`` prints there too).
    print(f"warning: {text}", file=sys.stderr, flush=True)


class Judge:
    """Scores groups of completions; see the module docstring.

    ``ask`` is the backend (messages, timeout in seconds -> the verdict
    text); built from the config when not given.
    """

    def __init__(
        self,
        config: JudgeConfig,
        ask: Callable[[list[dict[str, str]], float], str] | None = None,
        warn: Callable[[str], None] = _warn,
    ) -> None:
        self.config = config
        self.ask = ask or self._backend()
        self.warn = warn
        self.cache: OrderedDict[str, list[float]] = OrderedDict()
        self.calls = 0
        """Verdicts asked for (cache misses)."""
        self.failures = 0
        """Groups that got the fallback score."""
        self._warned: set[str] = set()

    def _backend(self) -> Callable[[list[dict[str, str]], float], str]:
        if self.config.backend == "ollama":
            return self._ask_ollama
        return ProjectJudge(self.config.model, self.config.max_new_tokens).ask

    def _ask_ollama(self, messages: list[dict[str, str]], timeout_s: float) -> str:
        from engine.ollama import OllamaClient

        # A client per verdict: its deadline bounds this verdict alone.
        client = OllamaClient(self.config.host, timeout=timeout_s, deadline_s=timeout_s)
        return client.chat(self.config.model, messages)

    def score_group(self, prompt: str, completions: list[str]) -> list[float]:
        """Scores in [0, 1] for the completions of one prompt (equal texts
        get equal scores: the judge sees each distinct text once)."""
        distinct = list(dict.fromkeys(completions))
        cfg = self.config
        key = _digest(cfg.backend, cfg.model, cfg.host, cfg.rubric, prompt, *distinct)
        scores = self.cache.get(key)
        if scores is not None:
            self.cache.move_to_end(key)
        elif len(distinct) == 1:
            # One distinct answer has nothing to be ranked against: the
            # middle of the range, without asking.
            scores = [0.5]
        else:
            scores = self._verdict(prompt, distinct)
            if scores is None:
                return [cfg.fallback] * len(completions)
            self.cache[key] = scores
            if len(self.cache) > CACHE_GROUPS:
                self.cache.popitem(last=False)
        by_text = dict(zip(distinct, scores, strict=True))
        return [by_text[c] for c in completions]

    def _verdict(self, prompt: str, answers: list[str]) -> list[float] | None:
        cfg = self.config
        messages = judge_messages(cfg.rubric, prompt, answers)
        self.calls += 1
        started = time.monotonic()
        try:
            text = self.ask(messages, cfg.timeout_s)
            if time.monotonic() - started > cfg.timeout_s:
                raise EngineError(
                    f"the judge took longer than the {cfg.timeout_s:g} s timeout"
                )
            return parse_verdict(text, len(answers))
        except ValueError as exc:
            reason = f"answered garbage ({exc})"
        except Exception as exc:  # any failure of the judge is the fallback
            reason = f"failed ({str(exc).rstrip('.') or type(exc).__name__})"
        self.failures += 1
        kind = reason.split(" (", 1)[0]
        if kind not in self._warned:
            # One sentence per kind of failure; the rest are counted.
            self._warned.add(kind)
            self.warn(
                f"The judge {cfg.model} {reason}; its group scored "
                f"{cfg.fallback:g} (the fallback), and later failures of this "
                "kind are counted without a warning."
            )
        return None


class ProjectJudge:
    """A project model as the judge, loaded once in this process, greedy,
    generation cut at the timeout."""

    def __init__(self, ref: str, max_new_tokens: int) -> None:
        self.ref = ref
        self.max_new_tokens = max_new_tokens
        self._loaded: tuple[Any, Any] | None = None

    def ask(self, messages: list[dict[str, str]], timeout_s: float) -> str:
        import torch

        from engine.llm.policy import generation_device, load_model

        if self._loaded is None:
            device, dtype = generation_device()
            self._loaded = load_model(self.ref, dtype=dtype, device=device)
        model, tok = self._loaded
        prompt = tok.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        inputs = tok(prompt, return_tensors="pt").to(model.device)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        with torch.no_grad():
            out = model.generate(
                **inputs,
                max_new_tokens=self.max_new_tokens,
                do_sample=False,
                pad_token_id=pad,
                max_time=timeout_s,
            )
        new = out[0, inputs["input_ids"].shape[1] :]
        return str(tok.decode(new, skip_special_tokens=True))
