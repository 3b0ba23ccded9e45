"""Benchmark: the language-model loop learns, and the studio's GRPO job costs
little over bare TRL.

1. A tiny Qwen2 model (2 layers, 128 wide, with a byte-level BPE tokenizer
   trained on the env's own texts so prompts stay short) is warm-started with
   SFT on noisy rollouts of a rule-based policy (the shortest-path tool,
   replaced by a random tool half of the time).
2. GRPO with the env reward (the completion's tool replayed from the saved
   env state) trains it further.
3. Tool-selection success on 50 held-out decisions (states of issues never
   seen in training; success = the greedy answer names the shortest-path
   tool) before and after, plus episode success on the held-out issues.
4. Overhead: the ``llm.train`` GRPO job's steps/s against a bare TRL script
   with the same model, data, LoRA, rewards and GRPOConfig, in alternating
   rounds (the best round of each is compared: other work on a shared
   machine only ever slows a round down).

Run: ``.venv/bin/pytest tests/benchmarks/test_bench_llm.py -s -o addopts=""``
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.jobs.context import JobContext
from engine.jobs.registry import get_kind, load, validate_config

ROOT = Path(__file__).resolve().parents[2]
ENV = str(ROOT / "resources/examples/envs/jira_status_update.env.json")
HELD_OUT = [3, 7, 10, 13]
TRAIN_TASKS = [i for i in range(16) if i not in HELD_OUT]
SYSTEM = "Pick the next tool. Tools: {tools}. Reply with one tool name."
WIDTH = 128
OVERHEAD_ROUNDS = 3
"""Alternating rounds of the studio job and bare TRL."""
OVERHEAD_STEPS = 6
"""GRPO steps per overhead round."""

pytestmark = [pytest.mark.bench, pytest.mark.timeout(1800)]


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


def job(root: Path, kind: str, config: dict[str, Any]) -> dict[str, Any]:
    cfg = validate_config(kind, config)
    run_id = f"{kind.replace('.', '-')}-{uuid.uuid4().hex[:6]}"
    run_dir = root / "runs" / run_id
    run_dir.mkdir(parents=True)
    ctx = JobContext(run_id, run_dir, kind, cfg)
    try:
        return load(get_kind(kind).entry)(ctx)
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


def test_bench_llm_learns_and_overhead(tmp_path: Path) -> None:
    from engine.llm.policy import ExpertPolicy, build_messages, env_text, env_tools
    from engine.llm.rollouts import make_env

    t_start = time.perf_counter()
    root = tmp_path / "project"
    # Tokenizer corpus: the env's texts over many states.
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
    texts += env_tools(env) * 20
    base = str(build_model(root / "base", texts))

    # 1. noisy demonstrations on the training issues, SFT warm start
    job(
        root,
        "llm.collect",
        {
            "env": ENV,
            "policy": "expert",
            "noise": 0.5,
            "episodes": 300,
            "tasks": TRAIN_TASKS,
            "system_prompt": SYSTEM,
            "seed": 1,
            "name": "noisy",
        },
    )
    sft_ds = job(
        root,
        "llm.dataset",
        {"traces": "noisy.jsonl", "method": "sft", "seed": 0, "name": "sft"},
    )["dataset"]
    grpo_ds = job(
        root,
        "llm.dataset",
        {"traces": "noisy.jsonl", "method": "grpo", "seed": 0, "name": "grpo"},
    )["dataset"]
    common = {
        "model": base,
        "device": "cpu",
        "precision": "fp32",
        "gradient_checkpointing": False,
        "lora_rank": 16,
        "seed": 0,
        "save_steps": 0,
        "max_length": 256,
    }
    t0 = time.perf_counter()
    sft = job(
        root,
        "llm.train",
        {
            **common,
            "method": "sft",
            "dataset": sft_ds,
            # long enough that the model's samples are mostly tool names,
            # short of imitating the noise-free expert (about 80 steps here)
            "max_steps": 36,
            "batch_size": 8,
            "learning_rate": 3e-3,
            "name": "sft",
        },
    )
    sft_adapter = sft["models"][0]["file"]
    merged = job(root, "llm.merge", {"adapter": sft_adapter, "name": "sft-merged"})
    sft_model = merged["models"][0]["file"]
    t_sft = time.perf_counter() - t0

    states = held_out_states(50)
    before = tool_success(sft_model, states)
    before_ep = episode_success(root, sft_model)

    # 2. GRPO from the SFT model with the env reward. Sampling at 1.0 from a
    # warm start whose samples are mostly malformed (-1 each) teaches one
    # thing first: name *a* tool, any tool; the most frequent one
    # (move_to_in_progress, sometimes worth +1.1) wins every group and the
    # greedy policy collapses onto it within 10 steps (0.70 -> 0.34 with 4
    # generations, lr 2e-3). At 0.5 with 8 generations the groups compare
    # tools, and the env reward's differences between them drive learning.
    grpo_cfg = {
        **common,
        "model": sft_model,
        "method": "grpo",
        "dataset": grpo_ds,
        "max_steps": 30,
        "batch_size": 16,
        "num_generations": 8,
        "max_completion_length": 8,
        "learning_rate": 5e-4,
        "beta": 0.0,
        "temperature": 0.5,
        "rewards": [
            {"name": "env_reward", "weight": 1.0},
            {"name": "format", "weight": 0.2},
        ],
    }
    t0 = time.perf_counter()
    grpo = job(root, "llm.train", {**grpo_cfg, "name": "grpo"})
    t_grpo = time.perf_counter() - t0
    merged = job(
        root, "llm.merge", {"adapter": grpo["models"][0]["file"], "name": "grpo-merged"}
    )
    grpo_model = merged["models"][0]["file"]
    after = tool_success(grpo_model, states)
    after_ep = episode_success(root, grpo_model)

    # 3. overhead: the job against bare TRL on the same config. The machines
    # are shared and their load changes by the minute, so the two alternate
    # (job, bare, job, bare, ...) and the best round of each is compared:
    # load only ever slows a round down.
    bench_cfg = {**grpo_cfg, "max_steps": OVERHEAD_STEPS}
    job_rounds: list[float] = []
    bare_rounds: list[float] = []
    for i in range(OVERHEAD_ROUNDS):
        summary = job(root, "llm.train", {**bench_cfg, "name": f"overhead-{i}"})
        job_rounds.append(summary["metrics"]["steps_per_s"])
        bare_rounds.append(
            bare_trl_grpo(validate_config("llm.train", bench_cfg), root / f"bare-{i}")
        )
    job_sps, bare_sps = max(job_rounds), max(bare_rounds)
    tps = after_ep.get("tokens_per_s", 0.0)

    print(
        f"\nBENCH llm: SFT success {before:.2f} -> GRPO success {after:.2f} on "
        f"{len(states)} held-out tasks (episode success {before_ep['success_rate']:.2f}"
        f" -> {after_ep['success_rate']:.2f} on 20 held-out episodes;"
        f" SFT {t_sft:.0f} s, GRPO {t_grpo:.0f} s)"
    )
    print(
        f"BENCH llm: GRPO job {job_sps:.3f} steps/s vs bare TRL {bare_sps:.3f} steps/s"
        f" -> wall-time ratio {bare_sps / job_sps:.3f} (target <= 1.03; best of"
        f" {OVERHEAD_ROUNDS} alternating rounds; job rounds "
        f"{', '.join(f'{x:.3f}' for x in job_rounds)}, bare rounds "
        f"{', '.join(f'{x:.3f}' for x in bare_rounds)})"
    )
    print(f"BENCH llm: policy generation {tps:.0f} tokens/s (greedy, 20 envs batched)")
    print(f"BENCH llm: total {time.perf_counter() - t_start:.0f} s")
    (tmp_path / "bench.json").write_text(json.dumps({"before": before, "after": after}))
    assert after > before


def bare_trl_grpo(cfg: dict[str, Any], out: Path) -> float:
    """The same GRPO run written directly against TRL: steps/s of train()."""
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from engine.llm.datasets import load_split
    from engine.llm.rewards import build_rewards

    train, _ = load_split(cfg["dataset"], "grpo")
    tok = AutoTokenizer.from_pretrained(cfg["model"])
    model = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype=torch.float32)
    rewards = build_rewards(cfg["rewards"])
    args = GRPOConfig(
        output_dir=str(out),
        use_cpu=True,
        report_to=[],
        max_steps=cfg["max_steps"],
        learning_rate=cfg["learning_rate"],
        per_device_train_batch_size=cfg["batch_size"],
        num_generations=cfg["num_generations"],
        max_completion_length=cfg["max_completion_length"],
        beta=cfg["beta"],
        temperature=cfg["temperature"],
        reward_weights=[r.weight for r in rewards],
        # TRL's configs turn bf16 on by default, and CPU autocast in bf16 runs
        # this model about 6x slower: precision must match the job's (fp32
        # here), or the comparison measures bf16 on the CPU, not overhead.
        bf16=cfg["precision"] == "bf16" and cfg["device"] != "cpu",
        fp16=cfg["precision"] == "fp16",
        gradient_accumulation_steps=cfg["gradient_accumulation_steps"],
        logging_steps=1,
        save_strategy="no",
        seed=cfg["seed"],
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=list(rewards),
        args=args,
        train_dataset=train,
        processing_class=tok,
        peft_config=LoraConfig(
            r=cfg["lora_rank"],
            lora_alpha=cfg["lora_alpha"],
            target_modules="all-linear",
            task_type="CAUSAL_LM",
        ),
    )
    # as the job does: the rows are metrics, not lines for the log
    trainer.remove_callback(PrinterCallback)
    t0 = time.perf_counter()
    trainer.train()
    return trainer.state.global_step / (time.perf_counter() - t0)
