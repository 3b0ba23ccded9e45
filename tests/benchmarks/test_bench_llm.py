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
from pathlib import Path
from typing import Any

import pytest
from jira_llm import (
    build_model,
    episode_success,
    grpo_config,
    held_out_states,
    job,
    tokenizer_texts,
    tool_success,
    warm_start,
)

from engine.jobs.registry import validate_config

OVERHEAD_ROUNDS = 3
"""Alternating rounds of the studio job and bare TRL."""
OVERHEAD_STEPS = 6
"""GRPO steps per overhead round."""

pytestmark = [pytest.mark.bench, pytest.mark.timeout(1800)]


def test_bench_llm_learns_and_overhead(tmp_path: Path) -> None:
    t_start = time.perf_counter()
    root = tmp_path / "project"
    base = str(build_model(root / "base", tokenizer_texts()))

    # 1. noisy demonstrations on the training issues, SFT warm start
    start = warm_start(root, base)
    sft_model, t_sft = start.model, start.seconds

    states = held_out_states(50)
    before = tool_success(sft_model, states)
    before_ep = episode_success(root, sft_model)

    # 2. GRPO from the SFT model with the env reward
    grpo_cfg = {
        **grpo_config(start, steps=30),
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
