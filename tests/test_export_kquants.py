"""K-quant GGUF export: our numpy quantizers against a per-block transcription
of llama.cpp's reference C (``quantize_row_q*_K_ref``), read back through
``gguf``'s dequantizer, with error bounds per type."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tiny_models import build_tiny_model

from engine.errors import ConfigError, EngineError
from engine.export import gguf as gx
from engine.export import kquants as kq
from engine.export.types import K_FILE_TYPES

gguf = pytest.importorskip("gguf")

F = np.float32
K_TYPES = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")


# --------------------------------------------------------------------------
# A straightforward transcription of ggml-quants.c: one block at a time, one
# value at a time, float32 scalars in the C code's order.


def nearest_int(v: F) -> int:
    return int(np.rint(F(v)))


def fp16(v: F) -> F:
    return F(np.float16(F(v)))


def ref_make_qkx2_quants(n, nmax, x, weights, rmin, rdelta, nstep, use_mad):
    L = [0] * n
    mn = x[0]
    mx = x[0]
    sum_w = weights[0]
    sum_x = sum_w * x[0]
    for i in range(1, n):
        mn = min(mn, x[i]) if x[i] < mn else mn
        mx = x[i] if x[i] > mx else mx
        sum_w = sum_w + weights[i]
        sum_x = sum_x + weights[i] * x[i]
    if mn > 0:
        mn = F(0)
    if mx == mn:
        return F(0), -mn, [0] * n
    iscale = F(nmax) / (mx - mn)
    scale = F(1) / iscale
    best_error = F(0)
    for i in range(n):
        L[i] = max(0, min(nmax, nearest_int(iscale * (x[i] - mn))))
        diff = scale * F(L[i]) + mn - x[i]
        diff = abs(diff) if use_mad else diff * diff
        best_error = best_error + weights[i] * diff
    for step in range(nstep + 1):
        iscale = (F(rmin) + F(rdelta) * F(step) + F(nmax)) / (mx - mn)
        sum_l = sum_l2 = sum_xl = F(0)
        aux = [0] * n
        for i in range(n):
            lv = max(0, min(nmax, nearest_int(iscale * (x[i] - mn))))
            aux[i] = lv
            w = weights[i]
            sum_l = sum_l + w * F(lv)
            sum_l2 = sum_l2 + w * F(lv) * F(lv)
            sum_xl = sum_xl + w * F(lv) * x[i]
        D = sum_w * sum_l2 - sum_l * sum_l
        if D > 0:
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            if this_min > 0:
                this_min = F(0)
                this_scale = sum_xl / sum_l2
            cur = F(0)
            for i in range(n):
                diff = this_scale * F(aux[i]) + this_min - x[i]
                diff = abs(diff) if use_mad else diff * diff
                cur = cur + weights[i] * diff
            if cur < best_error:
                L = list(aux)
                best_error = cur
                scale = this_scale
                mn = this_min
    return scale, -mn, L


def ref_abs_max(x):
    amax = F(0)
    mx = F(0)
    for v in x:
        if abs(v) > amax:
            amax = abs(v)
            mx = v
    return mx, amax


def ref_make_qx_quants(n, nmax, x):
    mx, amax = ref_abs_max(x)
    if amax < F(1e-15):
        return F(0), [0] * n
    iscale = F(-nmax) / mx
    sumlx = suml2 = F(0)
    L = [0] * n
    for i in range(n):
        lv = max(-nmax, min(nmax - 1, nearest_int(iscale * x[i])))
        L[i] = lv + nmax
        w = x[i] * x[i]
        sumlx = sumlx + w * x[i] * F(lv)
        suml2 = suml2 + w * F(lv) * F(lv)
    scale = sumlx / suml2 if suml2 else F(0)
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = -(F(nmax) + F(0.1) * F(step)) / mx
        sumlx = suml2 = F(0)
        for i in range(n):
            lv = max(-nmax, min(nmax - 1, nearest_int(iscale * x[i])))
            w = x[i] * x[i]
            sumlx = sumlx + w * x[i] * F(lv)
            suml2 = suml2 + w * F(lv) * F(lv)
        if suml2 > 0 and sumlx * sumlx > best * suml2:
            for i in range(n):
                lv = nearest_int(iscale * x[i])
                L[i] = nmax + max(-nmax, min(nmax - 1, lv))
            scale = sumlx / suml2
            best = scale * sumlx
    return scale, L


def ref_make_q3_quants(n, nmax, x):
    mx, amax = ref_abs_max(x)
    if amax < F(1e-15):
        return F(0), [0] * n
    iscale = F(-nmax) / mx
    sumlx = suml2 = F(0)
    L = [0] * n
    for i in range(n):
        lv = max(-nmax, min(nmax - 1, nearest_int(iscale * x[i])))
        L[i] = lv
        w = x[i] * x[i]
        sumlx = sumlx + w * x[i] * F(lv)
        suml2 = suml2 + w * F(lv) * F(lv)
    for _ in range(5):
        changed = 0
        for i in range(n):
            w = x[i] * x[i]
            slx = sumlx - w * x[i] * F(L[i])
            if slx > 0:
                sl2 = suml2 - w * F(L[i]) * F(L[i])
                new_l = max(-nmax, min(nmax - 1, nearest_int(x[i] * sl2 / slx)))
                if new_l != L[i]:
                    slx = slx + w * x[i] * F(new_l)
                    sl2 = sl2 + w * F(new_l) * F(new_l)
                    if sl2 > 0 and slx * slx * suml2 > sumlx * sumlx * sl2:
                        L[i] = new_l
                        sumlx = slx
                        suml2 = sl2
                        changed += 1
        if not changed:
            break
    return (sumlx / suml2 if suml2 > 0 else F(0)), [v + nmax for v in L]


def f16_bytes(v: F) -> list[int]:
    return list(np.array([v], "<f2").view(np.uint8))


def pack_2bit(L):
    qs = [0] * 64
    for j in range(0, 256, 128):
        for i in range(32):
            qs[j // 4 + i] = (
                L[j + i]
                | (L[j + i + 32] << 2)
                | (L[j + i + 64] << 4)
                | (L[j + i + 96] << 6)
            )
    return qs


def ref_q2_k(x):
    L = [0] * 256
    scales = [F(0)] * 16
    mins = [F(0)] * 16
    max_scale = max_min = F(0)
    for j in range(16):
        xs = x[16 * j : 16 * j + 16]
        w = [abs(v) for v in xs]
        scales[j], mins[j], L[16 * j : 16 * j + 16] = ref_make_qkx2_quants(
            16, 3, xs, w, -0.5, 0.1, 15, True
        )
        max_scale = scales[j] if scales[j] > max_scale else max_scale
        max_min = mins[j] if mins[j] > max_min else max_min
    sc = [0] * 16
    if max_scale > 0:
        iscale = F(15) / max_scale
        sc = [nearest_int(iscale * s) & 0xFF for s in scales]
        d = fp16(max_scale / F(15))
    else:
        d = F(0)
    if max_min > 0:
        iscale = F(15) / max_min
        sc = [(sc[j] | (nearest_int(iscale * mins[j]) << 4)) & 0xFF for j in range(16)]
        dmin = fp16(max_min / F(15))
    else:
        dmin = F(0)
    for j in range(16):
        dd = d * F(sc[j] & 0xF)
        if not dd:
            continue
        dm = dmin * F(sc[j] >> 4)
        for ii in range(16):
            L[16 * j + ii] = max(0, min(3, nearest_int((x[16 * j + ii] + dm) / dd)))
    return sc + pack_2bit(L) + f16_bytes(d) + f16_bytes(dmin)


def ref_q3_k(x):
    L = [0] * 256
    scales = [F(0)] * 16
    amax = max_scale = F(0)
    for j in range(16):
        scales[j], L[16 * j : 16 * j + 16] = ref_make_q3_quants(
            16, 4, x[16 * j : 16 * j + 16]
        )
        if abs(scales[j]) > amax:
            amax = abs(scales[j])
            max_scale = scales[j]
    packed = [0] * 12
    if max_scale:
        iscale = F(-32) / max_scale
        for j in range(16):
            lv = max(-32, min(31, nearest_int(iscale * scales[j]))) + 32
            if j < 8:
                packed[j] = lv & 0xF
            else:
                packed[j - 8] |= (lv & 0xF) << 4
            packed[j % 4 + 8] |= (lv >> 4) << (2 * (j // 4))
        d = fp16(F(1) / iscale)
    else:
        d = F(0)
    for j in range(16):
        sc = packed[j] & 0xF if j < 8 else packed[j - 8] >> 4
        sc = (sc | (((packed[8 + j % 4] >> (2 * (j // 4))) & 3) << 4)) - 32
        dd = d * F(sc)
        if not dd:
            continue
        for ii in range(16):
            L[16 * j + ii] = max(-4, min(3, nearest_int(x[16 * j + ii] / dd))) + 4
    hmask = [0] * 32
    m, hm = 0, 1
    for j in range(256):
        if L[j] > 3:
            hmask[m] |= hm
            L[j] -= 4
        m += 1
        if m == 32:
            m, hm = 0, hm << 1
    return hmask + pack_2bit(L) + packed + f16_bytes(d)


def ref_k4_like(x, nmax, rmin, nstep):
    L = [0] * 256
    scales = [F(0)] * 8
    mins = [F(0)] * 8
    max_scale = max_min = F(0)
    for j in range(8):
        xs = x[32 * j : 32 * j + 32]
        sum_x2 = F(0)
        for v in xs:
            sum_x2 = sum_x2 + v * v
        av_x = np.sqrt(sum_x2 / F(32))
        w = [av_x + abs(v) for v in xs]
        scales[j], mins[j], L[32 * j : 32 * j + 32] = ref_make_qkx2_quants(
            32, nmax, xs, w, rmin, 0.1, nstep, False
        )
        max_scale = scales[j] if scales[j] > max_scale else max_scale
        max_min = mins[j] if mins[j] > max_min else max_min
    inv_scale = F(63) / max_scale if max_scale > 0 else F(0)
    inv_min = F(63) / max_min if max_min > 0 else F(0)
    s = [0] * 12
    for j in range(8):
        ls = min(63, nearest_int(inv_scale * scales[j]) & 0xFF)
        lm = min(63, nearest_int(inv_min * mins[j]) & 0xFF)
        if j < 4:
            s[j] = ls
            s[j + 4] = lm
        else:
            s[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4)
            s[j - 4] |= (ls >> 4) << 6
            s[j] |= (lm >> 4) << 6
    d = fp16(max_scale / F(63))
    dmin = fp16(max_min / F(63))
    for j in range(8):
        if j < 4:
            sc, m = s[j] & 63, s[j + 4] & 63
        else:
            sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4)
            m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4)
        dd = d * F(sc)
        if not dd:
            continue
        dm = dmin * F(m)
        for ii in range(32):
            L[32 * j + ii] = max(0, min(nmax, nearest_int((x[32 * j + ii] + dm) / dd)))
    return L, s, f16_bytes(d) + f16_bytes(dmin)


def ref_q4_k(x):
    L, s, dd = ref_k4_like(x, 15, -1.0, 20)
    qs = []
    for j in range(0, 256, 64):
        qs += [L[j + i] | (L[j + i + 32] << 4) for i in range(32)]
    return dd + s + qs


def ref_q5_k(x):
    L, s, dd = ref_k4_like(x, 31, -0.5, 15)
    qh = [0] * 32
    ql = []
    m1, m2 = 1, 2
    for n in range(0, 256, 64):
        for j in range(32):
            l1, l2 = L[n + j], L[n + j + 32]
            if l1 > 15:
                l1 -= 16
                qh[j] |= m1
            if l2 > 15:
                l2 -= 16
                qh[j] |= m2
            ql.append(l1 | (l2 << 4))
        m1, m2 = m1 << 2, m2 << 2
    return dd + s + qh + ql


def ref_q6_k(x):
    L = [0] * 256
    scales = [F(0)] * 16
    max_scale = max_abs = F(0)
    for ib in range(16):
        scales[ib], L[16 * ib : 16 * ib + 16] = ref_make_qx_quants(
            16, 32, x[16 * ib : 16 * ib + 16]
        )
        if abs(scales[ib]) > max_abs:
            max_abs = abs(scales[ib])
            max_scale = scales[ib]
    if max_abs < F(1e-15):
        return [0] * 210
    iscale = F(-128) / max_scale
    d = fp16(F(1) / iscale)
    sc = [min(127, nearest_int(iscale * s)) for s in scales]
    for j in range(16):
        dd = d * F(sc[j])
        if not dd:
            continue
        for ii in range(16):
            L[16 * j + ii] = max(-32, min(31, nearest_int(x[16 * j + ii] / dd))) + 32
    ql = [0] * 128
    qh = [0] * 64
    for h, j in enumerate(range(0, 256, 128)):
        for i in range(32):
            q1, q2, q3, q4 = (L[j + i + 32 * k] for k in range(4))
            ql[64 * h + i] = (q1 & 0xF) | ((q3 & 0xF) << 4)
            ql[64 * h + i + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4)
            qh[32 * h + i] = (
                (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)
            )
    return ql + qh + [v & 0xFF for v in sc] + f16_bytes(d)


REFERENCE = {
    "Q2_K": ref_q2_k,
    "Q3_K": ref_q3_k,
    "Q4_K": ref_q4_k,
    "Q5_K": ref_q5_k,
    "Q6_K": ref_q6_k,
}


def _blocks(seed: int, n: int) -> np.ndarray:
    """Blocks that visit the corner cases: Gaussian weights, heavy tails,
    all-positive, all-negative, all-zero, a constant, a lone spike, and a
    block with zeroed sub-blocks."""
    rng = np.random.default_rng(seed)
    out = [rng.standard_normal(256) * 0.02]
    out.append(rng.standard_t(2, 256) * 0.01)
    out.append(np.abs(rng.standard_normal(256)))
    out.append(-np.abs(rng.standard_normal(256)) * 3)
    out.append(np.zeros(256))
    out.append(np.full(256, 0.5))
    spike = np.zeros(256)
    spike[37] = 1.0
    out.append(spike)
    part = rng.standard_normal(256)
    part[:48] = 0
    part[200:] *= 1e-3
    out.append(part)
    while len(out) < n:
        out.append(rng.standard_normal(256) * rng.uniform(0.001, 2))
    return np.stack(out[:n]).astype(F)


@pytest.mark.parametrize("qtype", K_TYPES)
def test_blocks_match_the_reference_bit_for_bit(qtype: str) -> None:
    x = _blocks(1, 10)
    ours = kq.quantize(x, qtype)
    assert ours.shape == (10, kq.BLOCK_BYTES[qtype])
    for i in range(x.shape[0]):
        want = np.array(REFERENCE[qtype]([F(v) for v in x[i]]), dtype=np.uint8)
        assert len(want) == kq.BLOCK_BYTES[qtype]
        np.testing.assert_array_equal(ours[i], want, err_msg=f"{qtype} block {i}")


# Relative RMSE of Gaussian weights read back through gguf's dequantizer;
# measured ~0.30, 0.15, 0.071, 0.036, 0.018 (each type about halves it).
RMSE_BOUND = {"Q2_K": 0.33, "Q3_K": 0.17, "Q4_K": 0.08, "Q5_K": 0.04, "Q6_K": 0.02}


def test_gguf_reads_them_back_within_bounds_that_shrink_with_bits() -> None:
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((48, 1024)) * 0.02).astype(F)
    errors = []
    for qtype in K_TYPES:
        q = kq.quantize(x, qtype)
        assert q.shape == (48, 1024 // 256 * kq.BLOCK_BYTES[qtype])
        back = gguf.quants.dequantize(q, gguf.GGMLQuantizationType[qtype])
        assert back.shape == x.shape
        rel = float(np.sqrt(np.mean((back - x) ** 2) / np.mean(x**2)))
        assert rel < RMSE_BOUND[qtype], (qtype, rel)
        errors.append(rel)
    assert errors == sorted(errors, reverse=True)


def test_passes_over_blocks_give_the_same_bytes(monkeypatch) -> None:
    x = _blocks(2, 12)
    whole = {t: kq.quantize(x, t) for t in K_TYPES}
    monkeypatch.setattr(kq, "_BLOCKS_PER_PASS", 5)
    for t in K_TYPES:
        np.testing.assert_array_equal(kq.quantize(x, t), whole[t])
        np.testing.assert_array_equal(kq.quantize(x, t, threads=1), whole[t])


def test_passes_are_shared_evenly_between_threads(monkeypatch) -> None:
    monkeypatch.setattr(kq, "_THREADS", 2)
    # One 256 x 512 attn_k (512 blocks) is two passes, not one on one thread;
    # three passes' worth becomes four; small inputs stay whole.
    assert kq._pass_blocks(512) == 256
    assert kq._pass_blocks(1536) == 384
    assert kq._pass_blocks(4096) == kq._BLOCKS_PER_PASS
    assert kq._pass_blocks(100) == kq._MIN_BLOCKS_PER_PASS


def test_one_pass_sums_give_the_same_bytes_as_multiply_then_sum(monkeypatch) -> None:
    x = _blocks(3, 24)
    fused = {t: kq.quantize(x, t) for t in K_TYPES}
    monkeypatch.setattr(kq, "_EINSUM_EXACT", False)
    for t in K_TYPES:
        np.testing.assert_array_equal(kq.quantize(x, t), fused[t], err_msg=t)


def test_rows_must_fit_the_super_block() -> None:
    with pytest.raises(ValueError, match="do not fit Q4_K"):
        kq.quantize(np.zeros((2, 320), F), "Q4_K")


# --------------------------------------------------------------------------
# Named file types on a llama-like model whose rows are 256 and 512 wide:
# hidden 256, intermediate 512, 4 layers, 4 heads sharing 2 KV heads.

SIZE = (256, 512, 4)
TEXTS = [
    "Move PROJ-7 from To Do to In Progress with transition_issue.",
    "The board columns are To Do, In Progress, In Review and Done.",
]

# Each tensor's type in a 4-layer model as llama.cpp's llama_tensor_get_type
# gives it (use_more_bits picks layers 2 and 3 of 4; n_gqa is 2).
DEFAULTS = {
    "q2_k": "Q2_K",
    "q3_k_s": "Q3_K",
    "q3_k_m": "Q3_K",
    "q3_k_l": "Q3_K",
    "q4_k_s": "Q4_K",
    "q4_k_m": "Q4_K",
    "q5_k_s": "Q5_K",
    "q5_k_m": "Q5_K",
    "q6_k": "Q6_K",
}
SPECIAL = {
    "q2_k": {
        "attn_v": ["Q3_K"] * 4,
        "ffn_down": ["Q3_K"] * 4,
        "attn_output": ["Q3_K"] * 4,
    },
    "q3_k_m": {
        "attn_v": ["Q5_K", "Q5_K", "Q4_K", "Q4_K"],
        "ffn_down": ["Q4_K"] * 4,
        "attn_output": ["Q4_K"] * 4,
    },
    "q3_k_l": {
        "attn_v": ["Q5_K"] * 4,
        "ffn_down": ["Q5_K"] * 4,
        "attn_output": ["Q5_K"] * 4,
    },
    "q4_k_s": {"attn_v": ["Q5_K"] * 4},
    "q4_k_m": {
        "attn_v": ["Q4_K", "Q4_K", "Q6_K", "Q6_K"],
        "ffn_down": ["Q4_K", "Q4_K", "Q6_K", "Q6_K"],
    },
    "q5_k_m": {
        "attn_v": ["Q5_K", "Q5_K", "Q6_K", "Q6_K"],
        "ffn_down": ["Q5_K", "Q5_K", "Q6_K", "Q6_K"],
    },
}
# Mean |logit error| against the HF model on TEXTS (mean |logit| is ~1 and
# the random weights amplify errors), with a correlation floor; measured
# q2_k 1.1, q3_k_* 0.68-0.81, q4_k_* 0.43-0.45, q5_k_* 0.23, q6_k 0.12 (q4_0
# 0.50, q8_0 0.03); correlation 0.41, 0.68-0.76, 0.90, 0.97, 0.99.
MEAN_ERROR = {"q2": 1.6, "q3": 1.2, "q4": 0.6, "q5": 0.35, "q6": 0.18}
MIN_CORR = {"q2": 0.3, "q3": 0.55, "q4": 0.8, "q5": 0.93, "q6": 0.98}

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The tiny llama, its token ids of TEXTS and its logits on them."""
    transformers.logging.set_verbosity_error()
    folder = build_tiny_model(
        tmp_path_factory.mktemp("k") / "m", "llama", False, size=SIZE
    )
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    ids = tok(TEXTS, return_tensors="pt", padding=True).input_ids
    with torch.no_grad():
        logits = model(ids).logits
    return {"folder": folder, "ids": ids, "logits": logits}


@pytest.fixture(scope="module")
def exported(
    source: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], tuple[Path, gx.ExportReport]]:
    """``exported(file_type)``: the source exported as that type, made once in
    the module by whichever test asks first (an export that fails fails the
    test that asked, and the next one asking tries again)."""
    folder = tmp_path_factory.mktemp("exports")
    done: dict[str, tuple[Path, gx.ExportReport]] = {}

    def export(file_type: str) -> tuple[Path, gx.ExportReport]:
        if file_type not in done:
            out = folder / f"{file_type}.gguf"
            # Any case: the upper-case name reads as the lower-case type.
            done[file_type] = (
                out,
                gx.export_gguf(source["folder"], out, file_type.upper()),
            )
        return done[file_type]

    return export


def _expected(file_type: str, name: str) -> str:
    if name == "output.weight":
        return "Q6_K"
    if name.startswith("blk."):
        layer = int(name.split(".")[1])
        kind = name.split(".")[2]
        if kind in SPECIAL.get(file_type, {}):
            return SPECIAL[file_type][kind][layer]
    return DEFAULTS[file_type]


@pytest.mark.parametrize("file_type", K_FILE_TYPES)
def test_file_types_choose_tensor_types_as_llama_cpp_and_load_in_transformers(
    source: dict[str, Any],
    exported: Callable[[str], tuple[Path, gx.ExportReport]],
    file_type: str,
) -> None:
    out, report = exported(file_type)
    assert report.verified, report.checks
    assert report.file_type == file_type
    assert report.fallbacks == []
    kv, infos = gx.read_gguf_header(out)
    assert kv["general.file_type"] == int(
        gguf.LlamaFileType["MOSTLY_" + file_type.upper()]
    )
    for name, shape, ttype in infos:
        got = gguf.GGMLQuantizationType(ttype).name
        want = "F32" if len(shape) == 1 else _expected(file_type, name)
        assert got == want, f"{file_type}: {name} is {got}, llama.cpp writes {want}"
    model = transformers.AutoModelForCausalLM.from_pretrained(
        out.parent, gguf_file=out.name
    ).eval()
    with torch.no_grad():
        logits = model(source["ids"]).logits
    ref = source["logits"]
    err = (logits - ref).abs().mean().item()
    assert err <= MEAN_ERROR[file_type[:2]], (
        f"{file_type}: mean |logit error| {err:.3f}"
    )
    corr = np.corrcoef(logits.flatten().numpy(), ref.flatten().numpy())[0, 1]
    assert corr >= MIN_CORR[file_type[:2]]


def test_the_report_gives_bits_per_weight_and_the_logit_error(
    source: dict[str, Any], exported: Callable[[str], tuple[Path, gx.ExportReport]]
) -> None:
    from engine.export.logit_check import logit_error

    out, report = exported("q4_k_m")
    # Q4_K is 4.5 bits, Q6_K 6.56; norms stay F32.
    assert 4.5 < report.bits_per_weight < 5.5
    # A copy: the shared export's report stays as export_gguf wrote it.
    report = dataclasses.replace(
        report, logit_error=logit_error(source["folder"], out, TEXTS)
    )
    e = report.logit_error
    assert e["prompts"] == 2 and 0.2 < e["mean_abs"] < MEAN_ERROR["q4"]
    assert e["max_abs"] > e["mean_abs"] and 0.5 < e["mean_abs_logit"] < 2
    summary = report.summary()
    assert f"Q4_K_M, {report.bits_per_weight:.2f} bits per weight" in summary
    assert (
        f"Logit error against the source model: mean |Δ| {e['mean_abs']:.4f}, "
        in summary
    )
    assert summary.splitlines()[-1].endswith("over 2 prompts.")


def test_export_gguf_command_writes_a_k_quant_with_its_report(
    source, tmp_path: Path
) -> None:
    import json
    import subprocess
    import sys

    out = tmp_path / "cli.gguf"
    args = [str(source["folder"]), "--out", str(out), "--type", "Q5_K_M"]
    flags = ["--logit-error", "--json", "--quiet"]
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "export-gguf", *args, *flags],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["file_type"] == "q5_k_m" and report["verified"]
    assert report["tensor_types"] == {"F32": 9, "Q5_K": 25, "Q6_K": 5}
    assert 5.5 < report["bits_per_weight"] < 6.5
    assert 0 < report["logit_error"]["mean_abs"] < MEAN_ERROR["q5"]


def test_more_bits_make_bigger_files(
    exported: Callable[[str], tuple[Path, gx.ExportReport]],
) -> None:
    sizes = [exported(t)[1].size_bytes for t in K_FILE_TYPES]
    assert sizes == sorted(sizes)


def test_rows_not_filling_super_blocks_fall_back_as_llama_cpp_does(
    tmp_path: Path,
) -> None:
    # The 64-wide model: no row fills 256 values, all fill 32.
    folder = build_tiny_model(tmp_path / "m", "llama")
    out = tmp_path / "small.gguf"
    report = gx.export_gguf(folder, out, "q4_k_m")
    assert report.verified, report.checks
    _, infos = gx.read_gguf_header(out)
    types = {n: gguf.GGMLQuantizationType(t).name for n, _, t in infos}
    assert types["blk.0.attn_q.weight"] == "Q5_0"  # Q4_K's fallback
    assert types["blk.1.attn_v.weight"] == "Q8_0"  # Q6_K's (use_more_bits)
    assert types["output.weight"] == "Q8_0"
    assert "blk.0.attn_q.weight: Q4_K → Q5_0" in report.fallbacks
    assert "output.weight: Q6_K → Q8_0" in report.fallbacks
    quantized = [n for n, t in types.items() if t != "F32"]
    assert len(report.fallbacks) == len(quantized)
    assert f"{len(quantized)} tensor(s) in another type" in report.summary()
    assert "output.weight: Q6_K → Q8_0" in report.summary()


def test_mix_and_fallback_rules() -> None:
    # use_more_bits on 32 layers: the first and last 4, every third between.
    more = [i for i in range(32) if kq.use_more_bits(i, 32)]
    assert more == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
    assert kq.mix_type("q2_k", "blk.0.attn_v.weight", 32, 4, False) == "Q4_K"
    assert kq.mix_type("q2_k", "blk.0.attn_v.weight", 32, 1, False) == "Q3_K"
    assert kq.mix_type("q4_k_m", "token_embd.weight", 32, 1, True) == "Q6_K"
    assert kq.mix_type("q4_k_m", "token_embd.weight", 32, 1, False) == "Q4_K"
    assert kq.mix_type("q3_k_m", "blk.1.ffn_down.weight", 32, 1, False) == "Q5_K"
    assert kq.mix_type("q3_k_m", "blk.2.ffn_down.weight", 32, 1, False) == "Q4_K"
    assert kq.mix_type("q4_k_s", "blk.3.ffn_down.weight", 32, 1, False) == "Q5_K"
    assert kq.mix_type("q4_k_s", "blk.4.ffn_down.weight", 32, 1, False) == "Q4_K"
    assert [kq.fit_rows(t, 320) for t in K_TYPES] == [
        "Q4_0",
        "Q4_0",
        "Q5_0",
        "Q5_1",
        "Q8_0",
    ]
    assert kq.fit_rows("Q4_K", 100) == "F16"
    assert kq.fit_rows("Q4_K", 512) == "Q4_K"


def test_bad_type_names_are_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as exc:
        gx.export_gguf(tmp_path / "nothing", tmp_path / "a.gguf", "q4_k_x")
    message = str(exc.value)
    assert message.startswith("Unknown GGUF type 'q4_k_x'; choose one of f32, f16,")
    assert all(t in message for t in K_FILE_TYPES)
    assert message.endswith(", q6_k (upper or lower case).")
    with pytest.raises(EngineError) as exc:
        gx.export_lora_gguf(tmp_path / "adapter", tmp_path / "a.gguf", "Q4_K_M")
    assert str(exc.value) == (
        "A LoRA adapter exports as f32, f16, bf16, q8_0, not q4_k_m; K-quants are "
        "for full models, so merge the adapter and export the merged model."
    )
    assert list(tmp_path.iterdir()) == []


def test_job_configs_take_any_case(source, tmp_path: Path) -> None:
    from engine.export.jobs import validate_gguf
    from engine.export.ollama_job import validate

    folder = str(source["folder"])
    assert validate_gguf({"model_dir": folder, "type": "Q5_K_M"}).type == "q5_k_m"
    with pytest.raises(ConfigError) as exc:
        validate_gguf({"model_dir": folder, "type": "q4_k_m", "adapter": True})
    assert exc.value.field == "type"
    assert "K-quants are for full models" in str(exc.value)
    cfg = validate({"model": folder, "name": "tiny", "type": "Q4_K_M"})
    assert cfg.type == "q4_k_m"
    assert validate({"model": folder, "name": "tiny"}).type == "q4_k_m"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_disk_full_mid_write_leaves_no_file(
    source, tmp_path: Path, monkeypatch
) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    real = gguf.GGUFWriter.write_ti_data_to_file

    def then_the_disk_fills(self) -> None:
        real(self)
        full = os.open("/dev/full", os.O_WRONLY)
        try:
            os.dup2(full, self.fout[0].fileno())
        finally:
            os.close(full)

    monkeypatch.setattr(gguf.GGUFWriter, "write_ti_data_to_file", then_the_disk_fills)
    with pytest.raises(EngineError) as exc:
        gx.export_gguf(source["folder"], out_dir / "a.gguf", "q4_k_m")
    assert re.fullmatch(
        rf"The disk holding {re.escape(str(out_dir))} is full; free about \d+ MB "
        r"and export again\.",
        str(exc.value),
    ), str(exc.value)
    assert list(out_dir.iterdir()) == []
