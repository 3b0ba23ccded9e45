"""Merge a LoRA adapter into its base weights as a new HF folder (``llm.merge``)."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.errors import ConfigError, EngineError
from engine.jobs.context import JobContext
from engine.jobs.registry import job_kind
from engine.progress import Progress
from engine.settings import build, drawn_seed, setting
from engine.store.atomic import temp_path
from engine.store.paths import checked_name
from engine.store.project import new_model_folder

DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class MergeConfig:
    """Settings of an ``llm.merge`` job."""

    adapter: str | None = None
    """The LoRA adapter folder to merge."""
    base: str | None = None
    """Its base model (None: the one the adapter names)."""
    dtype: str = setting("float32", choices=DTYPES, label="Precision")
    """Precision of the saved weights: float32 keeps every bit of the adapter;
    bfloat16 / float16 halve the size."""
    name: str | None = setting(None, check=checked_name)
    """Name of the merged model, its folder in ``models/<id>/`` (None: the
    adapter's name with ``-merged``)."""
    seed: int | None = None
    """Recorded for reproducibility (merging draws nothing)."""


def validate(config: Mapping[str, Any]) -> MergeConfig:
    from engine.llm.base import inspect_model

    cfg = build(MergeConfig, config, "llm.merge")
    if not cfg.adapter:
        raise ConfigError("adapter", "adapter must name a LoRA adapter folder.")
    info = inspect_model(cfg.adapter, "adapter")
    if info.kind != "lora-adapter":
        raise ConfigError(
            "adapter",
            f"{info.path} is not a LoRA adapter folder (no adapter_config.json).",
        )
    if cfg.base:
        base = inspect_model(cfg.base, "base").path
    elif info.base is None:
        raise ConfigError("base", "The adapter does not name its base model; set base.")
    else:
        base = info.base
    seed = drawn_seed(cfg.seed)
    return replace(cfg, adapter=info.path, base=base, seed=seed)


MERGE_STAGES = ("loading the base model", "applying the adapter", "saving")
"""What a merge does, in order; its progress counts them."""


def merge_adapter(
    adapter: str,
    base: str,
    out_dir: Path,
    dtype: str = "float32",
    progress: Progress | None = None,
) -> Path:
    """Load ``base``, apply ``adapter``, fold the LoRA weights in and save the
    model (safetensors) and the tokenizer to ``out_dir``; ``progress`` hears
    each of :data:`MERGE_STAGES` as it starts, and the end.

    The folder is written under a temporary name beside ``out_dir`` and
    renamed into place once complete (replacing an older merge of the same
    name), so a failure (full disk, crash) never leaves a half-written model
    that looks whole. A full disk raises ``EngineError`` in one sentence.
    """
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def stage(i: int) -> None:
        if progress is not None:
            n = len(MERGE_STAGES)
            progress(i, n, MERGE_STAGES[i] if i < n else "merged")

    torch_dtype = getattr(torch, dtype)
    stage(0)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    stage(1)
    merged = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    merged = merged.to(torch_dtype)
    stage(2)
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(out_dir)
    old = temp_path(out_dir, "replaced")
    try:
        tmp.mkdir()
        merged.save_pretrained(str(tmp), safe_serialization=True)
        tok_src = (
            adapter if (Path(adapter) / "tokenizer_config.json").is_file() else base
        )
        AutoTokenizer.from_pretrained(tok_src).save_pretrained(str(tmp))
        if out_dir.exists():
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        stage(len(MERGE_STAGES))
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            size = sum(p.numel() * p.element_size() for p in merged.parameters())
            raise EngineError(
                f"The disk holding {out_dir.parent} is full; free about "
                f"{size / 1e6:.0f} MB and merge again."
            ) from None
        raise
    finally:
        if old.exists() and not out_dir.exists():
            os.replace(old, out_dir)  # the new one failed: keep the last merge
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return out_dir


@job_kind(
    "llm.merge", check=validate, label="Merge", group="export", progress_unit="stages"
)
def run(ctx: JobContext, cfg: MergeConfig) -> dict[str, Any]:
    """Merges a LoRA adapter into its base model as a new HF folder."""
    from engine.store.atomic import atomic_write_json

    # validate() filled both folders in.
    assert cfg.adapter is not None and cfg.base is not None
    name = cfg.name or f"{Path(cfg.adapter).name}-merged"
    out_dir = new_model_folder(ctx.project_dir, name)
    merge_adapter(cfg.adapter, cfg.base, out_dir, cfg.dtype, ctx.progress)
    atomic_write_json(
        out_dir / "rlstudio.json",
        {
            "kind": "hf-merged",
            "base": cfg.base,
            "adapter": cfg.adapter,
            "dtype": cfg.dtype,
            "run_id": ctx.run_id,
        },
    )
    return {
        "models": [
            {
                "name": name,
                "kind": "hf-merged",
                "file": str(out_dir),
                "base": cfg.base,
                "parents": [cfg.adapter, cfg.base],
                "metrics": {"dtype": cfg.dtype},
            }
        ]
    }
