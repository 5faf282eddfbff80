"""The norms' declaration to the op scaffold (`tritonkit._op.Op`), written once for RMSNorm
and LayerNorm: their fakes, what the forward saves and how the backward uses it.

A norm's forward launcher takes (x, *params, residual, *options) and returns (y, h, *stats):
h = x + residual (a (0,) placeholder without residual) and the float32 statistics per row
that the backward reads. Its backward launcher takes (dy, dh, h, *params, *stats, *the last
`backward_options` options) and returns (dx, *the params' gradients), a (0,) placeholder
for each param that is None. The op returns y, or (y, h) with a residual; x and residual
get one gradient, dx.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..._op import Op
from ._sharding import sharding


def declare(name: str, params: tuple[str, ...], stats: tuple[str, ...], options: tuple[str, ...],
            backward_options: int, launchers: tuple[Callable, Callable, Callable, Callable],
            check: Callable) -> Op:
    """The Op of a norm: `params`, `stats` and (float) `options` named as in its schemas;
    launchers (forward, eager forward, backward, eager backward) as `Op` takes them."""
    forward, eager_forward, backward_launcher, eager_backward = launchers
    n_params = len(params)
    passed = options[len(options) - backward_options:]  # the options the backward takes

    def forward_fake(x, *args):
        residual, rows = args[n_params], x.shape[:-1]
        return (x.new_empty(x.shape), x.new_empty(x.shape if residual is not None else (0,)),
                *(x.new_empty(rows, dtype=torch.float32) for _ in stats))

    def backward_fake(dy, dh, h, *args):
        return (h.new_empty(h.shape), *(p.new_empty(p.shape) if p is not None else h.new_empty((0,))
                                        for p in args[:n_params]))

    def setup_context(ctx, inputs, output):
        ctx.has_residual = inputs[1 + n_params] is not None
        ctx.options = inputs[len(inputs) - len(passed):]
        # Outputs nobody differentiated get None, not a zero tensor autograd would allocate
        # (and fill, on the GPU) every call. (The stats, and h without residual, are not
        # returned: the Op marks them non-differentiable.)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(output[1] if ctx.has_residual else inputs[0], *inputs[1:1 + n_params], *output[2:])

    def backward(bwd, ctx, dy, dh, *_dstats):
        h, *saved = ctx.saved_tensors
        dy = torch.zeros_like(h) if dy is None else dy
        dx, *dparams = bwd(dy, dh if ctx.has_residual else None, h, *saved, *ctx.options)
        # x and residual get the same gradient, one tensor (as torch's own add backward gives).
        return (dx, *(d if p is not None else None for d, p in zip(dparams, saved)),
                dx if ctx.has_residual else None, *(None,) * len(options))

    forward_sharding, backward_sharding = sharding(name, params, len(stats))
    return Op(
        name, forward=forward,
        forward_schema=_schema(["Tensor x", *_typed("Tensor?", params), "Tensor? residual", *_typed("float", options)],
                               2 + len(stats)),
        forward_fake=forward_fake, setup_context=setup_context, backward=backward,
        backward_launcher=backward_launcher,
        backward_schema=_schema(["Tensor dy", "Tensor? dh", "Tensor h", *_typed("Tensor?", params),
                                 *_typed("Tensor", stats), *_typed("float", passed)], 1 + n_params),
        backward_fake=backward_fake, eager_backward_launcher=eager_backward, check=check,
        returns=lambda *args: 1 if args[1 + n_params] is None else 2, eager_forward=eager_forward,
        forward_sharding=forward_sharding, backward_sharding=backward_sharding)


def _typed(kind: str, names: tuple[str, ...]) -> list[str]:
    return [f"{kind} {n}" for n in names]


def _schema(arguments: list[str], outputs: int) -> str:
    return f"({', '.join(arguments)}) -> ({', '.join(['Tensor'] * outputs)})"
