"""Catalogue entry for `tritonkit.gated_linear`: inspector passes (the gated kernel as the op
launches it, the backward storing h over dh), benchmark cases at Llama-3-8B's MLP tail against
the unfused forms, with each provider's peak memory and what its forward keeps for the
backward; sample and fuzz."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..ops.gated import SILU, _gated_bwd_checked, swiglu, swiglu_reference
from ..ops.gated_linear import gated_hidden_reference, gated_linear, gated_linear_reference
from . import BenchCase, InspectRequest, two_pass_entry
from ._accuracy import Comparison, condition
from ._fuzz import FuzzInputs, compare_gradients, compare_outputs, describe
from ._inputs import peer_compile
from ._peers import liger
from .swiglu import _empty_view, _fuzz_inputs, inspect_passes

ACTIVATIONS = ("silu", "gelu_tanh", "gelu")


def _inspect_bwd(request: InspectRequest, device: torch.device) -> None:
    # The launch gated_linear's backward makes: dgate, dup, and h written over dh = dy @ W.
    shape = request.shape or (8192, 14336)
    dtype = request.dtype or torch.bfloat16
    gate, up, dh = (_empty_view(shape, dtype, device, request.offset) for _ in range(3))
    _gated_bwd_checked(dh, gate, up, SILU, h=dh)


def eager_tail(gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The MLP tail as eager torch runs it (HF's `down_proj(act_fn(gate_proj(x)) * up_proj(x))`)."""
    return F.linear(swiglu_reference(gate, up, upcast=False), weight)


def _providers() -> dict[str, Callable]:
    providers = {
        "tritonkit": gated_linear,
        "eager": eager_tail,
        # the unfused form tritonkit.transformers ran before: h saved by the product
        "swiglu+F.linear": lambda gate, up, weight: F.linear(swiglu(gate, up), weight),
        "torch.compile": peer_compile(eager_tail),
    }
    silu_mul = liger("ops.swiglu", "LigerSiLUMulFunction")
    if silu_mul is not None:
        providers["Liger"] = lambda gate, up, weight: F.linear(silu_mul.apply(gate, up), weight)
    return providers


def _case(tokens: int, width: int, out: int, backward: bool) -> BenchCase:
    """fwd+bwd (the gradients of gate, up and weight), or the forward alone with autograd
    recording, whose result (the output and its graph) is what a training step holds from the
    forward to the backward."""
    dtype = torch.bfloat16

    def setup(device: torch.device):
        gate, up = (torch.randn(tokens, width, device=device, dtype=dtype).requires_grad_() for _ in range(2))
        weight = (torch.randn(out, width, device=device, dtype=dtype) / width ** 0.5).requires_grad_()
        leaves = (gate, up, weight)
        grad = torch.randn(tokens, out, device=device, dtype=dtype)
        if backward:
            return {p: (lambda f=f: torch.autograd.grad(f(*leaves), leaves, grad)) for p, f in _providers().items()}
        return {p: (lambda f=f: f(*leaves)) for p, f in _providers().items()}

    pass_name = "fwd+bwd" if backward else "fwd"
    element = dtype.itemsize
    return BenchCase(
        label=f"{pass_name} {tokens}x{width}->{out} bf16", group=f"gated_linear {pass_name}", unit="TFLOP/s",
        # the products: y = h W^T, and backward dh = dy W, dW = dy^T h; 2*T*I*out flops each
        work=(3 if backward else 1) * 2 * tokens * width * out, size=tokens * width, setup=setup,
        # eager's backward holds gate, up, silu(gate), h, dh and three gradients of (T, I)
        bytes_in_flight=(8 * tokens * width + 2 * out * width + 2 * tokens * out) * element,
        memory=backward, held=not backward,
    )


def _bench_cases(on_gpu: bool) -> list[BenchCase]:
    tokens, width, out = (8192, 14336, 4096) if on_gpu else (64, 96, 48)  # Llama-3-8B's down_proj
    return [_case(tokens, width, out, backward=True), _case(tokens, width, out, backward=False)]


def _sample(device: torch.device) -> tuple:
    # gate at an odd element offset, up transposed, weight a transposed view, a bias, GELU tanh.
    gate = torch.randn(2 * 3 * 9 + 1, device=device, dtype=torch.float16)[1:].view(2, 3, 9)
    up = torch.randn(2, 9, 3, device=device, dtype=torch.float16).transpose(1, 2)
    weight = torch.randn(9, 5, device=device, dtype=torch.float16).t()
    return gate, up, weight, torch.randn(5, device=device, dtype=torch.float16), "gelu_tanh"


def _fuzz_draw(inputs: FuzzInputs):
    """gate and up (separate, or one packed tensor) as swiglu's fuzz draws them, a weight of an
    edge number of rows at its own layout, a bias or none, and an activation: (the tensors, ours
    and the reference bound to the activation, a description, the activation)."""
    tensors = _fuzz_inputs(inputs)
    gate = tensors["gate"]
    width = gate.shape[-1] // (1 if "up" in tensors else 2)
    out = inputs.draw.choice(inputs.edge)
    tensors["weight"] = inputs.view((out, width), gate.dtype, scale=1.0 / max(1, width) ** 0.5)
    if inputs.draw.boolean():
        tensors["bias"] = inputs.view((out,), gate.dtype)
    activation = inputs.draw.choice(ACTIVATIONS)

    def bind(f):
        return lambda gate, up=None, weight=None, bias=None, **upcast: f(gate, up, weight, bias,
                                                                          activation=activation, **upcast)

    note = " ".join([activation] + [f"{name} {describe(t)}" for name, t in tensors.items()])
    return tensors, bind(gated_linear), bind(gated_linear_reference), note, activation


def _fuzz_forward(inputs: FuzzInputs) -> list[Comparison]:
    tensors, ours, reference, note, activation = _fuzz_draw(inputs)
    out = ours(**tensors)
    assert out.dtype == tensors["gate"].dtype and out.is_contiguous(), f"out: {out.dtype} {out.stride()}"
    ref = reference(**tensors, upcast=True)
    (compared,) = compare_outputs(note, ("out",), out, ref, reference(**tensors, upcast=False))
    # h is cast to the inputs' dtype before its product with the weight, as torch's is: each of
    # its terms carries a rounding, which the product's cancellation amplifies.
    h = gated_hidden_reference(tensors["gate"], tensors.get("up"), activation)
    bias = tensors.get("bias")
    magnitudes = F.linear(h.abs(), tensors["weight"].double().abs(), None if bias is None else bias.double().abs())
    compared.roundings = 1.0 + condition(magnitudes, ref)
    return [compared]


def _fuzz_backward(inputs: FuzzInputs) -> list[Comparison]:
    tensors, ours, reference, note, _ = _fuzz_draw(inputs)
    gate = tensors["gate"]
    shape = (*gate.shape[:-1], tensors["weight"].shape[0])
    upstream = inputs.view(shape, gate.dtype)
    return compare_gradients(f"{note}, upstream {describe(upstream)}", tensors, ours, reference, [upstream])


ENTRY = two_pass_entry(
    "gated_linear",
    "F.linear(act(gate) * up, weight, bias) keeping gate and up, not h; h rewritten by the backward kernel",
    inspect=(inspect_passes(SILU)["fwd"], _inspect_bwd), fuzz=((30, _fuzz_forward), (30, _fuzz_backward)),
    bench_cases=_bench_cases, peers=("eager", "swiglu+F.linear", "torch.compile", "Liger"),
    sample=_sample, reference=gated_linear_reference)
