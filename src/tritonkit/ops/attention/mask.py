"""Which keys a query sees: the block ranges each pass walks, the per-element mask, and
where each program's tile lies in packed variable-length batches.

One set of helpers for the forward, the dK/dV pass and the dQ pass, so that the three agree
on every (query, key) pair. Query i sees key j when every bound that is on allows it:
- CAUSAL: j <= i (top-left aligned, as SDPA's is_causal=True), or under a bottom-right
  alignment j <= i + Nk - Nq (FlashAttention-2's, and a KV cache's: the last query row sees
  the last key); diag below is that offset, 0 for top-left;
- WINDOW_LEFT = L >= 0: j >= i - L;  WINDOW_RIGHT = R >= 0: j <= i + R (same alignment;
  -1 leaves that side unbounded; the launcher folds a right bound under CAUSAL away);
- j < Nk, and in packed batches both i and j inside their own sequence (indices are local
  to the sequence: its first query and first key are 0).
A pass walks only whole blocks that hold a visible pair: key blocks outside the window or
the sequence are never loaded. Of those, blocks that every row of the tile sees in full
take the unmasked loop; the blocks at the edges the masked one.

Rows that see no key at all (a left window past the last key, an empty sequence) are
defined: output 0, lse -inf, zero gradients. Such rows can only occur when the launcher's
flags allow them (EMPTY_ROWS); the softmax helpers below then keep them finite: the running
max of a row that has seen nothing is -inf, and 2^(s - m) = 2^(-inf - -inf) would be NaN, so
its scores are measured from 0 until the row sees a key.
"""

import triton
import triton.language as tl


@triton.jit
def _visible(q, k, Nq, Nk, diag, SCORE: tl.constexpr, CHECK_KEYS: tl.constexpr, CHECK_QUERIES: tl.constexpr):
    # Whether query q sees key k: index tensors that broadcast to the tile ([M, 1] against
    # [1, N] in the forward and dQ pass, the transpose in the dK/dV pass). CHECK_KEYS hides
    # keys past Nk (the dK/dV pass never stores their rows); CHECK_QUERIES hides queries past
    # Nq (packed sequences, whose tiles may reach into the next one). The first bound that is
    # on starts the mask; the caller asks only where at least one is. SCORE: `score.Score`;
    # diag: where query 0 sits among the keys under a bottom-right alignment (`_diag`).
    CAUSAL: tl.constexpr = SCORE.causal
    WINDOW_LEFT: tl.constexpr = SCORE.window_left
    WINDOW_RIGHT: tl.constexpr = SCORE.window_right
    if SCORE.bottom_right:
        at = q + diag
    else:
        at = q
    if CHECK_KEYS:
        ok = k < Nk
        if CAUSAL:
            ok = ok & (k <= at)
    elif CAUSAL:
        ok = at >= k
    elif CHECK_QUERIES:
        ok = q < Nq
    elif WINDOW_RIGHT >= 0:
        ok = k <= at + WINDOW_RIGHT
    else:
        ok = k >= at - WINDOW_LEFT
    started: tl.constexpr = CHECK_KEYS or CAUSAL or CHECK_QUERIES
    if WINDOW_RIGHT >= 0 and started:
        ok = ok & (k <= at + WINDOW_RIGHT)
    if WINDOW_LEFT >= 0 and (started or WINDOW_RIGHT >= 0):
        ok = ok & (k >= at - WINDOW_LEFT)
    if CHECK_QUERIES and (CHECK_KEYS or CAUSAL):
        ok = ok & (q < Nq)
    return ok


@triton.jit
def _diag(nq, nk, SCORE: tl.constexpr):
    # Where query row 0 sits among the keys: nk - nq of its sequence under a bottom-right
    # alignment (row i at key position i + nk - nq), else 0 (`score.Score.bottom_right`).
    if SCORE.bottom_right:
        diag = nk - nq
    else:
        diag = 0
    return diag


@triton.jit
def _at_least_0(x, SCORE: tl.constexpr):
    # A block bound clamped at 0 where a bottom-right alignment can make it negative (rows that
    # sit before key 0 see no key); top-left bounds never are.
    if SCORE.bottom_right:
        x = tl.maximum(x, 0)
    return x


@triton.jit
def _key_range(start_m, Nq, Nk, diag, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SCORE: tl.constexpr):
    # Forward and dQ pass: the keys the query block [start_m, start_m + BLOCK_M) visits,
    # lo <= full_lo <= full_hi <= hi: [lo, full_lo) masked (the left window edge), [full_lo,
    # full_hi) whole BLOCK_N blocks every row sees, [full_hi, hi) masked (the causal diagonal
    # or right window edge, and the ragged tail). lo, full_lo, full_hi are multiples of BLOCK_N.
    # Without a left bound lo = full_lo = 0. The right end follows the block's last real row
    # (< Nq), not its last padding row: a key block only padding rows would see is never
    # loaded (its values, whatever they hold, would otherwise meet P = 0 in P V: 0 * inf).
    # Bounds are in key positions: a row's position is its index plus diag (`_diag`).
    CAUSAL: tl.constexpr = SCORE.causal
    WINDOW_LEFT: tl.constexpr = SCORE.window_left
    WINDOW_RIGHT: tl.constexpr = SCORE.window_right
    rows_end = tl.minimum(start_m + BLOCK_M, Nq)
    if SCORE.bottom_right:
        first = start_m + diag
        rows_end += diag
    else:
        first = start_m
    if CAUSAL:
        hi = _at_least_0(tl.minimum(Nk, rows_end), SCORE)
        full_hi = _at_least_0(tl.minimum(first, Nk), SCORE) // BLOCK_N * BLOCK_N
    elif WINDOW_RIGHT >= 0:
        hi = _at_least_0(tl.minimum(Nk, rows_end + WINDOW_RIGHT), SCORE)
        full_hi = _at_least_0(tl.minimum(first + (WINDOW_RIGHT + 1), Nk), SCORE) // BLOCK_N * BLOCK_N
    else:
        hi = Nk
        full_hi = Nk // BLOCK_N * BLOCK_N
    if WINDOW_LEFT >= 0:
        lo = tl.maximum(first - WINDOW_LEFT, 0) // BLOCK_N * BLOCK_N
        full_lo = tl.cdiv(tl.maximum(first + (BLOCK_M - 1 - WINDOW_LEFT), 0), BLOCK_N) * BLOCK_N
        full_lo = tl.minimum(full_lo, hi)
        full_hi = tl.maximum(full_hi, full_lo)
    else:
        lo = 0
        full_lo = 0
    return lo, full_lo, full_hi, hi


@triton.jit
def _walk_keys(TILES: tl.constexpr, state, rows_in, keys, rows, score_at, tile, qk_scale,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD: tl.constexpr, SCORE: tl.constexpr,
               USE_TMA: tl.constexpr, VARLEN: tl.constexpr):
    # Forward and dQ pass: the key blocks of `_key_range` for the query block tile = (start_m,
    # Nq, Nk) (score_at = (diag, ALiBi slope), `triton_score._score_at`), each stretch through
    # TILES(state, rows_in, walk, lo, hi, BLOCK_N, HEAD, MASKED, SCORE, USE_TMA, VARLEN) ->
    # state, with walk = (keys, rows, score_at, Nk, qk_scale) what every stretch reads alike:
    # the left window's edge masked, the blocks every row sees whole unmasked (from key 0
    # without a left bound), then the causal diagonal, right window edge and ragged tail masked.
    start_m, Nq, Nk = tile
    diag, _ = score_at
    lo, full_lo, full_hi, hi = _key_range(start_m, Nq, Nk, diag, BLOCK_M, BLOCK_N, SCORE)
    walk = (keys, rows, score_at, Nk, qk_scale)
    if SCORE.window_left >= 0:
        state = TILES(state, rows_in, walk, lo, full_lo, BLOCK_N, HEAD, True, SCORE, USE_TMA, VARLEN)
        state = TILES(state, rows_in, walk, full_lo, full_hi, BLOCK_N, HEAD, False, SCORE, USE_TMA, VARLEN)
    else:
        state = TILES(state, rows_in, walk, 0, full_hi, BLOCK_N, HEAD, False, SCORE, USE_TMA, VARLEN)
    state = TILES(state, rows_in, walk, full_hi, hi, BLOCK_N, HEAD, True, SCORE, USE_TMA, VARLEN)
    return state


@triton.jit
def _query_range(start_n, Nq, diag, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SCORE: tl.constexpr,
                 VARLEN: tl.constexpr):
    # dK/dV pass: the queries that see the key block [start_n, start_n + BLOCK_N),
    # lo <= full_lo <= full_hi <= hi: [lo, full_lo) masked (the causal diagonal or right
    # window edge), [full_lo, full_hi) whole BLOCK_M blocks that see every key of the block,
    # [full_hi, hi) masked (the left window edge; in packed sequences the ragged tail, whose
    # rows may belong to the next sequence). In a dense batch, rows past Nq load as zeros with
    # lse = delta = 0 and add nothing, so the tail needs no mask there (full_hi = Nq).
    # Bounds are in query rows: key j sits at row j - diag (`_diag`).
    CAUSAL: tl.constexpr = SCORE.causal
    WINDOW_LEFT: tl.constexpr = SCORE.window_left
    WINDOW_RIGHT: tl.constexpr = SCORE.window_right
    if SCORE.bottom_right:
        first = start_n - diag
    else:
        first = start_n
    if CAUSAL:
        lo = _at_least_0(first, SCORE) // BLOCK_M * BLOCK_M
        full_lo = tl.minimum(tl.cdiv(_at_least_0(first + BLOCK_N, SCORE), BLOCK_M) * BLOCK_M, Nq)
    elif WINDOW_RIGHT >= 0:
        lo = tl.maximum(first - WINDOW_RIGHT, 0) // BLOCK_M * BLOCK_M
        full_lo = tl.cdiv(tl.maximum(first + (BLOCK_N - 1 - WINDOW_RIGHT), 0), BLOCK_M) * BLOCK_M
        full_lo = tl.minimum(full_lo, Nq)
    else:
        lo = 0
        full_lo = 0
    if WINDOW_LEFT >= 0:
        hi = _at_least_0(tl.minimum(Nq, first + (BLOCK_N + WINDOW_LEFT)), SCORE)
        full_hi = _at_least_0(first + (WINDOW_LEFT + 1), SCORE) // BLOCK_M * BLOCK_M
        if VARLEN:
            full_hi = tl.minimum(full_hi, Nq // BLOCK_M * BLOCK_M)
        full_lo = tl.minimum(full_lo, hi)
        full_hi = tl.maximum(tl.minimum(full_hi, hi), full_lo)
    else:
        hi = Nq
        if VARLEN:
            full_hi = tl.maximum(Nq // BLOCK_M * BLOCK_M, full_lo)
        else:
            full_hi = Nq
    return lo, full_lo, full_hi, hi


@triton.jit
def _program_tile(CU_A, CU_B, SEQS, Na, Nb, BLOCK: tl.constexpr, REVERSE: tl.constexpr, HEAD_SPAN: tl.constexpr):
    # The tile this program owns along its own axis (queries in the forward and dQ pass, keys
    # in the dK/dV pass; "b" is the other operand): (batch, head, start, a0, na, b0, nb, seq,
    # row), with `head` the index along the grid's head axis, `start` local to the sequence, a0,
    # b0 the sequence's first row in the packed tensors, na, nb its lengths, seq the sequence's
    # index (the batch's in a dense batch, where every batch entry is one) and row the tile's
    # first row in the tensor (a0 + start). REVERSE: the last tiles (the longest causal rows)
    # start first.
    # Dense batches: program (i, head, batch), a0 = b0 = 0. Packed sequences (CU_A given):
    # sequence s owns tiles [cu_a[s] // BLOCK + s, ...), one per BLOCK rows; these ranges
    # never overlap and the grid needs cdiv(total, BLOCK) + SEQS tiles a head, so the launcher
    # needs no maximum length (nor a copy of cu_seqlens to the host). A binary search finds
    # s; tiles past a sequence's last one get start >= na. Sequence bounds are clamped to
    # [0, Na] and [0, Nb] (the totals), so bad cu_seqlens cannot send a tile out of bounds.
    # Packed programs take their (tile, head) with the head varying fastest in the order the
    # GPU starts programs (x, then y): every head's copy of a tile starts together, so the
    # costliest tiles of a long sequence (causal: the first key blocks, the last query
    # blocks) start when that sequence's turn comes, for all heads at once, instead of the
    # last head's starting near the end of the grid and running alone (the tail of a batch
    # whose sequences differ in length). Dense programs: (tile, head, batch) in grid order, or
    # with HEAD_SPAN > 0 (`order.longest_first_span`: a causal pass's unequal tiles) taken in
    # spans of HEAD_SPAN of the batch x heads, within which every head's k-th tile starts
    # before anyone's (k+1)-th (the Gluon kernels' twin: `gluon.common._ordered_tile`).
    if CU_A is not None:
        heads = tl.num_programs(1)
        order = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
        head = order % heads
        pid = order // heads
    elif HEAD_SPAN > 0:
        blocks = tl.num_programs(0)
        order = (tl.program_id(2) * tl.num_programs(1) + tl.program_id(1)) * blocks + tl.program_id(0)
        span = order // (HEAD_SPAN * blocks)
        within = order - span * (HEAD_SPAN * blocks)
        head_of_batch = span * HEAD_SPAN + within % HEAD_SPAN
        head = head_of_batch % tl.num_programs(1)
        pid = within // HEAD_SPAN
    else:
        head = tl.program_id(1)
        pid = tl.program_id(0)
    if REVERSE:
        pid = tl.num_programs(0) - 1 - pid
    if CU_A is not None:
        lo = 0
        hi = SEQS
        while hi - lo > 1:
            mid = (lo + hi) // 2
            before = tl.load(CU_A + mid) // BLOCK + mid <= pid
            lo = tl.where(before, mid, lo)
            hi = tl.where(before, hi, mid)
        a0 = tl.minimum(tl.maximum(tl.load(CU_A + lo), 0), Na)
        na = tl.maximum(tl.minimum(tl.load(CU_A + lo + 1), Na) - a0, 0)
        b0 = tl.minimum(tl.maximum(tl.load(CU_B + lo), 0), Nb)
        nb = tl.maximum(tl.minimum(tl.load(CU_B + lo + 1), Nb) - b0, 0)
        start = (pid - (tl.load(CU_A + lo) // BLOCK + lo)) * BLOCK
        start = tl.where(start < 0, na, start)  # only with cu_seqlens[0] > 0
        batch = 0
        seq = lo
    else:
        a0 = 0
        na = Na
        b0 = 0
        nb = Nb
        start = pid * BLOCK
        if HEAD_SPAN > 0:
            batch = head_of_batch // tl.num_programs(1)
        else:
            batch = tl.program_id(2)
        seq = batch
    if CU_A is not None:
        row = a0 + start
    else:
        row = start
    return batch, head, start, a0, na, b0, nb, seq, row


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
