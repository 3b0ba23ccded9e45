"""The GGUF tensor types the exporter writes, in a stdlib-only module so the
flow catalog can offer them without importing numpy (``engine.export.gguf``
does)."""

from __future__ import annotations

GGUF_TYPES: tuple[str, ...] = (
    "f32",
    "f16",
    "bf16",
    "q8_0",
    "q4_0",
    "q4_1",
    "q5_0",
    "q5_1",
)
"""Types of a full model export."""

ADAPTER_TYPES: tuple[str, ...] = ("f32", "f16", "bf16", "q8_0")
"""Types of a LoRA adapter export (rank-sized rows rarely fit 4/5-bit blocks)."""
