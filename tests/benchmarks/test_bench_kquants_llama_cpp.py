"""Our K-quant exports against llama.cpp's own quantizer, byte for byte, and
the time of each, when llama-cpp-python is installed (it is no dependency:
``CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install llama-cpp-python`` builds
llama.cpp from source, about 15 minutes on 2 cores; skipped otherwise).

Every file type is exported by us from the Hugging Face folder and by
``llama_model_quantize`` from our F32 GGUF of it (the same values, Q/K
permuted), on a 256-wide 4-layer Llama, a tied 8-layer one, a 64-wide one
(every row falls back) and a Qwen2 with biases; then the 260 MB model of
test_bench_export.py in Q4_K_M, timed.

Run: .venv/bin/pytest tests/benchmarks/test_bench_kquants_llama_cpp.py -s -o addopts=""
"""

from __future__ import annotations

import ctypes
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

llama_cpp = pytest.importorskip("llama_cpp")
gguf = pytest.importorskip("gguf")

MODELS = [
    ("llama", False, (256, 512, 4)),
    ("llama", True, (256, 512, 8)),
    ("llama", False, (64, 128, 2)),
    ("qwen2", False, (256, 768, 3)),
]


def _llama_quantize(src: Path, out: Path, file_type: str, threads: int = 1) -> float:
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = int(gguf.LlamaFileType["MOSTLY_" + file_type.upper()])
    params.nthread = threads
    t0 = time.perf_counter()
    rc = llama_cpp.llama_model_quantize(
        str(src).encode(), str(out).encode(), ctypes.byref(params)
    )
    assert rc == 0
    return time.perf_counter() - t0


def _differences(ours: Path, theirs: Path) -> list[str]:
    a = {t.name: t for t in gguf.GGUFReader(ours).tensors}
    b = {t.name: t for t in gguf.GGUFReader(theirs).tensors}
    assert a.keys() == b.keys()
    return [
        n
        for n in a
        if a[n].tensor_type != b[n].tensor_type
        or np.asarray(a[n].data).tobytes() != np.asarray(b[n].data).tobytes()
    ]


@pytest.mark.bench
@pytest.mark.parametrize(("arch", "tie", "size"), MODELS)
def test_every_file_type_matches_llama_cpp(tmp_path: Path, arch, tie, size) -> None:
    from tiny_models import build_tiny_model

    from engine.export.gguf import export_gguf
    from engine.export.types import K_FILE_TYPES

    folder = build_tiny_model(tmp_path / "m", arch, tie, size=size)
    src = tmp_path / "f32.gguf"
    export_gguf(folder, src, "f32")
    for file_type in K_FILE_TYPES:
        ours, theirs = tmp_path / f"ours-{file_type}.gguf", tmp_path / "llama.gguf"
        export_gguf(folder, ours, file_type)
        _llama_quantize(src, theirs, file_type)
        assert _differences(ours, theirs) == [], f"{arch} {size} {file_type}"
    print(f"BENCH {arch} {size} tie={tie}: 9 file types byte-identical to llama.cpp")


@pytest.mark.bench
def test_q4_k_m_time_against_llama_cpp(tmp_path: Path) -> None:
    from test_bench_export import _build

    from engine.export.gguf import export_gguf

    model_dir = _build(tmp_path)
    mb = (model_dir / "model.safetensors").stat().st_size / 1e6
    src = tmp_path / "f32.gguf"
    export_gguf(model_dir, src, "f32")
    t0 = time.perf_counter()
    export_gguf(model_dir, tmp_path / "ours.gguf", "q4_k_m")
    ours = time.perf_counter() - t0
    theirs = _llama_quantize(src, tmp_path / "llama.gguf", "q4_k_m", threads=1)
    assert _differences(tmp_path / "ours.gguf", tmp_path / "llama.gguf") == []
    print(
        f"BENCH q4_k_m of a {mb:.0f} MB model: ours {ours:.1f} s ({mb / ours:.0f} "
        f"MB/s) from safetensors, llama.cpp's quantize {theirs:.1f} s from an F32 "
        f"GGUF on one thread; ratio {ours / theirs:.2f} (ours / llama.cpp, "
        "lower is better); byte-identical"
    )
