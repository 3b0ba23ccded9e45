"""Importance matrix for K-quant GGUF exports: activation statistics of a
Hugging Face model on calibration text, as llama.cpp's ``imatrix`` tool
(``tools/imatrix/imatrix.cpp``) gathers them.

The model runs over the text in chunks of ``CHUNK_TOKENS`` tokens, each
starting with the tokenizer's BOS token where it has one; a forward pre-hook
on every linear layer of the decoder blocks adds the squares of its inputs
per input column (``sum x²``) and counts the tokens. llama.cpp's default
collects the blocks' matrices only (``blk.*``: no ``output.weight`` without
``--process-output``), and so does this. ``llama-quantize`` quantizes with
``sum / count`` per column, which ``Imatrix.weights`` holds under the GGUF
tensor names ``export_gguf`` writes (``engine.export.kquants_imatrix`` uses
them).

Memory stays bounded: one chunk's activations at a time and one float64
vector per linear layer; the text read is capped at ``MAX_CHUNKS`` chunks.
torch and transformers are imported only in ``collect_imatrix``, which runs
in a job process (or the CLI).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import EngineError
from engine.progress import Progress

CHUNK_TOKENS = 512
"""Tokens per forward pass (llama.cpp's ``imatrix`` default context)."""

MAX_CHUNKS = 128
"""Chunks read at most; the rest of a longer text is left unread."""

_CHARS_PER_TOKEN_CAP = 16
"""Characters read per token wanted: more text than tokenizers need."""

DATASET_SUFFIXES = (".jsonl", ".parquet")
"""A calibration file with one of these suffixes (or a folder) is a dataset."""


@dataclass
class Imatrix:
    """Per-column importance of each GGUF tensor and what it was made from."""

    weights: dict[str, np.ndarray] = field(default_factory=dict)
    """GGUF tensor name: mean square of the inputs of each column (float32)."""
    tokens: int = 0
    """Tokens the model ran over."""
    chunks: int = 0
    source: str = ""
    """The calibration file or dataset."""

    def summary(self) -> dict[str, Any]:
        """The figures the export report shows."""
        return {
            "source": self.source,
            "tokens": self.tokens,
            "chunks": self.chunks,
            "tensors": len(self.weights),
        }


# --------------------------------------------------------------------------
# calibration text


def _strings(value: Any) -> Iterator[str]:
    """Every string in a dataset row, messages' contents included."""
    if isinstance(value, str):
        if value.strip():
            yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _dataset_rows(path: Path) -> Iterator[dict[str, Any]]:
    from engine.llm.datasets import dataset_files, read_rows

    train, _ = dataset_files(path)
    if not train.is_file():
        raise EngineError(f"The calibration dataset {path} has no train file.")
    if train.suffix == ".parquet":
        yield from read_rows(train)
        return
    with open(train, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise EngineError(
                    f"The calibration dataset {train} is not valid JSON Lines "
                    f"(line {lineno})."
                ) from None
            if isinstance(row, dict):
                yield row


def read_calibration_text(
    path: str | os.PathLike[str], max_chars: int = MAX_CHUNKS * CHUNK_TOKENS * 16
) -> str:
    """The calibration text of ``path``: a text file as it is, or the text of
    a dataset (a folder, ``.jsonl`` or ``.parquet``: every string of its rows,
    one row after another), at most ``max_chars`` characters. EngineError with
    one sentence when it is missing, unreadable or has no text."""
    p = Path(path).expanduser()
    if not p.exists():
        raise EngineError(f"The calibration text {p} does not exist.")
    if p.is_dir() or p.suffix in DATASET_SUFFIXES:
        parts: list[str] = []
        size = 0
        for row in _dataset_rows(p):
            for s in _strings(row):
                parts.append(s)
                size += len(s) + 1
            if size >= max_chars:
                break
        text = "\n".join(parts)[:max_chars]
    else:
        try:
            with open(p, encoding="utf-8", errors="replace") as fh:
                text = fh.read(max_chars)
        except OSError as exc:
            raise EngineError(
                f"Could not read the calibration text {p}: {exc.strerror or exc}."
            ) from None
    if not text.strip():
        raise EngineError(
            f"The calibration text {p} is empty; give a file with text the model "
            "will see (a few thousand words are enough)."
        )
    return text


# --------------------------------------------------------------------------
# collection


def collect_imatrix(
    model_dir: str | os.PathLike[str],
    calibration: str | os.PathLike[str],
    progress: Progress | None = None,
    chunk_tokens: int = CHUNK_TOKENS,
    max_chunks: int = MAX_CHUNKS,
) -> Imatrix:
    """Run the model in ``model_dir`` over the calibration text (or dataset)
    ``calibration`` and return the importance of every decoder-block linear
    layer's input columns, under the GGUF names ``export_gguf`` writes.
    ``progress(done, total, message)`` is called after every chunk."""
    import torch
    import transformers

    from engine.export.gguf import gguf_tensor_namer

    model_dir = Path(model_dir)
    namer = gguf_tensor_namer(model_dir)
    text = read_calibration_text(
        calibration, max_chars=max_chunks * chunk_tokens * _CHARS_PER_TOKEN_CAP
    )
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    ids: list[int] = tok(text, add_special_tokens=False).input_ids
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32
    )
    n_ctx = min(
        chunk_tokens,
        int(getattr(model.config, "max_position_embeddings", 0) or chunk_tokens),
    )
    bos = tok.bos_token_id
    # BOS first in every chunk where the tokenizer puts it before a text.
    add_bos = bos is not None and tok("x").input_ids[:1] == [bos]
    per_chunk = max(1, n_ctx - 1 if add_bos else n_ctx)
    starts = list(range(0, len(ids), per_chunk))[:max_chunks]
    if not starts:
        raise EngineError(
            f"The calibration text {calibration} makes no tokens; give one with text."
        )

    sums: dict[str, Any] = {}
    counts: dict[str, int] = {}
    handles = []

    # Q, K and V (and gate and up) take the same tensor: its squares are
    # summed once.
    last: list[Any] = [None, None]

    def hook_for(gname: str) -> Callable[..., None]:
        def hook(_module: Any, args: tuple[Any, ...]) -> None:
            x = args[0]
            if last[0] is not x:
                flat = x.detach().reshape(-1, x.shape[-1])
                last[0], last[1] = (
                    x,
                    (torch.square(flat).sum(dim=0).double(), flat.shape[0]),
                )
            sq, n = last[1]
            acc = sums.get(gname)
            sums[gname] = sq if acc is None else acc + sq
            counts[gname] = counts.get(gname, 0) + n

        return hook

    for mod_name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        gname = namer(mod_name + ".weight")
        if gname is None or not gname.startswith("blk."):
            continue
        handles.append(module.register_forward_pre_hook(hook_for(gname)))
    tokens = 0
    try:
        with torch.no_grad():
            for i, s in enumerate(starts):
                chunk = ids[s : s + per_chunk]
                if add_bos:
                    chunk = [int(bos), *chunk]
                model(torch.tensor([chunk], dtype=torch.long))
                tokens += len(chunk)
                if progress is not None:
                    progress(i + 1, len(starts), f"importance matrix: chunk {i + 1}")
    finally:
        last[0] = last[1] = None
        for h in handles:
            h.remove()
    weights: dict[str, np.ndarray] = {}
    for gname, total in sums.items():
        # llama-quantize: float(sum) / float(count) per column.
        s32 = total.cpu().numpy().astype(np.float32)
        weights[gname] = s32 / np.float32(counts[gname])
    return Imatrix(
        weights=weights, tokens=tokens, chunks=len(starts), source=str(calibration)
    )
