"""Language-model policies: observation -> prompt -> completion -> tool -> action.

The prompt is a system prompt (which lists every tool) plus the env's text
observation (``render_text()`` of a designed env, which names the tools
valid now), rendered through the tokenizer's chat template. The completion
is parsed into a tool name by :func:`parse_tool`; output naming no tool maps
to the fallback (``expert``: the env's expert action where it has one,
``rule``: a valid tool from ``action_masks()``, ``noop``: a fixed action)
and is counted.

Rule-based policies (:class:`RulePolicy`, :class:`ExpertPolicy`) share the
:meth:`act` interface, so rollouts can be collected without a model (the
noisy expert's traces warm-start a model with SFT).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_SYSTEM_PROMPT = (
    "You are an agent that completes a task by calling one tool per step. "
    "Tools: {tools}. Reply with the name of exactly one tool."
)
FALLBACKS = ("expert", "rule", "noop")


# ------------------------------------------------------------------ env views
def unwrap(env: Any) -> Any:
    return getattr(env, "unwrapped", env)


def env_tools(env: Any) -> list[str]:
    """Tool names of an env, index = action (``action_<i>`` when unnamed)."""
    u = unwrap(env)
    model = getattr(u, "model", None)
    names = getattr(model, "tool_names", None)
    if names:
        return list(names)
    n = int(getattr(env.action_space, "n", 0))
    return [f"action_{i}" for i in range(n)]


def env_mask(env: Any) -> np.ndarray:
    u = unwrap(env)
    if hasattr(u, "action_masks"):
        return np.asarray(u.action_masks(), dtype=bool)
    return np.ones(len(env_tools(env)), dtype=bool)


def env_text(env: Any, obs: Any = None) -> str:
    """The text observation for a language model."""
    u = unwrap(env)
    if hasattr(u, "render_text"):
        return str(u.render_text())
    tools = env_tools(env)
    return f"Observation: {np.asarray(obs).round(3).tolist()}\nTools: " + ", ".join(
        tools
    )


def env_state(env: Any) -> dict[str, Any] | None:
    u = unwrap(env)
    return u.get_state() if hasattr(u, "get_state") else None


# ------------------------------------------------------------------- parsing
_JSON_RE = re.compile(r"\{[^{}]*\}")
_TOOL_KV_RE = re.compile(
    r"(?:tool|action|call)\s*[:=]\s*[\"'`]?([A-Za-z0-9_.\-]+)", re.IGNORECASE
)


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def parse_tool(text: str, tools: list[str]) -> str | None:
    """The tool named by a model's answer, or None.

    Tried in order: the whole answer is a tool name (exact, then ignoring case
    and punctuation); a JSON object with ``tool``/``name``/``action``; a
    ``tool: X`` form; the first tool mentioned anywhere (case-insensitive,
    whole words, longer names first when two start at the same place).
    """
    if not text or not tools:
        return None
    stripped = text.strip().strip("`'\".").strip()
    if stripped in tools:
        return stripped
    by_norm = {_norm(t): t for t in tools}
    if _norm(stripped) in by_norm:
        return by_norm[_norm(stripped)]
    for blob in _JSON_RE.findall(text):
        try:
            data = json.loads(blob)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            for key in ("tool", "name", "action", "tool_name"):
                value = data.get(key)
                if isinstance(value, str) and _norm(value) in by_norm:
                    return by_norm[_norm(value)]
    m = _TOOL_KV_RE.search(text)
    if m and _norm(m.group(1)) in by_norm:
        return by_norm[_norm(m.group(1))]
    lowered = text.lower()
    best: tuple[int, int, str] | None = None
    for tool in tools:
        pattern = r"(?<![A-Za-z0-9_])" + re.escape(tool.lower()) + r"(?![A-Za-z0-9_])"
        hit = re.search(pattern, lowered)
        if hit and (best is None or (hit.start(), -len(tool)) < best[:2]):
            best = (hit.start(), -len(tool), tool)
    return None if best is None else best[2]


def format_ok(text: str, tools: list[str]) -> bool:
    """True when the answer is only a tool (bare, ``tool: X`` or JSON)."""
    s = text.strip().strip("`").strip()
    if s in tools:
        return True
    try:
        data = json.loads(s)
        if isinstance(data, dict) and data.get("tool") in tools:
            return True
    except json.JSONDecodeError:
        pass
    m = re.fullmatch(r"(?:tool|action)\s*:\s*([A-Za-z0-9_.\-]+)", s, re.IGNORECASE)
    return bool(m and m.group(1) in tools)


# ------------------------------------------------------------------ prompts
def build_messages(
    observation_text: str, tools: list[str], system_prompt: str | None = None
) -> list[dict[str, str]]:
    """Chat messages for one decision."""
    system = (system_prompt or DEFAULT_SYSTEM_PROMPT).replace(
        "{tools}", ", ".join(tools)
    )
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": observation_text},
    ]


@dataclass
class Decision:
    """One step's choice, with everything a trace records."""

    messages: list[dict[str, str]]
    completion: str
    tool: str | None
    """The tool parsed from the completion (None when none was named)."""
    action: int
    """The action taken (the fallback's when ``tool`` is None)."""
    parsed: bool
    """True when the completion named a tool."""
    fallback: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def fallback_action(
    env: Any, kind: str, rng: np.random.Generator, noop_action: int = 0
) -> int:
    """``expert``: the env's expert action (a random valid tool where it
    has none); ``rule``: a random valid tool from the mask; ``noop``:
    ``noop_action``."""
    if kind == "noop":
        return int(noop_action)
    if kind == "expert" and has_expert(env):
        return expert_action(env)
    valid = np.flatnonzero(env_mask(env))
    if len(valid) == 0:
        return int(noop_action)
    return int(rng.choice(valid))


# ------------------------------------------------------------- rule policies
class RulePolicy:
    """A valid tool chosen at random from ``action_masks()``."""

    def __init__(self, seed: int = 0, system_prompt: str | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self.system_prompt = system_prompt

    def choose(self, env: Any) -> int:
        return fallback_action(env, "rule", self.rng)

    def act(self, envs: list[Any]) -> list[Decision]:
        out = []
        for env in envs:
            tools = env_tools(env)
            a = self.choose(env)
            out.append(
                Decision(
                    messages=build_messages(env_text(env), tools, self.system_prompt),
                    completion=tools[a],
                    tool=tools[a],
                    action=a,
                    parsed=True,
                )
            )
        return out


def has_expert(env: Any) -> bool:
    """True for envs :func:`expert_action` plans in (designed workflows)."""
    return hasattr(getattr(unwrap(env), "model", None), "outcomes")


def expert_action(env: Any) -> int:
    """The valid tool with the fewest expected steps to the goal (value
    iteration on a workflow env's tables); a random-free rule for other envs:
    the first valid tool."""
    u = unwrap(env)
    model = getattr(u, "model", None)
    if model is None or not hasattr(model, "outcomes"):
        return int(np.flatnonzero(env_mask(env))[0])
    target = getattr(u, "_target", -1)
    status = int(getattr(u, "_status", 0))
    goal = np.zeros(model.n_statuses, dtype=bool)
    if target is not None and target >= 0:
        goal[target] = True
    else:
        goal[:] = model.success
    big = 1e6
    value = np.where(goal, 0.0, big)
    q = np.full(model.n_tools, big)
    for _ in range(4 * model.n_statuses + 4):
        new = value.copy()
        for s in range(model.n_statuses):
            if goal[s] or model.terminal[s]:
                continue
            best = big
            for a in range(model.n_tools):
                if not model.valid[s, a]:
                    continue
                outs = model.outcomes[s][a]
                exp = sum(o.probability * value[o.to] for o in outs)
                best = min(best, 1.0 + exp)
            new[s] = best
        if np.allclose(new, value):
            break
        value = new
    for a in range(model.n_tools):
        if model.valid[status, a]:
            q[a] = 1.0 + sum(
                o.probability * value[o.to] for o in model.outcomes[status][a]
            )
    if not np.isfinite(q).any() or q.min() >= big:
        return int(np.flatnonzero(env_mask(env))[0])
    return int(np.argmin(q))


class ExpertPolicy(RulePolicy):
    """The shortest-path tool, replaced by a random tool with probability
    ``noise`` (valid or not): the noisy demonstrations for warm starts."""

    def __init__(
        self, noise: float = 0.0, seed: int = 0, system_prompt: str | None = None
    ) -> None:
        super().__init__(seed, system_prompt)
        self.noise = float(noise)

    def choose(self, env: Any) -> int:
        if self.noise > 0 and self.rng.random() < self.noise:
            return int(self.rng.integers(len(env_tools(env))))
        return expert_action(env)


# ------------------------------------------------------------- the LM policy
@dataclass
class GenerationSettings:
    max_new_tokens: int = 16
    """Tokens generated per decision."""
    greedy: bool = True
    """Greedy decoding; False samples with ``temperature`` and ``top_p``."""
    temperature: float = 1.0
    top_p: float = 1.0
    batch_size: int = 16
    """Prompts generated together (one per env)."""


class LLMPolicy:
    """A causal LM choosing tools; ``act`` decides for many envs at once."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        system_prompt: str | None = None,
        generation: GenerationSettings | None = None,
        fallback: str = "rule",
        noop_action: int = 0,
        seed: int = 0,
    ) -> None:
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback must be one of {FALLBACKS}, not {fallback!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        self.gen = generation or GenerationSettings()
        self.fallback = fallback
        self.noop_action = noop_action
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.invalid_outputs = 0
        self.decisions = 0
        self.generated_tokens = 0
        self.generation_seconds = 0.0
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token

    @classmethod
    def from_pretrained(
        cls, ref: str, device: str | None = "auto", **kwargs: Any
    ) -> LLMPolicy:
        """Load ``ref`` (a model or adapter folder) for generation; ``"auto"``
        puts it on the first GPU in half precision when one is present."""
        dtype = "float32"
        if device == "auto":
            device, dtype = generation_device()
        model, tokenizer = load_model(ref, dtype=dtype, device=device)
        return cls(model, tokenizer, **kwargs)

    def render(self, messages: list[dict[str, str]]) -> str:
        return str(
            self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
        )

    def generate(self, prompts: list[str]) -> tuple[list[str], list[int], list[int]]:
        """Completions (and prompt/completion token counts) for rendered prompts."""
        import time

        import torch

        tok = self.tokenizer
        out_text: list[str] = []
        p_lens: list[int] = []
        c_lens: list[int] = []
        old_side = tok.padding_side
        tok.padding_side = "left"
        t0 = time.perf_counter()
        try:
            for i in range(0, len(prompts), max(1, self.gen.batch_size)):
                chunk = prompts[i : i + self.gen.batch_size]
                enc = tok(
                    chunk, return_tensors="pt", padding=True, add_special_tokens=False
                )
                enc = {k: v.to(self.model.device) for k, v in enc.items()}
                kwargs: dict[str, Any] = {
                    "max_new_tokens": self.gen.max_new_tokens,
                    "pad_token_id": tok.pad_token_id,
                    "eos_token_id": tok.eos_token_id,
                }
                if self.gen.greedy:
                    kwargs["do_sample"] = False
                else:
                    kwargs.update(
                        do_sample=True,
                        temperature=self.gen.temperature,
                        top_p=self.gen.top_p,
                    )
                with torch.no_grad():
                    seq = self.model.generate(**enc, **kwargs)
                width = enc["input_ids"].shape[1]
                for row, mask in zip(seq, enc["attention_mask"], strict=True):
                    new = row[width:]
                    # count up to (and including) the first eos
                    ids = new.tolist()
                    if tok.eos_token_id in ids:
                        ids = ids[: ids.index(tok.eos_token_id) + 1]
                    ids = [
                        t for t in ids if t != tok.pad_token_id or t == tok.eos_token_id
                    ]
                    out_text.append(tok.decode(ids, skip_special_tokens=True))
                    p_lens.append(int(mask.sum()))
                    c_lens.append(len(ids))
        finally:
            tok.padding_side = old_side
        self.generation_seconds += time.perf_counter() - t0
        self.generated_tokens += sum(c_lens)
        return out_text, p_lens, c_lens

    def act(self, envs: list[Any]) -> list[Decision]:
        msgs = [
            build_messages(env_text(e), env_tools(e), self.system_prompt) for e in envs
        ]
        texts, p_lens, c_lens = self.generate([self.render(m) for m in msgs])
        out = []
        for env, m, text, pl, cl in zip(envs, msgs, texts, p_lens, c_lens, strict=True):
            tools = env_tools(env)
            tool = parse_tool(text, tools)
            self.decisions += 1
            if tool is None:
                self.invalid_outputs += 1
                action = fallback_action(env, self.fallback, self.rng, self.noop_action)
            else:
                action = tools.index(tool)
            out.append(
                Decision(
                    messages=m,
                    completion=text,
                    tool=tool,
                    action=action,
                    parsed=tool is not None,
                    fallback=tool is None,
                    prompt_tokens=pl,
                    completion_tokens=cl,
                )
            )
        return out

    @property
    def tokens_per_second(self) -> float:
        if self.generation_seconds <= 0:
            return 0.0
        return self.generated_tokens / self.generation_seconds


def generation_device() -> tuple[str, str]:
    """(device, dtype) for generation on this machine: a CUDA GPU in bf16
    (fp16 where bf16 is missing), Apple's MPS in fp16, else the CPU in fp32
    (half precision is slow or unsupported on CPUs)."""
    import torch

    if torch.cuda.is_available():
        return "cuda", "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps", "float16"
    return "cpu", "float32"


def load_model(
    ref: str, dtype: str = "float32", device: str | None = None
) -> tuple[Any, Any]:
    """Model and tokenizer for a full HF folder or a LoRA adapter folder
    (the adapter is merged in memory for fast generation)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.llm.base import inspect_model

    info = inspect_model(ref)
    torch_dtype = getattr(torch, dtype)
    if info.kind == "lora-adapter":
        from peft import PeftModel

        if info.base is None:
            raise ValueError(f"The adapter {info.path} does not name its base model.")
        base = AutoModelForCausalLM.from_pretrained(info.base, dtype=torch_dtype)
        model = PeftModel.from_pretrained(base, info.path).merge_and_unload()
        has_tok = (Path(info.path) / "tokenizer_config.json").is_file()
        tok_src = info.path if has_tok else info.base
    else:
        model = AutoModelForCausalLM.from_pretrained(info.path, dtype=torch_dtype)
        tok_src = info.path
    tokenizer = AutoTokenizer.from_pretrained(tok_src)
    if device:
        model.to(device)
    model.eval()
    return model, tokenizer
