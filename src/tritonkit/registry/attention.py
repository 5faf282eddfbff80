"""Catalogue entry for `tritonkit.attention`: inspector passes, benchmark cases, sample and fuzz."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ..ops.attention import attention, attention_bwd, attention_fwd, attention_reference
from ..ops.attention.checks import ALIGNMENTS
from . import BenchCase, InspectRequest, OpEntry
from ._accuracy import Comparison, relative_error
from ._inputs import peer_compile
from ._fuzz import HALVES, FuzzCase, FuzzInputs, describe

NAIVE_LIMIT_BYTES = 16 << 30  # naive eager runs only where B*H*Nq*Nk fp32 scores fit in this


def packed_qkv(batch: int, heads: int, seq: int, head_dim: int, dtype: torch.dtype, device: torch.device,
               offset: int = 0, fill: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v (B, H, N, D): views into one packed (B, N, 3, H, D) buffer that starts `offset`
    elements into its storage, as a model's qkv projection lays them out. fill=False leaves
    the memory unset (for the inspector, which compiles but never runs the kernels)."""
    numel = batch * seq * 3 * heads * head_dim
    make = torch.randn if fill else torch.empty
    storage = make(numel + offset, dtype=dtype, device=device)
    packed = storage[offset:].view(batch, seq, 3, heads, head_dim)
    return tuple(packed[:, :, i].transpose(1, 2) for i in range(3))


def _inspect_inputs(request: InspectRequest, device: torch.device):
    """q, k, v of --shape B,H,N,D (or B,H,N,D,Dv: v of its own head dim, from a projection of
    its own)."""
    B, H, N, D, *Dv = request.shape or (4, 32, 4096, 128)
    dtype = request.dtype or torch.bfloat16
    q, k, v = packed_qkv(B, H, N, D, dtype, device, request.offset, fill=False)
    if Dv and Dv[0] != D:
        v = packed_qkv(B, H, N, Dv[0], dtype, device, request.offset, fill=False)[2]
    return q, k, v


# The inspector's passes: the plain mask, and the variants that compile other kernels (a
# sliding window of 1024, causal with --causal, else 1024 on both sides; a softcap of 50).
_VARIANTS = {"": {}, "_window": {"window": 1024}, "_softcap": {"softcap": 50.0}}


def _variant_args(request: InspectRequest, variant: dict) -> tuple:
    """(causal, scale, window_left, window_right, softcap) of a variant, as the launchers take them."""
    w = variant.get("window", -1)
    return request.causal, None, w, -1 if request.causal else w, variant.get("softcap", 0.0)


_GLUON = {None: None, "gluon": True, "triton": False}   # InspectRequest.path -> the launchers' gluon=


def _inspect_fwd(request: InspectRequest, device: torch.device, variant: dict | None = None) -> None:
    q, k, v = _inspect_inputs(request, device)
    attention_fwd(q, k, v, *_variant_args(request, variant or {}), tma=request.tma, gluon=_GLUON[request.path])


def _inspect_bwd(request: InspectRequest, device: torch.device, variant: dict | None = None) -> None:
    q, k, v = _inspect_inputs(request, device)
    B, H, N, _ = q.shape
    o, do = (torch.empty((B, H, N, v.shape[-1]), dtype=q.dtype, device=device) for _ in range(2))
    lse = torch.empty((B, H, N), dtype=torch.float32, device=device)
    attention_bwd(do, q, k, v, o, lse, *_variant_args(request, variant or {}), tma=request.tma,
                  gluon=_GLUON[request.path])


def _passes() -> dict:
    passes = {}
    for suffix, variant in _VARIANTS.items():
        passes["fwd" + suffix] = functools.partial(_inspect_fwd, variant=variant)
        passes["bwd" + suffix] = functools.partial(_inspect_bwd, variant=variant)
    return passes


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """The eager baseline: matmul, (mask,) softmax, matmul, with the whole score matrix in memory."""
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        seen = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~seen, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def _sdpa(backend: Any) -> Callable:
    from torch.nn.attention import sdpa_kernel

    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])
    return run


def flex_peer(mask_mod: Callable | None, nq: int, nk: int, device: torch.device,
              score_mod: Callable | None = None) -> Callable | None:
    """FlexAttention with a block mask built once from mask_mod (None: no mask) and the given
    score_mod, compiled on first use (outside the timed calls): f(q, k, v, causal_) -> out."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None
    mask = None if mask_mod is None else create_block_mask(mask_mod, None, None, nq, nk, device=device)
    compiled = peer_compile(flex_attention)  # past dynamo's recompile limit too: every case is a new shape

    def run(q, k, v, causal_):
        return compiled(q, k, v, block_mask=mask, score_mod=score_mod, enable_gqa=q.shape[1] != k.shape[1])
    return run


def _causal_mask(b, h, qi, ki):
    return qi >= ki


def _flex(causal: bool, nq: int, nk: int, device: torch.device) -> Callable | None:
    return flex_peer(_causal_mask if causal else None, nq, nk, device)


def _providers(device: torch.device, causal: bool, nq: int, nk: int, scores_bytes: int,
               with_flex: bool = True, beyond_flash: bool = False) -> dict[str, Callable]:
    """name -> f(q, k, v, causal) for every provider that can run here. FlexAttention compiles
    anew for every shape (20-40 s each, forward and backward), so the catalogue asks for it
    only on the headline cases that the issues' bars name. beyond_flash: head dims SDPA's
    FlashAttention does not take (above 256, or v's unlike q's), where its memory-efficient and
    math paths are the peers (a peer that refuses a case is reported as such by the runner)."""
    found: dict[str, Callable] = {"tritonkit": lambda q, k, v, c: attention(q, k, v, causal=c)}
    if scores_bytes <= NAIVE_LIMIT_BYTES:
        found["naive eager"] = naive_attention
    from torch.nn.attention import SDPBackend
    if device.type == "cuda":
        if torch.backends.cuda.flash_sdp_enabled():
            found["SDPA FA2"] = _sdpa(SDPBackend.FLASH_ATTENTION)
        if hasattr(SDPBackend, "CUDNN_ATTENTION") and torch.backends.cuda.cudnn_sdp_enabled():
            found["SDPA cuDNN"] = _sdpa(SDPBackend.CUDNN_ATTENTION)
        if beyond_flash:
            found["SDPA mem-efficient"] = _sdpa(SDPBackend.EFFICIENT_ATTENTION)
            found["SDPA math"] = _sdpa(SDPBackend.MATH)
        flex = _flex(causal, nq, nk, device) if with_flex else None
        if flex is not None:
            found["FlexAttention"] = flex
    else:
        found["SDPA math"] = _sdpa(SDPBackend.MATH)
    return found


def pair_flops(head_dim: int, v_head_dim: int, backward: bool) -> int:
    """Flops a visible (query, key) pair costs: 2 D for its score and 2 Dv for its share of
    P V; the backward recomputes the score and forms dP (2 Dv), dV (2 Dv), dK and dQ (2 D each)."""
    return 6 * head_dim + 4 * v_head_dim if backward else 2 * (head_dim + v_head_dim)


def _case(batch: int, heads: int, kv_heads: int, seq: int, head_dim: int, causal: bool, backward: bool,
          dtype: torch.dtype = torch.bfloat16, seed_table: bool = False, v_head_dim: int | None = None) -> BenchCase:
    """Attention at (batch, heads over kv_heads, seq, head_dim) against SDPA's backends,
    FlexAttention (on the headline cases) and naive eager; v_head_dim: v's own head dim (None:
    head_dim). Work: the visible pairs times `pair_flops`."""
    element = dtype.itemsize
    dv = head_dim if v_head_dim is None else v_head_dim
    flops = batch * heads * seq * seq * (0.5 if causal else 1.0) * pair_flops(head_dim, dv, backward)
    pass_name = "bwd" if backward else "fwd"

    def setup(device: torch.device):
        q = torch.randn(batch, heads, seq, head_dim, dtype=dtype, device=device)
        k = torch.randn(batch, kv_heads, seq, head_dim, dtype=dtype, device=device)
        v = torch.randn(batch, kv_heads, seq, dv, dtype=dtype, device=device)
        providers = _providers(device, causal, seq, seq, batch * heads * seq * seq * 4,
                               with_flex=head_dim == 128 and kv_heads == heads and seq in (4096, 16384),
                               beyond_flash=max(head_dim, dv) > 256 or dv != head_dim)
        return _timed(providers, (q, k, v), causal, backward)

    gqa = f" GQA{heads}/{kv_heads}" if kv_heads != heads else ""
    dims = f"D={head_dim}" if dv == head_dim else f"D={head_dim}/{dv}"
    label = f"{pass_name} N={seq} {dims}{' causal' if causal else ''}{gqa}"
    return BenchCase(
        label=label, group=f"attention {pass_name} {dims}{' causal' if causal else ''}{gqa}",
        unit="TFLOP/s", work=flops, size=seq, setup=setup, seed_table=seed_table,
        bytes_in_flight=(4 if backward else 2) * batch * heads * seq * (head_dim + dv) * element,
        graphed=not backward,
    )


def _masked_case(batch: int, heads: int, kv_heads: int, seq: int, head_dim: int, backward: bool,
                 window: int | None = None, softcap: float | None = None) -> BenchCase:
    """Causal attention with a sliding window (keys i - window .. i) or a softcap, against
    FlexAttention with the same block mask / score_mod. Work: the (query, key) pairs the mask
    keeps, 4 D flops each (times 2.5 for the backward)."""
    dtype = torch.bfloat16
    pairs = seq * (seq + 1) // 2 if window is None else sum(min(i, window) + 1 for i in range(seq))
    flops = 4 * batch * heads * head_dim * pairs * (2.5 if backward else 1.0)
    pass_name = "bwd" if backward else "fwd"
    kwargs = dict(causal=True, window=None if window is None else (window, 0), softcap=softcap)

    def setup(device: torch.device):
        q = torch.randn(batch, heads, seq, head_dim, dtype=dtype, device=device)
        k, v = (torch.randn(batch, kv_heads, seq, head_dim, dtype=dtype, device=device) for _ in range(2))
        providers = {"tritonkit": lambda q, k, v, c: attention(q, k, v, **kwargs)}
        if device.type == "cuda":
            if window is None:
                mask_mod = _causal_mask
            else:
                def mask_mod(b, h, qi, ki):
                    return (qi >= ki) & (qi - ki <= window)
            score_mod = None
            if softcap is not None:
                def score_mod(score, b, h, qi, ki):
                    return softcap * torch.tanh(score / softcap)
            flex = flex_peer(mask_mod, seq, seq, device, score_mod)
            if flex is not None:
                providers["FlexAttention"] = flex
        return _timed(providers, (q, k, v), True, backward)

    what = f"window {window}" if window is not None else f"softcap {softcap:g}"
    return BenchCase(
        label=f"{pass_name} N={seq} D={head_dim} causal {what} GQA{heads}/{kv_heads}",
        group=f"attention {pass_name} D={head_dim} causal {what.split()[0]}",
        unit="TFLOP/s", work=flops, size=seq, setup=setup,
        bytes_in_flight=(8 if backward else 4) * batch * heads * seq * head_dim * dtype.itemsize,
        graphed=not backward)


def _timed(providers: dict, inputs: tuple, causal: bool, backward: bool) -> dict:
    """{name: zero-argument callable}: the forward of each provider, or the backward alone:
    each provider's graph built once, then autograd.grad through it timed (floating-point
    inputs are the leaves; others, such as cu_seqlens, pass as they are)."""
    if not backward:
        return {name: (lambda f=f: f(*inputs, causal)) for name, f in providers.items()}
    do = None
    timed = {}
    for name, f in providers.items():
        leaves = [t.detach().requires_grad_() if t.is_floating_point() else t for t in inputs]
        out = f(*leaves, causal)
        do = torch.randn_like(out) if do is None else do
        grads_of = [t for t in leaves if t.requires_grad]
        timed[name] = (lambda out=out, grads_of=grads_of: torch.autograd.grad(out, grads_of, do, retain_graph=True))
    return timed


def _bench_cases(on_gpu: bool) -> list[BenchCase]:
    if not on_gpu:
        return [_case(1, 2, 2, 64, 32, False, False, seed_table=True), _case(1, 2, 2, 64, 32, True, False),
                _case(1, 2, 2, 64, 32, False, True), _case(1, 2, 2, 64, 32, True, True),
                _masked_case(1, 2, 1, 64, 32, False, window=16), _masked_case(1, 2, 1, 64, 32, True, softcap=5.0),
                _case(1, 2, 1, 64, 48, True, True, v_head_dim=32)]
    cases = []
    for backward in (False, True):
        for causal in (False, True):
            cases += [_case(4, 32, 32, n, 128, causal, backward,
                            seed_table=(n, causal, backward) == (4096, False, False))
                      for n in (1024, 2048, 4096, 8192, 16384)]
        # issue 16's head dims 64 (full and causal at both lengths) and 256, and GQA
        cases += [_case(4, 32, 32, n, 64, causal, backward) for n in (4096, 16384) for causal in (False, True)]
        cases += [_case(4, 16, 16, 4096, 256, False, backward), _case(4, 32, 8, 4096, 128, False, backward)]
        # issue 15's bars: a sliding window of 1024 at three lengths (time linear in N), and a
        # softcap beside the same causal case without one
        cases += [_masked_case(1, 32, 8, n, 128, backward, window=1024) for n in (8192, 16384, 32768)]
        cases += [_case(4, 32, 8, 4096, 128, True, backward), _masked_case(4, 32, 8, 4096, 128, backward, softcap=50.0)]
        # issue 16's short sequences: B=8, H=16 (the only cases at N=1024 with D=64)
        cases += [_case(8, 16, 16, 1024, 64, causal, backward) for causal in (False, True)]
        # issue 48's head dims: Gemma 4's global layers (512) at the bar's shape, and DeepSeek-V3's
        # MLA (192 for q, k and 128 for v) beside the D=128 case of the same shape (per FLOP)
        cases += [_case(2, 8, 4, 8192, 512, True, backward),
                  _case(4, 32, 32, 4096, 192, True, backward, v_head_dim=128)]
    return cases


def _sample(device: torch.device) -> tuple:
    # GQA (4 query heads over 2), Nq != Nk aligned bottom-right, causal with a left window, a
    # softcap and learnable sinks, q a view of a packed (B, N, H, D) buffer. (ALiBi's slopes are
    # not differentiated, and every floating argument of a sample is: tests/test_attention_score.)
    q = torch.randn(1, 37, 4, 32, device=device, dtype=torch.float16).transpose(1, 2)
    k = torch.randn(1, 2, 45, 32, device=device, dtype=torch.float16)
    v = torch.randn(1, 2, 45, 32, device=device, dtype=torch.float16)
    sinks = torch.randn(4, device=device)
    # causal, scale, window (20, -1), softcap 30, bottom-right, no ALiBi, sinks
    return q, k, v, True, 32 ** -0.5, 20, -1, 30.0, True, None, sinks


def _reference(q, k, v, causal, scale, window_left=-1, window_right=-1, softcap=0.0, bottom_right=False,
               alibi_slopes=None, sinks=None, upcast=True):
    """`attention_reference` taking the Op's positional arguments; (out, lse) as the Op returns."""
    return attention_reference(q, k, v, causal, scale, upcast, window=(window_left, window_right),
                               softcap=softcap or None, causal_alignment=ALIGNMENTS[bottom_right],
                               alibi_slopes=alibi_slopes, sinks=sinks, return_lse=True)


def fuzz_head_dims(draw, on_gpu: bool) -> tuple[int, int]:
    """q's and k's head dim, and v's: mostly equal, the usual ones and odd ones (padded in the
    kernels), on the GPU also 512 and DeepSeek-V3's 192 / 128."""
    head_dim = draw.choice((16, 24, 32, 40, 59, 64) + ((128, 256, 512, 192) if on_gpu else ()))
    if draw.boolean() or draw.boolean():
        return head_dim, head_dim
    return head_dim, (128 if head_dim == 192 else draw.choice((8, 32, 45)))


def _fuzz_inputs(inputs: FuzzInputs):
    """q, k, v and an upstream gradient: GQA or not, Nq != Nk, each at its own layout."""
    draw = inputs.draw
    seq = (1, 2, 7, 16, 17, 31, 33, 64, 65) + ((127, 129, 1000) if inputs.on_gpu else ())
    batch = draw.integer(1, 2)
    kv_heads = draw.integer(1, 2)
    heads = kv_heads * draw.choice((1, 2))
    nq, nk = draw.choice(seq), draw.choice(seq)
    head_dim, v_dim = fuzz_head_dims(draw, inputs.on_gpu)
    dtype = draw.choice(HALVES)
    causal = draw.boolean()
    shapes = [(batch, heads, nq, head_dim), (batch, kv_heads, nk, head_dim), (batch, kv_heads, nk, v_dim),
              (batch, heads, nq, v_dim)]
    layouts = [inputs.layout(4) for _ in shapes]
    # the head dim stays innermost more often than not, as in real projections
    layouts = [layout if draw.boolean() else layout.innermost(3) for layout in layouts]
    q, k, v, grad = (inputs.view(shape, dtype, layout) for shape, layout in zip(shapes, layouts))
    return q, k, v, grad, causal


def _note(q, k, v, causal) -> str:
    return f"causal={causal} q {describe(q)} k {describe(k)} v {describe(v)}"


def _fuzz_forward(inputs: FuzzInputs) -> list[Comparison]:
    q, k, v, _, causal = _fuzz_inputs(inputs)
    out = attention(q, k, v, causal=causal)
    want = (*q.shape[:-1], v.shape[-1])
    assert out.dtype == q.dtype and out.shape == want, f"attention: {out.dtype} {tuple(out.shape)}"
    return [Comparison(f"attention: {_note(q, k, v, causal)}", out, attention_reference(q, k, v, causal),
                       attention_reference(q, k, v, causal, upcast=False))]


def flash_recipe_grads(reference: Callable, leaves: list, o: torch.Tensor, grad: torch.Tensor) -> tuple:
    """float64 gradients computed the way a flash backward computes them: delta = rowsum(dO * O)
    from the forward output O as stored (rounded to q's dtype). Their gap to the exact gradient is
    the algorithm's own error in that dtype, which SDPA's unfused math does not share; on tiny,
    nearly one-hot rows it can be several times torch's error (dP - delta cancels).

    reference(q, k, v) -> (out, lse) in float64, lse indexed as out's rows (out[..., 0]). The
    exact backward takes dS = P (dP - rowsum(dO * O_exact)); since d lse / dS = P, an upstream
    gradient of rowsum(dO * (O_exact - O)) on lse turns that delta into the stored one, masks,
    softcap, GQA and packed sequences included. Gradients the graph does not reach are zero."""
    wide = [t.detach().double().requires_grad_() for t in leaves]
    out, lse = reference(*wide)
    upstream = grad.detach().double()
    shift = (upstream * (out.detach() - o.detach().double())).sum(-1)
    return grads_or_zeros((out, lse), wide, (upstream, shift))


def grads_or_zeros(outputs, leaves, upstreams) -> tuple:
    """torch.autograd.grad of `outputs` for `upstreams`, with zeros for the leaves the graph does
    not reach (a reference whose queries all see no key never touches k and v)."""
    reached = [(out, up.to(out.dtype)) for out, up in zip(outputs, upstreams) if out.requires_grad]
    found = (torch.autograd.grad([out for out, _ in reached], leaves, [up for _, up in reached], allow_unused=True)
             if reached else [None] * len(leaves))
    return tuple(torch.zeros_like(t) if g is None else g for g, t in zip(found, leaves))


def _fuzz_backward(inputs: FuzzInputs) -> list[Comparison]:
    q, k, v, grad, causal = _fuzz_inputs(inputs)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = attention(*leaves, causal=causal)
    ours = torch.autograd.grad(out, leaves, grad)
    recipe = flash_recipe_grads(lambda *t: attention_reference(*t, causal, return_lse=True), [q, k, v], out, grad)
    same = [t.detach().requires_grad_() for t in (q, k, v)]
    theirs = torch.autograd.grad(attention_reference(*same, causal, upcast=False), same, grad)
    wide = [t.detach().double().requires_grad_() for t in (q, k, v)]
    reference = torch.autograd.grad(attention_reference(*wide, causal, upcast=False), wide, grad.double())
    note = _note(q, k, v, causal)
    # The yardstick is the larger of torch's error and the flash recipe's own error.
    return [Comparison(f"attention {name}: {note}", a, ref,
                       max((b, c), key=lambda t: relative_error(t, ref)), gradient=True)
            for name, a, ref, b, c in zip(("dq", "dk", "dv"), ours, reference, theirs, recipe)]


ENTRY = OpEntry(
    name="attention",
    summary=("fused scaled-dot-product attention (FlashAttention-2 style): causal, sliding window, softcap, "
             "lse, GQA; forward and backward"),
    passes=_passes(),
    bench_cases=_bench_cases,
    peers=("naive eager", "SDPA FA2", "SDPA cuDNN", "FlexAttention", "SDPA mem-efficient", "SDPA math"),
    op="attention",
    sample=_sample,
    reference=_reference,
    fuzz=(FuzzCase("forward", 40, _fuzz_forward), FuzzCase("backward", 25, _fuzz_backward)),
    paths=("gluon", "triton"),
)
