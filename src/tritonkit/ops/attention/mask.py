"""Which keys a query sees: the block ranges each pass walks and the per-element mask.

One set of helpers for the forward, the dK/dV pass and the dQ pass, so that the three agree
on every (query, key) pair. A pass walks whole blocks; blocks that every row of the tile sees
in full take the unmasked loop, the few at the edges the masked one.

Rows that see no key at all are defined: output 0, lse -inf, zero gradients. The softmax
helpers below keep such rows finite where the caller says they can occur (EMPTY_ROWS): the
running max of a row that has seen nothing is -inf, and 2^(s - m) = 2^(-inf - -inf) would be
NaN, so the scores are measured from 0 until the row sees a key.
"""

import triton
import triton.language as tl

@triton.jit
def _visible(q_idx, k_idx, Nk, CAUSAL: tl.constexpr, CHECK_KEYS: tl.constexpr):
    # Whether query q_idx sees key k_idx: index tensors that broadcast to the tile ([M, 1]
    # against [1, N] in the forward and dQ pass, the transpose in the dK/dV pass).
    # CHECK_KEYS: keys past Nk are hidden too (the dK/dV pass never stores their rows).
    # CAUSAL: query i sees keys j <= i (top-left aligned).
    if CHECK_KEYS:
        ok = k_idx < Nk
        if CAUSAL:
            ok = ok & (k_idx <= q_idx)
    else:
        ok = q_idx >= k_idx
    return ok


@triton.jit
def _key_range(start_m, Nk, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    # Forward and dQ pass: the query block [start_m, start_m + BLOCK_M) visits keys [0, hi);
    # [0, full) in whole BLOCK_N blocks that need no mask, [full, hi) the causal diagonal band
    # and the ragged tail (masked). full is a multiple of BLOCK_N.
    if CAUSAL:
        hi = tl.minimum(Nk, start_m + BLOCK_M)
        full = tl.minimum(start_m, Nk) // BLOCK_N * BLOCK_N
    else:
        hi = Nk
        full = Nk // BLOCK_N * BLOCK_N
    return full, hi


@triton.jit
def _query_range(start_n, Nq, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    # dK/dV pass: the key block [start_n, start_n + BLOCK_N) is seen by queries [lo, Nq);
    # [lo, band) straddle the causal diagonal (masked), [band, Nq) see the whole block. Query
    # rows past Nq load as zeros with lse = delta = 0 and add nothing, so they need no mask.
    if CAUSAL:
        lo = start_n // BLOCK_M * BLOCK_M
        band = tl.minimum(tl.cdiv(start_n + BLOCK_N, BLOCK_M) * BLOCK_M, Nq)
    else:
        lo = 0
        band = 0
    return lo, band


@triton.jit
def _row_base(m, EMPTY_ROWS: tl.constexpr):
    # What a row's scores are measured from in the online softmax: its running max, or 0
    # while the row has seen no key (m = -inf), where s - m would be -inf - -inf = NaN.
    if EMPTY_ROWS:
        m = tl.where(m == float("-inf"), 0.0, m)
    return m


@triton.jit
def _rows_out(acc, l_i, EMPTY_ROWS: tl.constexpr):
    # o = acc / l; with EMPTY_ROWS a row that saw no key (l = 0) gets o = 0, not 0/0.
    if EMPTY_ROWS:
        acc = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    else:
        acc = acc / l_i[:, None]
    return acc


@triton.jit
def _rows_lse(l_i, m_i, EMPTY_ROWS: tl.constexpr):
    # The natural-log lse = (m + log2 l) ln 2 of each row; with EMPTY_ROWS a row that saw no
    # key (l = 0) gets -inf, without taking log(0).
    if EMPTY_ROWS:
        seen = l_i > 0.0
        lse = tl.where(seen, (m_i + tl.math.log2(tl.where(seen, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    else:
        lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
    return lse
