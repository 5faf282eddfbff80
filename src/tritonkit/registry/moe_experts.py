"""Catalogue entry for `tritonkit.moe_experts`: inspector passes (the forward's and the
backward's launches at Qwen3-30B-A3B's expert layer), benchmark cases at Qwen3-30B-A3B's and
gpt-oss-20b's expert layers against transformers' per-expert loop, the sort + two
`torch._grouped_mm` written in torch, transformers' own grouped_mm experts and Liger's fused
MoE where they run, with each provider's peak memory (fwd+bwd) and what its forward keeps for
the backward (the activation memory); sample and fuzz."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import torch

from ..ops.moe import moe_experts, moe_experts_bwd, moe_experts_fwd, moe_experts_reference
from ..ops.moe.reference import gated_reference
from . import BenchCase, InspectRequest, OpEntry
from ._accuracy import Comparison
from ._fuzz import FLOATS, FuzzCase, FuzzInputs, compare_gradients, compare_outputs, describe
from ._inputs import offset_view
from ._peers import liger

# (tokens, hidden, intermediate, experts, k, activation, interleaved, bias): the expert layers
# the bars are set at.
QWEN3_30B_A3B = (8192, 2048, 768, 128, 8, "silu", False, False)
GPT_OSS_20B = (8192, 2880, 2880, 32, 4, "gpt_oss", True, True)


def _inputs(tokens, hidden, width, experts, k, bias, dtype, device, offset=0, grad=False):
    """(hidden, indices, routing weights, gate_up, down, gate_up_bias, down_bias): k distinct
    experts a token at random (balanced on average, uneven in each draw), weights at the scale
    of an initialised layer."""
    x = offset_view((tokens, hidden), dtype, device, offset)
    indices = torch.rand(tokens, experts, device=device).topk(k, dim=1).indices
    weights = torch.randn(tokens, k, device=device).softmax(-1)
    gate_up = torch.randn(experts, 2 * width, hidden, device=device, dtype=dtype) / hidden ** 0.5
    down = torch.randn(experts, hidden, width, device=device, dtype=dtype) / width ** 0.5
    biases = [torch.randn(experts, n, device=device, dtype=dtype) * 0.1 for n in (2 * width, hidden)] if bias \
        else [None, None]
    tensors = [x, weights, gate_up, down, *biases]
    if grad:
        tensors = [None if t is None else t.detach().requires_grad_() for t in tensors]
    x, weights, gate_up, down, gate_up_bias, down_bias = tensors
    return x, indices, weights, gate_up, down, gate_up_bias, down_bias


def _inspect_args(request: InspectRequest, device: torch.device) -> tuple:
    tokens, hidden, width = request.shape or QWEN3_30B_A3B[:3]
    experts, k = QWEN3_30B_A3B[3:5]
    return (*_inputs(tokens, hidden, width, experts, k, False, request.dtype or torch.bfloat16, device,
                     request.offset), "silu", False, 1.702, 7.0)


def _inspect_fwd(request: InspectRequest, device: torch.device) -> None:
    moe_experts_fwd(*_inspect_args(request, device))


def _inspect_bwd(request: InspectRequest, device: torch.device) -> None:
    args = _inspect_args(request, device)
    out, *state = moe_experts_fwd(*args)   # recorded, not run: state of the right shapes
    moe_experts_bwd(torch.empty_like(out), *args[:7], *state, *args[7:])


def grouped_mm_experts(hidden, indices, weights, gate_up, down, gate_up_bias=None, down_bias=None,
                       activation="silu", interleaved=False, alpha=1.702, limit=7.0):
    """The experts as sort + two `torch._grouped_mm` in torch (transformers' grouped_mm path,
    with the gated activation, biases and routing weights as separate torch ops)."""
    tokens, k = indices.shape
    experts = gate_up.shape[0]
    sorted_experts, order = indices.reshape(-1).sort(stable=True)
    offsets = torch.searchsorted(sorted_experts, torch.arange(1, experts + 1, device=indices.device)).to(torch.int32)
    x = hidden[order // k]
    gu = torch._grouped_mm(x, gate_up.transpose(1, 2), offs=offsets)
    if gate_up_bias is not None:
        gu = gu + gate_up_bias[sorted_experts]
    y = torch._grouped_mm(gated_reference(gu, activation, interleaved, alpha, limit), down.transpose(1, 2),
                          offs=offsets)
    if down_bias is not None:
        y = y + down_bias[sorted_experts]
    y = y * weights.reshape(-1)[order, None].to(y.dtype)
    return y.new_zeros(y.shape).index_copy(0, order, y).view(tokens, k, -1).sum(1)


def _transformers_grouped_mm(activation: str, interleaved: bool, alpha: float, limit: float) -> Callable | None:
    """transformers' own grouped_mm experts forward, on a stand-in for its experts module."""
    try:
        from transformers.integrations.moe import grouped_mm_experts_forward
    except Exception:
        return None

    def call(hidden, indices, weights, gate_up, down, gate_up_bias=None, down_bias=None):
        module = SimpleNamespace(
            num_experts=gate_up.shape[0], has_gate=True, has_bias=gate_up_bias is not None, is_transposed=False,
            gate_up_proj=gate_up, down_proj=down, gate_up_proj_bias=gate_up_bias, down_proj_bias=down_bias,
            _apply_gate=lambda gu: gated_reference(gu, activation, interleaved, alpha, limit))
        return grouped_mm_experts_forward(module, hidden, indices, weights)
    return call


def _providers(activation: str, interleaved: bool) -> dict[str, Callable]:
    options = dict(activation=activation, interleaved=interleaved, alpha=1.702, limit=7.0)

    def bind(f):
        return lambda *tensors: f(*tensors, **options)

    providers = {"tritonkit": bind(moe_experts), "eager": bind(lambda *a, **o: moe_experts_reference(
        *a, **o, upcast=False))}
    if hasattr(torch, "_grouped_mm"):
        providers["grouped_mm"] = bind(grouped_mm_experts)
        hf = _transformers_grouped_mm(**options)
        if hf is not None:
            providers["transformers grouped_mm"] = hf
    fused = liger("ops.fused_moe", "LigerFusedMoEFunction")
    if fused is not None and activation == "silu" and not interleaved:
        providers["Liger"] = lambda x, idx, w, gate_up, down, *biases: fused.apply(x, gate_up, down, idx.int(), w)
    return providers


def _case(shape: tuple, backward: bool, name: str) -> BenchCase:
    """fwd+bwd (the gradients of hidden, routing weights, weights and biases), or the forward
    alone with autograd recording, whose result (the output and its graph) is what a training
    step holds from the forward to the backward: the activation memory."""
    tokens, hidden, width, experts, k, activation, interleaved, bias = shape
    dtype = torch.bfloat16

    def setup(device: torch.device):
        args = _inputs(tokens, hidden, width, experts, k, bias, dtype, device, grad=True)
        leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        upstream = torch.randn(tokens, hidden, device=device, dtype=dtype)
        providers = _providers(activation, interleaved)
        if backward:
            return {p: (lambda f=f: torch.autograd.grad(f(*args), leaves, upstream)) for p, f in providers.items()}
        return {p: (lambda f=f: f(*args)) for p, f in providers.items()}

    pass_name = "fwd+bwd" if backward else "fwd"
    slots, element = tokens * k, dtype.itemsize
    return BenchCase(
        label=f"{name} {pass_name} {tokens}x{hidden} E{experts} k{k} I{width}", group=f"moe_experts {pass_name}",
        unit="TFLOP/s",
        # the products: 2 S H 2I (gate/up) + 2 S I H (down) forward; twice that backward (the
        # input and weight gradients of each); S = tokens * k
        work=(3 if backward else 1) * 6 * slots * hidden * width, size=slots * hidden, setup=setup,
        # the torch peers' (S, H) and (S, 2I) intermediates, a few of each, and the weights twice
        bytes_in_flight=(6 * slots * (hidden + 2 * width) + 2 * 3 * experts * hidden * width) * element,
        memory=backward, held=not backward,
    )


def _bench_cases(on_gpu: bool) -> list[BenchCase]:
    if not on_gpu:
        tiny = (24, 32, 16, 4, 2, "silu", False, False)
        return [_case(tiny, True, "tiny"), _case(tiny, False, "tiny")]
    return [_case(shape, backward, name) for name, shape in (("Qwen3-30B-A3B", QWEN3_30B_A3B),
                                                                  ("gpt-oss-20b", GPT_OSS_20B))
            for backward in (True, False)]


def _sample(device: torch.device) -> tuple:
    # gpt-oss's layout and activation: weights passed transposed, interleaved gate/up, biases;
    # hidden at an odd element offset, the indices a transposed view with one slot routed
    # nowhere, the routing weights strided; 11 tokens x 3 of 4 experts.
    tokens, hidden, width, experts, k = 11, 12, 10, 4, 3
    dtype = torch.float16
    x = offset_view((tokens, hidden), dtype, device, 1)
    indices = torch.rand(tokens, experts, device=device).topk(k, dim=1).indices.t().contiguous().t()
    indices[2, 1] = experts
    weights = torch.rand(tokens, 2 * k, device=device)[:, ::2]
    gate_up = torch.randn(experts, hidden, 2 * width, device=device, dtype=dtype).transpose(1, 2) / 4
    down = torch.randn(experts, width, hidden, device=device, dtype=dtype).transpose(1, 2) / 4
    gate_up_bias = torch.randn(experts, 2 * width, device=device, dtype=dtype)
    down_bias = torch.randn(experts, hidden, device=device, dtype=dtype)
    return x, indices, weights, gate_up, down, gate_up_bias, down_bias, "gpt_oss", True, 1.702, 7.0


# Small edge sizes: the interpreter's row tiles are 16 rows and its column blocks 32.
_FUZZ_SIZES = (1, 2, 3, 7, 13, 16, 17, 33)
# gu, h, each weighted row and the token sum are each rounded to the inputs' dtype.
_ROUNDINGS = 4.0


def _fuzz_draw(inputs: FuzzInputs):
    """Tokens, sizes, experts (1 to 7) and k (1 to 4, repeats and unrouted slots allowed),
    every tensor at its own drawn layout, biases or none, an activation and a gate/up layout:
    (tensors by name, ours and the reference bound to the rest, a description)."""
    draw = inputs.draw
    tokens, hidden, width = (draw.choice(_FUZZ_SIZES) for _ in range(3))
    experts, k = draw.choice((1, 2, 3, 7)), draw.integer(1, 4)
    dtype = draw.choice(FLOATS)
    indices = torch.randint(-1, experts + 1, (tokens, k), device=inputs.device, generator=inputs.generator)
    indices[0, 0] = experts - 1  # one slot routed at least (else the reference's output is a constant)
    tensors = {"hidden": inputs.view((tokens, hidden), dtype),
               "routing_weights": inputs.view((tokens, k), torch.float32),
               "gate_up_weight": inputs.view((experts, 2 * width, hidden), dtype, scale=hidden ** -0.5),
               "down_weight": inputs.view((experts, hidden, width), dtype, scale=width ** -0.5)}
    if draw.boolean():
        tensors["gate_up_bias"] = inputs.view((experts, 2 * width), dtype)
        tensors["down_bias"] = inputs.view((experts, hidden), dtype)
    options = dict(activation=draw.choice(("silu", "gelu_tanh", "gelu", "gpt_oss")), interleaved=draw.boolean())

    def bind(f):
        def call(hidden, routing_weights, gate_up_weight, down_weight, gate_up_bias=None, down_bias=None, **upcast):
            return f(hidden, indices, routing_weights, gate_up_weight, down_weight, gate_up_bias, down_bias,
                     **options, **upcast)
        return call

    note = " ".join([f"{options}, indices {tuple(indices.shape)} of {experts}"]
                    + [f"{name} {describe(t)}" for name, t in tensors.items()])
    return tensors, bind(moe_experts), bind(moe_experts_reference), note


def _fuzz_forward(inputs: FuzzInputs) -> list[Comparison]:
    tensors, ours, reference, note = _fuzz_draw(inputs)
    compared = compare_outputs(note, ("out",), ours(**tensors), reference(**tensors, upcast=True),
                               reference(**tensors, upcast=False))
    for c in compared:
        c.roundings = _ROUNDINGS
    return compared


def _fuzz_backward(inputs: FuzzInputs) -> list[Comparison]:
    tensors, ours, reference, note = _fuzz_draw(inputs)
    upstream = inputs.view(tuple(tensors["hidden"].shape), tensors["hidden"].dtype)
    compared = compare_gradients(f"{note}, upstream {describe(upstream)}", tensors, ours, reference, [upstream])
    for c in compared:
        c.roundings = _ROUNDINGS
    return compared


ENTRY = OpEntry(
    name="moe_experts",
    summary="routed expert MLPs: tokens sorted by expert, grouped gate/up and down products with the gated "
            "activation and the routing weights in their epilogues, deterministic backward",
    passes={"fwd": _inspect_fwd, "bwd": _inspect_bwd},
    bench_cases=_bench_cases,
    peers=("grouped_mm", "transformers grouped_mm", "Liger", "eager"),
    op="moe_experts",
    sample=_sample,
    reference=moe_experts_reference,
    fuzz=(FuzzCase("forward", 10, _fuzz_forward), FuzzCase("backward", 8, _fuzz_backward)),
)
