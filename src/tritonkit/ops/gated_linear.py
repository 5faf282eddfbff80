"""`gated_linear`: the tail of a gated MLP, F.linear(act(gate) * up, weight, bias), without
keeping h = act(gate) * up for the backward.

Forward:   h  = act(gate) * up                 the gated forward kernel; freed after the product
           y  = F.linear(h, weight, bias)      cuBLAS, the very call an nn.Linear makes
Backward:  dh = dy @ weight                    cuBLAS
           dgate, dup, h = one launch of the gated backward kernel (STORE_H), h written over
                           dh once dh is read, with the forward's expression and so its bits
           dweight = dy^T @ h                  cuBLAS, as torch's Linear backward computes it
           dbias   = dy.sum(0)                 float32 accumulation, rounded once, as torch's
Each product is the call torch's autograd makes for nn.Linear (the weight's gradient in the
weight's layout), and h is bitwise what `tritonkit.swiglu` / `geglu` return, so the results
are the unfused `F.linear(swiglu(gate, up), weight, bias)`'s bits, forward and backward.

Unfused, `down_proj(swiglu(gate, up))` keeps gate, up and h (the product's input) from the
forward to the backward: three (tokens x I) tensors a layer. This op keeps gate and up only
(plus the weight and bias, which exist anyway), so a Llama MLP saves a third less: at 8192
tokens, I = 8192 in bf16, 128 MiB a layer. The price is the recomputation of h inside a
backward launch that reads gate and up anyway: one more store per element. Since h takes
dh's buffer, the backward's transient peak (dh, dgate, dup) is the unfused one's too.

Gradients not asked for are not computed (the want_ flags of the backward op): a frozen
weight (LoRA, frozen layers) skips the h store and the dweight product; inputs that need no
gradient skip dh and the kernel (dweight then takes h from the forward kernel).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from .._autocast import autocast_inputs
from .._checks import check_choice, check_meta, check_tensor, dtype_name, meta_of
from .._op import Op, not_computed
from .._sharding import Partial, Replicate, Shard, maybe, nonempty, only_shard
from .gated import _ACTIVATIONS, _check_tensors, _gated_bwd_checked, _out_shape, _promoted, gated_fwd
from .gated import _validate as _validate_gate_up

_REFERENCE_ACTIVATIONS = {
    "silu": F.silu,
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"),
    "gelu": F.gelu,
}


def gated_linear_reference(gate: torch.Tensor, up: torch.Tensor | None, weight: torch.Tensor,
                           bias: torch.Tensor | None = None, activation: str = "silu",
                           upcast: bool = True) -> torch.Tensor:
    """F.linear(act(gate) * up, weight, bias) in float64 (upcast=True) or in torch's own
    arithmetic in the inputs' dtype (the eager peer); up None: gate holds [gate, up]."""
    if upcast:
        weight = weight.double()
        bias = None if bias is None else bias.double()
    return F.linear(gated_hidden_reference(gate, up, activation, upcast), weight, bias)


def gated_hidden_reference(gate: torch.Tensor, up: torch.Tensor | None, activation: str = "silu",
                           upcast: bool = True) -> torch.Tensor:
    """h = act(gate) * up, the input of gated_linear's product, as `gated_linear_reference`
    computes it (float64 with upcast; up None: gate holds [gate, up])."""
    gate, up = gate.chunk(2, dim=-1) if up is None else (gate, up)
    if upcast:
        gate, up = gate.double(), up.double()
    return _REFERENCE_ACTIVATIONS[activation](gate) * up


def _activation_code(activation: str) -> int:
    return _ACTIVATIONS[check_choice("activation", activation, _ACTIVATIONS)]


def _validate(gate: tuple, up: tuple | None, weight: tuple, bias: tuple | None) -> tuple[int, ...]:
    """h's shape (..., I) for these tensors (their meta_of), or the error naming the argument."""
    _validate_gate_up(gate, up)
    shape = _out_shape(gate[0], packed=up is None)
    if len(shape) == 0:
        raise ValueError("gate is 0-d; gated_linear needs a last dim to contract with weight")
    check_meta("weight", weight[2], weight[3])
    if weight[2] != gate[2]:
        raise TypeError(f"weight has dtype {dtype_name(weight[2])} but gate has {dtype_name(gate[2])}; they must match")
    if weight[3] != gate[3]:
        raise ValueError(f"weight is on {weight[3]} but gate is on {gate[3]}")
    if len(weight[0]) != 2 or weight[0][1] != shape[-1]:
        raise ValueError(f"weight has shape {tuple(weight[0])}; expected (out_features, {shape[-1]}) for h = "
                         f"act(gate) * up of shape {shape}")
    if bias is not None:
        check_meta("bias", bias[2], bias[3])
        if bias[2] != gate[2]:
            raise TypeError(f"bias has dtype {dtype_name(bias[2])} but gate has {dtype_name(gate[2])}; they must match")
        if bias[3] != gate[3]:
            raise ValueError(f"bias is on {bias[3]} but gate is on {gate[3]}")
        if tuple(bias[0]) != (weight[0][0],):
            raise ValueError(f"bias has shape {tuple(bias[0])}; expected ({weight[0][0]},)")
    return shape


# The launchers' validation: metadata validated once is not validated again.
_checked = functools.lru_cache(maxsize=1024)(_validate)


def _check(gate, up, weight, bias, validate=_checked) -> tuple[int, ...]:
    """h's shape, after the checks of every argument."""
    _check_tensors(gate, up)
    check_tensor("weight", weight)
    if bias is not None:
        check_tensor("bias", bias)
    return validate(meta_of(gate), None if up is None else meta_of(up), meta_of(weight),
                    None if bias is None else meta_of(bias))


def gated_linear_fwd(gate: torch.Tensor, up: torch.Tensor | None, weight: torch.Tensor,
                     bias: torch.Tensor | None, activation: str) -> torch.Tensor:
    """Launcher for the forward pass: F.linear(act(gate) * up, weight, bias), (..., out) in
    gate's dtype, contiguous; h is made and dropped here."""
    _check(gate, up, weight, bias)
    return F.linear(gated_fwd(gate, up, _activation_code(activation)), weight, bias)


def gated_linear_bwd(grad_out: torch.Tensor, gate: torch.Tensor, up: torch.Tensor | None, weight: torch.Tensor,
                     bias: torch.Tensor | None, activation: str, want_gate_up: bool = True, want_weight: bool = True,
                     want_bias: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launcher for the backward pass: (dgate, dup, dweight, dbias) for the upstream gradient
    grad_out (..., out). A gradient not wanted (or dup for a packed gate, dbias without bias)
    is an empty placeholder. dgate (dup) have gate's (up's) shape, contiguous; packed, dgate
    is the one (..., 2I) gradient."""
    shape = _check(gate, up, weight, bias)
    check_tensor("grad_out", grad_out)
    if grad_out.dtype != gate.dtype:
        raise TypeError(f"grad_out has dtype {dtype_name(grad_out.dtype)} but gate has {dtype_name(gate.dtype)}")
    if grad_out.device != gate.device:
        raise ValueError(f"grad_out is on {grad_out.device} but gate is on {gate.device}")
    if grad_out.shape != (*shape[:-1], weight.shape[0]):
        raise ValueError(f"grad_out has shape {tuple(grad_out.shape)} but the output has "
                         f"{(*shape[:-1], weight.shape[0])}")
    return _gated_linear_bwd(grad_out, gate, up, weight, bias, _activation_code(activation), want_gate_up,
                             want_weight, want_bias)


def _row_major(weight: torch.Tensor) -> bool:
    """Whether torch's mm backward gives this weight's gradient as dy^T h (row-major), rather
    than as (h^T dy)^T."""
    return weight.stride(1) == 1 and weight.stride(0) == weight.shape[1]


def _gated_linear_bwd(grad_out, gate, up, weight, bias, code: int, want_gate_up: bool, want_weight: bool,
                      want_bias: bool):
    """gated_linear_bwd without validation, for the eager backward: the saved tensors passed
    the forward's checks, and autograd hands a gradient of the output's shape and dtype."""
    n_out, width = weight.shape
    h_shape = (*grad_out.shape[:-1], width)
    tokens = math.prod(h_shape[:-1])
    dy = grad_out.reshape(tokens, n_out)
    dgate = dup = dweight = dbias = None
    if want_gate_up:
        dh = torch.mm(dy, weight).view(h_shape)
        # h written over dh (the kernel loads each element of dh before it stores h there).
        dgate, *rest = _gated_bwd_checked(dh, gate, up, code, h=dh if want_weight else None)
        dup = rest[0] if rest else None
        h = dh
    elif want_weight:
        h = gated_fwd(gate, up, code)
    if want_weight:
        # torch's mm backward for the weight: dy^T h for a row-major weight, else (h^T dy)^T,
        # the gradient in the weight's layout either way (and torch's bits).
        h = h.view(tokens, width)
        dweight = torch.mm(dy.t(), h) if _row_major(weight) else torch.mm(h.t(), dy).t()
    if want_bias and bias is not None:
        dbias = dy.sum(0)
    return tuple(not_computed(gate) if g is None else g for g in (dgate, dup, dweight, dbias))


def _fwd_fake(gate, up, weight, bias, activation):
    return gate.new_empty((*gate.shape[:-1], weight.shape[0]))


def _bwd_fake(grad_out, gate, up, weight, bias, activation, want_gate_up, want_weight, want_bias):
    return (gate.new_empty(gate.shape) if want_gate_up else not_computed(gate),
            up.new_empty(up.shape) if want_gate_up and up is not None else not_computed(gate),
            (weight.new_empty(weight.shape) if _row_major(weight) else weight.new_empty(weight.shape[::-1]).t())
            if want_weight else not_computed(gate),
            bias.new_empty(bias.shape) if want_bias and bias is not None else not_computed(gate))


def _setup_context(ctx, inputs, output):
    gate, up, weight, bias, activation = inputs
    ctx.save_for_backward(gate, up, weight, bias)  # not h: the backward recomputes it
    ctx.activation = activation


def _backward(bwd, ctx, grad_out):
    gate, up, weight, bias = ctx.saved_tensors
    want = ctx.needs_input_grad
    dgate, dup, dweight, dbias = bwd(grad_out, gate, up, weight, bias, ctx.activation, want[0] or want[1],
                                     want[2], want[3] and bias is not None)
    return (dgate if want[0] else None, dup if want[1] and up is not None else None,
            dweight if want[2] else None, dbias if want[3] and bias is not None else None, None)


def _op_check(gate, up, weight, bias, activation):
    # Uncached while torch.compile traces (dynamo would trace through the cache).
    _check(gate, up, weight, bias, _validate)
    _activation_code(activation)
    return gate, up, weight, bias, activation


def _sharding(op: str, gate, up, weight, bias, wants: tuple | None):
    """DTensor may shard the tokens (any dim of gate but the last: weight and bias replicated,
    the output sharded alike and the weight's gradients Partial), or the intermediate dim
    (gate's and up's last, weight's dim 1: a row-parallel down projection, the output then
    Partial, so without a bias, which each rank would add). The output features (weight's
    dim 0) stay whole. For the forward (wants None: one output) or the backward (grad_out
    first, the four gradients' want_ flags given; an unwanted gradient is a (0,) placeholder)."""
    last = gate.ndim - 1
    split = up is not None and bias is None  # the intermediate dim may be sharded
    why = ("gated_linear runs locally on shards of the tokens (any dim of gate but its last) or, for separate "
           "gate and up without a bias, of the intermediate dim (gate's and up's last, weight's dim 1)")
    only_shard(op, "gate", gate, range(gate.ndim if split else last), why)
    if up is not None:
        only_shard(op, "up", up, range(gate.ndim if split else last), why)
    only_shard(op, "weight", weight, (1,) if split else (), why)
    if bias is not None:
        only_shard(op, "bias", bias, (), why)

    def strategy(rows, grads, dy, w):
        """(outputs, inputs) for gate and up placed as `rows`, the weight as `w`, grad_out as `dy`."""
        inputs = [rows, maybe(up, rows), w, maybe(bias, Replicate()), None]
        if wants is None:
            return [grads[0]], inputs
        present = (wants[0], wants[0] and up is not None, wants[1], wants[2] and bias is not None)
        return [nonempty(p, g) for p, g in zip(present, grads)], [dy, *inputs, None, None, None]

    strategies = [strategy(Replicate(), [Replicate()] * 4, Replicate(), Replicate())]
    for d in range(last):
        sharded = Shard(d)
        grads = [sharded] * 2 + [Partial()] * 2 if wants is not None else [sharded]
        strategies.append(strategy(sharded, grads, sharded, Replicate()))
    if split:
        grads = [Shard(last), Shard(last), Shard(1), Replicate()] if wants is not None else [Partial()]
        strategies.append(strategy(Shard(last), grads, Replicate(), Shard(1)))
    return strategies


def _fwd_sharding(gate, up, weight, bias, activation):
    return _sharding("gated_linear", gate, up, weight, bias, None)


def _bwd_sharding(grad_out, gate, up, weight, bias, activation, want_gate_up, want_weight, want_bias):
    return _sharding("gated_linear backward", gate, up, weight, bias, (want_gate_up, want_weight, want_bias))


# The want_ flags: which gradients autograd will ask for (named apart from the gradients).
_GATED_LINEAR = Op(
    "gated_linear", forward=gated_linear_fwd,
    forward_schema="(Tensor gate, Tensor? up, Tensor weight, Tensor? bias, str activation) -> Tensor",
    forward_fake=_fwd_fake, setup_context=_setup_context, backward=_backward,
    backward_launcher=gated_linear_bwd,
    backward_schema=("(Tensor grad_out, Tensor gate, Tensor? up, Tensor weight, Tensor? bias, str activation, "
                     "bool want_gate_up, bool want_weight, bool want_bias) -> (Tensor, Tensor, Tensor, Tensor)"),
    backward_fake=_bwd_fake, check=_op_check,
    eager_backward_launcher=lambda grad_out, gate, up, weight, bias, activation, *wants: _gated_linear_bwd(
        grad_out, gate, up, weight, bias, _ACTIVATIONS[activation], *wants),
    forward_sharding=_fwd_sharding, backward_sharding=_bwd_sharding)


def gated_linear(gate: torch.Tensor, up: torch.Tensor | None, weight: torch.Tensor, bias: torch.Tensor | None = None,
                 *, activation: str = "silu") -> torch.Tensor:
    """``F.linear(act(gate) * up, weight, bias)``, a gated MLP's activation and down
    projection, differentiable in gate, up, weight and bias, that keeps gate and up for the
    backward but not h = act(gate) * up (recomputed there, bitwise as the forward made it).

    activation: "silu" (SwiGLU), "gelu_tanh" (GeGLU, Gemma's ``gelu_pytorch_tanh``) or "gelu"
    (exact erf). gate, up: float32, float16 or bfloat16 tensors of one shape (..., I), any
    strides and view offset, of two dtypes promoted as ``swiglu`` promotes them; or
    ``up=None`` and gate of shape (..., 2 * I) holding [gate, up] along its last dim (a fused
    gate-up projection, as Phi-3's), whose gradient is then one (..., 2 * I) tensor. weight:
    (out, I) and bias: (out,) or None, in gate's (the promoted) dtype, as F.linear needs them,
    and on its device, any strides. Returns a contiguous (..., out) tensor in gate's dtype:
    h is act(gate) * up computed in float32 and rounded once (as ``tritonkit.swiglu`` /
    ``geglu``), then the product is torch's ``F.linear``.

    Saved for the backward: gate, up, weight, bias. The backward computes only the gradients
    autograd asks for (a frozen weight: no h and no weight product).

    Raises TypeError for unsupported or mismatched dtypes (naming the argument), ValueError for
    mismatched shapes or devices, a 0-d gate, an odd packed last dim, or another activation
    (TypeError for one that is not a string).
    Inside a torch.autocast region gate, up, weight and bias are cast to its dtype first, as
    F.linear's input and weight are.
    """
    check_choice("activation", activation, _ACTIVATIONS)
    gate, up, weight, bias = autocast_inputs(gate, up, weight, bias)
    gate, up = _promoted(gate, up)
    return _GATED_LINEAR(gate, up, weight, bias, activation)
