"""Catalogue entry for `tritonkit.rope`: inspector passes, benchmark cases, sample and fuzz."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..ops.rope import rope, rope_bwd, rope_fwd, rope_reference
from . import BenchCase, InspectRequest, two_pass_entry
from ._accuracy import Comparison
from ._fuzz import FLOATS, FuzzInputs, compare_gradients, compare_outputs, describe
from ._inputs import peer_compile


def hf_inputs(batch: int, heads: int, kv_heads: int, seq: int, head_dim: int, dtype: torch.dtype,
              device: torch.device, offset: int = 0, fill: bool = True):
    """q (B, H, N, D), k (B, Hkv, N, D) as Hugging Face's attention makes them: one (B, N,
    (H + Hkv) * D) projection buffer `offset` elements into its storage, viewed per head and
    transposed; cos, sin (B, N, D) as its rotary embedding returns them. fill=False leaves the
    memory unset (the inspector compiles, never runs)."""
    make = torch.randn if fill else torch.empty
    width = (heads + kv_heads) * head_dim
    proj = make(batch * seq * width + offset, dtype=dtype, device=device)[offset:].view(batch, seq, width)
    q = proj[..., :heads * head_dim].view(batch, seq, heads, head_dim).transpose(1, 2)
    k = proj[..., heads * head_dim:].view(batch, seq, kv_heads, head_dim).transpose(1, 2)
    angles = make(batch, seq, head_dim // 2, device=device)
    emb = torch.cat((angles, angles), dim=-1)
    return q, k, emb.cos().to(dtype), emb.sin().to(dtype)


def _inspect_inputs(request: InspectRequest, device: torch.device):
    B, H, N, D = request.shape or (4, 32, 2048, 128)
    return hf_inputs(B, H, max(1, H // 4), N, D, request.dtype or torch.bfloat16, device, request.offset,
                     fill=False)


def _inspect_fwd(request: InspectRequest, device: torch.device) -> None:
    rope_fwd(*_inspect_inputs(request, device), False)


def _inspect_bwd(request: InspectRequest, device: torch.device) -> None:
    q, k, cos, sin = _inspect_inputs(request, device)
    rope_bwd(q, k, cos, sin, False)


def _eager(q, k, cos, sin):
    return rope_reference(q, k, cos, sin, upcast=False)


def _liger() -> Callable | None:
    """Liger Kernel's rope, when Liger imports (a peer, not a dependency)."""
    try:
        from liger_kernel.transformers.rope import liger_rotary_pos_emb
    except Exception:  # not installed, or its own imports fail on this machine
        return None
    return liger_rotary_pos_emb


def _case(batch: int, heads: int, kv_heads: int, seq: int, head_dim: int, backward: bool,
          dtype: torch.dtype = torch.bfloat16, seed_table: bool = False) -> BenchCase:
    """GB/s count each tensor read or written once: q and k read and written, cos and sin read;
    twice that for forward+backward (the backward reads the two gradients and cos, sin and
    writes two)."""
    element = dtype.itemsize
    qk = batch * (heads + kv_heads) * seq * head_dim
    elements = (2 * qk + 2 * batch * seq * head_dim) * (2 if backward else 1)

    def setup(device: torch.device):
        q, k, cos, sin = hf_inputs(batch, heads, kv_heads, seq, head_dim, dtype, device)
        providers = {"tritonkit": rope, "eager": _eager, "torch.compile": peer_compile(_eager)}
        liger = _liger()
        if liger is not None:
            providers["Liger"] = liger
        if not backward:
            return {name: (lambda f=f: f(q, k, cos, sin)) for name, f in providers.items()}
        leaves = [q.detach().requires_grad_(), k.detach().requires_grad_()]
        grads = (torch.randn_like(q), torch.randn_like(k))
        return {name: (lambda f=f: torch.autograd.grad(f(*leaves, cos, sin), leaves, grads))
                for name, f in providers.items()}

    pass_name = "fwd+bwd" if backward else "fwd"
    gqa = f" {heads}/{kv_heads} heads" if kv_heads != heads else f" {heads} heads"
    return BenchCase(
        label=f"{pass_name} B{batch} N{seq}{gqa} D{head_dim}", group=f"rope {pass_name}", unit="GB/s",
        work=elements * element, size=qk, setup=setup, seed_table=seed_table,
        bytes_in_flight=(4 if backward else 2) * elements * element,
    )


def _bench_cases(on_gpu: bool) -> list[BenchCase]:
    shapes = ([(4, 32, 8, 2048, 128), (1, 32, 8, 8192, 128), (8, 16, 16, 1024, 64)] if on_gpu
              else [(1, 4, 2, 16, 32), (2, 3, 3, 7, 16)])
    return [_case(*shape, backward, seed_table=(shape, backward) == (shapes[0], False))
            for backward in (False, True) for shape in shapes]


def _sample(device: torch.device) -> tuple:
    # GQA 3/1 heads at an odd offset of one projection, partial rotary (8 of 10 dims),
    # cos and sin (N, R) broadcast over the batch.
    q, k, cos, sin = hf_inputs(2, 3, 1, 5, 10, torch.float16, device, offset=1)
    return q, k, cos[0, :, :8], sin[0, :, :8], False


def _fuzz_inputs(inputs: FuzzInputs):
    """q (B, H, N, D) and k (B, Hkv, N, D), Hkv dividing H, each at its own layout (the head dim
    innermost more often than not); R even, at most D (partial rotary when below); cos and sin
    of one accepted shape ((N, R), (B or 1, N, R), (B or 1, 1, N, R), N or 1), each at its own
    layout, in q's dtype or float32; interleaved or not."""
    draw = inputs.draw
    batch, kv_heads = draw.integer(1, 2), draw.integer(1, 3)
    heads = kv_heads * draw.choice((1, 2, 3))
    head_dim = draw.choice(tuple(d for d in inputs.edge if d > 1))
    rot = head_dim - head_dim % 2 if draw.boolean() else 2 * draw.integer(1, head_dim // 2)
    seq = draw.choice((1, 2, 3, 7, 13, 16, 31) + ((127, 129, 1000) if inputs.on_gpu else ()))
    seq = max(1, min(seq, inputs.max_elements // (batch * (heads + kv_heads) * head_dim)))
    dtype = draw.choice(FLOATS)
    layouts = [inputs.layout(4) for _ in range(2)]
    layouts = [layout if draw.boolean() else layout.innermost(3) for layout in layouts]
    q = inputs.view((batch, heads, seq, head_dim), dtype, layouts[0])
    k = inputs.view((batch, kv_heads, seq, head_dim), dtype, layouts[1])
    n = seq if draw.boolean() else draw.choice((1, seq))
    table = draw.choice(((n, rot), (draw.choice((1, batch)), n, rot), (draw.choice((1, batch)), 1, n, rot)))
    cos_dtype = draw.choice((dtype, torch.float32))
    angles = inputs.randn(table, torch.float32, scale=3.0)
    cos = inputs.view(table, cos_dtype).copy_(angles.cos())
    sin = inputs.view(table, cos_dtype).copy_(angles.sin())
    return q, k, cos, sin, draw.boolean()


def _fuzz_note(q, k, cos, sin, interleaved) -> str:
    return (f"interleaved={interleaved} q {describe(q)} k {describe(k)} cos {describe(cos)} "
            f"sin {describe(sin)}")


def _fuzz_forward(inputs: FuzzInputs) -> list[Comparison]:
    q, k, cos, sin, interleaved = _fuzz_inputs(inputs)
    outs = rope(q, k, cos, sin, interleaved=interleaved)
    for out, x in zip(outs, (q, k)):
        assert out.dtype == x.dtype and out.shape == x.shape, f"rope: {out.dtype} {tuple(out.shape)}"
    return compare_outputs(_fuzz_note(q, k, cos, sin, interleaved), ("q", "k"), outs,
                           rope_reference(q, k, cos, sin, interleaved),
                           rope_reference(q, k, cos, sin, interleaved, upcast=False))


def _fuzz_backward(inputs: FuzzInputs) -> list[Comparison]:
    q, k, cos, sin, interleaved = _fuzz_inputs(inputs)
    upstream = [inputs.view(t.shape, t.dtype) for t in (q, k)]

    def ours(q, k):
        return rope(q, k, cos, sin, interleaved=interleaved)

    def reference(q, k, upcast):
        return rope_reference(q, k, cos, sin, interleaved, upcast)

    note = _fuzz_note(q, k, cos, sin, interleaved) + "".join(f", upstream {describe(u)}" for u in upstream)
    return compare_gradients(note, {"q": q, "k": k}, ours, reference, upstream)


ENTRY = two_pass_entry(
    "rope", ("rotary position embeddings of q and k in one launch (rotate-half or interleaved, partial); "
             "forward and backward"),
    inspect=(_inspect_fwd, _inspect_bwd), fuzz=((40, _fuzz_forward), (40, _fuzz_backward)),
    bench_cases=_bench_cases, peers=("eager", "torch.compile", "Liger"),
    sample=_sample, reference=rope_reference)
