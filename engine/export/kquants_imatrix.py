"""llama.cpp's importance-matrix K-quants (Q2_K ... Q6_K) in numpy.

With an importance matrix ``llama-quantize`` calls ``quantize_q*_K(src, dst,
nrow, n_per_row, quant_weights)`` of ``ggml/src/ggml-quants.c``, which take
``quantize_row_q*_K_impl`` instead of the reference path: each value's error
is weighted by ``imatrix[column] * sqrt(sigma2 + x²)`` (``sigma2`` the
block's mean square, doubled for Q3_K/Q4_K/Q5_K), the sub-block search is
``make_qkx3_quants`` (the weighted ``make_qkx2_quants`` with a wider range,
-0.9 + 0.05·k for 37 steps) or ``make_qx_quants`` with those weights, and the
sub-block scales are themselves quantized by a weighted search
(``make_qp_quants`` for Q2_K/Q4_K/Q5_K, ``make_qx_quants`` for Q3_K) instead
of max/63. Q6_K weights its sub-block search by the imatrix alone. The
32-value types K types fall back to (Q4_0, Q4_1, Q5_0, Q5_1) are weighted
too, as ``quantize_row_q4_0_impl`` ... ``q5_1_impl`` do (``sigma2`` the
row's mean square).

The importance of a column is the mean of the squared activations that
multiply it (``engine.export.imatrix`` collects them), the value
``llama-quantize`` reads from an imatrix file (sum / count).

Like ``engine.export.kquants`` every step is vectorized over all sub-blocks,
in float32 with the C code's operation order and sequential sums, so the
bytes are those of a plain C build (no FMA contraction) of llama.cpp;
``tests/benchmarks/test_bench_imatrix_llama_cpp.py`` compares them with
llama.cpp's own functions where a build of ``ggml-quants.c`` is at hand.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from engine.export.kquants import (
    _BLOCKS_PER_PASS,
    _GROUP_MAX_EPS,
    _THREADS,
    BLOCK_BYTES,
    QK_K,
    _abs_max,
    _asym_requantize,
    _fp16_bytes,
    _fp16_round,
    _pack_2bit,
    _pack_k4_scales,
    _seq_sum,
    _sub_blocks,
    _to_u8,
    make_qkx2_quants,
    q3_k_blocks,
    q4_k_blocks,
    q5_k_blocks,
    q6_k_blocks,
    refine_levels,
    run_passes,
)

_F32 = np.float32


def _f(v: float) -> np.float32:
    return _F32(v)


# --------------------------------------------------------------------------
# the weighted searches; x and qw are (values per group, groups)


def make_qx_quants_weighted(
    x: np.ndarray, nmax: int, qw: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``make_qx_quants(n, nmax, x, L, 1, qw)``: symmetric scale search
    weighted by ``qw``: (scale, L with L in [0, 2*nmax))."""
    mx, amax = _abs_max(x)
    zero = amax < _GROUP_MAX_EPS
    wx = qw * x
    f_nmax = _f(nmax)
    t = np.empty_like(x)
    q = np.empty_like(x)

    def sums(iscale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        np.multiply(iscale, x, out=t)
        np.rint(t, out=q)
        np.maximum(q, -nmax, out=q)
        np.minimum(q, nmax - 1, out=q)
        np.multiply(wx, q, out=t)
        sumlx = _seq_sum(t)
        np.multiply(qw, q, out=t)
        np.multiply(t, q, out=t)
        return sumlx, _seq_sum(t)

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        sumlx, suml2 = sums(-f_nmax / mx)
        scale = np.where(suml2 != 0, sumlx / suml2, _f(0))
        best = scale * sumlx
        levels = q + f_nmax
        for step in range(-9, 10):
            if step == 0:
                continue
            sumlx, suml2 = sums(-(f_nmax + _f(0.1) * _f(step)) / mx)
            take = (suml2 > 0) & (sumlx * sumlx > best * suml2)
            np.add(q, f_nmax, out=t)
            np.copyto(levels, t, where=take)
            scale = np.where(take, sumlx / suml2, scale)
            best = np.where(take, scale * sumlx, best)
    levels[:, zero] = 0
    scale = np.where(zero, _f(0), scale)
    return scale.astype(_F32), levels


def _as_stored_level(v: np.ndarray) -> np.ndarray:
    """A level as ``make_qp_quants`` keeps it in C's ``uint8_t L[i]``
    (modulo 256), as float32 for the sums that read it back."""
    return _to_u8(v).astype(_F32)


def make_qp_quants(
    x: np.ndarray, nmax: int, qw: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``make_qp_quants``: a scale for non-negative values (sub-block scales
    or mins) and their levels in [0, nmax], weighted by ``qw``: (scale, L as
    uint8). A negative value's level wraps as C's ``uint8_t`` does."""
    f_nmax = _f(nmax)
    mx = np.maximum(x.max(axis=0), _f(0))
    zero = mx < _GROUP_MAX_EPS
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = f_nmax / mx
        first = np.rint(iscale * x)
        # L[i] = nearest_int(...) into a uint8_t, read back by the error sum.
        wrapped = _as_stored_level(first)
        scale = _f(1) / iscale
        diff = x - scale * wrapped
        best_mse = _seq_sum(qw * diff * diff)
        for step in range(-4, 5):
            if step == 0:
                continue
            iscale_is = (_f(0.1) * _f(step) + f_nmax) / mx
            scale_is = _f(1) / iscale_is
            lv = np.minimum(np.rint(iscale_is * x), f_nmax)
            diff = x - scale_is * lv
            mse = _seq_sum(qw * diff * diff)
            take = mse < best_mse
            best_mse = np.where(take, mse, best_mse)
            iscale = np.where(take, iscale_is, iscale)
        lv = np.minimum(np.rint(iscale * x), f_nmax)
        stored = _as_stored_level(lv)
        sumlx, suml2 = refine_levels(
            x,
            qw,
            stored,
            (_seq_sum(qw * x * lv), _seq_sum(qw * lv * lv)),
            lambda v: np.minimum(np.rint(v), f_nmax),
            positive_before=True,
            stored=_as_stored_level,
        )
        scale = np.where(suml2 > 0, sumlx / suml2, _f(0))
    stored[:, zero] = 0
    scale = np.where(zero, _f(0), scale)
    return scale.astype(_F32), stored.astype(np.uint8)


# --------------------------------------------------------------------------
# the block quantizers; x and qw are (blocks, 256) float32


def _block_sigma2(x: np.ndarray, factor: int) -> np.ndarray:
    """``factor * sum(x²) / QK_K`` of each block, summed as the C loop adds."""
    xt = np.ascontiguousarray(x.T)
    return _f(factor) * _seq_sum(xt * xt) / _f(QK_K)


def _weights(
    x: np.ndarray, qw: np.ndarray, sigma2: np.ndarray, size: int
) -> np.ndarray:
    """``qw * sqrt(sigma2 + x²)`` laid out as ``_sub_blocks(x, size)``."""
    xt = _sub_blocks(x, size)
    qt = _sub_blocks(qw, size)
    s2 = np.repeat(sigma2, QK_K // size)[None, :]
    out: np.ndarray = qt * np.sqrt(s2 + xt * xt)
    return out


def _weighted_sub_blocks(
    x: np.ndarray, qw: np.ndarray, factor: int, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sub-blocks of ``size`` values of Q2_K ... Q5_K and their weights
    (``sigma2`` the block's mean square times ``factor``), laid out as
    ``_sub_blocks(x, size)``: (values, weights, each sub-block's weight sum)."""
    w = _weights(x, qw, _block_sigma2(x, factor), size)
    return _sub_blocks(x, size), w, _seq_sum(w)


def _k4_scales_decoded(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``get_scale_min_k4`` for the eight sub-blocks of every block."""
    q = packed.astype(np.uint8)
    sc = np.empty((q.shape[0], 8), np.uint8)
    mn = np.empty((q.shape[0], 8), np.uint8)
    sc[:, 0:4] = q[:, 0:4] & 63
    mn[:, 0:4] = q[:, 4:8] & 63
    sc[:, 4:8] = (q[:, 8:12] & 0xF) | ((q[:, 0:4] >> 6) << 4)
    mn[:, 4:8] = (q[:, 8:12] >> 4) | ((q[:, 4:8] >> 6) << 4)
    return sc, mn


def _q4_k_like(
    x: np.ndarray, qw: np.ndarray, nmax: int, clamp_scales: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``quantize_row_q4_K_impl`` / ``q5_K_impl`` up to the packing of the
    levels: (levels, packed scales, d, dmin)."""
    n = x.shape[0]
    xt, w, sw = _weighted_sub_blocks(x, qw, 2, 32)
    scales, mins, levels_t = make_qkx2_quants(xt, w, nmax, -0.9, 0.05, 36, False)
    sw_b = np.ascontiguousarray(sw.reshape(n, 8).T)
    d_block, ls = make_qp_quants(np.ascontiguousarray(scales.reshape(n, 8).T), 63, sw_b)
    m_block, lm = make_qp_quants(np.ascontiguousarray(mins.reshape(n, 8).T), 63, sw_b)
    ls, lm = ls.T, lm.T
    if clamp_scales:
        ls, lm = np.minimum(ls, 63), np.minimum(lm, 63)
    packed = _pack_k4_scales(np.ascontiguousarray(ls), np.ascontiguousarray(lm))
    d = _fp16_round(d_block)
    dmin = _fp16_round(m_block)
    sc, mn = _k4_scales_decoded(packed)
    d_sub = d[:, None] * sc.astype(_F32)
    m_sub = dmin[:, None] * mn.astype(_F32)
    levels = _asym_requantize(x, levels_t, d_sub, m_sub, 32, nmax)
    return levels, packed, d, dmin


def quantize_q4_k_blocks_weighted(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    return q4_k_blocks(*_q4_k_like(x, qw, 15, False))


def quantize_q5_k_blocks_weighted(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    return q5_k_blocks(*_q4_k_like(x, qw, 31, True))


def quantize_q2_k_blocks_weighted(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    n = x.shape[0]
    xt, w, sw = _weighted_sub_blocks(x, qw, 1, 16)
    scales, mins, levels_t = make_qkx2_quants(xt, w, 3, -0.9, 0.05, 36, False)
    sw_b = np.ascontiguousarray(sw.reshape(n, 16).T)
    dm, ls = make_qp_quants(np.ascontiguousarray(scales.reshape(n, 16).T), 15, sw_b)
    mm, lm = make_qp_quants(np.ascontiguousarray(mins.reshape(n, 16).T), 15, sw_b)
    # Ls | (Lm << 4) into a uint8_t.
    sc_u8 = (ls.T | (lm.T << 4)).astype(np.uint8)
    d = _fp16_round(dm)
    dmin = _fp16_round(mm)
    d_sub = d[:, None] * (sc_u8 & 0xF).astype(_F32)
    m_sub = dmin[:, None] * (sc_u8 >> 4).astype(_F32)
    levels = _asym_requantize(x, levels_t, d_sub, m_sub, 16, 3)
    return np.concatenate(
        [sc_u8, _pack_2bit(levels), _fp16_bytes(d), _fp16_bytes(dmin)], axis=1
    )


def quantize_q3_k_blocks_weighted(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    n = x.shape[0]
    xt, w, sw = _weighted_sub_blocks(x, qw, 2, 16)
    scales, levels_t = make_qx_quants_weighted(xt, 4, w)
    d_block, ls = make_qx_quants_weighted(
        np.ascontiguousarray(scales.reshape(n, 16).T),
        32,
        np.ascontiguousarray(sw.reshape(n, 16).T),
    )
    l6 = ls.T.astype(np.uint8)
    return q3_k_blocks(x, l6, _fp16_round(d_block), levels_t)


def quantize_q6_k_blocks_weighted(x: np.ndarray, qw: np.ndarray) -> np.ndarray:
    scales_t, levels_t = make_qx_quants_weighted(
        _sub_blocks(x, 16), 32, _sub_blocks(qw, 16)
    )
    return q6_k_blocks(x, scales_t, levels_t)


WEIGHTED_QUANTIZERS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Q2_K": quantize_q2_k_blocks_weighted,
    "Q3_K": quantize_q3_k_blocks_weighted,
    "Q4_K": quantize_q4_k_blocks_weighted,
    "Q5_K": quantize_q5_k_blocks_weighted,
    "Q6_K": quantize_q6_k_blocks_weighted,
}
"""Importance-weighted block quantizer of each K type: (blocks, 256) values
and weights to (blocks, bytes)."""


def quantize_weighted(
    values: np.ndarray,
    type_name: str,
    importance: np.ndarray,
    threads: int | None = None,
) -> np.ndarray:
    """Rows of float values (last axis a multiple of 256) to K-quant bytes
    weighted by ``importance`` (one non-negative float per column, shared by
    every row), shaped (rows..., row bytes) like ``kquants.quantize``, on
    ``threads`` threads (``_THREADS`` unless given)."""
    threads = _THREADS if threads is None else threads
    fn = WEIGHTED_QUANTIZERS[type_name]
    size = BLOCK_BYTES[type_name]
    ncols = values.shape[-1]
    if ncols % QK_K != 0:
        raise ValueError(f"rows of {ncols} values do not fit {type_name}")
    importance = np.ascontiguousarray(importance, dtype=_F32).reshape(-1)
    if importance.shape[0] != ncols:
        raise ValueError(
            f"the importance matrix has {importance.shape[0]} columns, the rows {ncols}"
        )
    per_row = ncols // QK_K
    blocks = np.ascontiguousarray(values, dtype=_F32).reshape(-1, QK_K)
    qw_row = importance.reshape(per_row, QK_K)
    out = np.empty((blocks.shape[0], size), np.uint8)
    # A pass covers whole rows where a row has many blocks, so the weights
    # of block b are those of column block b % per_row.
    step = max(1, _BLOCKS_PER_PASS // per_row) * per_row

    def one_pass(b0: int) -> None:
        chunk = blocks[b0 : b0 + step]
        qw = np.tile(qw_row, (chunk.shape[0] // per_row, 1))
        out[b0 : b0 + step] = fn(chunk, qw)

    run_passes(one_pass, blocks.shape[0], step, threads)
    return out.reshape(*values.shape[:-1], ncols // QK_K * size)


# --------------------------------------------------------------------------
# the 32-value types K types fall back to (rows not a multiple of 256)


_LEGACY_BYTES = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24}
"""Bytes per 32-value block of the types weighted like llama.cpp's
``quantize_row_q4_0_impl`` ... ``q5_1_impl`` (Q8_0 takes no weights)."""


def _qh_bits(levels: np.ndarray) -> np.ndarray:
    """The fifth bits of 32 levels as Q5_0/Q5_1's little-endian ``qh``."""
    bits = ((levels >> 4) & 1).astype(np.uint32) << np.arange(32, dtype=np.uint32)
    packed: np.ndarray = np.bitwise_or.reduce(bits, axis=1).astype("<u4")
    return packed.reshape(-1, 1).view(np.uint8)


def _legacy_rows(x: np.ndarray, qw_row: np.ndarray, type_name: str) -> np.ndarray:
    """Whole rows (rows, n_per_row) of one 32-value type to bytes (rows, ...)."""
    rows, ncols = x.shape
    nb = ncols // 32
    xt_rows = np.ascontiguousarray(x.T)
    # One sigma2 per row: its mean square, summed as the C loop adds.
    sigma2 = _seq_sum(xt_rows * xt_rows) / _f(ncols)
    blocks = x.reshape(-1, 32)
    xt = np.ascontiguousarray(blocks.T)
    qt = np.ascontiguousarray(np.tile(qw_row.reshape(nb, 32), (rows, 1)).T)
    s2 = np.repeat(sigma2, nb)[None, :]
    w = qt * np.sqrt(s2 + xt * xt)
    if type_name in ("Q4_0", "Q5_0"):
        nmax = 8 if type_name == "Q4_0" else 16
        d, levels_t = make_qx_quants_weighted(xt, nmax, w)
        head = [_fp16_bytes(d)]
    else:
        nmax = 15 if type_name == "Q4_1" else 31
        d, the_min, levels_t = make_qkx2_quants(xt, w, nmax, -0.9, 0.05, 36, False)
        head = [_fp16_bytes(d), _fp16_bytes(-the_min)]
    levels = levels_t.T.astype(np.uint8)
    qs = (levels[:, :16] & 0xF) | ((levels[:, 16:] & 0xF) << 4)
    parts = [*head, _qh_bits(levels), qs] if type_name[1] == "5" else [*head, qs]
    return np.concatenate(parts, axis=1).reshape(rows, -1)


def quantize_legacy_weighted(
    values: np.ndarray, type_name: str, importance: np.ndarray
) -> np.ndarray:
    """Rows (last axis a multiple of 32) to Q4_0/Q4_1/Q5_0/Q5_1 bytes weighted
    by ``importance`` per column, as llama.cpp quantizes a K type's fallback
    with an importance matrix; shaped (rows..., row bytes)."""
    ncols = values.shape[-1]
    if ncols % 32 != 0:
        raise ValueError(f"rows of {ncols} values do not fit {type_name}")
    importance = np.ascontiguousarray(importance, dtype=_F32).reshape(-1)
    if importance.shape[0] != ncols:
        raise ValueError(
            f"the importance matrix has {importance.shape[0]} columns, the rows {ncols}"
        )
    x = np.ascontiguousarray(values, dtype=_F32).reshape(-1, ncols)
    row_bytes = ncols // 32 * _LEGACY_BYTES[type_name]
    out = np.empty((x.shape[0], row_bytes), np.uint8)
    step = max(1, _BLOCKS_PER_PASS * QK_K // ncols)
    for r0 in range(0, x.shape[0], step):
        out[r0 : r0 + step] = _legacy_rows(x[r0 : r0 + step], importance, type_name)
    return out.reshape(*values.shape[:-1], row_bytes)
