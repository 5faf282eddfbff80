"""Catalogue entry for `tritonkit.attention_varlen`: packed variable-length sequences;
inspector passes, benchmark cases, sample and fuzz."""

from __future__ import annotations

import math

import torch

from ..ops.attention import attention_varlen, attention_varlen_bwd, attention_varlen_fwd, attention_varlen_reference
from ..ops.attention.checks import ALIGNMENTS
from . import BenchCase, InspectRequest, two_pass_entry
from ._accuracy import Comparison, relative_error
from ._fuzz import HALVES, FuzzInputs, describe
from .attention import _GLUON, _timed, flash_recipe_grads, flex_peer, fuzz_head_dims, grads_or_zeros, pair_flops


def lognormal_lengths(count: int, mean: int, seed: int = 0, sigma: float = 0.6) -> list[int]:
    """`count` sequence lengths drawn once from a lognormal of about `mean` (a fixed seed, so
    every run and every peer sees the same batch), each at least 1."""
    g = torch.Generator().manual_seed(seed)
    draws = torch.randn(count, generator=g, dtype=torch.float64) * sigma + (math.log(mean) - sigma ** 2 / 2)
    return [max(1, round(x)) for x in draws.exp().tolist()]


def cu_seqlens(lengths: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)


def _packed_qkv(total: int, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device,
                fill: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q (T, H, D), k and v (T, Hkv, D): views into one (T, H + 2 Hkv, D) projection, as a
    model's fused qkv projection lays packed tokens out."""
    make = torch.randn if fill else torch.empty
    qkv = make(total, heads + 2 * kv_heads, head_dim, dtype=dtype, device=device)
    return qkv[:, :heads], qkv[:, heads:heads + kv_heads], qkv[:, heads + kv_heads:]


def _inspect_inputs(request: InspectRequest, device: torch.device):
    """Packed q, k, v of --shape B,H,N,D (B sequences of about N tokens), or B,H,N,D,Dv (v of
    its own head dim)."""
    B, H, N, D, *Dv = request.shape or (16, 32, 1024, 128)
    lengths = lognormal_lengths(B, N)
    dtype = request.dtype or torch.bfloat16
    q, k, v = _packed_qkv(sum(lengths), H, H, D, dtype, device, fill=False)
    if Dv and Dv[0] != D:
        v = _packed_qkv(sum(lengths), H, H, Dv[0], dtype, device, fill=False)[2]
    cu = cu_seqlens(lengths, device)
    return q, k, v, cu


def _inspect_fwd(request: InspectRequest, device: torch.device) -> None:
    q, k, v, cu = _inspect_inputs(request, device)
    attention_varlen_fwd(q, k, v, cu, cu, request.causal, tma=request.tma, gluon=_GLUON[request.path])


def _inspect_bwd(request: InspectRequest, device: torch.device) -> None:
    q, k, v, cu = _inspect_inputs(request, device)
    o, do = (q.new_empty((*q.shape[:2], v.shape[-1])) for _ in range(2))
    lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=device)
    attention_varlen_bwd(do, q, k, v, o, lse, cu, cu, request.causal, tma=request.tma, gluon=_GLUON[request.path])


def _document_causal(doc: torch.Tensor):
    def mask_mod(b, h, qi, ki):
        return (doc[qi] == doc[ki]) & (qi >= ki)
    return mask_mod


def _case(count: int, mean: int, heads: int, kv_heads: int, head_dim: int, backward: bool,
          v_head_dim: int | None = None) -> BenchCase:
    """Causal attention over `count` packed sequences of lognormal lengths, against
    FlexAttention with a document-causal block mask over the packed row. Work: the (query,
    key) pairs each sequence's causal mask keeps, `attention.pair_flops` each. v_head_dim: v's
    own head dim (None: head_dim)."""
    lengths = lognormal_lengths(count, mean)
    total = sum(lengths)
    dtype = torch.bfloat16
    dv = head_dim if v_head_dim is None else v_head_dim
    flops = heads * sum(n * (n + 1) // 2 for n in lengths) * pair_flops(head_dim, dv, backward)
    pass_name = "bwd" if backward else "fwd"

    def setup(device: torch.device):
        q, k, _ = _packed_qkv(total, heads, kv_heads, head_dim, dtype, device)
        v = torch.randn(total, kv_heads, dv, dtype=dtype, device=device)
        q, k = q.contiguous(), k.contiguous()
        cu = cu_seqlens(lengths, device)
        longest = max(lengths)
        providers = {"tritonkit": lambda q, k, v, c: attention_varlen(q, k, v, cu, cu, longest, longest, causal=c)}
        if device.type == "cuda":
            doc = torch.repeat_interleave(torch.arange(count, device=device), torch.tensor(lengths, device=device))
            flex = flex_peer(_document_causal(doc), total, total, device)
            if flex is not None:
                # FlexAttention takes (B, H, N, D): the packed row as one batch of one sequence.
                def as_dense(q, k, v, c, flex=flex):
                    return flex(*(t.transpose(0, 1)[None] for t in (q, k, v)), c)[0].transpose(0, 1)
                providers["FlexAttention"] = as_dense
        return _timed(providers, (q, k, v), True, backward)

    dims = f"D={head_dim}" if dv == head_dim else f"D={head_dim}/{dv}"
    return BenchCase(
        label=f"{pass_name} {count} seqs mean {mean} (total {total}) {dims} causal GQA{heads}/{kv_heads}",
        group=f"attention_varlen {pass_name} {dims} causal", unit="TFLOP/s", work=flops, size=total,
        setup=setup, bytes_in_flight=(4 if backward else 2) * total * heads * (head_dim + dv) * dtype.itemsize,
        graphed=not backward)


def _bench_cases(on_gpu: bool) -> list[BenchCase]:
    if not on_gpu:
        return [_case(4, 16, 2, 1, 32, False), _case(4, 16, 2, 1, 32, True)]
    # D=128; and issue 48's head dims: Gemma 4's global 512, DeepSeek-V3's MLA 192 / 128
    return [case for backward in (False, True)
            for case in (_case(16, 1024, 32, 8, 128, backward), _case(16, 1024, 8, 4, 512, backward),
                         _case(16, 1024, 32, 32, 192, backward, v_head_dim=128))]


def _reference(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, window_left=-1, window_right=-1, softcap=0.0,
               bottom_right=False, alibi_slopes=None, sinks=None, upcast=True):
    """`attention_varlen_reference` taking the Op's positional arguments; (out, lse) as the Op."""
    return attention_varlen_reference(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, upcast,
                                      window=(window_left, window_right), softcap=softcap or None,
                                      causal_alignment=ALIGNMENTS[bottom_right], alibi_slopes=alibi_slopes,
                                      sinks=sinks, return_lse=True)


def _sample(device: torch.device) -> tuple:
    # GQA (4 query heads over 2), lengths 5, 0, 17, 1 (an empty sequence), causal, a left
    # window, a softcap and learnable sinks; q, k, v views into one packed projection.
    lengths = [5, 0, 17, 1]
    q, k, v = _packed_qkv(sum(lengths), 4, 2, 32, torch.float16, device)
    cu = cu_seqlens(lengths, device)
    return q, k, v, cu, cu, True, 32 ** -0.5, 6, -1, 30.0, False, None, torch.randn(4, device=device)  # sinks


FUZZ_LENGTHS = (0, 0, 1, 1, 2, 3, 5, 7, 13, 16, 17, 31)   # empty, single, primes, a block and one past


def _fuzz_inputs(inputs: FuzzInputs):
    """q (Tq, H, D), k (Tk, Hkv, D), v (Tk, Hkv, Dv) and an upstream gradient, each at its own
    layout with the head dim innermost (as projections lay them out; the op copies any other);
    1..4 sequences, key lengths the query lengths or drawn apart; GQA or not; Dv mostly D; the
    mask options."""
    draw = inputs.draw
    count = draw.integer(1, 4)
    lens_q = [draw.choice(FUZZ_LENGTHS) for _ in range(count)]
    lens_k = lens_q if draw.boolean() else [draw.choice(FUZZ_LENGTHS) for _ in range(count)]
    kv_heads = draw.integer(1, 2)
    heads = kv_heads * draw.choice((1, 2))
    head_dim, v_dim = fuzz_head_dims(draw, inputs.on_gpu)
    dtype = draw.choice(HALVES)
    q_shape, kv_shape = (sum(lens_q), heads, head_dim), (sum(lens_k), kv_heads, head_dim)
    shapes = (q_shape, kv_shape, kv_shape[:2] + (v_dim,), q_shape[:2] + (v_dim,))
    q, k, v, grad = (inputs.view(shape, dtype, inputs.layout(3).innermost(2)) for shape in shapes)
    window = draw.choice((None, None, (draw.choice((0, 1, 3, 8)), draw.choice((-1, 0, 2)))))
    options = dict(causal=draw.boolean(), window=window, softcap=draw.choice((None, None, 5.0)))
    return q, k, v, grad, cu_seqlens(lens_q, inputs.device), cu_seqlens(lens_k, inputs.device), options


def _note(q, k, v, cu_q, cu_k, options) -> str:
    return (f"lengths q {cu_q.diff().tolist()} k {cu_k.diff().tolist()} "
            + " ".join(f"{key}={value}" for key, value in options.items())
            + f" q {describe(q)} k {describe(k)} v {describe(v)}")


def _fuzz_forward(inputs: FuzzInputs) -> list[Comparison]:
    q, k, v, _, cu_q, cu_k, options = _fuzz_inputs(inputs)
    longest_q, longest_k = int(cu_q.diff().max()), int(cu_k.diff().max())
    out = attention_varlen(q, k, v, cu_q, cu_k, longest_q, longest_k, **options)
    want = (*q.shape[:-1], v.shape[-1])
    assert out.dtype == q.dtype and out.shape == want, f"attention_varlen: {out.dtype} {tuple(out.shape)}"
    return [Comparison(f"attention_varlen: {_note(q, k, v, cu_q, cu_k, options)}", out,
                       attention_varlen_reference(q, k, v, cu_q, cu_k, **options),
                       attention_varlen_reference(q, k, v, cu_q, cu_k, upcast=False, **options))]


def _fuzz_backward(inputs: FuzzInputs) -> list[Comparison]:
    q, k, v, grad, cu_q, cu_k, options = _fuzz_inputs(inputs)
    longest_q, longest_k = int(cu_q.diff().max()), int(cu_k.diff().max())
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = attention_varlen(*leaves, cu_q, cu_k, longest_q, longest_k, **options)
    ours = torch.autograd.grad(out, leaves, grad)

    def reference(*t, upcast=True):
        o, lse = attention_varlen_reference(*t, cu_q, cu_k, upcast=upcast, return_lse=True, **options)
        return o, lse.transpose(0, 1)   # lse indexed as o's rows

    def grads(*t, upcast=True):
        leaves = [x.detach().requires_grad_() for x in t]
        return grads_or_zeros(reference(*leaves, upcast=upcast)[:1], leaves, (grad,))

    theirs = grads(q, k, v, upcast=False)
    exact = grads(*(t.double() for t in (q, k, v)))
    recipe = flash_recipe_grads(reference, [q, k, v], out, grad)
    note = _note(q, k, v, cu_q, cu_k, options)
    # The yardstick is the larger of torch's error and the flash recipe's own error (attention's fuzz).
    return [Comparison(f"attention_varlen {name}: {note}", a, ref,
                       max((b, c), key=lambda t: relative_error(t, ref)), gradient=True)
            for name, a, ref, b, c in zip(("dq", "dk", "dv"), ours, exact, theirs, recipe)]


ENTRY = two_pass_entry(
    "attention_varlen", "attention over packed variable-length sequences (cu_seqlens, as FlashAttention-2's varlen)",
    inspect=(_inspect_fwd, _inspect_bwd), fuzz=((30, _fuzz_forward), (20, _fuzz_backward)),
    bench_cases=_bench_cases, peers=("FlexAttention",), paths=("gluon", "triton"),
    sample=_sample, reference=_reference)
