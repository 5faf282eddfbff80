"""DTensor sharding rules for tritonkit's custom ops.

A DTensor reaching a tritonkit op takes the custom-op road (`tritonkit._op.tracing`), and
DTensor then asks for the op's sharding strategy: which placements of the inputs let every
rank run the kernel on its local shard and give which placements of the outputs. The rules
here answer for each `tritonkit::<name>_fwd` / `_bwd` op, one mesh dimension at a time
(DTensor expands them to every mesh dimension):

- add: elementwise; the output sharded along any dim, each input along the matching dim
  (or replicated where it broadcasts).
- softmax: any dim but the softmax dim (rows are independent).
- attention: batch (dim 0) or heads (dim 1, tensor parallelism: q by H, k and v by Hkv,
  both multiples of the ranks sharding them); never the sequence (that is ring attention,
  `tritonkit.distributed.ring_attention`) or the head dim.

Every rule also accepts everything replicated. An input sharded in a way the op cannot run
locally raises ValueError naming the op, the argument and the placement, rather than an
all-gather DTensor would insert silently. Partial inputs are reduced by DTensor first.

Registration happens once per op, through `torch.distributed.tensor.experimental.
register_sharding`, when `tritonkit.distributed` is imported or the first time a DTensor
reaches a tritonkit op; plain-tensor users never import torch.distributed.tensor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor.placement_types import Placement

from .._op import DECLARED

# Custom op name (without the namespace) -> its sharding function, as register_sharding takes.
_RULES: dict[str, Callable] = {}
_REGISTERED: set[str] = set()


def _rule(*op_names: str):
    def add(fn: Callable) -> Callable:
        for name in op_names:
            _RULES[name] = fn
        return fn
    return add


def register_shardings() -> None:
    """Register the sharding rule of every declared tritonkit custom op not yet registered
    (idempotent; new ops are picked up by the next call)."""
    if len(_REGISTERED) == len(_RULES):
        return
    from torch.distributed.tensor.experimental import register_sharding

    for name, fn in _RULES.items():
        if name in _REGISTERED or not hasattr(torch.ops.tritonkit, name):
            continue
        overload = getattr(torch.ops.tritonkit, name).default
        if isinstance(overload._schema.returns[0].type, torch.ListType):
            _register_list_output(overload, fn)
        else:
            register_sharding(overload)(fn)
        _REGISTERED.add(name)


def _register_list_output(overload, fn: Callable) -> None:
    """register_sharding for an op returning Tensor[]: register_sharding counts a list as
    one output, while DTensor wants a placement for each tensor in it; this counts the
    placements the rule gives. (The same calls register_sharding makes, with that count.)"""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._op_schema import OpStrategy, RuntimeSchemaInfo
    from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy

    def strategy(op_schema):
        specs = [a.strategies[0].output_spec if isinstance(a, OpStrategy) else a for a in op_schema.args_schema]
        shardings = fn(*specs)
        return expand_to_full_mesh_op_strategy(op_schema.get_mesh_from_args(), op_schema,
                                               [list(out) + list(inp) for out, inp in shardings],
                                               input_index=len(shardings[0][0]))

    static = next((i for i, a in enumerate(overload._schema.arguments)
                   if not isinstance(a.type, (torch.TensorType, torch.OptionalType))), 100)
    DTensor._op_dispatcher.sharding_propagator.register_op_strategy(
        overload, strategy, RuntimeSchemaInfo(static, needs_pytree=True))


def check_dtensor_args(custom_op, args: tuple) -> None:
    """Register the rules, then run `custom_op`'s rule on the call's DTensor arguments, so
    that an unsupported placement raises its ValueError itself (inside DTensor's sharding
    propagation the same error reaches the caller wrapped in a RuntimeError)."""
    from torch.distributed.tensor import DTensor

    register_shardings()
    rule = _RULES.get(custom_op._name.split("::")[-1])
    if rule is not None:
        rule(*(a._spec if isinstance(a, DTensor) else a for a in args))


def unregistered_ops() -> list[str]:
    """Custom ops of declared tritonkit ops that have no sharding rule (for tests)."""
    names = []
    for op in DECLARED.values():
        for custom in (op.forward_op, op.backward_op):
            if custom is not None:
                name = custom._name.split("::")[-1]
                if name not in _RULES:
                    names.append(name)
    return names


# ---------------------------------------------------------------------------------------
# Checks shared by the rules
# ---------------------------------------------------------------------------------------

def _shard_dims(spec) -> list[tuple[int, int]]:
    """(tensor dim, mesh dim) of each Shard placement of a DTensorSpec."""
    return [(p.dim % spec.ndim, mesh_dim) for mesh_dim, p in enumerate(spec.placements) if p.is_shard()]


def _refuse(op: str, name: str, spec, placement_dim: int, why: str) -> None:
    raise ValueError(f"tritonkit {op}: {name} is sharded along dim {placement_dim} (Shard({placement_dim})) of "
                     f"shape {tuple(spec.shape)}; {why}")


def _only_shard(op: str, name: str, spec, allowed: Sequence[int], why: str) -> None:
    """Refuse Shard placements of `spec` along dims outside `allowed`."""
    for dim, _ in _shard_dims(spec):
        if dim not in allowed:
            _refuse(op, name, spec, dim, why)


def _even(op: str, name: str, spec, dim: int, what: str) -> None:
    """Refuse a shard along `dim` that does not split it evenly over its mesh dims."""
    ranks = 1
    for d, mesh_dim in _shard_dims(spec):
        if d == dim:
            ranks *= spec.mesh.size(mesh_dim)
    if spec.shape[dim] % ranks:
        raise ValueError(f"tritonkit {op}: {name} has {spec.shape[dim]} {what}, sharded over {ranks} ranks; "
                         f"tritonkit needs a multiple of the ranks sharding them")


def _empty(spec) -> bool:
    return math.prod(spec.shape) == 0


def _same(placement: Placement, count: int) -> list[Placement]:
    return [placement] * count


# ---------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------

@_rule("add")
def _add_sharding(x, y):
    out_ndim = max(x.ndim, y.ndim)
    out_shape = torch.broadcast_shapes(x.shape, y.shape)
    strategies = [([Replicate()], [Replicate(), Replicate()])]
    for d in range(out_ndim):
        inputs = []
        for t in (x, y):
            own = d - (out_ndim - t.ndim)
            sharded = own >= 0 and t.shape[own] == out_shape[d]
            inputs.append(Shard(own) if sharded else Replicate())
        strategies.append(([Shard(d)], inputs))
    return strategies


def _softmax_strategies(op: str, names: Sequence[str], specs: Sequence, dim: int, outputs: int):
    ndim = specs[0].ndim
    dim %= ndim
    for name, spec in zip(names, specs):
        _only_shard(op, name, spec, [d for d in range(ndim) if d != dim],
                    f"softmax normalises along dim {dim}, so its rows must stay whole on each rank")
    strategies = [(_same(Replicate(), outputs), _same(Replicate(), len(specs)) + [None])]
    for d in range(ndim):
        if d != dim:
            strategies.append((_same(Shard(d), outputs), _same(Shard(d), len(specs)) + [None]))
    return strategies


@_rule("softmax_fwd")
def _softmax_fwd_sharding(x, dim):
    return _softmax_strategies("softmax", ["x"], [x], dim, 1)


@_rule("softmax_bwd")
def _softmax_bwd_sharding(grad_out, y, dim):
    return _softmax_strategies("softmax backward", ["grad_out", "y"], [grad_out, y], dim, 1)


_ATTENTION_WHY = ("attention runs locally on shards of the batch (dim 0) or of the heads (dim 1); "
                  "for the sequence use tritonkit.distributed.ring_attention")


def _attention_strategies(op: str, names: Sequence[str], args: tuple, outputs: int):
    """Strategies for an attention op whose leading arguments, named `names`, are (B, heads,
    N, D) tensors; the arguments after them are options, or (B, H, N) tensors such as the
    log-sum-exp, which shard along the same batch and head dims. Outputs likewise."""
    for name, spec in zip(names, args):
        if spec.ndim == 4:
            _only_shard(op, name, spec, (0, 1), _ATTENTION_WHY)
            _even(op, name, spec, 1, "heads")

    def placements(p):
        return [p if isinstance(a, DTensorSpec) else None for a in args]

    strategies = [(_same(Replicate(), outputs), placements(Replicate()))]
    for d in (0, 1):  # batch; heads
        strategies.append((_same(Shard(d), outputs), placements(Shard(d))))
    return strategies


@_rule("attention_fwd")
def _attention_fwd_sharding(q, k, v, *options):
    return _attention_strategies("attention", ("q", "k", "v"), (q, k, v, *options), 2)


@_rule("attention_bwd")
def _attention_bwd_sharding(do, q, k, v, o, lse, *options):
    return _attention_strategies("attention backward", ("do", "q", "k", "v", "o"), (do, q, k, v, o, lse, *options), 3)


_VARLEN_WHY = ("packed-sequence attention runs locally on shards of the heads (dim 1 of q, k, v; dim 0 of "
               "the log-sum-exp); the packed tokens and cu_seqlens stay whole on each rank")


def _varlen_strategies(op: str, args: tuple, outputs: Sequence[int]):
    """Strategies for a packed-sequence attention op: (total, heads, D) tensors shard their heads
    (dim 1), (H, total) log-sum-exps their dim 0, cu_seqlens stay replicated; `outputs` gives
    each output's head dim."""
    heads_dim = {3: 1, 2: 0}
    for i, spec in enumerate(args):
        if isinstance(spec, DTensorSpec):
            allowed = (heads_dim[spec.ndim],) if spec.ndim in heads_dim else ()
            _only_shard(op, f"argument {i}", spec, allowed, _VARLEN_WHY)
            if spec.ndim == 3:
                _even(op, f"argument {i}", spec, 1, "heads")

    def placements(shard: bool):
        return [None if not isinstance(a, DTensorSpec)
                else Shard(heads_dim[a.ndim]) if shard and a.ndim in heads_dim else Replicate() for a in args]

    return [([Replicate()] * len(outputs), placements(False)),
            ([Shard(d) for d in outputs], placements(True))]


@_rule("attention_varlen_fwd")
def _attention_varlen_fwd_sharding(*args):
    return _varlen_strategies("attention_varlen", args, (1, 0))


@_rule("attention_varlen_bwd")
def _attention_varlen_bwd_sharding(*args):
    return _varlen_strategies("attention_varlen backward", args, (1, 1, 1))


# Norms: rows are independent, so any dim but the normalised last one may be sharded (the
# token dim under sequence parallelism); weight and bias stay replicated, and their
# gradients, summed over each rank's rows, come out Partial (DTensor reduces them).

def _rows_check(op: str, named: dict, why: str) -> int:
    """The row dims of the first tensor in `named`; refuse a Shard of the last dim of any."""
    ndim = None
    for name, spec in named.items():
        if spec is None or spec.ndim == 0 or _empty(spec):
            continue
        ndim = spec.ndim if ndim is None else ndim
        _only_shard(op, name, spec, range(spec.ndim - 1), why)
    return ndim or 1


def _replicated_only(op: str, named: dict, why: str) -> None:
    for name, spec in named.items():
        if spec is not None:
            _only_shard(op, name, spec, (), why)


_NORM_WHY = "a norm reduces over the last dim, which must stay whole on each rank (shard the rows instead)"
_PARAM_WHY = "tritonkit's norms take the weight and bias replicated (as tensor and sequence parallelism keep them)"


def _maybe(spec, placement):
    return None if spec is None else placement


def _nonempty(present: bool, placement):
    """Placement of an output that is an empty (0,) tensor when absent."""
    return placement if present else Replicate()


@_rule("rms_norm_fwd")
def _rms_norm_fwd_sharding(x, weight, residual, eps, weight_offset):
    ndim = _rows_check("rms_norm", dict(x=x, residual=residual), _NORM_WHY)
    _replicated_only("rms_norm", dict(weight=weight), _PARAM_WHY)
    has_h = residual is not None
    strategies = []
    for p in [Replicate()] + [Shard(d) for d in range(ndim - 1)]:
        strategies.append(([p, _nonempty(has_h, p), p],
                           [p, _maybe(weight, Replicate()), _maybe(residual, p), None, None]))
    return strategies


@_rule("rms_norm_bwd")
def _rms_norm_bwd_sharding(dy, dh, h, weight, rstd, weight_offset):
    ndim = _rows_check("rms_norm backward", dict(dy=dy, dh=dh, h=h), _NORM_WHY)
    strategies = [([Replicate(), Replicate()], [Replicate(), _maybe(dh, Replicate()), Replicate(),
                                                 _maybe(weight, Replicate()), Replicate(), None])]
    for d in range(ndim - 1):
        strategies.append(([Shard(d), _nonempty(weight is not None, Partial())],
                           [Shard(d), _maybe(dh, Shard(d)), Shard(d), _maybe(weight, Replicate()), Shard(d), None]))
    return strategies


@_rule("layer_norm_fwd")
def _layer_norm_fwd_sharding(x, weight, bias, residual, eps):
    ndim = _rows_check("layer_norm", dict(x=x, residual=residual), _NORM_WHY)
    _replicated_only("layer_norm", dict(weight=weight, bias=bias), _PARAM_WHY)
    has_h = residual is not None
    strategies = []
    for p in [Replicate()] + [Shard(d) for d in range(ndim - 1)]:
        strategies.append(([p, _nonempty(has_h, p), p, p],
                           [p, _maybe(weight, Replicate()), _maybe(bias, Replicate()), _maybe(residual, p), None]))
    return strategies


@_rule("layer_norm_bwd")
def _layer_norm_bwd_sharding(dy, dh, h, weight, bias, mean, rstd):
    ndim = _rows_check("layer_norm backward", dict(dy=dy, dh=dh, h=h), _NORM_WHY)
    strategies = []
    for p in [Replicate()] + [Shard(d) for d in range(ndim - 1)]:
        param_grad = Replicate() if p == Replicate() else Partial()
        strategies.append(([p, _nonempty(weight is not None, param_grad), _nonempty(bias is not None, param_grad)],
                           [p, _maybe(dh, p), p, _maybe(weight, Replicate()), _maybe(bias, Replicate()), p, p]))
    return strategies


# Gated activations: elementwise in (gate, up), so any dim may be sharded, the intermediate
# (last) dim included, as tensor parallelism shards the MLP. A packed (..., 2I) gate holds
# [gate, up] along its last dim, which must then stay whole.

def _gated_strategies(op: str, gate, up, tail: int, leading: int, outputs: int):
    last = gate.ndim - 1
    allowed = range(gate.ndim) if up is not None else range(last)
    why = "a packed gate holds [gate, up] halves along its last dim, which must stay whole (pass up separately)"
    _only_shard(op, "gate", gate, allowed, why)
    if up is not None:
        _only_shard(op, "up", up, allowed, why)
    strategies = []
    for p in [Replicate()] + [Shard(d) for d in allowed]:
        strategies.append(([p] * outputs, [p] * leading + [p, _maybe(up, p)] + [None] * tail))
    return strategies


@_rule("swiglu_fwd")
def _swiglu_fwd_sharding(gate, up):
    return _gated_strategies("swiglu", gate, up, 0, 0, 1)


@_rule("swiglu_bwd")
def _swiglu_bwd_sharding(grad_out, gate, up):
    return _gated_strategies("swiglu backward", gate, up, 0, 1, 1 if up is None else 2)


@_rule("geglu_fwd")
def _geglu_fwd_sharding(gate, up, approximate):
    return _gated_strategies("geglu", gate, up, 1, 0, 1)


@_rule("geglu_bwd")
def _geglu_bwd_sharding(grad_out, gate, up, approximate):
    return _gated_strategies("geglu backward", gate, up, 1, 1, 1 if up is None else 2)


# Gated linear (the MLP's activation and down projection): the tokens (any dim of gate but
# the last) may be sharded, weight and bias replicated, the output sharded alike and the
# weight's gradients Partial; or the intermediate dim (gate's and up's last, weight's dim 1:
# a row-parallel down projection), the output then Partial, so without a bias (each rank
# would add it). The output features (weight's dim 0) stay whole.

def _gated_linear_strategies(op: str, gate, up, weight, bias, wants: tuple | None):
    """Strategies for gated_linear_fwd (wants None: one output) or _bwd (grad_out first, the
    four gradients' want_ flags given; an unwanted gradient is a (0,) placeholder)."""
    last = gate.ndim - 1
    split = up is not None and bias is None  # the intermediate dim may be sharded
    why = ("gated_linear runs locally on shards of the tokens (any dim of gate but its last) or, for separate "
           "gate and up without a bias, of the intermediate dim (gate's and up's last, weight's dim 1)")
    _only_shard(op, "gate", gate, range(gate.ndim if split else last), why)
    if up is not None:
        _only_shard(op, "up", up, range(gate.ndim if split else last), why)
    _only_shard(op, "weight", weight, (1,) if split else (), why)
    if bias is not None:
        _only_shard(op, "bias", bias, (), why)

    def strategy(rows, grads, dy, w):
        """(outputs, inputs) for gate and up placed as `rows`, the weight as `w`, grad_out as `dy`."""
        inputs = [rows, _maybe(up, rows), w, _maybe(bias, Replicate()), None]
        if wants is None:
            return [grads[0]], inputs
        present = (wants[0], wants[0] and up is not None, wants[1], wants[2] and bias is not None)
        return [_nonempty(p, g) for p, g in zip(present, grads)], [dy, *inputs, None, None, None]

    strategies = [strategy(Replicate(), [Replicate()] * 4, Replicate(), Replicate())]
    for d in range(last):
        sharded = Shard(d)
        grads = [sharded] * 2 + [Partial()] * 2 if wants is not None else [sharded]
        strategies.append(strategy(sharded, grads, sharded, Replicate()))
    if split:
        grads = [Shard(last), Shard(last), Shard(1), Replicate()] if wants is not None else [Partial()]
        strategies.append(strategy(Shard(last), grads, Replicate(), Shard(1)))
    return strategies


@_rule("gated_linear_fwd")
def _gated_linear_fwd_sharding(gate, up, weight, bias, activation):
    return _gated_linear_strategies("gated_linear", gate, up, weight, bias, None)


@_rule("gated_linear_bwd")
def _gated_linear_bwd_sharding(grad_out, gate, up, weight, bias, activation, want_gate_up, want_weight, want_bias):
    return _gated_linear_strategies("gated_linear backward", gate, up, weight, bias,
                                    (want_gate_up, want_weight, want_bias))


# RoPE: per (batch, head, position) element pairs within one head, so batch, heads (q by H,
# k by Hkv) and positions may be sharded, never the head dim; cos and sin follow the batch
# or position sharding where they have that dim, else stay replicated.

def _rope_cos_placement(cos, dim: int):
    """cos/sin's placement for q sharded along `dim` (0 batch, 2 positions): cos is (N, R),
    (B, N, R) or (B, 1, N, R); a dim of size 1 broadcasts and stays replicated."""
    own = {2: {2: 0, 3: 1, 4: 2}, 0: {3: 0, 4: 0}}[dim].get(cos.ndim)
    return Replicate() if own is None or cos.shape[own] == 1 else Shard(own)


def _rope_strategies(op: str, q, k, cos, sin, names: tuple[str, str]):
    why = "rope rotates pairs inside each head's D dims, which must stay whole"
    for name, spec in zip(names, (q, k)):
        _only_shard(op, name, spec, (0, 1, 2), why)
        _even(op, name, spec, 1, "heads")
    _only_shard(op, "cos", cos, range(cos.ndim - 1), why)
    strategies = [([Replicate()] * 2, [Replicate()] * 4 + [None])]
    strategies.append(([Shard(1)] * 2, [Shard(1), Shard(1), Replicate(), Replicate(), None]))
    for d in (0, 2):
        c = _rope_cos_placement(cos, d)
        strategies.append(([Shard(d)] * 2, [Shard(d), Shard(d), c, c, None]))
    return strategies


@_rule("rope_fwd")
def _rope_fwd_sharding(q, k, cos, sin, interleaved):
    return _rope_strategies("rope", q, k, cos, sin, ("q", "k"))


@_rule("rope_bwd")
def _rope_bwd_sharding(grad_q, grad_k, cos, sin, interleaved):
    return _rope_strategies("rope backward", grad_q, grad_k, cos, sin, ("grad_q", "grad_k"))


# Cross-entropy: rows (tokens) may be sharded with reduction "sum" (the loss comes out
# Partial) or "none"; a "mean" would divide each rank's sum by its own count of targets.
# The vocabulary may not be sharded: that needs a log-sum-exp across ranks.

_VOCAB_WHY = ("the vocabulary may not be sharded here: vocabulary-parallel cross-entropy needs a log-sum-exp "
              "across ranks, which tritonkit computes only for linear_cross_entropy with the weight's rows "
              "sharded (tritonkit.distributed.vocab_parallel); replicate the logits, or shard the tokens")


def _loss_placements(op: str, name: str, spec, reduction: str):
    """(loss, row-shaped) placements for rows sharded along dim 0, or a ValueError for mean."""
    if reduction == "mean" and any(d == 0 for d, _ in _shard_dims(spec)):
        raise ValueError(f"tritonkit {op}: {name} is sharded along its rows with reduction='mean', which would "
                         f"average each rank's rows alone; use reduction='sum' and divide by the count of "
                         f"targets, or reduction='none'")
    return (Shard(0) if reduction == "none" else Partial()), Shard(0)


@_rule("cross_entropy_fwd")
def _cross_entropy_fwd_sharding(logits, target, ignore_index, label_smoothing, reduction, softcap, inplace):
    _only_shard("cross_entropy", "logits", logits, (0,), _VOCAB_WHY)
    loss, rows = _loss_placements("cross_entropy", "logits", logits, reduction)
    # The third output counts the targets that are not ignore_index: each rank counts its rows.
    return [([Replicate()] * 3, [Replicate(), Replicate()] + [None] * 5),
            ([loss, rows, Partial()], [rows, rows] + [None] * 5)]


@_rule("cross_entropy_bwd")
def _cross_entropy_bwd_sharding(grad_loss, logits, target, lse, ignore_index, label_smoothing, reduction,
                                softcap, inplace, count=None):
    _only_shard("cross_entropy backward", "logits", logits, (0,), _VOCAB_WHY)
    upstream = Shard(0) if reduction == "none" else Replicate()
    # The count is read for reduction "mean" alone, which rows sharded refuse.
    return [([Replicate()], [Replicate()] * 4 + [None] * 5 + [None if count is None else Replicate()]),
            ([Shard(0)], [upstream, Shard(0), Shard(0), Shard(0)] + [None] * 5 + [None])]


@_rule("linear_cross_entropy_fwd")
def _linear_cross_entropy_fwd_sharding(hidden, weight, target, bias, ignore_index, label_smoothing, reduction,
                                       softcap, grad_hidden, grad_weight, grad_bias, chunk_tokens):
    op = "linear_cross_entropy"
    # (A weight sharded along its rows never gets here: linear_cross_entropy takes it to
    # tritonkit.distributed.vocab_parallel.)
    _only_shard(op, "weight", weight, (), "the weight's hidden dim (dim 1) may not be sharded")
    if bias is not None:
        _only_shard(op, "bias", bias, (), _VOCAB_WHY)
    _only_shard(op, "hidden", hidden, (0,), "only the tokens (rows) of hidden may be sharded")
    loss, rows = _loss_placements(op, "hidden", hidden, reduction)
    reduced = reduction != "none"
    grads = [_nonempty(reduced and grad_hidden, rows), _nonempty(reduced and grad_weight, Partial()),
             _nonempty(reduced and grad_bias and bias is not None, Partial())]
    replicated_inputs = [Replicate(), Replicate(), Replicate(), _maybe(bias, Replicate())] + [None] * 8
    return [([Replicate()] * 5, replicated_inputs),
            ([loss, _nonempty(not reduced, rows), *grads],
             [rows, Replicate(), rows, _maybe(bias, Replicate())] + [None] * 8)]


@_rule("linear_cross_entropy_bwd")
def _linear_cross_entropy_bwd_sharding(grad_loss, hidden, weight, target, bias, lse, grad_hidden, grad_weight,
                                       grad_bias, ignore_index, label_smoothing, reduction, softcap, want_hidden,
                                       want_weight, want_bias, chunk_tokens):
    op = "linear_cross_entropy backward"
    _only_shard(op, "weight", weight, (), _VOCAB_WHY)
    reduced = reduction != "none"
    rows = Shard(0)
    saved = [_nonempty(not reduced, rows),
             _nonempty(reduced and not _empty(grad_hidden), rows),
             _nonempty(reduced and not _empty(grad_weight), Partial()),
             _nonempty(reduced and not _empty(grad_bias), Partial())]
    outputs = [_nonempty(want_hidden, rows), _nonempty(want_weight, Partial()),
               _nonempty(want_bias and bias is not None, Partial())]
    replicated = [Replicate()] * 4 + [_maybe(bias, Replicate())] + [Replicate()] * 4 + [None] * 8
    return [([Replicate()] * 3, replicated),
            (outputs, [rows if not reduced else Replicate(), rows, Replicate(), rows, _maybe(bias, Replicate()),
                       *saved] + [None] * 8)]


# The post-training ops' rules live beside these; importing them adds them to _RULES.
from . import sharding_post_training  # noqa: E402,F401
