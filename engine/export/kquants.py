"""llama.cpp's K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) in numpy.

Each function follows ``quantize_row_q*_K_ref`` of llama.cpp's
``ggml/src/ggml-quants.c`` (the path ``llama-quantize`` takes when no
importance matrix is given): super-blocks of 256 values, 16 or 32-value
sub-blocks with their own scale (and min), those scales quantized to 4, 6 or
8 bits against one fp16 scale per super-block, and the same iterative scale
searches (``make_qkx2_quants``, ``make_qx_quants``, ``make_q3_quants``).

Every step is vectorized over all sub-blocks at once; the searches keep one
state per sub-block and take a candidate where it is better, which is what
the per-block loops of the C code do one block at a time. Arithmetic is
float32 in the C code's order, sums included (a sequential sum over the
sub-block, not numpy's pairwise one), so the blocks are the ones a plain C
build of the reference writes. ``gguf.quants.dequantize`` reads them back.

``quantize`` works through a bounded number of blocks at a time, so its
temporary memory stays a few tens of MB whatever it is given; the passes
run on a small thread pool (numpy releases the GIL), each writing its own
rows, so the bytes do not depend on the number of threads.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

QK_K = 256
"""Values per super-block."""

BLOCK_BYTES: dict[str, int] = {
    "Q2_K": 84,
    "Q3_K": 110,
    "Q4_K": 144,
    "Q5_K": 176,
    "Q6_K": 210,
}
"""Bytes per super-block of each type (llama.cpp's ``block_q*_K``)."""

_F32 = np.float32
_GROUP_MAX_EPS = _F32(1e-15)
# Blocks quantized at once: 131,072 values, 512 KB per temporary array, so
# that a pass's arrays stay near the cache (on a 2048 x 2048 matrix, one
# thread: Q4_K 0.67-0.74 CPU-s against 0.72-0.86 with 1024 blocks, Q6_K
# 0.37-0.42 against 0.40-0.47; 256 blocks add more numpy call overhead than
# they save).
_BLOCKS_PER_PASS = 512
# Passes are split no smaller than this to keep threads busy (below it the
# numpy calls' overhead grows).
_MIN_BLOCKS_PER_PASS = 128
# numpy releases the GIL in its loops, so passes run side by side on threads.
_THREADS = min(8, os.cpu_count() or 1)


def _f(v: float) -> np.float32:
    return _F32(v)


def _seq_sum(a: np.ndarray) -> np.ndarray:
    """Sum over axis 0 one row after another, as the C loops add."""
    if a.ndim == 2 and a.shape[1] > 1 and a.flags.c_contiguous:
        # numpy reduces a C-ordered array's outer axis row by row (its
        # pairwise summation is for the contiguous inner axis only), in one
        # call instead of one per row.
        summed: np.ndarray = np.add.reduce(a, axis=0)
        return summed
    acc: np.ndarray = a[0].copy()
    for k in range(1, a.shape[0]):
        acc += a[k]
    return acc


def _einsum_matches() -> bool:
    """Whether ``np.einsum`` sums products over axis 0 exactly as ``_seq_sum``
    of the multiplied arrays: each product rounded to float32, then added one
    row after another. numpy's baseline x86 build does (no FMA in its loops);
    a build whose einsum fuses the multiply-add or reorders the sum fails
    this on random data, and ``_dot`` then multiplies and sums separately."""
    rng = np.random.default_rng(12345)
    for rows, cols in ((32, 8), (32, 2), (16, 16), (32, 259)):
        a, b, c = (
            rng.standard_normal((3 * rows, cols)).astype(_F32).reshape(3, rows, cols)
        )
        for args in ((a, b), (a, b, c), (a[:, ::-1], b), (a, b[::-1], c)):
            want = np.multiply(args[0], args[1])
            if len(args) == 3:
                want = np.multiply(want, args[2])
            if not np.array_equal(_seq_sum(want), np.einsum(_SPEC[len(args)], *args)):
                return False
    return True


_SPEC = {2: "ij,ij->j", 3: "ij,ij,ij->j"}


def _dot(*arrays: np.ndarray) -> np.ndarray:
    """Sum over axis 0 of the product of two or three (rows, cols) float32
    arrays, multiplied left to right and summed as ``_seq_sum`` does, in one
    pass (``np.einsum``) where that gives the same bits."""
    if _EINSUM_EXACT and arrays[0].shape[1] > 1:
        out: np.ndarray = np.einsum(_SPEC[len(arrays)], *arrays)
        return out
    prod = np.multiply(arrays[0], arrays[1])
    for a in arrays[2:]:
        np.multiply(prod, a, out=prod)
    return _seq_sum(prod)


def _round(v: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``MAX(lo, MIN(hi, nearest_int(v)))`` as float32 (ties to even, as the
    C code's magic-number rounding)."""
    out: np.ndarray = np.clip(np.rint(v), lo, hi)
    return out


def _fp16_round(v: np.ndarray) -> np.ndarray:
    """A float32 as stored in fp16 and read back (GGML_FP16_TO_FP32(FP32_TO_FP16))."""
    return np.asarray(v, dtype=_F32).astype(np.float16).astype(_F32)


def _to_u8(v: np.ndarray) -> np.ndarray:
    """An int stored in a uint8_t (C's modulo-256 conversion)."""
    return (v.astype(np.int64) & 0xFF).astype(np.uint8)


def _mask(cond: np.ndarray) -> np.ndarray:
    """A bool array as uint32 bit masks (all ones where true) for ``_pick``."""
    out: np.ndarray = np.negative(cond.view(np.uint8), dtype=np.uint32)
    return out


def _pick(
    mask: np.ndarray, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None
) -> np.ndarray:
    """``np.where`` of float32 arrays by bit operations: ``a`` where ``mask``
    (from ``_mask``, broadcast over leading axes) is all ones, else ``b``,
    into ``out`` (which may be ``b``). The bits are copied as they are, NaN
    included. numpy's masked copies (``where``, ``copyto(where=)``) branch
    on every element and took two thirds of the scale search's time."""
    bits_b = b.view(np.uint32)
    diff = np.bitwise_xor(a.view(np.uint32), bits_b)
    np.bitwise_and(diff, mask, out=diff)
    if out is None:
        out = np.empty_like(b)
    np.bitwise_xor(bits_b, diff, out=out.view(np.uint32))
    return out


_EINSUM_EXACT = _einsum_matches()


def _abs_max(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column: the value of largest magnitude (first one on ties) and
    that magnitude."""
    ax = np.abs(x)
    idx = np.argmax(ax, axis=0)
    cols = np.arange(x.shape[1])
    return x[idx, cols], ax[idx, cols]


# --------------------------------------------------------------------------
# the scale searches; x is (values per sub-block, sub-blocks)


def make_qkx2_quants(
    x: np.ndarray,
    w: np.ndarray,
    nmax: int,
    rmin: float,
    rdelta: float,
    nstep: int,
    use_mad: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scale and min search of an asymmetric sub-block: (scale, -min, L)."""
    f_nmax, f_rmin, f_rdelta = _f(nmax), _f(rmin), _f(rdelta)
    x = np.ascontiguousarray(x)
    w = np.ascontiguousarray(w)
    mn = np.minimum(x.min(axis=0), _f(0))
    mx = x.max(axis=0)
    flat = mx == mn
    sum_w = _seq_sum(w)
    sum_x = _seq_sum(w * x)
    # Buffers reused by every step: the search is ~20 passes over the tensor.
    t = np.empty_like(x)
    aux = np.empty_like(x)
    wl = np.empty_like(x)
    zeros = np.zeros_like(mx)
    # The search's state, one row each: the (iscale, min) that made the best
    # levels (kept that way and made again once at the end: copying levels
    # at every step cost more), the best error, the scale and the min. A
    # step's candidate has the same rows and replaces a column of the state
    # where it is better, all rows in one ``_pick``.
    state = np.empty((5, x.shape[1]), _F32)
    best_iscale, best_mn, best, scale, mn_now = state
    cand = np.empty_like(state)
    c_iscale, c_mn, c_err, c_scale, c_min = cand

    def levels_at(
        iscale: np.ndarray, the_mn: np.ndarray, out: np.ndarray
    ) -> np.ndarray:
        np.subtract(x, the_mn, out=t)
        np.multiply(t, iscale, out=t)
        np.rint(t, out=out)
        # MAX(0, MIN(nmax, l)) in one pass
        np.clip(out, _f(0), f_nmax, out=out)
        return out

    def error(scale: np.ndarray, the_min: np.ndarray, lv: np.ndarray) -> np.ndarray:
        """Sum of w * |scale * L + min - x| (or its square)."""
        np.multiply(scale, lv, out=t)
        np.add(t, the_min, out=t)
        np.subtract(t, x, out=t)
        if use_mad:
            np.abs(t, out=t)
            return _dot(t, w)
        return _dot(t, t, w)

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = f_nmax / (mx - mn)
        best_iscale[:] = iscale
        best_mn[:] = mn
        mn_now[:] = mn
        scale[:] = _f(1) / iscale
        best[:] = error(scale, mn, levels_at(iscale, mn, aux))
        for step in range(nstep + 1):
            np.divide(f_rmin + f_rdelta * _f(step) + f_nmax, mx - mn_now, out=c_iscale)
            c_mn[:] = mn_now
            levels_at(c_iscale, c_mn, aux)
            np.multiply(w, aux, out=wl)
            sum_l = _seq_sum(wl)
            sum_l2 = _dot(wl, aux)
            sum_xl = _dot(wl, x)
            d = sum_w * sum_l2 - sum_l * sum_l
            np.divide(sum_w * sum_xl - sum_x * sum_l, d, out=c_scale)
            np.divide(sum_l2 * sum_x - sum_l * sum_xl, d, out=c_min)
            positive = c_min > 0
            if positive.any():
                # A positive min is clamped to 0 and the scale refit alone
                # (rare: the step is skipped when no sub-block has one).
                mask = _mask(positive)
                _pick(mask, zeros, c_min, out=c_min)
                _pick(mask, sum_xl / sum_l2, c_scale, out=c_scale)
            c_err[:] = error(c_scale, c_min, aux)
            better = _mask((d > 0) & (c_err < best))
            _pick(better, cand, state, out=state)
        levels = levels_at(best_iscale, best_mn, np.empty_like(x))
    levels[:, flat] = 0
    scale_out = np.where(flat, _f(0), scale)
    return scale_out.astype(_F32), (-mn_now).astype(_F32), levels


def make_qx_quants(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric scale search weighted by x² (``rmse_type`` 1, no importance
    weights): (scale, L with L in [0, 2*nmax))."""
    x = np.ascontiguousarray(x)
    mx, amax = _abs_max(x)
    zero = amax < _GROUP_MAX_EPS
    w = x * x
    wx = w * x
    f_nmax = _f(nmax)
    t = np.empty_like(x)
    q = np.empty_like(x)
    # State and candidate rows: the iscale of the best levels (made again
    # once at the end), the scale and the best score.
    state = np.empty((3, x.shape[1]), _F32)
    best_iscale, scale, best = state
    cand = np.empty_like(state)
    c_iscale, c_scale, c_best = cand

    def levels_at(iscale: np.ndarray) -> None:
        """Levels at ``iscale`` into q."""
        np.multiply(iscale, x, out=t)
        np.rint(t, out=q)
        np.clip(q, -f_nmax, f_nmax - _f(1), out=q)

    def sums(iscale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Levels at ``iscale`` into q; sum of w*x*l and of w*l*l."""
        levels_at(iscale)
        return _dot(wx, q), _dot(w, q, q)

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        best_iscale[:] = -f_nmax / mx
        sumlx, suml2 = sums(best_iscale)
        scale[:] = np.where(suml2 != 0, sumlx / suml2, _f(0))
        best[:] = scale * sumlx
        for step in range(-9, 10):
            if step == 0:
                continue
            np.divide(-(f_nmax + _f(0.1) * _f(step)), mx, out=c_iscale)
            sumlx, suml2 = sums(c_iscale)
            take = _mask((suml2 > 0) & (sumlx * sumlx > best * suml2))
            np.divide(sumlx, suml2, out=c_scale)
            np.multiply(c_scale, sumlx, out=c_best)
            _pick(take, cand, state, out=state)
        levels_at(best_iscale)
        levels = q + f_nmax
    levels[:, zero] = 0
    scale_out = np.where(zero, _f(0), scale)
    return scale_out.astype(_F32), levels


def refine_levels(
    x: np.ndarray,
    w: np.ndarray,
    levels: np.ndarray,
    sums: tuple[np.ndarray, np.ndarray],
    nearest: Callable[[np.ndarray], np.ndarray],
    *,
    positive_before: bool,
    stored: Callable[[np.ndarray], np.ndarray] = lambda v: v,
) -> tuple[np.ndarray, np.ndarray]:
    """The coordinate descent of ``make_q3_quants`` and ``make_qp_quants``:
    five passes over the values of each group (a column of ``x``), each
    moving one level to ``nearest`` of the value that fits the others best,
    kept where that raises ``sumlx² / suml2``. ``levels`` change in place
    (as ``stored`` of the new level: C's ``uint8_t`` wraps); ``sums`` are
    ``(sum of w*x*l, sum of w*l*l)`` at the start; returns them at the end.

    The two C functions differ in one test, kept apart here: ``make_qp_quants``
    asks the sum without the value to be positive (``positive_before``),
    ``make_q3_quants`` the sum with the new level."""
    wx = w * x
    sumlx, suml2 = sums
    # Five passes, each value in turn; a pass that changes nothing leaves
    # the state as it was, so the C code's early exit changes no result.
    for _ in range(5):
        for i in range(x.shape[0]):
            li = levels[i]
            slx = sumlx - wx[i] * li
            sl2 = suml2 - w[i] * li * li
            new = nearest(x[i] * sl2 / slx)
            slx_new = slx + wx[i] * new
            sl2_new = sl2 + w[i] * new * new
            take = (
                (slx > 0)
                & ((sl2 if positive_before else sl2_new) > 0)
                & (new != li)
                & (slx_new * slx_new * suml2 > sumlx * sumlx * sl2_new)
            )
            levels[i] = np.where(take, stored(new), li)
            sumlx = np.where(take, slx_new, sumlx)
            suml2 = np.where(take, sl2_new, suml2)
    return sumlx, suml2


def make_q3_quants(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric search of Q3_K with the coordinate-descent refinement
    (``do_rmse``): (scale, L with L in [0, 2*nmax))."""
    mx, amax = _abs_max(x)
    zero = amax < _GROUP_MAX_EPS
    w = x * x
    wx = w * x
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = -_f(nmax) / mx
        q = _round(iscale * x, -nmax, nmax - 1)
        sumlx, suml2 = refine_levels(
            x,
            w,
            q,
            (_seq_sum(wx * q), _seq_sum(w * q * q)),
            lambda v: _round(v, -nmax, nmax - 1),
            positive_before=False,
        )
        scale = np.where(suml2 > 0, sumlx / suml2, _f(0))
    levels = q + _f(nmax)
    levels[:, zero] = 0
    scale = np.where(zero, _f(0), scale)
    return scale.astype(_F32), levels


# --------------------------------------------------------------------------
# packing helpers


def _sub_blocks(x: np.ndarray, size: int) -> np.ndarray:
    """(blocks, 256) to (size, blocks * 256/size): one column per sub-block."""
    return np.ascontiguousarray(x.reshape(-1, size).T)


def _levels_by_block(levels_t: np.ndarray, n_blocks: int) -> np.ndarray:
    """The inverse of ``_sub_blocks`` for levels: (blocks, 256)."""
    return levels_t.T.reshape(n_blocks, QK_K)


def _fp16_bytes(v: np.ndarray) -> np.ndarray:
    return np.asarray(v, dtype=_F32).astype("<f2").reshape(-1, 1).view(np.uint8)


def _pack_2bit(levels: np.ndarray) -> np.ndarray:
    """2-bit levels (blocks, 256) to the 64 ``qs`` bytes of Q2_K/Q3_K."""
    n = levels.shape[0]
    parts = (
        levels.reshape(n, 2, 4, 32)
        << np.array([0, 2, 4, 6], np.uint8)[None, None, :, None]
    )
    out: np.ndarray = np.bitwise_or.reduce(parts, axis=2).reshape(n, 64)
    return out


def _pack_k4_scales(ls: np.ndarray, lm: np.ndarray) -> np.ndarray:
    """Eight 6-bit scales and mins to Q4_K/Q5_K's 12 bytes."""
    n = ls.shape[0]
    out = np.zeros((n, 12), np.uint8)
    out[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    out[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (ls[:, 4:8] & 0xF) | ((lm[:, 4:8] & 0xF) << 4)
    return out


# --------------------------------------------------------------------------
# the block quantizers; x is (blocks, 256) float32


def _max_positive(v: np.ndarray) -> np.ndarray:
    """``max`` over a block's sub-blocks starting from 0, as the C loops do."""
    out: np.ndarray = np.maximum(v.max(axis=1), _f(0))
    return out


def _k4_scales(
    scales: np.ndarray, mins: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Q4_K/Q5_K: the 6-bit scales and mins and the fp16 d, dmin of each block."""
    max_scale = _max_positive(scales)
    max_min = _max_positive(mins)
    with np.errstate(divide="ignore"):
        inv_scale = np.where(max_scale > 0, _f(63) / max_scale, _f(0))
        inv_min = np.where(max_min > 0, _f(63) / max_min, _f(0))
    ls = np.minimum(_to_u8(np.rint(inv_scale[:, None] * scales)), 63)
    lm = np.minimum(_to_u8(np.rint(inv_min[:, None] * mins)), 63)
    d = _fp16_round(max_scale / _f(63))
    dmin = _fp16_round(max_min / _f(63))
    return ls, lm, d, dmin


def _asym_requantize(
    x: np.ndarray,
    levels_t: np.ndarray,
    d_sub: np.ndarray,
    m_sub: np.ndarray,
    size: int,
    nmax: int,
) -> np.ndarray:
    """Levels against the stored scales, kept from the search (``levels_t``,
    by sub-block) where a sub-block's scale is zero."""
    n = x.shape[0]
    d = d_sub[:, :, None]
    new: np.ndarray = np.add(x.reshape(n, -1, size), m_sub[:, :, None])
    with np.errstate(divide="ignore", invalid="ignore"):
        np.divide(new, d, out=new)
    np.rint(new, out=new)
    np.clip(new, _f(0), _f(nmax), out=new)
    _keep_where_zero(new, d_sub, levels_t)
    return new.reshape(n, QK_K).astype(np.uint8)


def _keep_where_zero(new: np.ndarray, d_sub: np.ndarray, levels_t: np.ndarray) -> None:
    """Into ``new`` (blocks, sub-blocks, values): the search's levels where
    the sub-block's stored scale ``d_sub`` is zero (the C code keeps them)."""
    zero = d_sub == 0
    if zero.any():
        keep = _levels_by_block(levels_t, new.shape[0]).reshape(new.shape)
        new[zero] = keep[zero]


def _q4_k_like(
    x: np.ndarray, nmax: int, rmin: float, nstep: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Q4_K and Q5_K share all but the level width and the search's range:
    (levels, packed scales, d, dmin)."""
    n = x.shape[0]
    xt = _sub_blocks(x, 32)
    av_x = np.sqrt(_seq_sum(xt * xt) / _f(32))
    w = av_x + np.abs(xt)
    scales, mins, levels_t = make_qkx2_quants(xt, w, nmax, rmin, 0.1, nstep, False)
    ls, lm, d, dmin = _k4_scales(scales.reshape(n, 8), mins.reshape(n, 8))
    d_sub = d[:, None] * ls.astype(_F32)
    m_sub = dmin[:, None] * lm.astype(_F32)
    levels = _asym_requantize(x, levels_t, d_sub, m_sub, 32, nmax)
    return levels, _pack_k4_scales(ls, lm), d, dmin


def quantize_q4_k_blocks(x: np.ndarray) -> np.ndarray:
    return q4_k_blocks(*_q4_k_like(x, 15, -1.0, 20))


def quantize_q5_k_blocks(x: np.ndarray) -> np.ndarray:
    return q5_k_blocks(*_q4_k_like(x, 31, -0.5, 15))


def q4_k_blocks(
    levels: np.ndarray, scales: np.ndarray, d: np.ndarray, dmin: np.ndarray
) -> np.ndarray:
    """Q4_K blocks from their levels in [0, 15], packed sub-block scales and
    the super-block scales ``d`` and ``dmin``."""
    n = levels.shape[0]
    pairs = levels.reshape(n, 4, 2, 32)
    qs = (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(n, 128)
    return np.concatenate([_fp16_bytes(d), _fp16_bytes(dmin), scales, qs], axis=1)


def q5_k_blocks(
    levels: np.ndarray, scales: np.ndarray, d: np.ndarray, dmin: np.ndarray
) -> np.ndarray:
    """Q5_K blocks as :func:`q4_k_blocks`, levels in [0, 31]: their fifth
    bits go in a plane of their own."""
    n = levels.shape[0]
    pairs = levels.reshape(n, 4, 2, 32)
    qs = ((pairs[:, :, 0] & 0xF) | ((pairs[:, :, 1] & 0xF) << 4)).reshape(n, 128)
    high = ((levels >> 4) & 1).reshape(n, 8, 32) << np.arange(8, dtype=np.uint8)[
        None, :, None
    ]
    qh = np.bitwise_or.reduce(high, axis=1)
    return np.concatenate([_fp16_bytes(d), _fp16_bytes(dmin), scales, qh, qs], axis=1)


def quantize_q2_k_blocks(x: np.ndarray) -> np.ndarray:
    n = x.shape[0]
    xt = _sub_blocks(x, 16)
    scales_t, mins_t, levels_t = make_qkx2_quants(
        xt, np.abs(xt), 3, -0.5, 0.1, 15, True
    )
    scales = scales_t.reshape(n, 16)
    mins = mins_t.reshape(n, 16)
    max_scale = _max_positive(scales)
    max_min = _max_positive(mins)
    q4scale = _f(15)
    has_scale = max_scale > 0
    has_min = max_min > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        l_sc = np.rint((q4scale / max_scale)[:, None] * scales)
        l_mn = np.rint((q4scale / max_min)[:, None] * mins)
    # Low nibble the scale, high nibble the min, each left at 0 where the
    # block has none; stored in a uint8_t as C does (modulo 256).
    sc = np.where(has_scale[:, None], l_sc, 0).astype(np.int64)
    sc |= np.where(has_min[:, None], l_mn, 0).astype(np.int64) << 4
    sc_u8 = (sc & 0xFF).astype(np.uint8)
    d = np.where(has_scale, _fp16_round(max_scale / q4scale), _f(0))
    dmin = np.where(has_min, _fp16_round(max_min / q4scale), _f(0))
    d_sub = d[:, None] * (sc_u8 & 0xF).astype(_F32)
    m_sub = dmin[:, None] * (sc_u8 >> 4).astype(_F32)
    levels = _asym_requantize(x, levels_t, d_sub, m_sub, 16, 3)
    return np.concatenate(
        [sc_u8, _pack_2bit(levels), _fp16_bytes(d), _fp16_bytes(dmin)], axis=1
    )


def quantize_q3_k_blocks(x: np.ndarray) -> np.ndarray:
    n = x.shape[0]
    xt = _sub_blocks(x, 16)
    scales_t, levels_t = make_q3_quants(xt, 4)
    scales = scales_t.reshape(n, 16)
    abs_scales = np.abs(scales)
    idx = np.argmax(abs_scales, axis=1)
    max_scale = scales[np.arange(n), idx]
    has = max_scale != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = _f(-32) / max_scale
        l6 = np.clip(np.rint(iscale[:, None] * scales), -32, 31) + 32
    l6 = np.where(has[:, None], l6, 0).astype(np.uint8)
    with np.errstate(divide="ignore"):
        d = np.where(has, _fp16_round(_f(1) / iscale), _f(0))
    # A block without scales stores zeros, which read back as -32.
    return q3_k_blocks(x, l6, d, levels_t)


def _sym_requantize(
    x: np.ndarray, levels_t: np.ndarray, d_sub: np.ndarray, nmax: int
) -> np.ndarray:
    """Q3_K/Q6_K: levels in [0, 2*nmax) of 16-value sub-blocks against the
    stored scales ``d_sub``, kept from the search (``levels_t``, by
    sub-block) where a scale is zero; (blocks, 16, 16) uint8."""
    n = x.shape[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        new: np.ndarray = np.divide(x.reshape(n, 16, 16), d_sub[:, :, None])
    np.rint(new, out=new)
    np.clip(new, _f(-nmax), _f(nmax - 1), out=new)
    np.add(new, _f(nmax), out=new)
    _keep_where_zero(new, d_sub, levels_t)
    return new.astype(np.uint8)


def q3_k_blocks(
    x: np.ndarray, l6: np.ndarray, d: np.ndarray, levels_t: np.ndarray
) -> np.ndarray:
    """Q3_K blocks from their 6-bit sub-block scales ``l6`` (offset 32), the
    super-block scales ``d`` (already fp16-rounded) and the scale search's
    levels ``levels_t`` (kept where a sub-block's scale is 0)."""
    n = x.shape[0]
    packed = np.zeros((n, 12), np.uint8)
    packed[:, 0:8] = (l6[:, 0:8] & 0xF) | ((l6[:, 8:16] & 0xF) << 4)
    high = (l6 >> 4).reshape(n, 4, 4) << (2 * np.arange(4, dtype=np.uint8))[
        None, :, None
    ]
    packed[:, 8:12] = np.bitwise_or.reduce(high, axis=1)
    d_sub = d[:, None] * (l6.astype(_F32) - _f(32))
    levels = _sym_requantize(x, levels_t, d_sub, 4).reshape(n, QK_K)
    high_bits = (levels > 3).reshape(n, 8, 32).astype(np.uint8) << np.arange(
        8, dtype=np.uint8
    )[None, :, None]
    hmask = np.bitwise_or.reduce(high_bits, axis=1)
    return np.concatenate(
        [hmask, _pack_2bit(levels & 3), packed, _fp16_bytes(d)], axis=1
    )


def quantize_q6_k_blocks(x: np.ndarray) -> np.ndarray:
    return q6_k_blocks(x, *make_qx_quants(_sub_blocks(x, 16), 32))


def q6_k_blocks(
    x: np.ndarray, scales_t: np.ndarray, levels_t: np.ndarray
) -> np.ndarray:
    """Q6_K blocks from the sub-block scale search's scales and levels (by
    sub-block, as ``make_qx_quants`` returns them)."""
    n = x.shape[0]
    scales = scales_t.reshape(n, 16)
    idx = np.argmax(np.abs(scales), axis=1)
    max_scale = scales[np.arange(n), idx]
    zero = np.abs(max_scale) < _GROUP_MAX_EPS
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = _f(-128) / max_scale
        d = _fp16_round(_f(1) / iscale)
        sc = np.minimum(np.rint(iscale[:, None] * scales), 127)
    sc = np.where(zero[:, None], 0, sc).astype(np.int8)
    d = np.where(zero, _f(0), d)
    d_sub = d[:, None] * sc.astype(_F32)
    levels = _sym_requantize(x, levels_t, d_sub, 32)
    levels[zero] = 0
    lr = levels.reshape(n, 2, 4, 32)
    ql = ((lr[:, :, 0:2] & 0xF) | ((lr[:, :, 2:4] & 0xF) << 4)).reshape(n, 128)
    high = (lr >> 4) << (2 * np.arange(4, dtype=np.uint8))[None, None, :, None]
    qh = np.bitwise_or.reduce(high, axis=2).reshape(n, 64)
    return np.concatenate([ql, qh, sc.view(np.uint8), _fp16_bytes(d)], axis=1)


QUANTIZERS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Q2_K": quantize_q2_k_blocks,
    "Q3_K": quantize_q3_k_blocks,
    "Q4_K": quantize_q4_k_blocks,
    "Q5_K": quantize_q5_k_blocks,
    "Q6_K": quantize_q6_k_blocks,
}
"""Block quantizer of each K type: (blocks, 256) float32 to (blocks, bytes)."""


def _pass_blocks(n_blocks: int, threads: int | None = None) -> int:
    """Blocks per pass for ``n_blocks``: at most ``_BLOCKS_PER_PASS``, and
    the passes a multiple of the threads where there is enough to share, so
    that a small tensor (a 256 x 512 attn_k is one pass of 512) or a chunk's
    last passes do not leave threads idle. Each block is quantized on its
    own, so the bytes do not depend on it."""
    threads = _THREADS if threads is None else threads
    passes = -(-n_blocks // _BLOCKS_PER_PASS)
    if threads > 1 and n_blocks >= 2 * _MIN_BLOCKS_PER_PASS:
        passes = -(-passes // threads) * threads
    return max(min(_MIN_BLOCKS_PER_PASS, _BLOCKS_PER_PASS), -(-n_blocks // passes))


def run_passes(
    one_pass: Callable[[int], None], n_blocks: int, step: int, threads: int
) -> None:
    """``one_pass(b0)`` for each pass of ``step`` of ``n_blocks`` blocks, on
    up to ``threads`` threads where there is more than one pass."""
    starts = range(0, n_blocks, step)
    if threads > 1 and len(starts) > 1:
        # Each pass writes its own rows of the output; list() re-raises errors.
        with ThreadPoolExecutor(min(threads, len(starts))) as pool:
            list(pool.map(one_pass, starts))
    else:
        for b0 in starts:
            one_pass(b0)


def quantize(
    values: np.ndarray, type_name: str, threads: int | None = None
) -> np.ndarray:
    """Rows of float values (last axis a multiple of 256) to K-quant bytes,
    shaped (rows..., row bytes) like ``gguf.quants.quantize``, on ``threads``
    threads (``_THREADS`` unless given)."""
    threads = _THREADS if threads is None else threads
    fn = QUANTIZERS[type_name]
    size = BLOCK_BYTES[type_name]
    if values.shape[-1] % QK_K != 0:
        raise ValueError(f"rows of {values.shape[-1]} values do not fit {type_name}")
    blocks = np.ascontiguousarray(values, dtype=_F32).reshape(-1, QK_K)
    out = np.empty((blocks.shape[0], size), np.uint8)

    per_pass = _pass_blocks(blocks.shape[0], threads)

    def one_pass(b0: int) -> None:
        out[b0 : b0 + per_pass] = fn(blocks[b0 : b0 + per_pass])

    run_passes(one_pass, blocks.shape[0], per_pass, threads)
    return out.reshape(*values.shape[:-1], values.shape[-1] // QK_K * size)


# --------------------------------------------------------------------------
# llama.cpp's per-tensor choice for each K-quant file type


FALLBACK: dict[str, str] = {
    "Q2_K": "Q4_0",
    "Q3_K": "Q4_0",
    "Q4_K": "Q5_0",
    "Q5_K": "Q5_1",
    "Q6_K": "Q8_0",
}
"""The 32-value type a K type falls back to when rows are not a multiple of
256 (llama.cpp's ``tensor_type_fallback``; F16 where even 32 does not fit)."""


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama.cpp's choice of the layers that get more bits in the _M mixes:
    the first and last eighth and every third layer between."""
    return (
        i_layer < n_layers // 8
        or i_layer >= 7 * n_layers // 8
        or (i_layer - n_layers // 8) % 3 == 2
    )


def _layer(name: str) -> int:
    return int(name.split(".")[1]) if name.startswith("blk.") else 0


def mix_type(file_type: str, name: str, n_layers: int, n_gqa: int, tied: bool) -> str:
    """The K type ``llama_tensor_get_type`` gives the 2-D weight ``name`` (a
    GGUF tensor name) in a ``file_type`` file (``q4_k_m`` ...), before the
    row-length fallback. ``tied``: the file has no ``output.weight``, so the
    token embedding doubles as the output. Dense models only (no experts,
    no Falcon), and without the 70B attn_v bump."""
    ft = file_type.lower()
    new = ft[:4].upper()
    i = _layer(name)
    if name == "output.weight" or (tied and name == "token_embd.weight"):
        return "Q6_K"
    if name.endswith("attn_v.weight"):
        if ft == "q2_k":
            return "Q4_K" if n_gqa >= 4 else "Q3_K"
        if ft == "q3_k_m":
            return "Q5_K" if i < 2 else "Q4_K"
        if ft == "q3_k_l":
            return "Q5_K"
        if ft in ("q4_k_m", "q5_k_m") and use_more_bits(i, n_layers):
            return "Q6_K"
        if ft == "q4_k_s" and i < 4:
            return "Q5_K"
        return new
    if ".ffn_down" in name:
        if ft == "q2_k":
            return "Q3_K"
        if ft == "q3_k_m":
            return "Q5_K" if i < n_layers // 16 else "Q4_K"
        if ft == "q3_k_l":
            return "Q5_K"
        if ft in ("q4_k_m", "q5_k_m") and use_more_bits(i, n_layers):
            return "Q6_K"
        if ft == "q4_k_s" and i < n_layers // 8:
            return "Q5_K"
        return new
    if name.endswith("attn_output.weight"):
        return {"q2_k": "Q3_K", "q3_k_m": "Q4_K", "q3_k_l": "Q5_K"}.get(ft, new)
    return new


def fit_rows(qtype: str, ncols: int) -> str:
    """``qtype``, or what llama.cpp writes instead when rows of ``ncols``
    values do not fill its super-blocks (the output weight's Q6_K becomes
    Q8_0, as its own rule has it)."""
    if ncols % QK_K == 0:
        return qtype
    return FALLBACK[qtype] if ncols % 32 == 0 else "F16"
