"""The dK/dV pass of the Gluon attention backward (the package's docstring has the design):
one program per 128-key block of one (batch, kv head), two consumer warpgroups of 64 keys
each, a producer warp streaming (Q, dO) blocks, with their rows' lse and delta, through a ring.
The kernel builds its program's bundles once (`Buffers`, `Globals`, `common.Tiles`,
`score.Scores`) and hands them to both partitions.

With SPLIT_D (head dim 256, where 64 keys' dK and dV in float32 would take 256 registers a
thread) a program takes 64 keys and the two warpgroups split the head dim instead: every
tensor is read in boxes of 128 columns (K, V, Q, dO as two column halves in shared memory), and
each warpgroup accumulates dK and dV for its own 128 columns. S^T and dP^T, which need all 256
columns, are each formed once, by one warpgroup, and handed over through shared memory
(`_split_d_step`): warpgroup 0 forms S^T and P^T, warpgroup 1 dP^T and dS^T. Each of the four
products is then done once (forming S^T and dP^T in both warpgroups would be six)."""

# No `from __future__ import annotations`: an aggregate's field annotations are its types.
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

from ..common import Tiles, _store_rows, _store_tile, _tma_view, _wgmma_layout, bundle
from ..score import Scores


@bundle
class Buffers:
    """A program's shared memory and mbarriers: K and V (k_smem, v_smem: two halves, of the
    keys, or with SPLIT_D of the columns) with kv_ready; the ring of Q and dO blocks (q_bufs,
    do_bufs: STAGES slots of one column box, two with SPLIT_D) with each block's lse (base 2)
    and delta (lse_bufs, delta_bufs), and ready / empty a slot. With SPLIT_D the consumers hand
    P^T and dS^T to each other (`_split_d_step`): ops_smem holds them as the operands of dV's
    and dK's products, pf_smem P^T in float32 (with the softcap's factor), xbars the barriers
    P^T ready, dS^T ready, both done with the block, and both done with their products before
    the stores write through K's and V's halves; without SPLIT_D none of them is read (each
    names a buffer that exists anyway)."""
    k_smem: gl.shared_memory_descriptor
    v_smem: gl.shared_memory_descriptor
    q_bufs: gl.shared_memory_descriptor
    do_bufs: gl.shared_memory_descriptor
    lse_bufs: gl.shared_memory_descriptor
    delta_bufs: gl.shared_memory_descriptor
    ops_smem: gl.shared_memory_descriptor
    pf_smem: gl.shared_memory_descriptor
    xbars: gl.shared_memory_descriptor
    kv_ready: gl.shared_memory_descriptor
    ready: gl.shared_memory_descriptor
    empty: gl.shared_memory_descriptor
    SPLIT_D: gl.constexpr


    @gluon.jit
    def allocate(q_desc, k_desc, STAGES: gl.constexpr, SPLIT_D: gl.constexpr):
        # The buffers of a program's keys (K's box rows a half) and a ring of STAGES query
        # blocks (Q's box rows), their barriers initialised.
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
        COLS: gl.constexpr = q_desc.block_type.shape[3]     # the head dim, or with SPLIT_D its half
        KEYS: gl.constexpr = k_desc.block_type.shape[2]
        PIECES: gl.constexpr = 2 if SPLIT_D else 1
        dtype: gl.constexpr = q_desc.dtype
        q_2d: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, COLS], dtype)
        k_2d: gl.constexpr = gl.NVMMASharedLayout.get_default_for([KEYS, COLS], dtype)
        k_smem = gl.allocate_shared_memory(dtype, [2, KEYS, COLS], k_2d)
        v_smem = gl.allocate_shared_memory(dtype, [2, KEYS, COLS], k_2d)
        q_bufs = gl.allocate_shared_memory(dtype, [STAGES * PIECES, BLOCK_M, COLS], q_2d)
        do_bufs = gl.allocate_shared_memory(dtype, [STAGES * PIECES, BLOCK_M, COLS], q_2d)
        rows_1d: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
        lse_bufs = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], rows_1d)
        delta_bufs = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], rows_1d)
        kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(kv_ready, count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=2)     # released by both consumer warpgroups
        if SPLIT_D:
            ops_smem = gl.allocate_shared_memory(dtype, [2, KEYS, BLOCK_M],
                                                 gl.NVMMASharedLayout.get_default_for([KEYS, BLOCK_M], dtype))
            pf_smem = gl.allocate_shared_memory(gl.float32, [KEYS, BLOCK_M],
                                                gl.NVMMASharedLayout.get_default_for([KEYS, BLOCK_M], gl.float32))
            xbars = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())
            mbarrier.init(xbars.index(0), count=1)
            mbarrier.init(xbars.index(1), count=1)
            mbarrier.init(xbars.index(2), count=2)
            mbarrier.init(xbars.index(3), count=2)
        else:
            ops_smem = k_smem
            pf_smem = k_smem
            xbars = ready
        return Buffers(k_smem, v_smem, q_bufs, do_bufs, lse_bufs, delta_bufs, ops_smem, pf_smem, xbars, kv_ready, ready,
                       empty, SPLIT_D)

    @gluon.constexpr_function
    def st_layout(self, num_warps):
        # The register layout of a (keys x query rows) product over a query block, S^T's and
        # dP^T's: one warpgroup's wgmma accumulator, BLOCK_M wide.
        return _wgmma_layout(num_warps, self.q_bufs.shape[1])

    @gluon.jit
    def wait_block(self, c):
        # The ring slot of the c-th query block the consumers take (c % STAGES, a slot holding
        # one column box of Q and of dO, two with SPLIT_D), once its Q, dO, lse and delta are in.
        PIECES: gl.constexpr = 2 if self.SPLIT_D else 1
        STAGES: gl.constexpr = self.q_bufs.shape[0] // PIECES
        s = c % STAGES
        mbarrier.wait(self.ready.index(s), (c // STAGES) & 1)
        return s


@bundle
class Globals:
    """What a program reads and writes in global memory: descriptors of the whole (B, H, Nq, D)
    q, do and (B, Hkv, Nk, D) k, v, dk, dv; for packed sequences DK, DV, the pointers of dk and
    dv, with their head and row strides, for the keys of a block that reach past their sequence
    (dk's and dv's data and zeros otherwise); LSE, DELTA: (B, H, Nq) float32."""
    q_desc: gl.base_value
    do_desc: gl.base_value
    k_desc: gl.base_value
    v_desc: gl.base_value
    dk_desc: gl.base_value
    dv_desc: gl.base_value
    DK: gl.base_value
    DV: gl.base_value
    stride_kh: gl.base_value
    stride_kn: gl.base_value
    LSE: gl.base_value
    DELTA: gl.base_value


@gluon.jit
def _dkdv_loads(io, bufs, tiles, H, b, hk, n0, q0, nq, k0, lo, end):
    # The program's K and V (keys from n0 of the sequence from row k0 of (b, hk)), then for
    # each query head of the group its query blocks [lo, end) (rows from q0) through the ring.
    PIECES: gl.constexpr = 2 if bufs.SPLIT_D else 1      # column boxes of each Q and dO block
    STAGES: gl.constexpr = bufs.q_bufs.shape[0] // PIECES
    BLOCK_M: gl.constexpr = bufs.q_bufs.shape[1]
    KEYS: gl.constexpr = bufs.k_smem.shape[1]
    COLS: gl.constexpr = bufs.k_smem.shape[2]
    mbarrier.expect(bufs.kv_ready, 4 * io.k_desc.block_type.nbytes)
    for w in gl.static_range(2):
        # two key halves of the 128 keys; with SPLIT_D two column halves of the 64 keys
        row = k0 + n0 if bufs.SPLIT_D else k0 + n0 + w * KEYS
        col = w * COLS if bufs.SPLIT_D else 0
        tma.async_copy_global_to_shared(io.k_desc, [b, hk, row, col], bufs.kv_ready,
                                        _tma_view(bufs.k_smem.index(w), io.k_desc))
        tma.async_copy_global_to_shared(io.v_desc, [b, hk, row, col], bufs.kv_ready,
                                        _tma_view(bufs.v_smem.index(w), io.v_desc))
    # The query block's lse (in base 2) and delta go into the ring beside Q and dO: the
    # consumers read them from shared memory in their products' column layout, instead of
    # loading them from global memory on their own chain and converting the layout through
    # shared memory and a warpgroup barrier every block. Loaded before the slot's wait, so
    # their latency runs under it; stored before the slot's arrive, which releases them.
    flat: gl.constexpr = gl.BlockedLayout([BLOCK_M // 32], [32], [1], [0])
    offs = gl.arange(0, BLOCK_M, layout=flat)
    c = 0
    for g in range(tiles.GROUP):
        h = hk * tiles.GROUP + g
        row_base = (b * H + h).to(gl.int64) * tiles.Nq + q0
        for i in range(lo, end):
            s = c % STAGES
            rows = i * BLOCK_M + offs
            # Query rows past the sequence's end get lse = +inf, so P = 0 and they add nothing,
            # whatever rows of Q and dO the block holds there (zeros past the tensor's end, the
            # next sequence's rows in a packed batch).
            lse2 = gl.load(io.LSE + row_base + rows, mask=rows < nq, other=float("inf")) * 1.4426950408889634
            delta = gl.load(io.DELTA + row_base + rows, mask=rows < nq, other=0.0)
            # A fresh mbarrier is in phase 0: waiting for parity 1 passes, the first lap is free.
            mbarrier.wait(bufs.empty.index(s), ((c // STAGES) & 1) ^ 1)
            bufs.lse_bufs.index(s).store(lse2)
            bufs.delta_bufs.index(s).store(delta)
            mbarrier.expect(bufs.ready.index(s), 2 * PIECES * io.q_desc.block_type.nbytes)
            for p in gl.static_range(PIECES):
                tma.async_copy_global_to_shared(io.q_desc, [b, h, q0 + i * BLOCK_M, p * COLS], bufs.ready.index(s),
                                                _tma_view(bufs.q_bufs.index(s * PIECES + p), io.q_desc))
                tma.async_copy_global_to_shared(io.do_desc, [b, h, q0 + i * BLOCK_M, p * COLS], bufs.ready.index(s),
                                                _tma_view(bufs.do_bufs.index(s * PIECES + p), io.do_desc))
            c += 1


@gluon.jit
def _dkdv_producer(io, bufs, tiles, SCORE: gl.constexpr, H):
    BLOCK_M: gl.constexpr = bufs.q_bufs.shape[1]
    KEYS: gl.constexpr = bufs.k_smem.shape[1]
    b, hk, n0, q0, nq, k0, nk, lo, band, mid, end = tiles.key_tile(gl.program_id(0), SCORE, BLOCK_M,
                                                                   KEYS if bufs.SPLIT_D else 2 * KEYS)
    if tiles.VARLEN:
        if n0 < nk:                 # a block past its sequence's keys loads nothing
            _dkdv_loads(io, bufs, tiles, H, b, hk, n0, q0, nq, k0, lo, end)
    else:
        _dkdv_loads(io, bufs, tiles, H, b, hk, n0, q0, nq, k0, lo, end)


@gluon.jit
def _probabilities(st, lse2, m0, key0, scores, MASKED: gl.constexpr):
    # P^T of a (keys x query rows) block from its raw scores S^T and the rows' lse (base 2),
    # zero where masked; also capped(S^T) (with a softcap tanh of the capped scores, dS's
    # factor 1 - tanh^2: `scores.capped_grad`).
    tht = scores.capped(st)
    pt = gl.exp2(scores.base2(tht) - lse2)
    if MASKED:
        pt = scores.mask_t(pt, 0.0, key0, m0)
    return pt, tht


@gluon.jit
def _dkdv_step(c, m0, dk, dv, k_op, v_op, key0, bufs, scores, MASKED: gl.constexpr):
    # One query block (ring slot c % STAGES) for this warpgroup's 64 keys: P^T under dP^T's
    # product, dS^T under dV's; everything retires before the slot is released, the other
    # warpgroup's products covering this one's last wait.
    BLOCK_M: gl.constexpr = bufs.q_bufs.shape[1]
    KEYS: gl.constexpr = bufs.k_smem.shape[1]
    s_layout: gl.constexpr = bufs.st_layout(gl.num_warps())
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    s = bufs.wait_block(c)
    q = bufs.q_bufs.index(s)
    do = bufs.do_bufs.index(s)
    st = warpgroup_mma(k_op, q.permute((1, 0)), gl.zeros([KEYS, BLOCK_M], gl.float32, s_layout),
                       use_acc=False, is_async=True)
    dpt = warpgroup_mma(v_op, do.permute((1, 0)), gl.zeros([KEYS, BLOCK_M], gl.float32, s_layout),
                        use_acc=False, is_async=True)
    # This block's lse (base 2) in the products' column layout, read while S^T runs.
    lse2 = gl.expand_dims(bufs.lse_bufs.index(s).load(col_layout), 0)
    st = warpgroup_mma_wait(num_outstanding=1, deps=(st, ))
    pt, tht = _probabilities(st, lse2, m0, key0, scores, MASKED)
    # P^T and dS^T reach the tensor cores as register operands (16 registers each in bf16):
    # the accumulator layout of S^T is the A operand's, so no shared-memory round trip and
    # fence stands between forming them and issuing dV's and dK's products.
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0,
                                                 parent=_wgmma_layout(gl.num_warps(), bufs.q_bufs.shape[2]), k_width=2)
    pa = gl.convert_layout(pt.to(q.dtype), a_layout)
    # dS's factor from the softcap, folded in before dV's product is issued: tanh's tile is
    # dead while that product and dP^T's hold their registers.
    pt = scores.capped_grad(pt, tht)
    dv = warpgroup_mma(pa, do, dv, is_async=True)
    delta = gl.expand_dims(bufs.delta_bufs.index(s).load(col_layout), 0)
    dpt = warpgroup_mma_wait(num_outstanding=1, deps=(dpt, ))
    dsa = gl.convert_layout((pt * (dpt - delta)).to(q.dtype), a_layout)
    dk = warpgroup_mma(dsa, q, dk, is_async=True)
    # The register operands are dependencies of the wait that retires their products, so
    # their registers are not reused before the tensor cores have read them.
    dv, dk, pa, dsa = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dk, pa, dsa))
    mbarrier.arrive(bufs.empty.index(s), count=1)
    return dk, dv


@gluon.jit
def _split_d_step(c, m0, dk, dv, key0, WG: gl.constexpr, bufs, scores, MASKED: gl.constexpr):
    # One query block at head dim 256 (SPLIT_D), the 64 keys shared by both warpgroups, each
    # accumulating dK and dV for its own 128 columns. S^T and dP^T sum two products each over
    # the column halves of K (V) and Q (dO): warpgroup 0 forms S^T and P^T and hands P^T over
    # in q's dtype (dV's operand, ops_smem[0]) and in float32 with the softcap's factor folded
    # in (pf_smem); warpgroup 1 forms dP^T, then dS^T = pf (dP^T - delta), and hands it over
    # (ops_smem[1]). Each issues dV's product as soon as P^T is there and dK's once dS^T is.
    # The exchange buffers are rewritten only once both warpgroups' products of the previous
    # block have retired (xbars[2]); warpgroup 1 writes dS^T only after P^T's barrier
    # (xbars[0]), which warpgroup 0 signals only after that wait. dS^T's barrier: xbars[1].
    BLOCK_M: gl.constexpr = bufs.q_bufs.shape[1]
    KEYS: gl.constexpr = bufs.k_smem.shape[1]
    s_layout: gl.constexpr = bufs.st_layout(gl.num_warps())
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    s = bufs.wait_block(c)
    q = bufs.q_bufs.index(s * 2 + WG)
    do = bufs.do_bufs.index(s * 2 + WG)
    pt_smem = bufs.ops_smem.index(0)
    ds_smem = bufs.ops_smem.index(1)
    pt_ready = bufs.xbars.index(0)
    ds_ready = bufs.xbars.index(1)
    x_free = bufs.xbars.index(2)
    if WG == 0:
        st = warpgroup_mma(bufs.k_smem.index(0), bufs.q_bufs.index(s * 2).permute((1, 0)),
                           gl.zeros([KEYS, BLOCK_M], gl.float32, s_layout), use_acc=False, is_async=True)
        st = warpgroup_mma(bufs.k_smem.index(1), bufs.q_bufs.index(s * 2 + 1).permute((1, 0)), st, is_async=True)
        lse2 = gl.expand_dims(bufs.lse_bufs.index(s).load(col_layout), 0)
        st = warpgroup_mma_wait(num_outstanding=0, deps=(st, ))
        pt, tht = _probabilities(st, lse2, m0, key0, scores, MASKED)
        mbarrier.wait(x_free, (c & 1) ^ 1)
        pt_smem.store(pt.to(bufs.q_bufs.dtype))
        pt = scores.capped_grad(pt, tht)
        bufs.pf_smem.store(pt)
        fence_async_shared()
        mbarrier.arrive(pt_ready, count=1)
        dv = warpgroup_mma(pt_smem, do, dv, is_async=True)
        mbarrier.wait(ds_ready, c & 1)
        dk = warpgroup_mma(ds_smem, q, dk, is_async=True)
    else:
        dpt = warpgroup_mma(bufs.v_smem.index(0), bufs.do_bufs.index(s * 2).permute((1, 0)),
                            gl.zeros([KEYS, BLOCK_M], gl.float32, s_layout), use_acc=False, is_async=True)
        dpt = warpgroup_mma(bufs.v_smem.index(1), bufs.do_bufs.index(s * 2 + 1).permute((1, 0)), dpt, is_async=True)
        delta = gl.expand_dims(bufs.delta_bufs.index(s).load(col_layout), 0)
        dpt = warpgroup_mma_wait(num_outstanding=0, deps=(dpt, ))
        mbarrier.wait(pt_ready, c & 1)
        dv = warpgroup_mma(pt_smem, do, dv, is_async=True)
        dst = bufs.pf_smem.load(s_layout) * (dpt - delta)
        ds_smem.store(dst.to(bufs.q_bufs.dtype))
        fence_async_shared()
        mbarrier.arrive(ds_ready, count=1)
        dk = warpgroup_mma(ds_smem, q, dk, is_async=True)
    dv, dk = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dk))
    mbarrier.arrive(x_free, count=1)
    mbarrier.arrive(bufs.empty.index(s), count=1)
    return dk, dv


@gluon.jit
def _step(c, m0, dk, dv, k_op, v_op, key0, WG: gl.constexpr, bufs, scores, MASKED: gl.constexpr):
    if bufs.SPLIT_D:
        dk, dv = _split_d_step(c, m0, dk, dv, key0, WG, bufs, scores, MASKED)
    else:
        dk, dv = _dkdv_step(c, m0, dk, dv, k_op, v_op, key0, bufs, scores, MASKED)
    return dk, dv


@gluon.jit
def _dkdv_keys(WG: gl.constexpr, tile, bufs, io, tiles, scores, sm_scale, KV_REGS: gl.constexpr):
    # This warpgroup's keys of the program's block (from n0 of a sequence of nk keys whose first
    # is row k0 of (b, hk)) over query blocks [lo, end) of every query head of the group.
    b, hk, n0, k0, nk, lo, band, mid, end = tile
    BLOCK_M: gl.constexpr = bufs.q_bufs.shape[1]
    COLS: gl.constexpr = bufs.q_bufs.shape[2]       # the head dim, or with SPLIT_D its half
    KEYS: gl.constexpr = bufs.k_smem.shape[1]
    NW: gl.constexpr = gl.num_warps()
    acc_layout: gl.constexpr = _wgmma_layout(NW, COLS)
    dtype: gl.constexpr = bufs.q_bufs.dtype
    key0 = n0 if bufs.SPLIT_D else n0 + WG * KEYS
    k_half = bufs.k_smem.index(WG)
    v_half = bufs.v_smem.index(WG)
    # Accumulators loop-carried while their products run (initialised as such).
    dk = gl.zeros([KEYS, COLS], gl.float32, acc_layout)
    dv = gl.zeros([KEYS, COLS], gl.float32, acc_layout)
    mbarrier.wait(bufs.kv_ready, 0)
    # K and V of this warpgroup's keys are the A operands of every block's S^T and dP^T
    # products: held in registers (KV_REGS of them, K first), they are read from shared memory
    # once instead of once a block (an m64n64 product with both operands in shared memory reads
    # as many bytes a clock as shared memory gives).
    kv_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=bufs.st_layout(gl.num_warps()), k_width=2)
    k_op = k_half
    v_op = v_half
    if KV_REGS >= 1:
        k_op = k_half.load(kv_layout)
    if KV_REGS >= 2:
        v_op = v_half.load(kv_layout)
    c = 0
    # The group's query heads in a fixed order, each over its query blocks: deterministic.
    for g in range(tiles.GROUP):
        for i in range(lo, band):
            dk, dv = _step(c, i * BLOCK_M, dk, dv, k_op, v_op, key0, WG, bufs, scores, True)
            c += 1
        for i in range(band, mid):
            dk, dv = _step(c, i * BLOCK_M, dk, dv, k_op, v_op, key0, WG, bufs, scores, False)
            c += 1
        for i in range(mid, end):
            dk, dv = _step(c, i * BLOCK_M, dk, dv, k_op, v_op, key0, WG, bufs, scores, True)
            c += 1
    dv, dk = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dk))
    # dK, dV through this warpgroup's own halves of K and V (no product of this warpgroup
    # reads them any more; with SPLIT_D the other's read both halves, so each waits for the
    # other to be done) and TMA stores, which drop rows past the tensor's end.
    if bufs.SPLIT_D:
        done = bufs.xbars.index(3)
        mbarrier.arrive(done, count=1)
        mbarrier.wait(done, 0)
    # In a packed batch, a warpgroup whose keys reach past their sequence (into the next one's)
    # stores its rows through masked pointers instead.
    col = WG * COLS if bufs.SPLIT_D else 0
    if tiles.VARLEN:
        if key0 + KEYS <= nk:
            _store_tile(k_half, io.dk_desc, dk * sm_scale, b, hk, k0 + key0, col)
            _store_tile(v_half, io.dv_desc, dv, b, hk, k0 + key0, col)
        else:
            _store_rows(io.DK, (dk * sm_scale).to(dtype), hk * io.stride_kh + col, k0 + key0, nk - key0, io.stride_kn)
            _store_rows(io.DV, dv.to(dtype), hk * io.stride_kh + col, k0 + key0, nk - key0, io.stride_kn)
    else:
        _store_tile(k_half, io.dk_desc, dk * sm_scale, b, hk, key0, col)
        _store_tile(v_half, io.dv_desc, dv, b, hk, key0, col)
    tma.store_wait(pendings=0)


@gluon.jit
def _dkdv_consumer(WG: gl.constexpr, bufs, io, tiles, scores, sm_scale, KV_REGS: gl.constexpr):
    BLOCK_M: gl.constexpr = bufs.q_bufs.shape[1]
    KEYS: gl.constexpr = bufs.k_smem.shape[1]
    b, hk, n0, q0, nq, k0, nk, lo, band, mid, end = tiles.key_tile(gl.program_id(0), scores.SCORE, BLOCK_M,
                                                                   KEYS if bufs.SPLIT_D else 2 * KEYS)
    if tiles.VARLEN:
        if n0 < nk:
            _dkdv_keys(WG, (b, hk, n0, k0, nk, lo, band, mid, end), bufs, io, tiles, scores, sm_scale, KV_REGS)
    else:
        _dkdv_keys(WG, (b, hk, n0, k0, nk, lo, band, mid, end), bufs, io, tiles, scores, sm_scale, KV_REGS)


@gluon.jit
def _dkdv_kernel(
    # descriptors of the whole (B, H, Nq, D) q, do and (B, Hkv, Nk, D) k, v, dk, dv; LSE, DELTA:
    # (B, H, Nq) float32; packed sequences (VARLEN, B = 1, N the totals): CU_Q, CU_K their int32
    # cumulative lengths (SEQS + 1 each), DK, DV the pointers for the keys of a block that reach
    # past their sequence (None, None, dk, dv otherwise)
    q_desc, do_desc, k_desc, v_desc, dk_desc, dv_desc, LSE, DELTA, CU_Q, CU_K, DK, DV,
    # sizes: (Nq, Nk, H, Hkv, GROUP); scales: (qk_scale, what Q K^T is multiplied by
    # (`score.kernel_qk_scale`), sm_scale = scale); tiling: (n_kb, HEAD_SPAN), n_kb key blocks of
    # 128 per kv head (packed: cdiv(Nk, 128) + SEQS, `common._varlen_tile`), HEAD_SPAN the kv
    # heads LONGEST_FIRST orders together (`common._ordered_tile`); packed: (SEQS, dk's and dv's
    # head and row strides), zeros when dense
    sizes, scales, tiling, packed,
    # meta (SCORE: the `score.Score`, `score.Scores` applies it)
    SCORE: gl.constexpr, STAGES: gl.constexpr, KV_REGS: gl.constexpr, SPLIT_D: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr, VARLEN: gl.constexpr, LONGEST_FIRST: gl.constexpr,
):
    gl.static_assert(gl.num_warps() == 4)
    Nq, Nk, H, Hkv, GROUP = sizes
    qk_scale, sm_scale = scales
    n_kb, HEAD_SPAN = tiling
    SEQS, stride_kh, stride_kn = packed
    bufs = Buffers.allocate(q_desc, k_desc, STAGES, SPLIT_D)
    io = Globals(q_desc, do_desc, k_desc, v_desc, dk_desc, dv_desc, DK, DV, stride_kh, stride_kn, LSE, DELTA)
    tiles = Tiles(n_kb, HEAD_SPAN, Hkv, GROUP, Nq, Nk, CU_Q, CU_K, SEQS, LONGEST_FIRST, VARLEN)
    scores = Scores(qk_scale, SCORE)
    scores.check()
    gl.warp_specialize([
        (_dkdv_consumer, (0, bufs, io, tiles, scores, sm_scale, KV_REGS)),
        (_dkdv_consumer, (1, bufs, io, tiles, scores, sm_scale, KV_REGS)),
        (_dkdv_producer, (io, bufs, tiles, SCORE, H)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
