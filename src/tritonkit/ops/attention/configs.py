"""Tile configurations of the attention passes: one fixed config per pass (tests, the
interpreter, TRITONKIT_AUTOTUNE=0), and on a GPU `triton.autotune` over pruned spaces, keyed
by (head-dim tiles, causal, group, path, a power-of-two bucket of the length, dtypes) and
cached on disk. Where a tile wins and by how much is in notes/attention*.md."""

import functools
import math
import os
from dataclasses import dataclass

import triton
from triton.runtime.autotuner import Autotuner

from ... import _launch
from ..._layout import next_power_of_2
from ..._runtime import INTERPRETED
from .backward import _attn_bwd_dkdv_kernel, _attn_bwd_dq_kernel
from .forward import _attn_fwd_kernel
from .head import HeadTiles


@dataclass(frozen=True)
class TileConfig:
    """Block sizes and launch options of one pass. For the dK/dV pass, block_n is the key
    block a program owns and block_m the query block it streams."""
    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2

    def meta(self) -> dict[str, int]:
        """The kernel's tile constexprs."""
        return {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n}

    def triton_config(self) -> triton.Config:
        return triton.Config(self.meta(), num_warps=self.num_warps, num_stages=self.num_stages)


def _interpreting() -> bool:
    """Kernels will run through the interpreter. Not so inside record_launches(execute=False),
    where `tritonkit inspect` compiles the launches for the GPU: they must be the GPU's."""
    return INTERPRETED and _launch.launches_execute()


def fixed_configs(block_d: int, row_keys: int | None = None, busy_dkdv: bool = False,
                  packed: bool = False, block_dv: int | None = None) -> dict[str, TileConfig]:
    """The one config per pass used under the interpreter, under tests and when autotuning is
    off (TRITONKIT_AUTOTUNE=0). Interpreter blocks are small, so that test shapes of ~100 rows
    still cross several blocks and the causal band spans more than one key block. row_keys
    (about how many keys a query row sees: `_row_keys`; None: many) picks the forward's tile
    where the best one depends on it. busy_dkdv: a softcap (tanh's tile) adds to the dK/dV
    pass's live registers, and at D=128 its one-warpgroup 64x64 tile then spills (ptxas,
    sm_90: 140-224 B); it takes 128 keys on two warpgroups there and streams 32-row query
    blocks (`_BUSY_DKDV`). packed: packed sequences' bounds add registers too; through tensor
    descriptors they keep the plain tile all the same (it spills there, and measured faster than
    the busy one: notes/attention_masks.md), through pointers they take the busy one.
    block_dv: v's head-dim tile where it differs from q's and k's block_d (unequal head dims,
    `head.py`); the tiles of the wider one are taken, which fit the narrower (every estimate of
    `_fits` grows with either width), but for the dK/dV pass at 256 and narrower (DeepSeek-V3's
    192 / 128), which streams 32 query rows instead of 64: compiled for sm_90 its 64-row tile
    spilled 52-128 B (as at 256 / 256), the 32-row one not at all (235 registers). Not measured
    on a GPU: how much either gains.
    The dict is shared between calls: read it, do not change it."""
    wide = block_d if block_dv is None else max(block_d, block_dv)
    narrow = block_d if block_dv is None else min(block_d, block_dv)
    return _fixed_configs(wide, _interpreting(), row_keys is not None and row_keys <= SHORT_ROWS, busy_dkdv,
                          packed, narrow < wide)


# At D=128 the TMA forward's 64-row tiles of one warpgroup (two CTAs an SM) beat the 128-row,
# two-warpgroup tile where rows see few keys, and lose to it where they see many: up to this
# many keys a row (notes/attention_tma.md).
SHORT_ROWS = 2048


def _row_keys(Nq: int, Nk: int, causal: bool, window_left: int = -1, window_right: int = -1) -> int:
    """About how many keys a query row sees: the longer length, halved under a causal mask,
    and at most the window's width."""
    keys = max(Nq, Nk) // 2 if causal else max(Nq, Nk)
    if window_left >= 0 or window_right >= 0:
        right = 0 if causal else (window_right if window_right >= 0 else keys)
        keys = min(keys, (window_left if window_left >= 0 else keys) + right + 1)
    return keys


# The busy dK/dV tile at D=128: 128 keys a program on two warpgroups, 64 rows each, 32 query
# rows streamed. Spill-free on both load paths with a softcap, packed sequences or both
# (ptxas, sm_90: 241-255 registers; with 3 stages, packed and softcapped spills 16 B through
# descriptors). Not 64 keys on two warpgroups: a 64-row S^T = K Q^T cannot be split by rows
# between two warpgroups (wgmma's 64-row minimum), so Triton gives both the whole tile and
# each computes S^T, dP^T, the tanh and the exponentials of all 64 x 64 pairs.
_BUSY_DKDV = TileConfig(32, 128, 8, 2)


@functools.lru_cache(maxsize=None)
def _fixed_configs(block_d: int, interpreting: bool, short: bool = False, busy_dkdv: bool = False,
                   packed: bool = False, unequal: bool = False) -> dict[str, TileConfig]:
    if (busy_dkdv or packed) and not interpreting and 64 < block_d <= 128:
        plain = _fixed_configs(block_d, False, short)
        return {**plain, "dkdv": _BUSY_DKDV, "dkdv_tma": _BUSY_DKDV if busy_dkdv else plain["dkdv_tma"]}
    if interpreting:
        return {"fwd": TileConfig(32, 16), "fwd_tma": TileConfig(32, 16), "dkdv": TileConfig(16, 32),
                "dkdv_tma": TileConfig(16, 32), "dq": TileConfig(32, 16), "dq_tma": TileConfig(32, 16)}
    # The fastest of each pass on the H200, bf16 (notes/attention.md, notes/attention_tma.md);
    # "_tma": the pass with its streamed tiles read through tensor descriptors.
    if block_d <= 64:
        return {"fwd": TileConfig(128, 64, 8, 3), "fwd_tma": TileConfig(64, 128, 4, 2),
                "dkdv": TileConfig(64, 64, 4, 3), "dkdv_tma": TileConfig(64, 64, 4, 3),
                "dq": TileConfig(128, 64, 8, 3), "dq_tma": TileConfig(64, 64, 4, 3)}
    if block_d <= 128:
        return {"fwd": TileConfig(128, 128, 8, 3),
                "fwd_tma": TileConfig(64, 64, 4, 3) if short else TileConfig(128, 128, 8, 3),
                "dkdv": TileConfig(64, 128, 8, 3), "dkdv_tma": TileConfig(64, 64, 4, 2),
                "dq": TileConfig(128, 32, 8, 3), "dq_tma": TileConfig(128, 64, 8, 3)}
    if block_d <= 256:
        dkdv = TileConfig(32, 64, 8, 2) if unequal else TileConfig(64, 64, 8, 2)
        return {"fwd": TileConfig(128, 64, 8, 2), "fwd_tma": TileConfig(128, 64, 8, 2),
                "dkdv": dkdv, "dkdv_tma": dkdv,
                "dq": TileConfig(128, 32, 8, 3), "dq_tma": TileConfig(128, 32, 8, 3)}
    return dict(_WIDE_FIXED)


def _shared_bytes(block_m: int, block_n: int, stages: int, resident: int, streamed: int) -> int:
    """Rough shared memory of a pass: tiles of block_m rows kept, `resident` head-dim columns in
    all (the widths of their head-dim tiles added), and tiles of block_n rows, `streamed`
    columns in all, pipelined `stages` deep; 2 bytes an element."""
    return 2 * (resident * block_m + stages * streamed * block_n)


SMEM_LIMIT = 227 * 1024  # the H100/H200 per-block maximum


def _fp32_regs(c: triton.Config, *tiles: int) -> float:
    """fp32 registers a thread needs for the given accumulator/score tiles (in elements)."""
    return sum(tiles) / (32 * c.num_warps)


def _fixed_first(configs: list, kind: str, head: HeadTiles, row_keys: int | None = None,
                 busy_dkdv: bool = False, packed: bool = False) -> list:
    """The fixed config first: it is what `tritonkit inspect` shows for an untuned run."""
    fixed = fixed_configs(head.qk, row_keys, busy_dkdv, packed, head.v)[kind].triton_config()
    same = [c for c in configs if c.kwargs == fixed.kwargs and
            (c.num_warps, c.num_stages) == (fixed.num_warps, fixed.num_stages)]
    return same + [c for c in configs if c not in same]


def _fits(kind: str, c: triton.Config, head: HeadTiles) -> bool:
    """Whether a config fits shared memory and a register budget, for q's and k's head-dim tile
    head.qk and v's head.v. The budgets: above them ptxas spilled in sm_90 builds (ptxas -v,
    triton 3.6); 255 registers a thread hold the fp32 tiles counted here plus operands,
    pointers and masks. The configs of wide heads (`_WIDE_SPACES`) are kept for them alone."""
    m, n, s = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_stages
    qk, v = head.qk, head.v
    if max(qk, v) <= 256 and c in _WIDE_CONFIGS[kind]:
        return False
    if kind == "fwd":     # Q resident; K, V streamed; acc (of v's width) and the score tile in registers
        smem, regs, budget = _shared_bytes(m, n, s, qk, qk + v), _fp32_regs(c, m * v, m * n), 160
    elif kind == "dkdv":  # K, V resident; Q, dO streamed; dK, dV, P^T, dP^T in registers
        smem, regs, budget = _shared_bytes(n, m, s, qk + v, qk + v), _fp32_regs(c, n * (qk + v), 2 * n * m), 192
    else:                 # Q, dO resident; K, V streamed; dQ (of q's width), P, dP in registers
        smem, regs, budget = _shared_bytes(m, n, s, qk + v, qk + v), _fp32_regs(c, m * qk, 2 * m * n), 160
    return smem <= SMEM_LIMIT and regs <= budget and not (max(qk, v) > 128 and kind != "dkdv" and n > 64)


def _pruner(kind: str):
    def prune(configs, named_args, **kwargs):
        head = kwargs["HEAD"]
        fixed_kind = kind + "_tma" if kwargs.get("USE_TMA") else kind
        busy, packed = bool(kwargs["SCORE"].softcap), named_args.get("CU_Q") is not None
        return _fixed_first([c for c in configs if _fits(kind, c, head)], fixed_kind, head,
                            busy_dkdv=busy, packed=packed) or configs[:1]
    return prune


_prune_dkdv, _prune_dq = _pruner("dkdv"), _pruner("dq")


def _prune_fwd(configs, named_args, **kwargs):
    """The forward keeps the configs of the path the launcher chose (USE_TMA: "fwd_tma",
    else "fwd"), then prunes them as the other passes are pruned, with the fixed config of
    the call's lengths first (the runtime arguments Nq, Nk reach the pruner by name)."""
    kind = "fwd_tma" if kwargs.get("USE_TMA") else "fwd"
    head = kwargs["HEAD"]
    mine = [c for c in configs if c in _FWD_SPACES[kind]]
    lengths = named_args.get("Nq"), named_args.get("Nk")
    score = kwargs["SCORE"]
    row_keys = None if None in lengths else _row_keys(*lengths, score.causal, score.window_left, score.window_right)
    return _fixed_first([c for c in mine if _fits("fwd", c, head)], kind, head, row_keys) or mine[:1]


def autotune_configs(kind: str) -> list[TileConfig]:
    """Every config the autotuner may try for a pass (before pruning by head dim): its space,
    and the configs of heads wider than 256 (`_WIDE_SPACES`), which `_fits` keeps for those
    alone."""
    return _space(kind) + [c for c in _WIDE_SPACES[kind.removesuffix("_tma")] if c not in _space(kind)]


def _space(kind: str) -> list[TileConfig]:
    if kind == "fwd":
        space = [(m, n, w, s) for m in (64, 128) for n in (32, 64, 128) for w in (4, 8) for s in (2, 3, 4)]
        # 8 warps on 64 rows leave a warpgroup without wgmma rows
        return [TileConfig(*c) for c in space if not (c[0] == 64 and c[2] == 8)]
    if kind == "fwd_tma":  # the forward through tensor descriptors
        # 128-row query tiles; and 64-row tiles of one warpgroup, small enough at D=128 (64x64:
        # 138 registers, 116 KB shared at 3 stages, compiled for sm_90) for two CTAs an SM,
        # whose warpgroups, unlike the two of one 128-row CTA, need not keep in step (that one's
        # loop has three CTA-wide barriers an iteration).
        return ([TileConfig(128, n, w, s) for n in (64, 128) for w in (4, 8) for s in (2, 3, 4)]
                + [TileConfig(64, n, 4, s) for n in (64, 128) for s in (2, 3, 4)])
    if kind == "dkdv":
        space = [(m, n, w, s) for m in (32, 64) for n in (64, 128) for w in (4, 8) for s in (2, 3)]
        return [TileConfig(*c) for c in space]
    space = [(m, n, w, s) for m in (64, 128) for n in (32, 64) for w in (4, 8) for s in (2, 3)]
    return [TileConfig(*c) for c in space if not (c[0] == 64 and c[2] == 8)]


# Heads wider than 256 (Gemma 4's 512, `head.py`). An fp32 accumulator of 512 columns takes 128
# registers a thread of 8 warps at 64 rows, so the tiles are small: the forward on 64 query rows,
# 8 warps (its two warpgroups split the accumulator's columns), keys streamed 32 at a time (16
# through pointers); the dQ pass, which also holds Q's and dO's rows and two score tiles, on 32
# query rows; the dK/dV pass, which holds two accumulators (dK, dV) and K, V, on 32 keys
# streaming 16 query rows, one stage deep. The fixed ones (`_WIDE_FIXED`) compiled for sm_90
# (Triton 3.6, bf16, causal or not, softcap) without spills through descriptors: 239-255
# registers; through pointers the dK/dV pass spills 16 B, and packed sequences' forward 20 B. The
# next larger of each spilled (the dK/dV pass at 32 query rows or two stages: 128-880 B; the dQ
# pass at 64 rows: 264-2412 B, or past the shared memory at two stages; the forward through
# pointers at 32 keys: 28 B). Which is fastest is for a GPU to measure.
_WIDE_SPACES = {
    "fwd": [TileConfig(64, 16, 8, 2), TileConfig(64, 32, 8, 1), TileConfig(64, 32, 8, 2), TileConfig(64, 64, 8, 1)],
    "dkdv": [TileConfig(m, 32, 8, s) for m in (16, 32) for s in (1, 2)],
    "dq": [TileConfig(32, 16, 8, 2), TileConfig(32, 32, 8, 1), TileConfig(32, 32, 8, 2), TileConfig(64, 16, 8, 2)],
}
_WIDE_CONFIGS = {kind: [c.triton_config() for c in space] for kind, space in _WIDE_SPACES.items()}
_WIDE_FIXED = {"fwd": TileConfig(64, 16, 8, 2), "fwd_tma": TileConfig(64, 32, 8, 2),
               "dkdv": TileConfig(16, 32, 8, 1), "dkdv_tma": TileConfig(16, 32, 8, 1),
               "dq": TileConfig(32, 32, 8, 2), "dq_tma": TileConfig(32, 32, 8, 2)}


# The dK/dV pass masks its streamed query rows (CHECK_M) unless every query block is full.
# The tuned BLOCK_M is not known when the launcher sets that constexpr, so it asks whether Nq
# is a multiple of every BLOCK_M the tuner may pick: of their least common multiple.
DKDV_TUNED_ROWS = math.lcm(*{c.block_m for c in autotune_configs("dkdv")})


def _n_bucket(n: int) -> int:
    """The power-of-two bucket of a sequence length that keys the autotuner's choices."""
    return min(max(next_power_of_2(n), 256), 16384)


class _ChoicesByLength(dict):
    """An autotuner's choices (its `cache`), keyed as Triton keys them, with the two sequence
    lengths in the key (Nq, Nk, at `at` and `at + 1`) both replaced by the power-of-two bucket
    of the longer one: a new length in a tuned bucket takes the choice made for it instead of
    tuning again, and the kernels need no argument that only keys the tuner. Replacing is
    idempotent (a bucket is its own bucket), so keys may pass through twice."""

    def __init__(self, at: int):
        super().__init__()
        self.at = at

    def _key(self, key: tuple) -> tuple:
        n = _n_bucket(max(key[self.at], key[self.at + 1]))
        return (*key[:self.at], n, n, *key[self.at + 2:])

    def __getitem__(self, key):
        return super().__getitem__(self._key(key))

    def __setitem__(self, key, value):
        super().__setitem__(self._key(key), value)

    def __contains__(self, key):
        return super().__contains__(self._key(key))

    def get(self, key, default=None):
        return super().get(self._key(key), default)


class _LengthBucketedAutotuner(Autotuner):
    """triton.autotune whose choices are shared by the lengths of one bucket, in memory
    (`_ChoicesByLength`) and in Triton's on-disk cache (whose key it buckets the same way)."""

    def __init__(self, kernel, configs: list, key: list[str], prune) -> None:
        super().__init__(kernel, kernel.arg_names, configs, key, reset_to_zero=None, restore_value=None,
                         prune_configs_by={"early_config_prune": prune},
                         cache_results=True)  # on disk, under TRITON_CACHE_DIR: a second process does not tune again
        self.cache = _ChoicesByLength(key.index("Nq"))
        assert key.index("Nk") == key.index("Nq") + 1, "the lengths must sit side by side in the key"

    def check_disk_cache(self, tuning_key, configs, bench_fn):
        return super().check_disk_cache(self.cache._key(tuning_key), configs, bench_fn)


def _autotuned(kernel, kinds: str | tuple[str, ...], prune, flags: list[str]) -> Autotuner:
    configs = []
    for kind in (kinds,) if isinstance(kinds, str) else kinds:
        configs += [c for c in map(TileConfig.triton_config, autotune_configs(kind)) if c not in configs]
    # The autotuner adds the dtypes of the tensor arguments to the key itself.
    return _LengthBucketedAutotuner(kernel, configs, [*flags, "Nq", "Nk"], prune)


_FWD_SPACES = {kind: [c.triton_config() for c in autotune_configs(kind)] for kind in ("fwd", "fwd_tma")}
# USE_TMA keys the forward: with descriptors, O and LSE are the tensors whose dtypes it adds.
# Packed sequences key themselves: their cu_seqlens add an int32 dtype to the key.
_FLAGS = ["HEAD", "SCORE", "dims", "USE_TMA"]
_attn_fwd_tuned = _autotuned(_attn_fwd_kernel, ("fwd", "fwd_tma"), _prune_fwd, _FLAGS)
_attn_bwd_dkdv_tuned = _autotuned(_attn_bwd_dkdv_kernel, "dkdv", _prune_dkdv, _FLAGS)
_attn_bwd_dq_tuned = _autotuned(_attn_bwd_dq_kernel, "dq", _prune_dq, _FLAGS)


def _autotune_enabled() -> bool:
    return not _interpreting() and os.environ.get("TRITONKIT_AUTOTUNE", "1") != "0"
