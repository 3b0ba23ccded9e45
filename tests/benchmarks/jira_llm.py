"""What the language-model benchmarks share (``test_bench_llm``,
``test_bench_learned_reward``): the Jira env and its train/held-out issues, a
tiny Qwen2 model with a tokenizer trained on the env's texts, the product's
jobs run in-process, the SFT warm start both start GRPO from, and the
held-out measures (tool success on decisions, episode success)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.jobs.context import JobContext
from engine.jobs.registry import get_kind, validate_config

ROOT = Path(__file__).resolve().parents[2]
ENV = str(ROOT / "resources/examples/envs/jira_status_update.env.json")
HELD_OUT = [3, 7, 10, 13]
TRAIN_TASKS = [i for i in range(16) if i not in HELD_OUT]
SYSTEM = "Pick the next tool. Tools: {tools}. Reply with one tool name."
WIDTH = 128
COMMON = {
    "device": "cpu",
    "precision": "fp32",
    "gradient_checkpointing": False,
    "lora_rank": 16,
    "seed": 0,
    "save_steps": 0,
    "max_length": 256,
}
"""The ``llm.train`` settings of every SFT and GRPO run of the benchmarks."""


def tokenizer_texts() -> list[str]:
    """The tokenizer's corpus: the env's texts over many states."""
    from engine.llm.policy import ExpertPolicy, build_messages, env_text, env_tools
    from engine.llm.rollouts import make_env

    env = make_env(ENV)
    pol = ExpertPolicy(noise=0.5, seed=9)
    texts: list[str] = []
    for ep in range(60):
        env.reset(seed=ep)
        done = False
        while not done:
            msgs = build_messages(env_text(env), env_tools(env), SYSTEM)
            texts += [m["content"] for m in msgs]
            _, _, term, trunc, _ = env.step(pol.choose(env))
            done = term or trunc
    return texts + env_tools(env) * 20


def build_model(folder: Path, texts: list[str], seed: int = 0) -> Path:
    """A 2-layer Qwen2 with a BPE tokenizer trained on ``texts`` (ChatML)."""
    import torch
    import transformers
    from tiny_models import CHATML_TEMPLATE
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=900,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
        model_max_length=1024,
    )
    cfg = transformers.Qwen2Config(
        vocab_size=len(fast),
        hidden_size=WIDTH,
        intermediate_size=2 * WIDTH,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    torch.manual_seed(seed)
    model = transformers.Qwen2ForCausalLM(cfg)
    # LoRA ("all-linear") leaves the output head frozen: with the default
    # 0.02 init its logits stay nearly flat and sampled GRPO completions are
    # noise. Wider weights (as a pretrained model has) leave room to sharpen.
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed)
        for _name, p in model.named_parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


@dataclass(frozen=True)
class WarmStart:
    """The SFT warm start on noisy demonstrations of the training issues."""

    model: str
    """The merged SFT model's folder."""
    grpo_dataset: str
    """The GRPO dataset from the same demonstrations."""
    seconds: float
    """Wall time of the SFT run and its merge."""


def warm_start(root: Path, base: str) -> WarmStart:
    """Collect 300 noisy expert episodes of the training issues, make the
    SFT and GRPO datasets of them, and fine-tune ``base`` with SFT (merged)."""
    job(root, "llm.collect", {
        "env": ENV, "policy": "expert", "noise": 0.5, "episodes": 300,
        "tasks": TRAIN_TASKS, "system_prompt": SYSTEM, "seed": 1, "name": "noisy",
    })  # fmt: skip
    sft_ds = job(root, "llm.dataset", {
        "traces": "noisy.jsonl", "method": "sft", "seed": 0, "name": "sft"
    })["dataset"]  # fmt: skip
    grpo_ds = job(root, "llm.dataset", {
        "traces": "noisy.jsonl", "method": "grpo", "seed": 0, "name": "grpo"
    })["dataset"]  # fmt: skip
    t0 = time.perf_counter()
    sft = job(root, "llm.train", {
        **COMMON, "model": base, "method": "sft", "dataset": sft_ds,
        # long enough that the model's samples are mostly tool names,
        # short of imitating the noise-free expert (about 80 steps here)
        "max_steps": 36, "batch_size": 8, "learning_rate": 3e-3, "name": "sft",
    })  # fmt: skip
    model = job(
        root, "llm.merge", {"adapter": sft["models"][0]["file"], "name": "sft-merged"}
    )["models"][0]["file"]
    return WarmStart(model, grpo_ds, time.perf_counter() - t0)


def grpo_config(start: WarmStart, steps: int) -> dict[str, Any]:
    """The ``llm.train`` GRPO settings from the warm start (rewards left to
    the caller).

    Sampling at 1.0 from a warm start whose samples are mostly malformed (-1
    each) teaches one thing first: name *a* tool, any tool; the most frequent
    one (move_to_in_progress, sometimes worth +1.1) wins every group and the
    greedy policy collapses onto it within 10 steps (0.70 -> 0.34 with 4
    generations, lr 2e-3). At 0.5 with 8 generations the groups compare
    tools, and the reward's differences between them drive learning."""
    return {
        **COMMON,
        "model": start.model,
        "method": "grpo",
        "dataset": start.grpo_dataset,
        "max_steps": steps,
        "batch_size": 16,
        "num_generations": 8,
        "max_completion_length": 8,
        "learning_rate": 5e-4,
        "beta": 0.0,
        "temperature": 0.5,
    }


def job(root: Path, kind: str, config: dict[str, Any]) -> dict[str, Any]:
    cfg = validate_config(kind, config)
    run_id = f"{kind.replace('.', '-')}-{uuid.uuid4().hex[:6]}"
    run_dir = root / "runs" / run_id
    run_dir.mkdir(parents=True)
    ctx = JobContext(run_id, run_dir, kind, cfg)
    try:
        return get_kind(kind).entry(ctx)
    finally:
        ctx.close()


def held_out_states(n: int = 50) -> list[dict[str, Any]]:
    """``n`` decision states of held-out issues, from noisy expert episodes."""
    from engine.llm.policy import ExpertPolicy, env_state, env_tools, expert_action
    from engine.llm.rollouts import make_env

    env = make_env(ENV)
    pol = ExpertPolicy(noise=0.5, seed=123)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    ep = 0
    while len(out) < n and ep < 400:
        env.reset(seed=1000 + ep, options={"task": HELD_OUT[ep % len(HELD_OUT)]})
        ep += 1
        done = False
        while not done and len(out) < n:
            u = env.unwrapped
            text = u.render_text()
            if text not in seen or ep > 200:
                seen.add(text)
                out.append(
                    {
                        "state": env_state(env),
                        "expert": env_tools(env)[expert_action(env)],
                    }
                )
            _, _, term, trunc, _ = env.step(pol.choose(env))
            done = term or trunc
    return out


def tool_success(model_dir: str, states: list[dict[str, Any]]) -> float:
    from engine.llm.policy import GenerationSettings, LLMPolicy
    from engine.llm.rollouts import make_env

    policy = LLMPolicy.from_pretrained(
        model_dir,
        system_prompt=SYSTEM,
        generation=GenerationSettings(max_new_tokens=8, greedy=True, batch_size=25),
        fallback="noop",
    )
    envs = []
    for s in states:
        e = make_env(ENV)
        e.reset(seed=0)
        e.unwrapped.set_state(s["state"])
        envs.append(e)
    decisions = policy.act(envs)
    return float(
        np.mean([d.tool == s["expert"] for d, s in zip(decisions, states, strict=True)])
    )


def episode_success(root: Path, model_dir: str) -> dict[str, Any]:
    summary = job(
        root,
        "llm.evaluate",
        {
            "model": model_dir,
            "env": ENV,
            "episodes": 20,
            "num_envs": 20,
            "max_new_tokens": 8,
            "tasks": HELD_OUT,
            "system_prompt": SYSTEM,
            "seed": 5,
        },
    )
    return summary["results"]["after"]
