"""A tiny Hugging Face model folder built with numpy alone (no torch, no
training): config.json, one safetensors file and a byte-level BPE
tokenizer.json, enough for ``export_gguf`` to convert and verify in a few
milliseconds, and a base for the malformed folders the fuzz tests derive."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from engine.export.gguf import QWEN2_SPLIT

TINY_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
    "vocab_size": 48,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}


def tiny_tensors(cfg: dict[str, Any], seed: int = 0) -> dict[str, np.ndarray]:
    """Weights of the shapes ``cfg`` implies for a Qwen2 model (tied)."""
    rng = np.random.default_rng(seed)
    h, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd

    def w(*shape: int) -> np.ndarray:
        return rng.normal(0, 0.05, shape).astype(np.float32)

    out = {"model.embed_tokens.weight": w(v, h), "model.norm.weight": w(h) + 1}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out.update({
            p + "input_layernorm.weight": w(h) + 1,
            p + "post_attention_layernorm.weight": w(h) + 1,
            p + "self_attn.q_proj.weight": w(q, h),
            p + "self_attn.q_proj.bias": w(q),
            p + "self_attn.k_proj.weight": w(kv, h),
            p + "self_attn.k_proj.bias": w(kv),
            p + "self_attn.v_proj.weight": w(kv, h),
            p + "self_attn.v_proj.bias": w(kv),
            p + "self_attn.o_proj.weight": w(h, q),
            p + "mlp.gate_proj.weight": w(f, h),
            p + "mlp.up_proj.weight": w(f, h),
            p + "mlp.down_proj.weight": w(h, f),
        })  # fmt: skip
    return out


def tiny_tokenizer(vocab_size: int) -> dict[str, Any]:
    """A byte-level BPE tokenizer.json of ``vocab_size`` tokens, two of them
    special, with Qwen2's pre-tokenizer (so llama.cpp names it)."""
    chars = [chr(c) for c in range(ord("a"), ord("a") + vocab_size - 2)]
    vocab = {c: i for i, c in enumerate(chars)}
    return {
        "version": "1.0",
        "added_tokens": [
            {"id": vocab_size - 2, "content": "<|endoftext|>", "special": True},
            {"id": vocab_size - 1, "content": "<|im_start|>", "special": True},
        ],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": QWEN2_SPLIT},
                    "behavior": "Isolated",
                    "invert": False,
                },
                {
                    "type": "ByteLevel",
                    "add_prefix_space": False,
                    "trim_offsets": False,
                    "use_regex": False,
                },
            ],
        },
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab, "merges": ["a b", "c d"]},
    }


def write_tiny_model(
    folder: Path,
    cfg: dict[str, Any] | None = None,
    tensors: dict[str, np.ndarray] | None = None,
    tokenizer: Any = None,
) -> Path:
    """A model folder in ``folder``: ``cfg`` (default :data:`TINY_CONFIG`),
    ``tensors`` (default the shapes it implies) and ``tokenizer`` (default
    :func:`tiny_tokenizer`; a str is written as the file's text)."""
    cfg = dict(TINY_CONFIG) if cfg is None else cfg
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    save_file(tiny_tensors(TINY_CONFIG) if tensors is None else tensors,
              str(folder / "model.safetensors"))  # fmt: skip
    if tokenizer is None:
        tokenizer = tiny_tokenizer(TINY_CONFIG["vocab_size"])
    text = tokenizer if isinstance(tokenizer, str) else json.dumps(tokenizer)
    (folder / "tokenizer.json").write_text(text)
    return folder
