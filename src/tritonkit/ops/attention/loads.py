"""Tile loads shared by the attention kernels: through pointers, masking only what may fall
outside, or through tensor descriptors (TMA), which fill rows past the end and columns past
the head dim with zeros."""

import triton
import triton.language as tl


@triton.jit
def _load(ptrs, rows_ok, d_ok, CHECK_ROWS: tl.constexpr, CHECK_D: tl.constexpr):
    # A tile load that masks only what may fall outside: ragged rows, a padded head dim.
    if CHECK_ROWS:
        if CHECK_D:
            x = tl.load(ptrs, mask=rows_ok & d_ok, other=0.0)
        else:
            x = tl.load(ptrs, mask=rows_ok, other=0.0)
    else:
        if CHECK_D:
            x = tl.load(ptrs, mask=d_ok, other=0.0)
        else:
            x = tl.load(ptrs)
    return x


@triton.jit
def _tile_ptrs(base, strides, b64, h64, row64, rows, cols):
    # Pointers of the tile of `rows` (offsets from row64) by `cols` of head h64 of batch entry
    # b64 in a (B, H, N, D) tensor with strides = its (batch, head, seq, head_dim) strides:
    # the batch, head and first row offsets in int64, those inside the tile int32.
    stride_b, stride_h, stride_n, stride_d = strides
    return (base + b64 * stride_b + h64 * stride_h + row64 * stride_n
            + rows[:, None] * stride_n + cols[None, :] * stride_d)


@triton.jit
def _key_sources(K, V, strides_k, strides_v, b, b64, hk, hk64, key0, offs_n0, offs_d, offs_dv,
                 V_TRANSPOSED: tl.constexpr, USE_TMA: tl.constexpr, VARLEN: tl.constexpr):
    # What the forward's and the dQ pass's key loops (`mask._walk_keys`) read K and V from,
    # as they take it: keys = (k_src, v_src, stride_kn, stride_vn, kt_offs, v_offs, b, hk, key0).
    # k_src, v_src: kv head hk's base pointers in batch entry b (in packed sequences, at the
    # sequence's first key key0), or (USE_TMA) the descriptors of the whole tensors, which the
    # loops index by [b, hk, key0 + key, 0]; strides_k, strides_v: k's and v's (batch, head,
    # seq, head_dim) strides; kt_offs: K^T's tile offsets ([D, BLOCK_N], from offs_d and the
    # block's keys offs_n0), v_offs: V's ([BLOCK_N, DV]), or V^T's with V_TRANSPOSED.
    stride_kb, stride_kh, stride_kn, stride_kd = strides_k
    stride_vb, stride_vh, stride_vn, stride_vd = strides_v
    if USE_TMA:
        k_src = K
        v_src = V
    else:
        k_src = K + b64 * stride_kb + hk64 * stride_kh
        v_src = V + b64 * stride_vb + hk64 * stride_vh
        if VARLEN:
            k_src += key0.to(tl.int64) * stride_kn
            v_src += key0.to(tl.int64) * stride_vn
    kt_offs = offs_d[:, None] * stride_kd + offs_n0[None, :] * stride_kn
    if V_TRANSPOSED:
        v_offs = offs_dv[:, None] * stride_vd + offs_n0[None, :] * stride_vn
    else:
        v_offs = offs_n0[:, None] * stride_vn + offs_dv[None, :] * stride_vd
    return k_src, v_src, stride_kn, stride_vn, kt_offs, v_offs, b, hk, key0


@triton.jit
def _key_block(
    src, stride_n, offs, b, hk, key0, start_n, offs_n0, d_ok, Nk,
    BLOCK_N: tl.constexpr, HEAD: tl.constexpr, OF_V: tl.constexpr, MASKED: tl.constexpr,
    USE_TMA: tl.constexpr, TRANSPOSED: tl.constexpr, VARLEN: tl.constexpr,
):
    # The K (or with OF_V, V) tile of the key block at start_n: [BLOCK_N, BLOCK_D], or
    # (TRANSPOSED) [BLOCK_D, BLOCK_N], BLOCK_D its head-dim tile in HEAD (`head.HeadTiles`),
    # masked past the head dim where that tile is wider (PAD_D).
    # src: the kv head's base pointer (at the sequence's first key), with
    # `offs` the tile's element offsets in that orientation and `d_ok` its head-dim mask; or
    # (USE_TMA) the descriptor of the whole tensor, read at [b, hk, key0 + key, 0], which
    # fills keys past the tensor's end and columns past D with zeros (keys of the next packed
    # sequence come back as they are: the caller masks them).
    BLOCK_D: tl.constexpr = HEAD.v if OF_V else HEAD.qk
    PAD_D: tl.constexpr = HEAD.pad_v if OF_V else HEAD.pad_qk
    if USE_TMA:
        if VARLEN:
            tile = src.load([b, hk, key0 + start_n, 0]).reshape(BLOCK_N, BLOCK_D)
        else:
            tile = src.load([b, hk, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
        if TRANSPOSED:
            tile = tl.trans(tile)
    else:
        n64 = tl.cast(start_n, tl.int64)
        if TRANSPOSED:
            keys_ok = (start_n + offs_n0)[None, :] < Nk
        else:
            keys_ok = (start_n + offs_n0)[:, None] < Nk
        tile = _load(src + n64 * stride_n + offs, keys_ok, d_ok, MASKED, PAD_D)
    return tile


@triton.jit
def _v_dim(D, HEAD: tl.constexpr):
    # The head dim of v (and of o, dO, dV), which bounds their padded columns: HEAD.v_dim where
    # it differs from q's and k's D (`head.HeadTiles`), else D itself.
    V_DIM: tl.constexpr = HEAD.v_dim
    if V_DIM > 0:
        dv = V_DIM
    else:
        dv = D
    return dv


@triton.jit
def _head_columns(D, HEAD: tl.constexpr):
    # A tile's head-dim columns: q's and k's (HEAD.qk of them, `head.HeadTiles`) and v's
    # (HEAD.v), with the masks of the real ones (D, `_v_dim`) as a row ([1, cols]) and as a
    # column ([cols, 1]): (offs_d, offs_dv, d_row, d_col, dv_row, dv_col).
    offs_d = tl.arange(0, HEAD.qk)
    offs_dv = tl.arange(0, HEAD.v)
    DV = _v_dim(D, HEAD)
    return offs_d, offs_dv, offs_d[None, :] < D, offs_d[:, None] < D, offs_dv[None, :] < DV, offs_dv[:, None] < DV


@triton.jit
def _own_tiles(A, B, strides_a, strides_b, b64, h64, row, start, n, D, BLOCK: tl.constexpr,
               OTHER: tl.constexpr, HEAD: tl.constexpr):
    # The two tiles a backward program holds throughout its walk (K and V in the dK/dV pass, Q
    # and dO in the dQ pass): its BLOCK rows from `start` of a sequence of n (`row` the first
    # in the tensor) of head h64 of batch entry b64, A at q's and k's head dim, B at v's; and
    # the offsets of the OTHER rows of each block it walks (queries, keys). Returns (rows, offs,
    # ok, row64): the tile's row offsets, their positions in the sequence, which of them it
    # holds and `row` in int64 (where the program's stores start); those other offsets; the
    # columns of `_head_columns`; the two tiles.
    row64 = tl.cast(row, tl.int64)
    rows = tl.arange(0, BLOCK)
    offs = start + rows
    others = tl.arange(0, OTHER)
    cols = _head_columns(D, HEAD)
    offs_d, offs_dv, d_row, d_col, dv_row, dv_col = cols
    ok = offs[:, None] < n
    a_tile = _load(_tile_ptrs(A, strides_a, b64, h64, row64, rows, offs_d), ok, d_row, True, HEAD.pad_qk)
    b_tile = _load(_tile_ptrs(B, strides_b, b64, h64, row64, rows, offs_dv), ok, dv_row, True, HEAD.pad_v)
    return (rows, offs, ok, row64), others, cols, a_tile, b_tile
