"""Importance-matrix K-quants against llama.cpp, and what the matrix buys.

1. ``test_weighted_blocks_match_llama_cpp``: our ``quantize_weighted`` against
   llama.cpp's own ``quantize_q2_K`` ... ``quantize_q6_K`` called with
   ``quant_weights`` through ctypes, byte for byte, on random and awkward
   matrices, with the time of each; and ``quantize_legacy_weighted`` against
   ``quantize_q4_0`` ... ``quantize_q5_1`` (K types' fallbacks) on rows of
   896 and 320 values. It needs a build of ``ggml-quants.c``:
   ``RLSTUDIO_GGML_QUANTS_LIB`` naming a shared library that exports those
   functions, or ``RLSTUDIO_LLAMA_CPP_SRC`` naming a llama.cpp source tree,
   from which the test compiles ``ggml/src/ggml-quants.c`` with gcc -O2 (no
   -march, so no FMA contraction: the plain C arithmetic our numpy follows)
   and the four small functions it needs from ggml.c (``_STUBS`` below).
   Skipped without either.
2. ``test_logit_error_with_and_without_imatrix``: mean |logit| error of
   Q4_K_M and Q2_K exports with and without an importance matrix (collected
   on ``logit_check.PROMPTS``-like text) on a tiny Llama, plain and with
   outlier channels (log-normal RMSNorm weights, as trained models have),
   and on test_bench_export.py's 260 MB model with outlier channels.

Run: .venv/bin/pytest tests/benchmarks/test_bench_imatrix_llama_cpp.py -s -o addopts=""
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

K_TYPES = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")

_STUBS = r"""
#include "ggml.h"
#include <stdio.h>
#include <stdlib.h>
size_t ggml_type_size(enum ggml_type t) {
    switch (t) {
    case GGML_TYPE_Q2_K: return 84;  case GGML_TYPE_Q3_K: return 110;
    case GGML_TYPE_Q4_K: return 144; case GGML_TYPE_Q5_K: return 176;
    case GGML_TYPE_Q6_K: return 210; case GGML_TYPE_Q4_0: return 18;
    case GGML_TYPE_Q4_1: return 20;  case GGML_TYPE_Q5_0: return 22;
    case GGML_TYPE_Q5_1: return 24;  default: abort();
    }
}
size_t ggml_row_size(enum ggml_type t, int64_t ne) {
    return ggml_type_size(t) * ne / (t >= GGML_TYPE_Q2_K ? 256 : 32);
}
const char * ggml_type_name(enum ggml_type t) { (void) t; return "?"; }
void ggml_abort(const char * file, int line, const char * fmt, ...) {
    (void) fmt; fprintf(stderr, "ggml_abort %s:%d\n", file, line); abort();
}
"""


@pytest.fixture(scope="module")
def ggml(tmp_path_factory) -> ctypes.CDLL:
    lib = os.environ.get("RLSTUDIO_GGML_QUANTS_LIB")
    src = os.environ.get("RLSTUDIO_LLAMA_CPP_SRC")
    if not lib and src:
        gcc = shutil.which("gcc")
        ggml_dir = Path(src) / "ggml"
        if gcc is None or not (ggml_dir / "src" / "ggml-quants.c").is_file():
            pytest.skip("RLSTUDIO_LLAMA_CPP_SRC needs gcc and ggml/src/ggml-quants.c")
        out = tmp_path_factory.mktemp("ggml")
        (out / "stubs.c").write_text(_STUBS)
        lib = str(out / "libggmlquants.so")
        subprocess.run(
            [gcc, "-O2", "-fPIC", "-shared", "-std=gnu11",
             f"-I{ggml_dir / 'include'}", f"-I{ggml_dir / 'src'}",
             f"-I{ggml_dir / 'src' / 'ggml-cpu'}",
             str(ggml_dir / "src" / "ggml-quants.c"), str(out / "stubs.c"),
             "-o", lib, "-lm"],
            check=True,
        )  # fmt: skip
    if not lib:
        pytest.skip("set RLSTUDIO_GGML_QUANTS_LIB or RLSTUDIO_LLAMA_CPP_SRC")
    return ctypes.CDLL(lib)


def _matrices(rng: np.random.Generator) -> list[tuple[str, np.ndarray, np.ndarray]]:
    out = []
    x = rng.standard_normal((256, 1024)).astype(np.float32) * np.float32(0.02)
    out.append(("normal", x, (rng.random(1024) ** 3 * 5).astype(np.float32)))
    x = rng.standard_t(3, (128, 768)).astype(np.float32)
    x[3, :256] = 0
    x[5, 16:48] = 0
    x[7] = np.abs(x[7])
    x[9, 100] = 1e4
    w = rng.random(768).astype(np.float32)
    w[:40] = 0
    out.append(("heavy tails, zeros, outliers", x, w))
    x = rng.standard_normal((64, 512)).astype(np.float32)
    out.append(("uniform importance", x, np.ones(512, np.float32)))
    return out


@pytest.mark.bench
def test_weighted_blocks_match_llama_cpp(ggml: ctypes.CDLL) -> None:
    from engine.export.kquants import BLOCK_BYTES
    from engine.export.kquants_imatrix import quantize_weighted

    rng = np.random.default_rng(0)
    p = ctypes.c_void_p
    totals = dict.fromkeys(K_TYPES, (0.0, 0.0))
    for what, x, w in _matrices(rng):
        rows, cols = x.shape
        for t in K_TYPES:
            fn = getattr(ggml, f"quantize_{t[:2].lower()}_K")
            fn.restype = ctypes.c_size_t
            fn.argtypes = [p, p, ctypes.c_int64, ctypes.c_int64, p]
            theirs = np.zeros(rows * cols // 256 * BLOCK_BYTES[t], np.uint8)
            t0 = time.perf_counter()
            fn(x.ctypes.data, theirs.ctypes.data, rows, cols, w.ctypes.data)
            t1 = time.perf_counter()
            ours = quantize_weighted(x, t, w).reshape(-1)
            t2 = time.perf_counter()
            bad = np.nonzero(ours != theirs)[0] // BLOCK_BYTES[t]
            assert bad.size == 0, f"{t} {what}: blocks {sorted(set(bad))[:10]} differ"
            c, o = totals[t]
            totals[t] = (c + t1 - t0, o + t2 - t1)
    for t, (c, o) in totals.items():
        print(
            f"BENCH imatrix {t}: byte-identical to llama.cpp on 3 matrices; "
            f"ours / llama.cpp (1 C thread) time {o / c:.1f}"
        )
    from engine.export.kquants_imatrix import _LEGACY_BYTES, quantize_legacy_weighted

    for t, size in _LEGACY_BYTES.items():
        fn = getattr(ggml, f"quantize_{t.lower()}")
        fn.restype = ctypes.c_size_t
        fn.argtypes = [p, p, ctypes.c_int64, ctypes.c_int64, p]
        for rows, cols in ((64, 896), (33, 320)):
            x = rng.standard_t(4, (rows, cols)).astype(np.float32)
            x[1, :32] = 0
            w = rng.random(cols).astype(np.float32) ** 3
            w[:7] = 0
            theirs = np.zeros(rows * cols // 32 * size, np.uint8)
            fn(x.ctypes.data, theirs.ctypes.data, rows, cols, w.ctypes.data)
            ours = quantize_legacy_weighted(x, t, w).reshape(-1)
            assert np.array_equal(ours, theirs), f"{t} {rows}x{cols}"
        print(f"BENCH imatrix {t} (fallback): byte-identical to llama.cpp")


def _outlier_channels(folder: Path, seed: int = 1) -> None:
    from safetensors.numpy import load_file, save_file

    for path in folder.glob("*.safetensors"):
        tensors = load_file(path)
        rng = np.random.default_rng(seed)
        for k, v in tensors.items():
            if k.endswith("layernorm.weight"):
                tensors[k] = v * np.exp(rng.normal(0, 1.0, v.shape)).astype(v.dtype)
        save_file(tensors, path, metadata={"format": "pt"})


def _figures(model: Path, out: Path, calibration: Path, label: str) -> None:
    from engine.export.gguf import export_gguf
    from engine.export.imatrix import collect_imatrix
    from engine.export.logit_check import logit_error

    t0 = time.perf_counter()
    im = collect_imatrix(model, calibration)
    collect_s = time.perf_counter() - t0
    for file_type in ("q4_k_m", "q2_k"):
        plain, weighted = out / f"plain-{file_type}.gguf", out / f"im-{file_type}.gguf"
        a = export_gguf(model, plain, file_type)
        b = export_gguf(model, weighted, file_type, imatrix=im)
        without = logit_error(model, plain)["mean_abs"]
        with_im = logit_error(model, weighted)["mean_abs"]
        print(
            f"BENCH imatrix {label} {file_type}: mean |logit error| with "
            f"{with_im:.4f}, without {without:.4f}, with / without "
            f"{with_im / without:.3f}; {im.tokens} tokens collected in "
            f"{collect_s:.1f} s; export {b.seconds:.1f} s with, {a.seconds:.1f} s "
            "without"
        )
        plain.unlink()
        weighted.unlink()


CALIBRATION = (
    "Move the issue PROJ-7 from To Do to In Progress, then close it. "
    "def add(a, b):\n    return a + b\n"
    "Water boils at 100 degrees Celsius at sea level. "
    "The quick brown fox jumps over the lazy dog. "
) * 60


@pytest.mark.bench
@pytest.mark.parametrize("outliers", [False, True])
def test_logit_error_with_and_without_imatrix(tmp_path: Path, outliers: bool) -> None:
    from tiny_models import build_tiny_model

    model = build_tiny_model(tmp_path / "m", "llama", size=(256, 512, 4))
    if outliers:
        _outlier_channels(model)
    calibration = tmp_path / "calibration.txt"
    calibration.write_text(CALIBRATION)
    label = "tiny llama 256x512x4" + (" outlier channels" if outliers else "")
    _figures(model, tmp_path, calibration, label)


@pytest.mark.bench
def test_logit_error_with_and_without_imatrix_260mb(tmp_path: Path) -> None:
    from test_bench_export import _build  # type: ignore[import-not-found]

    model = _build(tmp_path)
    _outlier_channels(model)
    calibration = tmp_path / "calibration.txt"
    calibration.write_text(CALIBRATION)
    _figures(model, tmp_path, calibration, "260 MB llama outlier channels")
