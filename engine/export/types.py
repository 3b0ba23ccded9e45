"""The GGUF tensor types the exporter writes, in a stdlib-only module so the
flow catalog can offer them without importing numpy (``engine.export.gguf``
does)."""

from __future__ import annotations

K_FILE_TYPES: tuple[str, ...] = (
    "q2_k",
    "q3_k_s",
    "q3_k_m",
    "q3_k_l",
    "q4_k_s",
    "q4_k_m",
    "q5_k_s",
    "q5_k_m",
    "q6_k",
)
"""llama.cpp's K-quant file types: each tensor's type is chosen as
``llama-quantize`` chooses it for that file type (``engine.export.kquants``)."""

GGUF_TYPES: tuple[str, ...] = (
    "f32",
    "f16",
    "bf16",
    "q8_0",
    "q4_0",
    "q4_1",
    "q5_0",
    "q5_1",
    *K_FILE_TYPES,
)
"""Types of a full model export (names are case-insensitive)."""

ADAPTER_TYPES: tuple[str, ...] = ("f32", "f16", "bf16", "q8_0")
"""Types of a LoRA adapter export (rank-sized rows rarely fit 4/5-bit blocks)."""


def adapter_type_problem(name: str) -> str | None:
    """The sentence refusing ``name`` for a LoRA adapter export; None when
    adapters can be written in that type (any case)."""
    key = name.lower()
    if key in ADAPTER_TYPES:
        return None
    why = (
        "K-quants are for full models, so merge the adapter and export the merged model"
        if key in K_FILE_TYPES
        else "rank-sized rows do not fit 4/5-bit blocks"
        if key in GGUF_TYPES
        else "that is no GGUF type"
    )
    return f"A LoRA adapter exports as {', '.join(ADAPTER_TYPES)}, not {name}; {why}."


OLLAMA_SERVER_QUANTS: dict[str, str] = {
    "ollama-q4_k_m": "q4_K_M",
    "ollama-q4_k_s": "q4_K_S",
}
"""One-click export types made by the Ollama server from an F16 export (its
``/api/create`` quantize name); the exporter makes the others itself."""

OLLAMA_EXPORT_TYPES: tuple[str, ...] = (
    "q4_k_m",
    *(t for t in GGUF_TYPES if t != "q4_k_m"),
    *OLLAMA_SERVER_QUANTS,
)
"""Types of the one-click Export to Ollama, its default first."""


def imatrix_problem(name: str, adapter: bool = False) -> str | None:
    """The sentence refusing an importance matrix (calibration text) for an
    export of type ``name``; None when that export can use one."""
    if adapter:
        return (
            "An importance matrix weights full-model K-quants; a LoRA adapter "
            f"exports as {', '.join(ADAPTER_TYPES)} without calibration text."
        )
    if name.lower() in K_FILE_TYPES:
        return None
    return (
        f"An importance matrix weights K-quants only ({', '.join(K_FILE_TYPES)}), "
        f"not {name}; choose a K-quant type or leave the calibration text empty."
    )
