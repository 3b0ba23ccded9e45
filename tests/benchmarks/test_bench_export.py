"""Benchmark: GGUF export throughput and peak memory against copying the
safetensors file (the physical limit here), on a random Llama-architecture
model of about 260 MB (float32) built by the benchmark: F16, Q8_0 and the
Q4_K_M mix (numpy K-quants, the slow one).

With ``LLAMA_CPP_DIR`` set to a llama.cpp checkout (it needs
``convert_hf_to_gguf.py``, ``conversion/`` and ``gguf-py/``; the
llama-cpp-python sdist's ``vendor/llama.cpp`` has them), a second benchmark
times our Q4_K_M export against llama.cpp's converter writing F16 alone
(``convert_hf_to_gguf.py MODEL --outtype f16``, its own gguf-py first on the
path), each a fresh process timed whole (interpreter start and imports
included), in alternating rounds, and prints the ratio; skipped with the
reason otherwise. It also prints both sides' CPU seconds: Linux schedules
each session (autogroup) as one, so on a machine shared with other sessions
this test's processes together get a fixed share of the CPUs, threads or not,
and the wall-time ratio tends to the CPU-time ratio; on an idle machine the
K-quants' threads count. The converter imports ``sentencepiece`` before it looks for
a ``tokenizer.model``: set ``LLAMA_CPP_PYTHONPATH`` to a folder holding it
(``pip install --target DIR sentencepiece``) if the venv lacks it. The test
model's tokenizer is a small BPE one the converter's hash table does not
know, so its pre-tokenizer is named ``llama-bpe`` (the vocabulary is a few
KB; the time is the tensors').

Run: .venv/bin/pytest tests/benchmarks/test_bench_export.py -s -o addopts=""
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Exports in a fresh process so its peak RSS (ru_maxrss) is the export's.
_CHILD = r"""
import json, sys, threading, time
sys.path.insert(0, sys.argv[4])
from engine.export.gguf import export_gguf
import numpy, gguf  # imported before the baseline, like the job process

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])

# Anonymous memory (heap, numpy buffers) sampled every 20 ms: RssFile also
# counts the memory-mapped safetensors pages, which are page cache.
peak_anon = [status("RssAnon:")]
base_anon = peak_anon[0]
stop = threading.Event()
def sample():
    while not stop.is_set():
        peak_anon[0] = max(peak_anon[0], status("RssAnon:"))
        time.sleep(0.02)
threading.Thread(target=sample, daemon=True).start()
base_hwm = status("VmHWM:")
t0 = time.perf_counter()
report = export_gguf(sys.argv[1], sys.argv[2], sys.argv[3])
secs = time.perf_counter() - t0
stop.set()
print(json.dumps({"seconds": secs, "anon_kb": peak_anon[0] - base_anon,
                  "hwm_kb": status("VmHWM:") - base_hwm,
                  "verified": report.verified, "size": report.size_bytes}))
"""


# llama.cpp's converter with its pre-tokenizer check answered (see above).
_LLAMA_CPP = r"""
import runpy, sys
from pathlib import Path
llama = Path(sys.argv[1])
sys.argv = [str(llama / "convert_hf_to_gguf.py"), *sys.argv[2:]]
sys.path[:0] = [str(llama), str(llama / "gguf-py")]
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "llama-bpe"
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _build(folder: Path) -> Path:
    import torch
    import transformers

    sys.path.insert(0, str(ROOT / "tests"))
    from tiny_models import build_tiny_model

    tiny = build_tiny_model(folder / "tiny", "llama")
    config = transformers.LlamaConfig(
        vocab_size=32768,
        hidden_size=512,
        intermediate_size=2048,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    dest = folder / "big"
    model.save_pretrained(dest, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (tiny / f).exists():
            (dest / f).write_bytes((tiny / f).read_bytes())
    return dest


@pytest.mark.bench
def test_bench_export_vs_copy(tmp_path: Path) -> None:
    import shutil

    model_dir = _build(tmp_path)
    weights = model_dir / "model.safetensors"
    size = weights.stat().st_size
    mb = size / 1e6

    t0 = time.perf_counter()
    shutil.copyfile(weights, tmp_path / "copy.safetensors")
    copy_s = time.perf_counter() - t0
    copy_rate = mb / copy_s

    for qtype in ("f16", "q8_0", "q4_k_m"):
        out = tmp_path / f"big-{qtype}.gguf"
        r = subprocess.run(
            [sys.executable, "-c", _CHILD, str(model_dir), str(out), qtype, str(ROOT)],
            capture_output=True,
            text=True,
            check=True,
        )
        res = json.loads(r.stdout.strip().splitlines()[-1])
        assert res["verified"]
        rate = mb / res["seconds"]
        rss_mb = res["anon_kb"] / 1024
        print(
            f"BENCH export gguf {qtype}: {rate:.0f} MB/s vs raw copy "
            f"{copy_rate:.0f} MB/s, ratio {rate / copy_rate:.2f}; peak RSS "
            f"+{rss_mb:.0f} MB anonymous (+{res['hwm_kb'] / 1024:.0f} MB incl. mapped "
            "file pages) for a "
            f"{mb:.0f} MB model (output {res['size'] / 1e6:.0f} MB)"
        )
        assert rss_mb < mb / 2, "export should stream, not hold the model"


def _children_cpu() -> float:
    """User + system CPU seconds of the finished child processes so far."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _ours(model_dir: Path, out: Path, qtype: str) -> dict[str, float]:
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, str(model_dir), str(out), qtype, str(ROOT)],
        capture_output=True,
        text=True,
        check=True,
    )
    res: dict[str, float] = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["verified"]
    return res


@pytest.mark.bench
def test_bench_q4_k_m_vs_llama_cpp_f16(tmp_path: Path) -> None:
    llama = os.environ.get("LLAMA_CPP_DIR")
    if not llama or not (Path(llama) / "convert_hf_to_gguf.py").is_file():
        pytest.skip(
            "LLAMA_CPP_DIR does not name a llama.cpp checkout with "
            "convert_hf_to_gguf.py, so there is no converter to time against"
        )
    env = dict(os.environ)
    extra = os.environ.get("LLAMA_CPP_PYTHONPATH")
    if extra:
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [extra, env.get("PYTHONPATH")])
        )
    model_dir = _build(tmp_path)
    mb = (model_dir / "model.safetensors").stat().st_size / 1e6
    ours_s: list[float] = []
    theirs_s: list[float] = []
    ours_cpu: list[float] = []
    theirs_cpu: list[float] = []
    for _ in range(int(os.environ.get("BENCH_ROUNDS", "2"))):
        t0, c0 = time.perf_counter(), _children_cpu()
        _ours(model_dir, tmp_path / "ours-q4_k_m.gguf", "q4_k_m")
        ours_s.append(time.perf_counter() - t0)
        ours_cpu.append(_children_cpu() - c0)
        t0, c0 = time.perf_counter(), _children_cpu()
        r = subprocess.run(
            [
                sys.executable,
                "-c",
                _LLAMA_CPP,
                llama,
                str(model_dir),
                "--outtype",
                "f16",
                "--outfile",
                str(tmp_path / "theirs-f16.gguf"),
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        theirs_s.append(time.perf_counter() - t0)
        theirs_cpu.append(_children_cpu() - c0)
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"llama.cpp's converter failed: {last}")
    ours, theirs = min(ours_s), min(theirs_s)
    ratio = ours / theirs
    print(
        f"BENCH export q4_k_m (ours) {ours:.1f} s ({mb / ours:.0f} MB/s) vs "
        f"llama.cpp convert_hf_to_gguf f16 {theirs:.1f} s ({mb / theirs:.0f} MB/s), "
        f"whole processes, best of {len(ours_s)} alternating rounds: ours / "
        f"llama.cpp = {ratio:.2f} ({'slower' if ratio > 1 else 'faster'}); "
        f"rounds ours {[round(t, 1) for t in ours_s]} theirs "
        f"{[round(t, 1) for t in theirs_s]}; CPU seconds (user + system, "
        f"best) ours {min(ours_cpu):.1f} theirs {min(theirs_cpu):.1f} = "
        f"{min(ours_cpu) / min(theirs_cpu):.2f}; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
