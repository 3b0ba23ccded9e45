"""Hugging Face causal LMs and PEFT LoRA adapters to GGUF, in pure Python.

The conversion follows llama.cpp's ``convert_hf_to_gguf.py`` for the
architectures it supports here (Llama 2/3, Mistral-style and SmolLM, which are
all ``LlamaForCausalLM`` / ``MistralForCausalLM``; Qwen2/Qwen2.5; Qwen3), using
the ``gguf`` package for names, quantization and the file format.

Tensors are read from memory-mapped safetensors files (a small header parser
plus ``numpy.memmap``, so no torch is needed) and written one tensor at a time,
large tensors in row chunks: peak memory stays a few tens of MB above the
interpreter whatever the model size. Every tensor's info is declared before any
data is written (GGUF needs the whole header first). The file is written under
a temporary name beside the target and renamed only once complete and read
back with ``gguf.GGUFReader``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import math
import os
import shutil
import struct
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from engine.contract import read_json
from engine.errors import EngineError, quoted
from engine.export.imatrix import Imatrix
from engine.export.types import (
    GGUF_TYPES,
    K_FILE_TYPES,
    adapter_type_problem,
    imatrix_problem,
)
from engine.progress import Progress
from engine.store.atomic import make_parent_folder, temp_path

log = logging.getLogger(__name__)

SUPPORTED_ARCHITECTURES: dict[str, str] = {
    # HF ``architectures[0]``: GGUF architecture name
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
"""Llama-architecture models (Llama 2/3, Mistral-style, SmolLM), Qwen2/2.5, Qwen3."""

_WEIGHTED_TYPES = (
    "Q2_K",
    "Q3_K",
    "Q4_K",
    "Q5_K",
    "Q6_K",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
)
"""Types an importance matrix weights (llama.cpp's Q8_0 takes no weights)."""

#: Rows converted at once, in source elements (8 MB as float32): small
#: enough that the span workers share the last tensors evenly.
_CHUNK_ELEMENTS = 2 * 1024 * 1024


@dataclass
class ExportReport:
    """What an export wrote and what reading it back found."""

    path: str
    kind: str
    """``model`` or ``adapter``."""
    architecture: str
    file_type: str
    tensor_count: int
    size_bytes: int
    source_bytes: int
    seconds: float
    tokenizer_model: str = ""
    tokenizer_pre: str = ""
    vocab_size: int = 0
    tensor_types: dict[str, int] = field(default_factory=dict)
    """Count of tensors per GGML type actually written."""
    fallbacks: list[str] = field(default_factory=list)
    """Tensors written in another type because their rows do not fit the
    block size, as ``name: wanted → written``."""
    warnings: list[str] = field(default_factory=list)
    verified: bool = False
    checks: list[str] = field(default_factory=list)
    bits_per_weight: float = 0.0
    """Tensor data bits per value, over every tensor (llama.cpp's BPW)."""
    logit_error: dict[str, float] = field(default_factory=dict)
    """``engine.export.logit_check.logit_error``'s figures where measured."""
    imatrix: dict[str, Any] = field(default_factory=dict)
    """Where an importance matrix weighted the K-quants: its source, tokens,
    chunks and ``weighted`` (tensors quantized with it)."""
    logit_error_without_imatrix: dict[str, float] = field(default_factory=dict)
    """The same file type's logit error without the importance matrix, for
    comparison, where measured."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        mb = self.size_bytes / 1e6
        lines = [
            f"Wrote {self.path} ({mb:.1f} MB, {self.file_type.upper()}, "
            f"{self.bits_per_weight:.2f} bits per weight, {self.architecture}, "
            f"{self.tensor_count} tensors) in {self.seconds:.1f} s.",
        ]
        if self.tokenizer_model:
            lines.append(
                f"Tokenizer: {self.tokenizer_model}"
                + (
                    f" (pre-tokenizer {self.tokenizer_pre})"
                    if self.tokenizer_pre
                    else ""
                )
                + f", {self.vocab_size} tokens."
            )
        types = ", ".join(f"{k} x{v}" for k, v in sorted(self.tensor_types.items()))
        lines.append(f"Tensor types: {types}.")
        if self.fallbacks:
            lines.append(
                f"{len(self.fallbacks)} tensor(s) in another type (rows do not "
                f"fill the blocks): {'; '.join(self.fallbacks)}."
            )
        lines.append(
            "Verified: "
            + ("yes" if self.verified else "NO")
            + " — "
            + "; ".join(self.checks)
        )
        im = self.imatrix
        if im:
            lines.append(
                f"Importance matrix: {im['tokens']} tokens in {im['chunks']} "
                f"chunk(s) of {Path(im['source']).name}; {im['weighted']} tensor(s) "
                "quantized with it."
            )
        e = self.logit_error
        if e:
            lines.append(
                f"Logit error against the source model: mean |Δ| {e['mean_abs']:.4f}, "
                f"max {e['max_abs']:.3f} (logits average |{e['mean_abs_logit']:.2f}|) "
                f"over {int(e['prompts'])} prompts."
            )
        w = self.logit_error_without_imatrix
        if w and e:
            lines.append(
                f"Without the importance matrix: mean |Δ| {w['mean_abs']:.4f}, "
                f"max {w['max_abs']:.3f} (with it / without: "
                f"{e['mean_abs'] / max(w['mean_abs'], 1e-30):.3f})."
            )
        lines.extend(f"Warning: {w}" for w in self.warnings)
        return "\n".join(lines)


# --------------------------------------------------------------------------
# safetensors, memory-mapped


_ST_DTYPES: dict[str, np.dtype[Any]] = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "F64": np.dtype("<f8"),
}


@dataclass(frozen=True)
class _StTensor:
    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int
    """Absolute byte offset of the data in ``file``."""
    nbytes: int


def _read_safetensors_header(path: Path) -> dict[str, _StTensor]:
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise ValueError("too short")
            (n,) = struct.unpack("<Q", raw)
            if n <= 0 or n > min(size - 8, 100_000_000):
                raise ValueError("bad header length")
            header = json.loads(f.read(n))
        base = 8 + n
        out: dict[str, _StTensor] = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = (int(x) for x in info["data_offsets"])
            shape = tuple(int(x) for x in info["shape"])
            dtype = str(info["dtype"])
            if end < begin or base + end > size:
                raise ValueError(f"tensor {name} lies past the end of the file")
            if (
                dtype in _ST_DTYPES
                and (end - begin) != math.prod(shape) * _ST_DTYPES[dtype].itemsize
            ):
                raise ValueError(f"tensor {name} has the wrong byte size")
            out[name] = _StTensor(path, dtype, shape, base + begin, end - begin)
        return out
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, struct.error) as exc:
        raise EngineError(
            f"{path} is not a valid safetensors file ({exc}); re-save or "
            "re-download it."
        ) from None


def _load_safetensors_index(model_dir: Path) -> dict[str, _StTensor]:
    index = model_dir / "model.safetensors.index.json"
    files: list[Path]
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (ValueError, KeyError) as exc:
            raise EngineError(
                f"{index} is not a valid safetensors index ({exc})."
            ) from None
        files = sorted({model_dir / f for f in weight_map.values()})
    else:
        files = sorted(model_dir.glob("*.safetensors"))
        files = [f for f in files if f.name != "adapter_model.safetensors"]
    if not files:
        raise EngineError(
            f"{model_dir} has no .safetensors weights; save the model with "
            "save_pretrained(safe_serialization=True) first."
        )
    tensors: dict[str, _StTensor] = {}
    for f in files:
        if not f.is_file():
            raise EngineError(
                f"The safetensors shard {f} listed in the index is missing."
            )
        tensors.update(_read_safetensors_header(f))
    return tensors


class _MemmapPool:
    """One read-only memory map per file, opened on first use."""

    def __init__(self) -> None:
        self._maps: dict[Path, np.memmap] = {}

    def array(self, t: _StTensor) -> np.ndarray:
        """The tensor as float32 (BF16 widened), a view where the dtype allows."""
        mm = self._maps.get(t.file)
        if mm is None:
            mm = np.memmap(t.file, dtype=np.uint8, mode="r")
            self._maps[t.file] = mm
        if t.dtype not in _ST_DTYPES:
            raise EngineError(
                f"Tensor dtype {t.dtype} in {t.file.name} is not supported; "
                "export from a float32, float16 or bfloat16 checkpoint."
            )
        raw: np.ndarray = (
            mm[t.start : t.start + t.nbytes].view(_ST_DTYPES[t.dtype]).reshape(t.shape)
        )
        return raw

    def release(self, t: _StTensor) -> None:
        """Drop ``t``'s pages from this process's RSS once written (the page
        cache keeps them); a no-op where madvise is missing."""
        import mmap

        mm = self._maps.get(t.file)
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if mm is None or advice is None:
            return
        page = mmap.PAGESIZE
        start = t.start // page * page
        with contextlib.suppress(OSError, ValueError, AttributeError):
            mm._mmap.madvise(advice, start, t.start + t.nbytes - start)  # type: ignore[attr-defined]

    def close(self) -> None:
        for mm in self._maps.values():
            mm._mmap.close()  # type: ignore[attr-defined]
        self._maps.clear()


def _check_dtype(t: _StTensor, name: str) -> None:
    """Refuse quantized or integer checkpoints while planning, before any
    file is written."""
    if t.dtype not in _ST_DTYPES:
        raise EngineError(
            f"Tensor {name} in {t.file.name} is {t.dtype}, which cannot be "
            "exported; export from a float32, float16 or bfloat16 checkpoint."
        )


def _to_f32(raw: np.ndarray, st_dtype: str) -> np.ndarray:
    if st_dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float32, copy=False)


# --------------------------------------------------------------------------
# model config


@dataclass(frozen=True)
class _Hparams:
    hf_arch: str
    arch: str
    n_layers: int
    hidden: int
    ffn: int
    n_head: int
    n_head_kv: int
    head_dim: int
    head_dim_explicit: bool
    eps: float
    ctx: int
    vocab_size: int
    tie: bool
    rope_theta: float
    rope: dict[str, Any]


def _read_config(model_dir: Path) -> dict[str, Any]:
    model_dir = Path(model_dir)
    if not model_dir.exists():
        raise EngineError(f"The model folder {model_dir} does not exist.")
    if not model_dir.is_dir():
        raise EngineError(
            f"{model_dir} is not a folder; point at a Hugging Face model folder."
        )
    cfg_path = model_dir / "config.json"
    if not cfg_path.is_file():
        raise EngineError(
            f"{model_dir} has no config.json, so it is not a Hugging Face model folder."
        )
    try:
        cfg: dict[str, Any] = json.loads(cfg_path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise EngineError(f"{cfg_path} is not valid JSON ({exc}).") from None
    return cfg


def _supported_text() -> str:
    return ", ".join(SUPPORTED_ARCHITECTURES)


_INT_BOUNDS: dict[str, int] = {
    # config.json field: the largest value a real checkpoint has room for
    # (several times today's largest models), so an absurd value is refused
    # in one sentence before it becomes an allocation.
    "hidden_size": 1 << 17,
    "num_attention_heads": 1 << 12,
    "num_key_value_heads": 1 << 12,
    "num_hidden_layers": 4096,
    "intermediate_size": 1 << 20,
    "vocab_size": 1 << 22,
    "head_dim": 1 << 12,
    "max_position_embeddings": 1 << 24,
}
"""Upper bounds of the integer fields of a model's config.json."""

_WEIGHT_LIMIT = 65504.0
"""The largest |weight| exported: float16's range. llama.cpp computes in F16
on many backends, and no trained checkpoint comes near it; a larger value
(or NaN, Inf) is a broken checkpoint, refused rather than written."""


def _config_int(
    cfg: dict[str, Any], key: str, model_dir: Path, default: int | None = None
) -> int:
    """``cfg[key]`` as a positive integer within :data:`_INT_BOUNDS`, or an
    EngineError naming the field."""
    value = cfg.get(key, default)
    bound = _INT_BOUNDS[key]
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= bound:
        raise EngineError(
            f"config.json in {model_dir} has {key} = {quoted(value)}; it must be a "
            f"whole number from 1 to {bound:,}."
        )
    return value


def _config_float(
    value: Any, key: str, model_dir: Path, low: float, high: float
) -> float:
    """``value`` as a finite float in the open interval (low, high), or an
    EngineError naming the field ``key``."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not (math.isfinite(value) and low < value < high):
        raise EngineError(
            f"config.json in {model_dir} has {key} = {quoted(value)}; it must be a "
            f"finite number above {low:g} and below {high:g}."
        )
    return float(value)


def _hparams(cfg: dict[str, Any], model_dir: Path) -> _Hparams:
    """The hyperparameters of ``cfg``, every one checked for type, range and
    consistency with the others (heads divide the width, KV heads divide the
    heads), each problem one sentence naming the field."""
    if not isinstance(cfg, dict):
        raise EngineError(f"config.json in {model_dir} is not a JSON object.")
    archs = cfg.get("architectures") or []
    hf_arch = archs[0] if isinstance(archs, list) and archs else ""
    if not isinstance(hf_arch, str) or hf_arch not in SUPPORTED_ARCHITECTURES:
        what = (
            quoted(hf_arch)
            if hf_arch
            else f"model_type {quoted(cfg.get('model_type'))}"
        )
        raise EngineError(
            f"Cannot export {what} from {model_dir} to GGUF; supported architectures: "
            f"{_supported_text()}."
        )
    missing = [
        k
        for k in (
            "hidden_size",
            "num_attention_heads",
            "num_hidden_layers",
            "intermediate_size",
            "vocab_size",
        )
        if k not in cfg
    ]
    if missing:
        raise EngineError(
            f"The config.json in {model_dir} lacks {', '.join(missing)}, so it is "
            f"not a complete {hf_arch} config."
        )
    arch = SUPPORTED_ARCHITECTURES[hf_arch]
    hidden = _config_int(cfg, "hidden_size", model_dir)
    n_head = _config_int(cfg, "num_attention_heads", model_dir)
    n_head_kv = _config_int(
        cfg, "num_key_value_heads", model_dir, cfg.get("num_key_value_heads") or n_head
    )
    head_dim_explicit = cfg.get("head_dim") is not None
    if head_dim_explicit:
        head_dim = _config_int(cfg, "head_dim", model_dir)
    elif hidden % n_head:
        raise EngineError(
            f"config.json in {model_dir} has hidden_size {hidden}, which "
            f"num_attention_heads {n_head} does not divide."
        )
    else:
        head_dim = hidden // n_head
    if n_head % n_head_kv:
        raise EngineError(
            f"config.json in {model_dir} has num_key_value_heads {n_head_kv}, "
            f"which does not divide num_attention_heads {n_head}."
        )
    if arch == "llama" and head_dim % 2:
        raise EngineError(
            f"config.json in {model_dir} gives heads of {head_dim} values; rotary "
            "embeddings need an even head size."
        )
    # transformers 5 moved rope settings into rope_parameters; older configs keep
    # rope_theta at the top level and scaling in rope_scaling.
    rope: dict[str, Any] = {}
    for key in ("rope_scaling", "rope_parameters"):
        part = cfg.get(key) or {}
        if not isinstance(part, dict):
            raise EngineError(
                f"config.json in {model_dir} has {key} = {quoted(part)}; it must "
                "be an object."
            )
        rope.update(part)
    theta = rope.get("rope_theta", cfg.get("rope_theta"))
    rope_theta = _config_float(
        10000.0 if theta is None else theta, "rope_theta", model_dir, 0.0, 1e15
    )
    if "factor" in rope:
        _config_float(rope["factor"], "rope factor", model_dir, 0.0, 1e6)
    tie = cfg.get("tie_word_embeddings")
    return _Hparams(
        hf_arch=hf_arch,
        arch=arch,
        n_layers=_config_int(cfg, "num_hidden_layers", model_dir),
        hidden=hidden,
        ffn=_config_int(cfg, "intermediate_size", model_dir),
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        head_dim_explicit=head_dim_explicit,
        eps=_config_float(
            cfg.get("rms_norm_eps", 1e-6), "rms_norm_eps", model_dir, 0.0, 1.0
        ),
        ctx=_config_int(cfg, "max_position_embeddings", model_dir, 4096),
        vocab_size=_config_int(cfg, "vocab_size", model_dir),
        tie=bool(tie) if tie is not None else False,
        rope_theta=rope_theta,
        rope=rope,
    )


def _expected_shapes(
    hp: _Hparams, cfg: dict[str, Any], with_lm_head: bool
) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """The shape ``cfg`` implies for every tensor of the model, as (required,
    optional) maps from Hugging Face name to numpy-order shape."""
    q_out, kv_out = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
    required: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (hp.vocab_size, hp.hidden),
        "model.norm.weight": (hp.hidden,),
    }
    optional: dict[str, tuple[int, ...]] = {}
    if with_lm_head:
        required["lm_head.weight"] = (hp.vocab_size, hp.hidden)
    biased = hp.arch == "qwen2" or bool(cfg.get("attention_bias"))
    for i in range(hp.n_layers):
        p = f"model.layers.{i}."
        layer = {
            "input_layernorm.weight": (hp.hidden,),
            "post_attention_layernorm.weight": (hp.hidden,),
            "self_attn.q_proj.weight": (q_out, hp.hidden),
            "self_attn.k_proj.weight": (kv_out, hp.hidden),
            "self_attn.v_proj.weight": (kv_out, hp.hidden),
            "self_attn.o_proj.weight": (hp.hidden, q_out),
            "mlp.gate_proj.weight": (hp.ffn, hp.hidden),
            "mlp.up_proj.weight": (hp.ffn, hp.hidden),
            "mlp.down_proj.weight": (hp.hidden, hp.ffn),
        }
        if hp.arch == "qwen3":
            layer["self_attn.q_norm.weight"] = (hp.head_dim,)
            layer["self_attn.k_norm.weight"] = (hp.head_dim,)
        biases = {
            "self_attn.q_proj.bias": (q_out,),
            "self_attn.k_proj.bias": (kv_out,),
            "self_attn.v_proj.bias": (kv_out,),
        }
        if biased:
            layer.update(biases)
        else:
            optional.update({p + k: v for k, v in biases.items()})
        optional[p + "self_attn.o_proj.bias"] = (hp.hidden,)
        optional[p + "mlp.gate_proj.bias"] = (hp.ffn,)
        optional[p + "mlp.up_proj.bias"] = (hp.ffn,)
        optional[p + "mlp.down_proj.bias"] = (hp.hidden,)
        required.update({p + k: v for k, v in layer.items()})
    return required, optional


_FIELDS_OF = (
    # tensor name part: the config.json fields its shape follows from
    ("embed_tokens", "vocab_size and hidden_size"),
    ("lm_head", "vocab_size and hidden_size"),
    ("norm", "hidden_size (or head_dim)"),
    ("q_proj", "num_attention_heads, head_dim and hidden_size"),
    ("k_proj", "num_key_value_heads, head_dim and hidden_size"),
    ("v_proj", "num_key_value_heads, head_dim and hidden_size"),
    ("o_proj", "num_attention_heads, head_dim and hidden_size"),
    ("mlp", "intermediate_size and hidden_size"),
)


def _check_tensors_against_config(
    hp: _Hparams,
    cfg: dict[str, Any],
    st: dict[str, _StTensor],
    model_dir: Path,
    with_lm_head: bool,
) -> None:
    """Refuse weights that contradict ``cfg``: a tensor missing, one beyond
    the config's layers, or one of another shape; one sentence naming the
    tensor and the config fields its shape follows from."""
    required, optional = _expected_shapes(hp, cfg, with_lm_head)
    for name, t in st.items():
        if name.endswith("rotary_emb.inv_freq"):
            continue
        if name.startswith("model.layers."):
            index = name.split(".")[2]
            if not index.isdigit() or int(index) >= hp.n_layers:
                raise EngineError(
                    f"Tensor {quoted(name)} in {model_dir} lies beyond config.json's "
                    f"num_hidden_layers {hp.n_layers}; the config does not describe "
                    "these weights."
                )
        want = required.get(name, optional.get(name))
        if want is not None and tuple(t.shape) != want:
            fields = next((f for part, f in _FIELDS_OF if part in name), "the config")
            raise EngineError(
                f"Tensor {name} in {model_dir} has shape {tuple(t.shape)}, but "
                f"config.json's {fields} make it {want}; the config does not "
                "describe these weights."
            )
    absent = [name for name in required if name not in st]
    if absent:
        more = f" and {len(absent) - 1} more" if len(absent) > 1 else ""
        raise EngineError(
            f"Tensor {absent[0]}{more} is missing from the weights in {model_dir}; "
            "re-save the model whole."
        )


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF rotary layout to GGML's (llama.cpp ``LlamaModel.permute``)."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def _llama3_rope_factors(hp: _Hparams) -> np.ndarray | None:
    rope = hp.rope
    if str(rope.get("rope_type", rope.get("type", ""))).lower() != "llama3":
        return None
    base = hp.rope_theta
    dim = hp.head_dim
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor = float(rope.get("factor", 8.0))
    low = float(rope.get("low_freq_factor", 1.0))
    high = float(rope.get("high_freq_factor", 4.0))
    old_ctx = float(rope.get("original_max_position_embeddings", 8192))
    low_wl, high_wl = old_ctx / low, old_ctx / high
    out = []
    for f in freqs:
        wl = 2 * math.pi / f
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (old_ctx / wl - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


# --------------------------------------------------------------------------
# tokenizer


QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def pre_tokenizer_signature(pre: dict[str, Any] | None) -> list[list[Any]]:
    """The parts of a ``tokenizer.json`` pre-tokenizer that decide the split."""
    if not isinstance(pre, dict):
        return []
    parts = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    sig: list[list[Any]] = []
    # A malformed step hashes as its type alone: a name llama.cpp knows none of.
    for p in parts if isinstance(parts, list) else []:
        if not isinstance(p, dict):
            sig.append([quoted(p, 40)])
            continue
        kind = p.get("type")
        if kind == "Split":
            pattern = p.get("pattern", {})
            if not isinstance(pattern, dict):
                pattern = {}
            sig.append(["Split", pattern.get("Regex", pattern.get("String"))])
        elif kind == "ByteLevel":
            sig.append(["ByteLevel", bool(p.get("use_regex", True))])
        elif kind == "Digits":
            sig.append(["Digits", bool(p.get("individual_digits", False))])
        else:
            sig.append([kind])
    return sig


def pre_tokenizer_hash(pre: dict[str, Any] | None) -> str:
    text = json.dumps(pre_tokenizer_signature(pre), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _known_pre_hashes() -> dict[str, str]:
    def seq(*parts: dict[str, Any]) -> dict[str, Any]:
        return {"type": "Sequence", "pretokenizers": list(parts)}

    def split(regex: str) -> dict[str, Any]:
        return {"type": "Split", "pattern": {"Regex": regex}}

    byte_level_no_regex = {"type": "ByteLevel", "use_regex": False}
    known = {
        "qwen2": seq(split(QWEN2_SPLIT), byte_level_no_regex),
        "llama-bpe": seq(split(LLAMA3_SPLIT), byte_level_no_regex),
        "smollm": seq(
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "use_regex": True},
        ),
        "gpt-2": {"type": "ByteLevel", "use_regex": True},
    }
    return {pre_tokenizer_hash(v): k for k, v in known.items()}


KNOWN_PRE_TOKENIZERS = _known_pre_hashes()
"""sha256 of a pre-tokenizer signature -> llama.cpp ``tokenizer.ggml.pre`` name."""


@dataclass
class _Vocab:
    model: str
    """``gpt2`` (byte-level BPE) or ``llama`` (SentencePiece)."""
    pre: str
    tokens: list[str]
    types: list[int]
    scores: list[float] | None
    add_bos_default: bool
    warnings: list[str]


def _read_sentencepiece_model(path: Path) -> list[tuple[str, float, int]]:
    """Pieces of a SentencePiece ``tokenizer.model`` (protobuf field 1), parsed
    without the sentencepiece package: (piece, score, type)."""
    data = path.read_bytes()

    def varint(buf: bytes, i: int) -> tuple[int, int]:
        shift = result = 0
        while True:
            b = buf[i]
            i += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result, i
            shift += 7

    def fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
        i = 0
        while i < len(buf):
            key, i = varint(buf, i)
            num, wire = key >> 3, key & 7
            val: int | bytes
            if wire == 0:
                val, i = varint(buf, i)
            elif wire == 1:
                val, i = buf[i : i + 8], i + 8
            elif wire == 2:
                n, i = varint(buf, i)
                val, i = buf[i : i + n], i + n
            elif wire == 5:
                val, i = buf[i : i + 4], i + 4
            else:
                raise ValueError(f"unsupported wire type {wire}")
            yield num, wire, val

    pieces: list[tuple[str, float, int]] = []
    try:
        for num, wire, val in fields(data):
            if num != 1 or wire != 2:
                continue
            piece, score, kind = "", 0.0, 1
            for n2, w2, v2 in fields(val):
                if n2 == 1 and w2 == 2:
                    piece = v2.decode("utf-8")
                elif n2 == 2 and w2 == 5:
                    (score,) = struct.unpack("<f", v2)
                elif n2 == 3 and w2 == 0:
                    kind = int(v2)
            pieces.append((piece, float(score), kind))
    except (ValueError, IndexError, UnicodeDecodeError, struct.error) as exc:
        raise EngineError(
            f"{path} is not a valid SentencePiece model ({exc})."
        ) from None
    if not pieces:
        raise EngineError(f"{path} holds no SentencePiece vocabulary.")
    return pieces


def _uses_step(tj: dict[str, Any] | None, kind: str) -> bool:
    """Whether the pre-tokenizer or decoder of a ``tokenizer.json`` has a
    step of type ``kind`` (nested ``Sequence`` steps included)."""

    def has(node: Any) -> bool:
        if not isinstance(node, dict):
            return False
        if node.get("type") == kind:
            return True
        inner = [
            n
            for key in ("pretokenizers", "decoders")
            if isinstance(node.get(key), list)
            for n in node[key]
        ]
        return any(has(n) for n in inner)

    return tj is not None and (has(tj.get("pre_tokenizer")) or has(tj.get("decoder")))


def _check_tokenizer_json(tj: Any, path: Path) -> None:
    """Refuse a ``tokenizer.json`` whose parts this converter reads have the
    wrong shape (token ids not whole numbers within the vocabulary bound,
    added tokens without content), in one sentence naming the part."""
    bound = _INT_BOUNDS["vocab_size"]

    def refuse(what: str) -> NoReturn:
        raise EngineError(f"{path} is malformed: {what}.")

    def token_id(value: Any) -> bool:
        return (
            isinstance(value, int)
            and not isinstance(value, bool)
            and 0 <= value < bound
        )

    if not isinstance(tj, dict):
        refuse("it is not a JSON object")
    model = tj.get("model", {})
    if not isinstance(model, dict):
        refuse("'model' is not an object")
    vocab = model.get("vocab", {})
    if isinstance(vocab, dict):
        for tok, idx in vocab.items():
            if not token_id(idx):
                refuse(f"token {quoted(tok, 40)} has id {quoted(idx, 40)}")
    elif model.get("type") == "BPE":
        refuse("'model.vocab' of its BPE model is not an object")
    merges = model.get("merges", [])
    if not isinstance(merges, list) or not all(
        isinstance(m, str)
        or (isinstance(m, list) and all(isinstance(x, str) for x in m))
        for m in merges
    ):
        refuse("'model.merges' is not a list of merges")
    for key in ("pre_tokenizer", "decoder", "normalizer"):
        if tj.get(key) is not None and not isinstance(tj[key], dict):
            refuse(f"{key!r} is not an object")
    added = tj.get("added_tokens", [])
    if not isinstance(added, list):
        refuse("'added_tokens' is not a list")
    for item in added:
        if (
            not isinstance(item, dict)
            or not token_id(item.get("id"))
            or not isinstance(item.get("content"), str)
        ):
            refuse(f"added token {quoted(item, 60)} lacks a valid id or content")


def _read_vocab(model_dir: Path, vocab_size: int) -> _Vocab:
    """The vocabulary to write: from a byte-level BPE ``tokenizer.json``, a
    SentencePiece ``tokenizer.model``, or a SentencePiece-style BPE
    ``tokenizer.json``, in that order of preference; added tokens on top,
    padded to ``vocab_size``."""
    tj = _load_tokenizer_json(model_dir)
    model = (tj or {}).get("model", {})
    # SentencePiece-style BPE (Llama 2, Mistral) marks word starts with "▁"
    # (Metaspace) and usually falls back to byte tokens; GPT-2 style BPE
    # spells bytes as characters (ByteLevel). Conversions without
    # byte_fallback exist, so the Metaspace marks count as well.
    spm_style = bool(model.get("byte_fallback")) or (
        _uses_step(tj, "Metaspace") and not _uses_step(tj, "ByteLevel")
    )
    byte_level_bpe = model.get("type") == "BPE" and not spm_style

    warnings: list[str] = []
    pieces = _Pieces()
    if tj is not None and byte_level_bpe:
        kind = "gpt2"
        pre = _byte_level_pieces(tj, model, pieces, warnings)
    elif (model_dir / "tokenizer.model").is_file():
        kind, pre = "llama", ""
        _sentencepiece_pieces(model_dir, pieces)
    elif tj is not None and model.get("type") == "BPE":
        kind, pre = "llama", ""
        _spm_bpe_pieces(model, pieces)
    elif tj is not None and model.get("type"):
        raise EngineError(
            f"The tokenizer.json in {model_dir} holds a "
            f"{str(model.get('type'))[:40]} model, "
            "which only a SentencePiece tokenizer.model can describe to llama.cpp; "
            "put the model's tokenizer.model beside it."
        )
    else:
        raise EngineError(
            f"{model_dir} has no usable tokenizer (tokenizer.json with a BPE model, "
            "or tokenizer.model); save the tokenizer beside the model."
        )
    _add_added_tokens(tj, pieces)
    return _dense_vocab(pieces, kind, pre, vocab_size, warnings)


@dataclass
class _Pieces:
    """A vocabulary being read, by token id (ids may have gaps)."""

    tokens: dict[int, str] = field(default_factory=dict)
    types: dict[int, int] = field(default_factory=dict)
    scores: dict[int, float] = field(default_factory=dict)


def _load_tokenizer_json(model_dir: Path) -> dict[str, Any] | None:
    """The folder's checked ``tokenizer.json``, or None without one."""
    tj_path = model_dir / "tokenizer.json"
    if not tj_path.is_file():
        return None
    try:
        tj: dict[str, Any] = json.loads(tj_path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise EngineError(f"{tj_path} is not valid JSON ({exc}).") from None
    _check_tokenizer_json(tj, tj_path)
    return tj


def _byte_level_pieces(
    tj: dict[str, Any], model: dict[str, Any], pieces: _Pieces, warnings: list[str]
) -> str:
    """Read a GPT-2 style BPE vocabulary; its llama.cpp pre-tokenizer name."""
    import gguf

    for tok, idx in model.get("vocab", {}).items():
        pieces.tokens[int(idx)] = tok
        pieces.types[int(idx)] = int(gguf.TokenType.NORMAL)
    h = pre_tokenizer_hash(tj.get("pre_tokenizer"))
    pre = KNOWN_PRE_TOKENIZERS.get(h, "")
    if not pre:
        pre = "default"
        warnings.append(
            "The pre-tokenizer in tokenizer.json is not one llama.cpp names "
            f"(hash {h[:12]}); wrote 'default', which may split text differently."
        )
    return pre


def _sentencepiece_pieces(model_dir: Path, pieces: _Pieces) -> None:
    """Read the SentencePiece model itself, as llama.cpp's converter prefers
    it (its scores decide merges in llama.cpp's tokenizer, and the ranks a
    tokenizer.json implies are only a stand-in for them), and
    ``added_tokens.json`` past its end."""
    import gguf

    T = gguf.TokenType
    tokens, types, scores = pieces.tokens, pieces.types, pieces.scores
    for idx, (piece, score, ptype) in enumerate(
        _read_sentencepiece_model(model_dir / "tokenizer.model")
    ):
        tokens[idx] = piece
        scores[idx] = score
        types[idx] = ptype if 1 <= ptype <= 6 else int(T.NORMAL)
    added = model_dir / "added_tokens.json"
    if added.is_file():
        extra = read_json(added)
        if not isinstance(extra, dict) or not all(
            isinstance(i, int) and 0 <= i < _INT_BOUNDS["vocab_size"]
            for i in extra.values()
        ):
            raise EngineError(
                f"{added} is malformed: it must map tokens to whole-number ids."
            )
        for tok, idx in extra.items():
            if int(idx) >= len(tokens):
                tokens[int(idx)] = tok
                scores[int(idx)] = -1000.0
                types[int(idx)] = int(T.USER_DEFINED)


def _spm_bpe_pieces(model: dict[str, Any], pieces: _Pieces) -> None:
    """Read SentencePiece-style BPE saved as tokenizer.json (Llama 2,
    Mistral) as a llama vocabulary, scores by rank."""
    import gguf

    T = gguf.TokenType
    for tok, idx in model.get("vocab", {}).items():
        idx = int(idx)
        pieces.tokens[idx] = tok
        pieces.scores[idx] = -float(idx)
        is_byte = len(tok) == 6 and tok.startswith("<0x") and tok.endswith(">")
        pieces.types[idx] = int(T.BYTE if is_byte else T.NORMAL)
    unk = model.get("unk_token")
    if unk is not None and unk in model.get("vocab", {}):
        pieces.types[int(model["vocab"][unk])] = int(T.UNKNOWN)


def _add_added_tokens(tj: dict[str, Any] | None, pieces: _Pieces) -> None:
    """Put ``tokenizer.json``'s added tokens over the vocabulary read."""
    import gguf

    T = gguf.TokenType
    for added_tok in (tj or {}).get("added_tokens", []):
        idx = int(added_tok["id"])
        pieces.tokens[idx] = added_tok["content"]
        if pieces.types.get(idx) == int(T.UNKNOWN):
            # Llama 2 / Mistral list <unk> among the special added tokens;
            # llama.cpp wants it typed UNKNOWN, as the SentencePiece model has it.
            continue
        pieces.types[idx] = int(
            T.CONTROL if added_tok.get("special") else T.USER_DEFINED
        )
        pieces.scores.setdefault(idx, -1000.0)


def _dense_vocab(
    pieces: _Pieces, kind: str, pre: str, vocab_size: int, warnings: list[str]
) -> _Vocab:
    """The vocabulary as lists, every id up to the embedding's rows (or the
    tokenizer's, if larger) filled, gaps as unused ``[PAD<i>]`` tokens."""
    import gguf

    tokens, types, scores = pieces.tokens, pieces.types, pieces.scores
    n = max(vocab_size, max(tokens) + 1 if tokens else 0)
    if n > vocab_size:
        warnings.append(
            f"The tokenizer has {n} tokens but the model only {vocab_size} embedding "
            "rows; llama.cpp may refuse the file."
        )
    out_tokens, out_types, out_scores = [], [], []
    for i in range(n):
        if i in tokens:
            out_tokens.append(tokens[i])
            out_types.append(types[i])
        else:
            out_tokens.append(f"[PAD{i}]")
            out_types.append(int(gguf.TokenType.UNUSED))
        out_scores.append(scores.get(i, -1000.0 if i not in tokens else 0.0))
    return _Vocab(
        model=kind,
        pre=pre,
        tokens=out_tokens,
        types=out_types,
        scores=out_scores if kind == "llama" else None,
        add_bos_default=kind == "llama",
        warnings=warnings,
    )


def _fill_special_ids(special: Any, vocab: _Vocab, tk_cfg: dict[str, Any]) -> None:
    """Special-token ids ``gguf.SpecialVocab`` could not find.

    It maps ``tokenizer_config.json``'s token strings to ids through
    ``tokenizer.json`` only, so a folder with just a SentencePiece
    ``tokenizer.model`` loses them (``config.json`` names bos/eos at most).
    Look the strings up in the vocabulary written here, and take the unknown
    token from the piece typed UNKNOWN, as SentencePiece does.
    """
    import gguf

    index = {tok: i for i, tok in enumerate(vocab.tokens)}
    for typ in ("bos", "eos", "unk", "pad"):
        if typ in special.special_token_ids:
            continue
        value = tk_cfg.get(f"{typ}_token")
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str) and value in index:
            special.special_token_ids[typ] = index[value]
    if "unk" not in special.special_token_ids:
        unknown = int(gguf.TokenType.UNKNOWN)
        for i, kind in enumerate(vocab.types):
            if kind == unknown:
                special.special_token_ids["unk"] = i
                break


# --------------------------------------------------------------------------
# writing


@dataclass
class _Planned:
    name: str
    """GGUF tensor name."""
    source: _StTensor | None
    qtype: Any
    """gguf.GGMLQuantizationType to write."""
    shape: tuple[int, ...]
    """numpy-order shape of the values."""
    nbytes: int
    transform: Callable[[np.ndarray], np.ndarray] | None = None
    """Whole-tensor transform applied before conversion (Q/K permutation)."""
    data: np.ndarray | None = None
    """Values computed here rather than read (rope factors)."""
    importance: np.ndarray | None = None
    """Per-column importance the K-quant is weighted by (an imatrix entry)."""
    source_name: str = ""
    """The tensor's name in the source checkpoint, for error messages."""


def _qtype(name: str) -> Any:
    """The GGML type of a file type: a K-quant mix's default (Q4_K for
    q4_k_m), which ``_KMix`` changes per tensor."""
    import gguf

    key = name.lower()
    if key not in GGUF_TYPES:
        raise EngineError(
            f"Unknown GGUF type {name!r}; choose one of {', '.join(GGUF_TYPES)} "
            "(upper or lower case)."
        )
    if key in K_FILE_TYPES:
        return gguf.GGMLQuantizationType[key[:4].upper()]
    return gguf.GGMLQuantizationType[key.upper()]


@dataclass(frozen=True)
class _KMix:
    """What llama.cpp's per-tensor choice of a K-quant file type needs."""

    file_type: str
    n_layers: int
    n_gqa: int
    tied: bool


def _file_type(name: str) -> int:
    import gguf

    ft = gguf.LlamaFileType
    if name in K_FILE_TYPES:
        return int(ft["MOSTLY_" + name.upper()])
    return int(
        {
            "f32": ft.ALL_F32,
            "f16": ft.MOSTLY_F16,
            "bf16": ft.MOSTLY_BF16,
            "q8_0": ft.MOSTLY_Q8_0,
            "q4_0": ft.MOSTLY_Q4_0,
            "q4_1": ft.MOSTLY_Q4_1,
            "q5_0": ft.MOSTLY_Q5_0,
            "q5_1": ft.MOSTLY_Q5_1,
        }[name]
    )


def _plan_type(
    name: str,
    shape: tuple[int, ...],
    want: Any,
    fallbacks: list[str],
    mix: _KMix | None = None,
) -> tuple[Any, int]:
    """The GGML type and byte size for one tensor; where its rows do not fit
    the type's blocks, the fallback (llama.cpp's for K types, F16 for the
    others), noted in ``fallbacks``."""
    import gguf

    from engine.export import kquants

    Q = gguf.GGMLQuantizationType
    n = math.prod(shape)
    if len(shape) <= 1 or name.endswith("_norm.weight") or name.endswith(".bias"):
        return Q.F32, n * 4
    if mix is not None:
        want = Q[
            kquants.mix_type(mix.file_type, name, mix.n_layers, mix.n_gqa, mix.tied)
        ]
    if want in (Q.F32, Q.F16):
        return want, n * (4 if want == Q.F32 else 2)
    block, type_size = gguf.GGML_QUANT_SIZES[want]
    if shape[-1] % block != 0:
        if want.name in kquants.FALLBACK:
            written = Q[kquants.fit_rows(want.name, shape[-1])]
        else:
            written = Q.F16
        fallbacks.append(f"{name}: {want.name} → {written.name}")
        if written == Q.F16:
            return Q.F16, n * 2
        block, type_size = gguf.GGML_QUANT_SIZES[written]
        return written, n // block * type_size
    return want, n // block * type_size


def _convert_chunk(
    values: np.ndarray,
    qtype: Any,
    importance: np.ndarray | None = None,
    threads: int | None = None,
) -> np.ndarray:
    """Rows in ``qtype``; K-quants on ``threads`` threads (all cores unless
    given)."""
    import gguf

    Q = gguf.GGMLQuantizationType
    if qtype == Q.F32:
        return np.ascontiguousarray(values, dtype=np.float32)
    if qtype == Q.F16:
        return np.ascontiguousarray(values, dtype=np.float16)
    from engine.export import kquants

    if importance is not None:
        from engine.export import kquants_imatrix

        if qtype.name in kquants.QUANTIZERS:
            return kquants_imatrix.quantize_weighted(
                values, qtype.name, importance, threads
            )
        return kquants_imatrix.quantize_legacy_weighted(values, qtype.name, importance)
    if qtype.name in kquants.QUANTIZERS:
        return kquants.quantize(values, qtype.name, threads)
    return gguf.quants.quantize(np.ascontiguousarray(values, dtype=np.float32), qtype)


def _bits_per_weight(planned: list[_Planned]) -> float:
    values = sum(math.prod(p.shape) for p in planned)
    return 8 * sum(p.nbytes for p in planned) / max(1, values)


def _check_free_space(target_dir: Path, needed: int) -> None:
    try:
        free = shutil.disk_usage(target_dir).free
    except OSError:
        return
    if free < needed + 16 * 1024 * 1024:
        raise EngineError(
            f"Not enough disk space in {target_dir}: the export needs about "
            f"{needed / 1e6:.0f} MB and {free / 1e6:.0f} MB are free."
        )


#: Row spans converting at once, each K-quant span on its share of the
#: cores (two spans of two threads each on two cores cost 15-30 % more CPU
#: on a loaded machine than the same work on two threads).
_SPAN_WORKERS = min(2, os.cpu_count() or 1)
_SPAN_THREADS = max(1, (os.cpu_count() or 1) // _SPAN_WORKERS)
#: Spans converting or converted ahead of the writer: more than the workers,
#: so a worker done with a small span starts the next while a large one runs.
_SPANS_AHEAD = 2 * _SPAN_WORKERS


@dataclass
class _Span:
    """Rows ``r0:r1`` of a planned tensor's ``rows`` (n_rows in all) to
    convert and write; ``done`` is the progress once they are written."""

    planned: _Planned
    rows: np.ndarray
    src_dtype: str
    r0: int
    r1: int
    n_rows: int
    done: int


def _spans(planned: list[_Planned], pool: _MemmapPool) -> Iterator[_Span]:
    """Every planned tensor's data as row spans of at most
    ``_CHUNK_ELEMENTS`` values, in file order (one empty span for a tensor
    without rows)."""
    done = 0
    for p in planned:
        if p.data is not None:
            values = p.data
            src_dtype = "F32"
        else:
            assert p.source is not None
            values = pool.array(p.source)
            src_dtype = p.source.dtype
            if p.transform is not None:
                values = p.transform(_to_f32(values, src_dtype))
                src_dtype = "F32"
        rows = values.reshape(-1, values.shape[-1]) if values.ndim > 1 else values[None]
        step = max(1, _CHUNK_ELEMENTS // max(1, rows.shape[-1]))
        n_rows = rows.shape[0]
        weight = p.source.nbytes if p.source is not None else p.nbytes
        if n_rows == 0:
            yield _Span(p, rows, src_dtype, 0, 0, 0, done)
        for r0 in range(0, n_rows, step):
            r1 = min(r0 + step, n_rows)
            yield _Span(
                p, rows, src_dtype, r0, r1, n_rows, done + weight * r1 // n_rows
            )
        done += weight


def _convert_span(span: _Span) -> np.ndarray:
    """A span's rows in its tensor's GGUF type, as contiguous bytes."""
    if span.r1 == span.r0:
        return np.empty(0, np.uint8)
    chunk = _to_f32(np.asarray(span.rows[span.r0 : span.r1]), span.src_dtype)
    p = span.planned
    # min and max propagate NaN, and take no temporary the size of the chunk.
    if chunk.size and not (
        float(chunk.min()) >= -_WEIGHT_LIMIT and float(chunk.max()) <= _WEIGHT_LIMIT
    ):
        bad = ~(np.abs(chunk) <= _WEIGHT_LIMIT)
        row = int(np.argmax(bad.reshape(len(chunk), -1).any(axis=1)))
        value = float(chunk[bad].flat[0])
        raise EngineError(
            f"Tensor {p.source_name or p.name} holds {value:g} in row "
            f"{span.r0 + row}; a weight that is NaN, infinite or beyond "
            f"±{_WEIGHT_LIMIT:g} means "
            "a broken checkpoint, and nothing was written."
        )
    return np.ascontiguousarray(
        _convert_chunk(chunk, p.qtype, p.importance, _SPAN_THREADS)
    )


def _write_gguf(
    out_path: Path,
    writer_setup: Callable[[Any], None],
    arch: str,
    planned: list[_Planned],
    pool: _MemmapPool,
    progress: Progress | None,
) -> None:
    """Declare everything, then stream tensor data into a temporary file and
    rename it over ``out_path``. Removes the temporary file on any failure."""
    import gguf

    make_parent_folder(out_path)
    needed = sum(p.nbytes for p in planned) + 1024 * 1024
    _check_free_space(out_path.parent, needed)
    tmp = temp_path(out_path)
    total = sum(p.source.nbytes if p.source else p.nbytes for p in planned) or 1
    writer = gguf.GGUFWriter(tmp, arch)
    try:
        writer_setup(writer)
        _declare_tensors(writer, planned)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        assert writer.fout is not None
        fout = writer.fout[0]
        _stream_tensor_data(writer, fout, planned, pool, progress, total)
        fout.flush()
        os.fsync(fout.fileno())
        writer.close()
        _replace_durably(tmp, out_path)
        if progress is not None:
            progress(total, total, "done")
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise EngineError(
                f"The disk holding {out_path.parent} is full; free about "
                f"{needed / 1e6:.0f} MB and export again."
            ) from None
        raise EngineError(
            f"Could not write {out_path}: {exc.strerror or exc}."
        ) from None
    finally:
        # Closing flushes: on a full disk that raises again, and must not
        # replace the one-sentence error above.
        with contextlib.suppress(OSError):
            writer.close()
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _declare_tensors(writer: Any, planned: list[_Planned]) -> None:
    """Each planned tensor's name, shape, type and size, in file order."""
    import gguf

    for p in planned:
        if p.qtype in (
            gguf.GGMLQuantizationType.F32,
            gguf.GGMLQuantizationType.F16,
        ):
            dt = np.float32 if p.qtype == gguf.GGMLQuantizationType.F32 else np.float16
            writer.add_tensor_info(p.name, p.shape, np.dtype(dt), p.nbytes)
        else:
            byte_shape = gguf.quant_shape_to_byte_shape(p.shape, p.qtype)
            writer.add_tensor_info(
                p.name, byte_shape, np.dtype(np.uint8), p.nbytes, raw_dtype=p.qtype
            )


def _stream_tensor_data(
    writer: Any,
    fout: Any,
    planned: list[_Planned],
    pool: _MemmapPool,
    progress: Progress | None,
    total: int,
) -> None:
    """Convert every tensor span by span and write it, padded, in order.

    The next spans convert on threads (numpy releases the GIL) while this
    one is written; each tensor's bytes are checked against its declared
    size and its source released once written."""
    written = 0
    with ThreadPoolExecutor(_SPAN_WORKERS) as ahead_pool:
        ahead: deque[tuple[_Span, Future[np.ndarray]]] = deque()

        def write_next() -> None:
            nonlocal written
            span, future = ahead.popleft()
            p = span.planned
            if span.r0 == 0:
                writer.write_padding(fout, fout.tell())
                written = 0
            data = future.result()
            # file.write, not ndarray.tofile: tofile reports a full disk
            # as "N requested and M written" with no errno, so ENOSPC
            # could not be told apart from any other failure.
            fout.write(data.data)
            written += data.nbytes
            if progress is not None and span.r1 > span.r0:
                progress(min(span.done, total), total, p.name)
            if span.r1 == span.n_rows:
                if p.source is not None:
                    pool.release(p.source)
                if written != p.nbytes:
                    raise RuntimeError(
                        f"{p.name}: wrote {written} bytes, declared {p.nbytes}"
                    )
                writer.write_padding(fout, written)

        try:
            for span in _spans(planned, pool):
                ahead.append((span, ahead_pool.submit(_convert_span, span)))
                if len(ahead) > _SPANS_AHEAD:
                    write_next()
            while ahead:
                write_next()
        finally:
            for _, future in ahead:
                future.cancel()


def _replace_durably(tmp: Path, out_path: Path) -> None:
    """Rename the finished ``tmp`` over ``out_path`` and sync the folder, so
    the rename survives a crash."""
    os.replace(tmp, out_path)
    with contextlib.suppress(OSError):
        dir_fd = os.open(out_path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


# --------------------------------------------------------------------------
# verification


_GGUF_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_GGUF_NP = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4",
            7: "<u1", 10: "<u8", 11: "<i8", 12: "<f8"}  # fmt: skip


def read_gguf_header(
    path: str | os.PathLike[str],
) -> tuple[dict[str, Any], list[tuple[str, tuple[int, ...], int]]]:
    """Key/values and tensor infos (name, numpy-order shape, GGML type) of a
    GGUF file, parsed with ``struct`` over a memory map.

    ``gguf.GGUFReader`` builds a numpy view per array element, which takes
    tens of seconds on a 150k-token vocabulary; this reads the same header in
    well under a second. Raises ``ValueError`` on a malformed file.
    """
    import mmap

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        buf = memoryview(m)
        try:
            if bytes(buf[:4]) != b"GGUF":
                raise ValueError("not a GGUF file (bad magic)")
            version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
            if version not in (2, 3):
                raise ValueError(f"unsupported GGUF version {version}")
            pos = 24

            def read_str(p: int) -> tuple[str, int]:
                (n,) = struct.unpack_from("<Q", buf, p)
                p += 8
                return bytes(buf[p : p + n]).decode("utf-8", "replace"), p + n

            def read_val(vtype: int, p: int) -> tuple[Any, int]:
                if vtype == 8:
                    return read_str(p)
                if vtype in _GGUF_SCALARS:
                    fmt = _GGUF_SCALARS[vtype]
                    return struct.unpack_from(fmt, buf, p)[0], p + struct.calcsize(fmt)
                if vtype == 9:
                    sub, count = struct.unpack_from("<IQ", buf, p)
                    p += 12
                    if sub in _GGUF_NP:
                        dt = np.dtype(_GGUF_NP[sub])
                        arr = np.frombuffer(buf, dtype=dt, count=count, offset=p)
                        return arr.tolist(), p + count * dt.itemsize
                    items = []
                    for _ in range(count):
                        v, p = read_val(sub, p)
                        items.append(v)
                    return items, p
                raise ValueError(f"unknown value type {vtype}")

            kv: dict[str, Any] = {}
            for _ in range(n_kv):
                key, pos = read_str(pos)
                (vtype,) = struct.unpack_from("<I", buf, pos)
                kv[key], pos = read_val(vtype, pos + 4)
            tensors: list[tuple[str, tuple[int, ...], int]] = []
            for _ in range(n_tensors):
                name, pos = read_str(pos)
                (n_dims,) = struct.unpack_from("<I", buf, pos)
                dims = struct.unpack_from(f"<{n_dims}Q", buf, pos + 4)
                pos += 4 + 8 * n_dims
                ttype, _offset = struct.unpack_from("<IQ", buf, pos)
                pos += 12
                tensors.append(
                    (name, tuple(int(d) for d in reversed(dims)), int(ttype))
                )
            return kv, tensors
        except struct.error as exc:
            raise ValueError(f"truncated header ({exc})") from None
        finally:
            buf.release()


def verify_gguf(
    path: Path,
    required_keys: list[str],
    tensors: dict[str, tuple[int, ...]],
    expected_kv: dict[str, Any] | None = None,
) -> tuple[bool, list[str]]:
    """Read ``path`` back: every key in ``required_keys`` present, the values
    of ``expected_kv`` as the config gave them (floats as float32), the
    tensor count, names and numpy-order shapes as declared, and the file as
    long as its last tensor's data. Returns (ok, checks)."""
    import gguf

    checks: list[str] = []
    try:
        kv, infos = read_gguf_header(path)
    except (ValueError, OSError) as exc:
        return False, [f"unreadable: {exc}"]
    missing = [k for k in required_keys if k not in kv]
    checks.append(
        f"{len(required_keys) - len(missing)}/{len(required_keys)} required keys"
        + (f" (missing {', '.join(missing)})" if missing else "")
    )
    differ: list[str] = []
    for key, want in (expected_kv or {}).items():
        got = kv.get(key)
        if isinstance(want, float):
            same = isinstance(got, float) and got == float(np.float32(want))
        else:
            same = got == want
        if not same:
            differ.append(f"{key} {quoted(got, 40)} != {quoted(want, 40)}")
    if expected_kv:
        checks.append(
            f"{len(expected_kv)} hyperparameters as configured"
            if not differ
            else f"hyperparameters differ: {'; '.join(differ[:3])}"
        )
    count_ok = len(infos) == len(tensors)
    checks.append(f"{len(infos)}/{len(tensors)} tensors")
    bad: list[str] = []
    for name, shape, _ttype in infos:
        want = tensors.get(name)
        if want is None or tuple(want) != shape:
            bad.append(f"{name} {shape} != {want}")
    checks.append(
        "all shapes match" if not bad else f"shape mismatch: {'; '.join(bad[:3])}"
    )
    # The data section must hold every tensor: size = aligned header + data.
    data_bytes = 0
    for _name, shape, ttype in infos:
        block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ttype)]
        nbytes = math.prod(shape) // block * type_size
        data_bytes += (nbytes + 31) // 32 * 32
    size_ok = Path(path).stat().st_size >= data_bytes
    if not size_ok:
        checks.append("file shorter than its tensor data")
    return (not missing and not differ and count_ok and not bad and size_ok), checks


def _name_map(hp: _Hparams) -> Any:
    import gguf

    arch_enum = {
        "llama": gguf.MODEL_ARCH.LLAMA,
        "qwen2": gguf.MODEL_ARCH.QWEN2,
        "qwen3": gguf.MODEL_ARCH.QWEN3,
    }[hp.arch]
    return gguf.get_tensor_name_map(arch_enum, hp.n_layers)


# --------------------------------------------------------------------------
# public API


def gguf_tensor_namer(model_dir: str | os.PathLike[str]) -> Callable[[str], str | None]:
    """The GGUF name ``export_gguf`` gives each Hugging Face tensor of the
    model in ``model_dir`` (``model.layers.0.self_attn.q_proj.weight`` →
    ``blk.0.attn_q.weight``); None for a name it has no GGUF name for."""
    model_dir = Path(model_dir)
    name_map = _name_map(_hparams(_read_config(model_dir), model_dir))

    def name(hf_name: str) -> str | None:
        found: str | None = name_map.get_name(
            hf_name, try_suffixes=(".weight", ".bias")
        )
        return found

    return name


def export_gguf(
    model_dir: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    gguf_type: str = "f16",
    progress: Progress | None = None,
    name: str | None = None,
    imatrix: Imatrix | None = None,
) -> ExportReport:
    """Convert a Hugging Face causal-LM folder to one GGUF file.

    ``gguf_type`` is one of ``GGUF_TYPES``. ``imatrix`` (K-quant types only,
    from ``engine.export.imatrix.collect_imatrix``) weights the K-quant
    tensors it has an entry for, as ``llama-quantize --imatrix`` does,
    their Q4_0/Q4_1/Q5_0/Q5_1 fallbacks included (Q8_0 and F16 take no
    weights). Raises
    ``EngineError`` with one sentence for anything that cannot be exported,
    before any file is written.
    """
    t0 = time.perf_counter()
    model_dir = Path(model_dir)
    out_path = Path(out_path)
    gguf_type = gguf_type.lower()
    want = _qtype(gguf_type)
    problem = imatrix_problem(gguf_type) if imatrix is not None else None
    if problem:
        raise EngineError(problem)
    cfg = _read_config(model_dir)
    hp = _hparams(cfg, model_dir)
    st = _load_safetensors_index(model_dir)
    has_lm_head = "lm_head.weight" in st
    tie = hp.tie or not has_lm_head
    _check_tensors_against_config(hp, cfg, st, model_dir, with_lm_head=not tie)
    vocab = _read_vocab(model_dir, hp.vocab_size)
    warnings = list(vocab.warnings)

    fallbacks: list[str] = []
    mix = (
        _KMix(gguf_type, hp.n_layers, max(1, hp.n_head // hp.n_head_kv), tie)
        if gguf_type in K_FILE_TYPES
        else None
    )
    planned = _plan_model_tensors(hp, st, model_dir, tie, want, mix, imatrix, fallbacks)
    special = _special_vocab(model_dir, vocab, warnings)
    model_name = name or cfg.get("_name_or_path") or model_dir.name
    if "/" in str(model_name) or os.sep in str(model_name):
        model_name = Path(str(model_name)).name or model_dir.name

    def setup(w: Any) -> None:
        _add_model_metadata(w, hp, vocab, special, str(model_name), gguf_type)

    _write_planned(out_path, setup, hp.arch, planned, progress)
    ok, checks = _verify_model_file(out_path, hp, vocab, planned, gguf_type)
    report = _written_report(
        "model",
        out_path,
        hp.arch,
        gguf_type,
        planned,
        t0,
        fallbacks,
        ok,
        checks,
        warnings=warnings,
        tokenizer_model=vocab.model,
        tokenizer_pre=vocab.pre,
        vocab_size=len(vocab.tokens),
        imatrix=(
            {
                **imatrix.summary(),
                "weighted": sum(p.importance is not None for p in planned),
            }
            if imatrix is not None
            else {}
        ),
    )
    for w in report.warnings:
        log.warning(w)
    return report


def _written_report(
    kind: str,
    out_path: Path,
    arch: str,
    gguf_type: str,
    planned: list[_Planned],
    t0: float,
    fallbacks: list[str],
    ok: bool,
    checks: list[str],
    *,
    warnings: Sequence[str] = (),
    **details: Any,
) -> ExportReport:
    """The report of the ``kind`` GGUF written at ``out_path`` from
    ``planned`` since ``t0``, with what reading it back found (``ok``,
    ``checks``); ``details``, the kind's own fields."""
    warnings = list(warnings)
    if not ok:
        warnings.append("Reading the file back found problems: " + "; ".join(checks))
    return ExportReport(
        path=str(out_path),
        kind=kind,
        architecture=arch,
        file_type=gguf_type,
        tensor_count=len(planned),
        size_bytes=out_path.stat().st_size,
        source_bytes=sum(p.source.nbytes for p in planned if p.source),
        seconds=time.perf_counter() - t0,
        tensor_types=dict(Counter(p.qtype.name for p in planned)),
        fallbacks=fallbacks,
        bits_per_weight=_bits_per_weight(planned),
        warnings=warnings,
        verified=ok,
        checks=checks,
        **details,
    )


def _permuter(n_head: int) -> Callable[[np.ndarray], np.ndarray]:
    """The Q or K rows' permutation into GGML's rotary layout."""

    def transform(w: np.ndarray) -> np.ndarray:
        return _permute(w, n_head)

    return transform


def _plan_model_tensors(
    hp: _Hparams,
    st: dict[str, _StTensor],
    model_dir: Path,
    tie: bool,
    want: Any,
    mix: _KMix | None,
    imatrix: Imatrix | None,
    fallbacks: list[str],
) -> list[_Planned]:
    """Every tensor to write, named, typed and sized, in llama.cpp's order;
    Llama's rope factors included. Refuses a tensor without a GGUF name."""
    name_map = _name_map(hp)
    planned: list[_Planned] = []
    for hf_name in st:
        if hf_name.endswith("rotary_emb.inv_freq"):
            continue
        if hf_name == "lm_head.weight" and tie:
            continue
        gname = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gname is None:
            raise EngineError(
                f"Tensor {hf_name} of {model_dir} has no GGUF name for {hp.arch}; "
                "this checkpoint is not a plain "
                f"{hp.hf_arch} and cannot be exported."
            )
        src = st[hf_name]
        transform: Callable[[np.ndarray], np.ndarray] | None = None
        if hp.arch == "llama" and hf_name.endswith(("q_proj.weight", "q_proj.bias")):
            transform = _permuter(hp.n_head)
        elif hp.arch == "llama" and hf_name.endswith(("k_proj.weight", "k_proj.bias")):
            transform = _permuter(hp.n_head_kv)
        _check_dtype(src, hf_name)
        qt, nbytes = _plan_type(gname, src.shape, want, fallbacks, mix)
        importance = imatrix.weights.get(gname) if imatrix is not None else None
        if (
            importance is None
            or qt.name not in _WEIGHTED_TYPES
            or importance.shape != (src.shape[-1],)
        ):
            importance = None
        planned.append(
            _Planned(
                gname,
                src,
                qt,
                src.shape,
                nbytes,
                transform,
                importance=importance,
                source_name=hf_name,
            )
        )

    factors = _llama3_rope_factors(hp) if hp.arch == "llama" else None
    if factors is not None:
        import gguf

        planned.append(
            _Planned(
                gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight",
                None,
                gguf.GGMLQuantizationType.F32,
                factors.shape,
                factors.nbytes,
                data=factors,
            )
        )

    # llama.cpp's order: token embedding first, blocks by index, output last.
    def order(p: _Planned) -> tuple[int, int, str]:
        if p.name.startswith("blk."):
            return (1, int(p.name.split(".")[1]), p.name)
        return (0 if p.name.startswith(("token_embd", "rope_freqs")) else 2, 0, p.name)

    planned.sort(key=order)
    return planned


def _special_vocab(model_dir: Path, vocab: _Vocab, warnings: list[str]) -> Any:
    """``gguf.SpecialVocab`` of the folder: special-token ids (filled in from
    the vocabulary where it misses them), whether to add BOS, merges and
    the chat template; a warning when there is no template."""
    import gguf

    special = gguf.SpecialVocab(
        model_dir, load_merges=vocab.model == "gpt2", n_vocab=len(vocab.tokens)
    )
    tk_cfg_path = model_dir / "tokenizer_config.json"
    tk_cfg: dict[str, Any] = {}
    if tk_cfg_path.is_file():
        with contextlib.suppress(ValueError):
            tk_cfg = json.loads(tk_cfg_path.read_text(encoding="utf-8"))
    _fill_special_ids(special, vocab, tk_cfg)
    add_bos = special.add_special_token.get("bos")
    if add_bos is None:
        add_bos = tk_cfg.get("add_bos_token")
    if not isinstance(add_bos, bool):
        add_bos = vocab.add_bos_default
    special.add_special_token["bos"] = add_bos
    if special.chat_template is None:
        warnings.append("The tokenizer has no chat template; Ollama needs a TEMPLATE.")
    return special


def _add_model_metadata(
    w: Any,
    hp: _Hparams,
    vocab: _Vocab,
    special: Any,
    model_name: str,
    gguf_type: str,
) -> None:
    """A model file's key-value pairs: hyperparameters, rope scaling, file
    type and the tokenizer, in llama.cpp's converter's order."""
    import gguf

    w.add_type("model")
    w.add_name(model_name)
    w.add_context_length(hp.ctx)
    w.add_embedding_length(hp.hidden)
    w.add_block_count(hp.n_layers)
    w.add_feed_forward_length(hp.ffn)
    w.add_head_count(hp.n_head)
    w.add_head_count_kv(hp.n_head_kv)
    w.add_layer_norm_rms_eps(hp.eps)
    w.add_rope_freq_base(hp.rope_theta)
    w.add_vocab_size(len(vocab.tokens))
    if hp.arch == "llama":
        w.add_rope_dimension_count(hp.head_dim)
    if hp.head_dim_explicit:
        w.add_key_length(hp.head_dim)
        w.add_value_length(hp.head_dim)
    rope_type = str(hp.rope.get("rope_type", hp.rope.get("type", "default"))).lower()
    if rope_type == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(hp.rope["factor"]))
    elif rope_type == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(float(hp.rope["factor"]))
        orig = hp.rope.get("original_max_position_embeddings")
        if orig:
            w.add_rope_scaling_orig_ctx_len(int(orig))
    w.add_file_type(_file_type(gguf_type))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_tokenizer_model(vocab.model)
    if vocab.pre:
        w.add_tokenizer_pre(vocab.pre)
    w.add_token_list(vocab.tokens)
    w.add_token_types(vocab.types)
    if vocab.scores is not None:
        w.add_token_scores(vocab.scores)
    special.add_to_gguf(w, quiet=True)


def _write_planned(
    out_path: Path,
    setup: Callable[[Any], None],
    arch: str,
    planned: list[_Planned],
    progress: Progress | None,
) -> None:
    """Write the file with its source files mapped for the while."""
    pool = _MemmapPool()
    try:
        _write_gguf(out_path, setup, arch, planned, pool, progress)
    finally:
        pool.close()


def _verify_model_file(
    out_path: Path,
    hp: _Hparams,
    vocab: _Vocab,
    planned: list[_Planned],
    gguf_type: str,
) -> tuple[bool, list[str]]:
    """Read the written model file back: the keys llama.cpp needs, the
    hyperparameters as configured and the tensors' shapes."""
    a = hp.arch
    required = [
        "general.architecture",
        "general.file_type",
        "general.quantization_version",
        f"{a}.context_length",
        f"{a}.embedding_length",
        f"{a}.block_count",
        f"{a}.feed_forward_length",
        f"{a}.attention.head_count",
        f"{a}.attention.head_count_kv",
        f"{a}.rope.freq_base",
        f"{a}.attention.layer_norm_rms_epsilon",
        "tokenizer.ggml.model",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.token_type",
        "tokenizer.ggml.add_bos_token",
    ]
    if hp.head_dim_explicit:
        required += [f"{a}.attention.key_length", f"{a}.attention.value_length"]
    if vocab.model == "gpt2":
        required += ["tokenizer.ggml.pre", "tokenizer.ggml.merges"]
    configured: dict[str, Any] = {
        "general.architecture": a,
        "general.file_type": _file_type(gguf_type),
        f"{a}.context_length": hp.ctx,
        f"{a}.embedding_length": hp.hidden,
        f"{a}.block_count": hp.n_layers,
        f"{a}.feed_forward_length": hp.ffn,
        f"{a}.attention.head_count": hp.n_head,
        f"{a}.attention.head_count_kv": hp.n_head_kv,
        f"{a}.rope.freq_base": hp.rope_theta,
        f"{a}.attention.layer_norm_rms_epsilon": hp.eps,
    }
    if hp.head_dim_explicit:
        configured[f"{a}.attention.key_length"] = hp.head_dim
        configured[f"{a}.attention.value_length"] = hp.head_dim
    # The shapes the config implies, not the ones read from the weights
    # (checked against each other before writing, compared again here).
    want_shapes = {p.name: p.shape for p in planned}
    want_shapes["token_embd.weight"] = (hp.vocab_size, hp.hidden)
    want_shapes[f"blk.{hp.n_layers - 1}.ffn_down.weight"] = (hp.hidden, hp.ffn)
    return verify_gguf(out_path, required, want_shapes, configured)


def _find_base_dir(
    adapter_dir: Path, adapter_cfg: dict[str, Any], base: Path | None
) -> Path:
    if base is not None:
        return Path(base)
    ref = adapter_cfg.get("base_model_name_or_path")
    if ref:
        for cand in (Path(ref), adapter_dir / ref, adapter_dir.parent / ref):
            if (cand / "config.json").is_file():
                return cand
    raise EngineError(
        f"The base model of the adapter in {adapter_dir} ({ref or 'unknown'}) is not a "
        "local folder; pass the base model folder."
    )


def export_lora_gguf(
    adapter_dir: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    gguf_type: str = "f16",
    base_model_dir: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> ExportReport:
    """Convert a PEFT LoRA folder (``adapter_config.json`` +
    ``adapter_model.safetensors``) to a GGUF LoRA adapter for llama.cpp's
    ``--lora`` and Ollama's ``ADAPTER``.

    The base model's config (architecture, heads, layers) comes from
    ``base_model_dir`` or from ``base_model_name_or_path`` when it is a local
    folder.
    """
    import gguf

    t0 = time.perf_counter()
    adapter_dir = Path(adapter_dir)
    out_path = Path(out_path)
    gguf_type = gguf_type.lower()
    problem = adapter_type_problem(gguf_type)
    if problem:
        raise EngineError(problem)
    want = _qtype(gguf_type)
    acfg, weights = _read_adapter_config(adapter_dir)
    base_dir = _find_base_dir(
        adapter_dir, acfg, Path(base_model_dir) if base_model_dir else None
    )
    hp = _hparams(_read_config(base_dir), base_dir)
    alpha = _lora_alpha(acfg)
    st = _read_safetensors_header(weights)
    fallbacks: list[str] = []
    planned = _plan_lora_tensors(hp, st, want, fallbacks)
    if not planned:
        raise EngineError(f"The adapter in {adapter_dir} holds no LoRA tensors.")

    def setup(w: Any) -> None:
        w.add_type(gguf.GGUFType.ADAPTER)
        w.add_name(adapter_dir.name)
        w.add_string(gguf.Keys.Adapter.TYPE, "lora")
        w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
        w.add_file_type(_file_type(gguf_type))
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    _write_planned(out_path, setup, hp.arch, planned, progress)
    required = [
        "general.architecture",
        "general.type",
        "adapter.type",
        "adapter.lora.alpha",
    ]
    ok, checks = verify_gguf(out_path, required, {p.name: p.shape for p in planned})
    return _written_report(
        "adapter", out_path, hp.arch, gguf_type, planned, t0, fallbacks, ok, checks
    )


def _read_adapter_config(adapter_dir: Path) -> tuple[dict[str, Any], Path]:
    """A PEFT adapter folder's ``adapter_config.json`` and its weights file;
    refuses anything but a plain LoRA adapter."""
    if not adapter_dir.is_dir():
        raise EngineError(f"The adapter folder {adapter_dir} does not exist.")
    cfg_path = adapter_dir / "adapter_config.json"
    weights = adapter_dir / "adapter_model.safetensors"
    if not cfg_path.is_file():
        raise EngineError(
            f"{adapter_dir} has no adapter_config.json, so it is not a PEFT adapter."
        )
    if not weights.is_file():
        raise EngineError(f"{adapter_dir} has no adapter_model.safetensors.")
    try:
        acfg: dict[str, Any] = json.loads(cfg_path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise EngineError(f"{cfg_path} is not valid JSON ({exc}).") from None
    if str(acfg.get("peft_type", "LORA")).upper() != "LORA":
        raise EngineError(
            f"Only LoRA adapters can be exported, not {acfg.get('peft_type')}."
        )
    if acfg.get("use_dora"):
        raise EngineError(
            "DoRA adapters cannot be written as GGUF; merge the adapter instead."
        )
    return acfg, weights


def _lora_alpha(acfg: dict[str, Any]) -> float:
    """The adapter's alpha as llama.cpp scales it (by alpha / r); refuses
    per-module ranks or alphas, which one GGUF adapter cannot hold."""
    rank = int(acfg.get("r", 8))
    alpha = float(acfg.get("lora_alpha", rank))
    if acfg.get("use_rslora"):
        # PEFT scales by alpha / sqrt(r); llama.cpp by alpha / r.
        alpha = alpha * math.sqrt(rank)
    if acfg.get("rank_pattern") or acfg.get("alpha_pattern"):
        raise EngineError(
            "Adapters with per-module rank_pattern/alpha_pattern cannot be "
            "written as one "
            "GGUF adapter; merge the adapter instead."
        )
    return alpha


def _lora_pairs(st: dict[str, _StTensor]) -> dict[str, dict[str, str]]:
    """The adapter's tensors by the base tensor they change: ``{"a": ...,
    "b": ...}`` keys. Refuses a full tensor (modules_to_save)."""
    pairs: dict[str, dict[str, str]] = {}
    for key in st:
        if ".lora_A." in key or ".lora_B." in key:
            which = "a" if ".lora_A." in key else "b"
            base_key = key.replace(".lora_A", "").replace(".lora_B", "")
            base_key = base_key.removeprefix("base_model.model.")
            pairs.setdefault(base_key, {})[which] = key
        else:
            raise EngineError(
                f"The adapter holds a full tensor {key} (modules_to_save or "
                "embeddings); "
                "only LoRA pairs can be written as a GGUF adapter, merge it instead."
            )
    return pairs


def _plan_lora_tensors(
    hp: _Hparams, st: dict[str, _StTensor], want: Any, fallbacks: list[str]
) -> list[_Planned]:
    """Each LoRA pair as ``<gguf name>.lora_a`` and ``.lora_b``, by base
    tensor name; Llama's Q and K ``B`` halves permuted as their weights."""
    name_map = _name_map(hp)
    planned: list[_Planned] = []
    for base_key, pair in sorted(_lora_pairs(st).items()):
        if set(pair) != {"a", "b"}:
            raise EngineError(f"The adapter tensor {base_key} has only one LoRA half.")
        if "embed_tokens" in base_key:
            raise EngineError(
                "LoRA on embed_tokens cannot be written as a GGUF adapter; merge "
                "it instead."
            )
        gname = name_map.get_name(base_key, try_suffixes=(".weight", ".bias"))
        if gname is None:
            raise EngineError(
                f"The adapter targets {base_key}, which has no GGUF name."
            )
        a_src, b_src = st[pair["a"]], st[pair["b"]]
        _check_dtype(a_src, pair["a"])
        _check_dtype(b_src, pair["b"])
        b_transform = None
        if hp.arch == "llama" and "q_proj" in base_key:
            b_transform = _permuter(hp.n_head)
        elif hp.arch == "llama" and "k_proj" in base_key:
            b_transform = _permuter(hp.n_head_kv)
        for suffix, src, tr in (
            (".lora_a", a_src, None),
            (".lora_b", b_src, b_transform),
        ):
            nm = gname + suffix
            qt, nbytes = _plan_type(nm, src.shape, want, fallbacks)
            planned.append(
                _Planned(
                    nm, src, qt, src.shape, nbytes, tr, source_name=pair[suffix[-1]]
                )
            )
    return planned


def read_gguf_summary(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A few facts about a GGUF file (architecture, type, chat template,
    control tokens, tensor count) for the Modelfile and the model manager."""
    path = Path(path)
    if not path.is_file():
        raise EngineError(f"The GGUF file {path} does not exist.")
    try:
        kv, infos = read_gguf_header(path)
    except (ValueError, OSError) as exc:
        raise EngineError(f"{path} is not a readable GGUF file ({exc}).") from None
    toks = kv.get("tokenizer.ggml.tokens") or []
    types = kv.get("tokenizer.ggml.token_type") or []
    return {
        "path": str(path),
        "architecture": kv.get("general.architecture"),
        "type": kv.get("general.type") or "model",
        "name": kv.get("general.name"),
        "file_type": kv.get("general.file_type"),
        "chat_template": kv.get("tokenizer.chat_template"),
        "special_tokens": [t for t, ty in zip(toks, types, strict=False) if ty == 3],
        "tensor_count": len(infos),
        "size_bytes": path.stat().st_size,
    }
