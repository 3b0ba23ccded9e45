"""How far a GGUF file's logits are from its source model's: both loaded with
transformers (its GGUF loader dequantizes every type this exporter writes, so
it is a reader independent of ours) and run on a few prompts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

PROMPTS: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog.",
    "Move the issue PROJ-7 from To Do to In Progress.",
    "def add(a, b):\n    return a + b",
    "Water boils at 100 degrees Celsius at sea level.",
)
"""Short prompts of prose, a tool request and code."""


def logit_error(
    model_dir: str | os.PathLike[str],
    gguf_path: str | os.PathLike[str],
    prompts: tuple[str, ...] = PROMPTS,
) -> dict[str, float]:
    """Mean and max |logit difference| of ``gguf_path`` against the Hugging
    Face model in ``model_dir`` over every position of ``prompts``, with the
    source's mean |logit| for scale."""
    import torch
    import transformers

    model_dir = Path(model_dir)
    gguf_path = Path(gguf_path)
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    # from_pretrained returns models in eval mode.
    source = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, torch_dtype=torch.float32
    )
    kwargs: dict[str, Any] = {}
    if source.config.model_type == "qwen3":
        # transformers' GGUF config mapping drops Qwen3's separate head_dim.
        kwargs["config"] = source.config
    quantized = transformers.AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, torch_dtype=torch.float32, **kwargs
    )
    total = biggest = scale = 0.0
    count = 0
    with torch.no_grad():
        for text in prompts:
            ids = tok(text, return_tensors="pt").input_ids
            want = source(ids).logits.float()
            got = quantized(ids).logits.float()
            diff = (got - want).abs()
            total += float(diff.sum())
            biggest = max(biggest, float(diff.max()))
            scale += float(want.abs().sum())
            count += diff.numel()
    return {
        "mean_abs": total / count,
        "max_abs": biggest,
        "mean_abs_logit": scale / count,
        "prompts": float(len(prompts)),
    }
