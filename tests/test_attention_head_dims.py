"""Head dims of `tritonkit.attention` and `attention_varlen` beyond the usual 64/128/256
(`ops/attention/head.py`): 512 (Gemma 4's global layers), sizes that are not multiples of 8,
and a head dim of v of its own (DeepSeek-V3's MLA: 192 for q and k, 128 for v), with the score
options (causal, windows, softcap, GQA, packed sequences, the bottom-right alignment, ALiBi,
sinks): forward, lse and the gradients of (o, lse) against the float64 reference with torch's
error in the same dtype as the yardstick; both load paths; torch.compile(fullgraph=True); the
Gluon dispatch sending such calls to the Triton kernels; tile configs; bad input.

Interpreter shapes are tiny (its blocks are 16-32 rows): a few dozen rows cross several blocks."""

import pytest
import torch

import tritonkit
from tritonkit._launch import record_launches
from tritonkit.ops import attention as attention_module
from tritonkit.ops.attention import (attention_bwd, attention_fwd, attention_varlen_reference, configs,
                                     head_tiles)
from tritonkit.ops.attention.head import HeadTiles
from _tolerance import assert_close_to_reference, eps_for
from test_attention import poison_outputs  # noqa: F401 (fixture)
from test_attention_score import check_against_reference, check_dense


def qkv(B, H, Hkv, Nq, Nk, D, Dv, device, dtype=torch.float16):
    return (torch.randn(B, H, Nq, D, dtype=dtype, device=device),
            torch.randn(B, Hkv, Nk, D, dtype=dtype, device=device),
            torch.randn(B, Hkv, Nk, Dv, dtype=dtype, device=device))


# (D, Dv, Nq, Nk, options, why); every case grouped-query (4 query heads over 2)
DENSE = [
    (512, 512, 40, 40, dict(causal=True), "Gemma 4's global layer: D=512, causal"),
    (512, 512, 23, 37, dict(causal=True, window=(9, 0), softcap=20.0, causal_alignment="bottom_right"),
     "D=512, a sliding window, softcap, bottom-right"),
    (40, 40, 45, 45, dict(causal=True, sinks=True), "D=40: a multiple of 8, padded to 64; sinks"),
    (59, 59, 37, 50, dict(window=(6, 4)), "D=59: odd, both sides of a window"),
    (111, 111, 33, 33, dict(causal=True, softcap=30.0, alibi=True), "D=111: odd, softcap and ALiBi"),
    (192, 128, 40, 40, dict(causal=True), "DeepSeek-V3's MLA: q, k 192 (padded to 256), v 128"),
    (48, 32, 20, 45, dict(causal=True, causal_alignment="bottom_right", sinks=True),
     "a small MLA analogue, Nq < Nk aligned bottom-right, sinks"),
    (32, 59, 33, 33, dict(window=(5, 0), causal=True, softcap=10.0), "Dv wider than D and odd"),
    (3, 5, 17, 21, dict(), "tiny head dims, padded to 16"),
]


def _options(options, device):
    options = dict(options)
    if options.pop("alibi", False):
        options["alibi_slopes"] = torch.rand(4, device=device)
    sinks = torch.randn(4, device=device) if options.pop("sinks", False) else None
    return options, sinks


@pytest.mark.parametrize("D,Dv,Nq,Nk,options", [pytest.param(*case[:-1], id=case[-1]) for case in DENSE])
def test_dense(D, Dv, Nq, Nk, options, device):
    q, k, v = qkv(2, 4, 2, Nq, Nk, D, Dv, device)
    options, sinks = _options(options, device)
    out, lse = check_dense(q, k, v, sinks=sinks, **options)
    assert out.shape == (2, 4, Nq, Dv) and out.dtype == q.dtype


# (D, Dv, options, why); packed sequences of queries and keys of different lengths, one without
# queries, one without keys
VARLEN = [
    (512, 512, dict(causal=True), "D=512"),
    (192, 128, dict(causal=True, window=(7, 0)), "MLA's head dims, a sliding window"),
    (59, 40, dict(causal=True, causal_alignment="bottom_right", sinks=True), "odd, unequal; bottom-right, sinks"),
]


@pytest.mark.parametrize("D,Dv,options", [pytest.param(*case[:-1], id=case[-1]) for case in VARLEN])
def test_varlen(D, Dv, options, device):
    lens_q, lens_k = [13, 0, 30, 5], [20, 6, 25, 0]
    cq = torch.tensor([0, 13, 13, 43, 48], dtype=torch.int32, device=device)
    ck = torch.tensor([0, 20, 26, 51, 51], dtype=torch.int32, device=device)
    q = torch.randn(sum(lens_q), 4, D, dtype=torch.float16, device=device)
    k = torch.randn(sum(lens_k), 2, D, dtype=torch.float16, device=device)
    v = torch.randn(sum(lens_k), 2, Dv, dtype=torch.float16, device=device)
    options, sinks = _options(options, device)
    leaves = (q, k, v) if sinks is None else (q, k, v, sinks)

    def ours(*t):
        return tritonkit.attention_varlen(*t[:3], cq, ck, 30, 25, sinks=t[3] if len(t) > 3 else None,
                                          return_lse=True, **options)

    def reference(*t, upcast=False):
        return attention_varlen_reference(*t[:3], cq, ck, sinks=t[3] if len(t) > 3 else None, upcast=upcast,
                                          return_lse=True, **options)
    out, _ = check_against_reference(ours, reference, leaves)
    assert out.shape == (sum(lens_q), 4, Dv)


def _views_of_wider_rows(shape, width, device):
    """A (B, H, N, shape[-1]) view into rows of `width` elements whose columns past the view
    hold NaN: a load that reached past the head dim would spread NaN."""
    buffer = torch.full((*shape[:-1], width), float("nan"), dtype=torch.float16, device=device)
    buffer[..., :shape[-1]] = torch.randn(shape, dtype=torch.float16, device=device)
    return buffer[..., :shape[-1]]


@pytest.mark.parametrize("tma", [True, False], ids=["tensor descriptors", "pointers"])
def test_odd_head_dims_in_wider_rows_on_both_paths(tma, device):
    # D=59 and Dv=37 in rows of 64 and 48: 16-byte strides, so tensor descriptors may read them,
    # and must bring zeros, never the NaN past each head dim (as the masked pointer loads do).
    q = _views_of_wider_rows((1, 4, 37, 59), 64, device)
    k = _views_of_wider_rows((1, 2, 45, 59), 64, device)
    v = _views_of_wider_rows((1, 2, 45, 37), 48, device)
    do = _views_of_wider_rows((1, 4, 37, 37), 48, device)
    out, lse = attention_fwd(q, k, v, True, tma=tma)
    same = attention_module.attention_reference(q, k, v, True, upcast=False)
    assert_close_to_reference(out, attention_module.attention_reference(q, k, v, True), same)
    dq, dk, dv = attention_bwd(do, q, k, v, out, lse, True, tma=tma)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    wide = torch.autograd.grad(attention_module.attention_reference(*leaves, True, upcast=False), leaves, do.double())
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    theirs = torch.autograd.grad(attention_module.attention_reference(*leaves, True, upcast=False), leaves, do)
    for name, a, w, t in zip(("dq", "dk", "dv"), (dq, dk, dv), wide, theirs):
        assert_close_to_reference(a, w, t, eps=eps_for(q.dtype, gradient=True), what=name)


def test_descriptors_only_where_rows_are_16_byte_strided(device):
    # Contiguous D=59 rows are 118 bytes apart: TMA cannot address them, so pointers (and
    # tma=True is refused); D=40 and Dv=24 rows (80 and 48 bytes) take descriptors, each of
    # its own head-dim tile.
    q, k, v = qkv(1, 4, 2, 40, 40, 59, 59, device)
    with record_launches(execute=False) as launches:
        attention_fwd(q, k, v, True, gluon=False)
    assert launches[0].constexprs["USE_TMA"] is False
    with pytest.raises(ValueError, match="tensor descriptors"):
        attention_fwd(q, k, v, True, tma=True)
    q, k, v = qkv(1, 4, 2, 40, 40, 40, 24, device)
    with record_launches(execute=False) as launches:
        attention_fwd(q, k, v, True, gluon=False)
    (launch,) = launches
    assert launch.constexprs["USE_TMA"] and launch.constexprs["HEAD"] == HeadTiles(64, True, 32, True, 24)
    Q, K, V = launch.args[:3]
    assert Q.block_shape[-1] == K.block_shape[-1] == 64 and V.block_shape[-1] == 32


def test_compiled_graph_has_v_head_dim(device):
    # The custom ops' fakes give o (and dv) v's head dim: one graph, eager's values.
    q, k, v = qkv(1, 4, 2, 20, 28, 48, 32, device)
    cq = torch.tensor([0, 9, 20], dtype=torch.int32, device=device)
    ck = torch.tensor([0, 15, 28], dtype=torch.int32, device=device)

    def f(q, k, v):
        dense = tritonkit.attention(q, k, v, causal=True, causal_alignment="bottom_right")
        packed = tritonkit.attention_varlen(q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1),
                                            cq, ck, 11, 15, causal=True)
        return dense.float().square().sum() + packed.float().sin().sum()
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    got = torch.autograd.grad(compiled(*leaves), leaves)
    want = torch.autograd.grad(f(*leaves), leaves)
    for a, b, leaf in zip(got, want, leaves):
        assert a.shape == leaf.shape
        torch.testing.assert_close(a, b)


def test_gluon_kernels_are_not_asked(device):
    # On Hopper (recorded for sm_90) head dims the Gluon kernels lack, and unequal ones, run the
    # Triton kernels, and gluon=True says why.
    for D, Dv, words in ((128, 64, "head dim 128 for q and k but 64 for v"), (512, 512, "head dim 512")):
        q, k, v = qkv(1, 4, 2, 256, 256, D, Dv, device, torch.bfloat16)
        o = torch.empty(1, 4, 256, Dv, dtype=q.dtype, device=device)
        lse = torch.empty(1, 4, 256, device=device)
        with record_launches(execute=False, capability=90) as recording:
            attention_fwd(q, k, v, True)
            attention_bwd(torch.empty_like(o), q, k, v, o, lse, True)
        assert [c.path for _, c in recording.choices] == ["triton", "triton"]
        with record_launches(execute=False, capability=90), pytest.raises(ValueError, match=words):
            attention_fwd(q, k, v, True, gluon=True)
        with record_launches(execute=False, capability=90), pytest.raises(ValueError, match=words):
            attention_bwd(torch.empty_like(o), q, k, v, o, lse, True, gluon=True)


def test_head_tiles():
    assert head_tiles(128, 128) == HeadTiles(128, False, 128, False, 0)
    assert head_tiles(192, 128) == HeadTiles(256, True, 128, False, 128)
    assert head_tiles(59, 59) == HeadTiles(64, True, 64, True, 0)
    assert head_tiles(5, 512) == HeadTiles(16, True, 512, False, 512)


def test_wide_head_configs_are_for_wide_heads_alone():
    # The tiles of 512-wide heads fit them alone (the budgets of `configs._fits`), and are never
    # offered at the usual head dims, whose tuner spaces stay as they were.
    with record_launches(execute=False):  # the GPU's configs
        for kind, prune in (("fwd", configs._prune_fwd), ("dkdv", configs._prune_dkdv), ("dq", configs._prune_dq)):
            space = configs._attn_fwd_tuned.configs if kind == "fwd" else [
                c.triton_config() for c in configs.autotune_configs(kind)]
            wide = configs._WIDE_CONFIGS[kind]
            for D, Dv in ((64, 64), (128, 128), (256, 256), (192, 128)):
                kept = prune(space, {}, HEAD=head_tiles(D, Dv), SCORE=attention_module.score_of(
                    True, -1, -1, 0.0, 1, 1), USE_TMA=True)
                assert kept and not any(c in wide for c in kept), (kind, D, Dv)
            kept = prune(space, {}, HEAD=head_tiles(512, 512), SCORE=attention_module.score_of(
                True, -1, -1, 0.0, 1, 1), USE_TMA=True)
            fixed = configs.fixed_configs(512)[kind + "_tma"].triton_config()
            assert kept[0] == fixed and all(c in wide for c in kept), kind


BAD = ("q wider than 512", "v wider than 512", "an empty head dim", "k's head dim not q's", "o's head dim not v's",
       "do's head dim not v's", "packed v wider than 512")


def _bad_head_dims(device):
    def t(*shape):
        return torch.randn(*shape, device=device).half()
    q, k, v = t(1, 4, 8, 32), t(1, 2, 8, 32), t(1, 2, 8, 16)
    o, lse = t(1, 4, 8, 16), torch.zeros(1, 4, 8, device=device)
    return {
        "q wider than 512": (lambda: tritonkit.attention(t(1, 4, 8, 520), t(1, 2, 8, 520), v), "q has head_dim 520"),
        "v wider than 512": (lambda: tritonkit.attention(q, k, t(1, 2, 8, 513)), "v has head_dim 513"),
        "an empty head dim": (lambda: tritonkit.attention(q, k, t(1, 2, 8, 0)), "v has head_dim 0"),
        "k's head dim not q's": (lambda: tritonkit.attention(q, t(1, 2, 8, 16), v), "k has head_dim 16"),
        "o's head dim not v's": (lambda: attention_bwd(torch.randn_like(o), q, k, v, t(1, 4, 8, 32), lse),
                                 "o has head_dim 32 but v has head_dim 16"),
        "do's head dim not v's": (lambda: attention_bwd(t(1, 4, 8, 32), q, k, v, o, lse),
                                  "do has head_dim 32 but v has head_dim 16"),
        "packed v wider than 512": (lambda: tritonkit.attention_varlen(
            t(8, 4, 32), t(8, 2, 32), t(8, 2, 600), *(torch.tensor([0, 8], dtype=torch.int32, device=device),) * 2,
            8, 8), "v has head_dim 600"),
    }


@pytest.mark.parametrize("case", BAD)
def test_bad_head_dims_name_the_argument(case, device):
    call, words = _bad_head_dims(device)[case]
    with pytest.raises(ValueError, match=words):
        call()
