"""The one scaffold that turns an op's launchers into a torch op.

An op module declares itself once with `Op(...)`: its forward launcher, the schema and fake
of that launcher, and (for ops with a backward kernel) the backward launcher, its schema and
fake, plus how the forward's context is saved and how the gradients are computed from it.
From that declaration this module builds

- the torch custom op `tritonkit::<name>_fwd` (`tritonkit::<name>` for ops whose backward is
  plain torch ops) with its fake, and `tritonkit::<name>_bwd` with its fake, which is what
  torch.compile(fullgraph=True), torch.export, make_fx and FakeTensorMode see;
- the autograd registration of the forward custom op, whose backward calls the backward
  custom op (so a compiled graph holds both kernels);
- a plain torch.autograd.Function for eager calls that record a gradient, whose backward
  calls the backward launcher directly;
- `Op.__call__`, which picks one of three roads for a call (see `Op.__call__`).

Why three roads: a custom op's autograd dispatch costs several times the host time of the
launch itself, and small kernels are bound by host time. All three run the same kernels on
the same arguments, so they give the same bits (tests/test_autograd_roads.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

from . import _dtensor

_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)

# Every declared op by its public name, for the tests that walk all ops.
DECLARED: dict[str, "Op"] = {}


def tracing(*tensors: object) -> bool:
    """Whether the call must go through the custom op: torch.compile is tracing, a torch
    dispatch mode is active (make_fx, export, FakeTensorMode, FlopCounterMode...), or an
    argument is a tensor subclass (FakeTensor, DTensor) or on the meta device (whose kernel is
    the op's fake: shapes and dtypes, no data). A launcher given such tensors would touch data
    pointers that do not exist, or launch kernels the tracer never sees."""
    return (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0
            or any(isinstance(t, torch.Tensor) and (type(t) not in _PLAIN_TENSORS or t.is_meta) for t in tensors))


def _has_dtensor(args: tuple) -> bool:
    # Only a program that has imported DTensor can hold one; others pay a dict lookup.
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and any(isinstance(a, module.DTensor) for a in args)


def not_computed(like: torch.Tensor) -> torch.Tensor:
    """The placeholder a launcher returns for an output its arguments do not ask for (a custom
    op's schema fixes its outputs): a 0-element tensor of like's dtype and device."""
    return like.new_empty((0,))


def records_grad(*tensors: object) -> bool:
    """Whether autograd would record an op on these arguments."""
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


class Op:
    """One op's torch plumbing, built from its declaration.

    name: the op's name; the custom ops are `tritonkit::<name>_fwd` and `tritonkit::<name>_bwd`,
        or `tritonkit::<name>` alone when there is no backward launcher.
    forward, forward_schema, forward_fake: the forward launcher, its schema as torch writes
        it ("(Tensor x, int dim) -> Tensor"), and a function of the same arguments returning
        empty tensors of the output's shapes, dtypes, strides and device.
    setup_context(ctx, inputs, output): saves what the backward needs (as torch's).
    backward(bwd, ctx, *grad_outputs) -> one gradient (or None) per forward argument; `bwd`
        is the backward custom op while torch.compile traces and the eager backward launcher
        otherwise, so one formula serves both roads.
    backward_launcher, backward_schema, backward_fake: the backward launcher, as for forward;
        None when `backward` is made of torch ops (then it stays differentiable).
    eager_backward_launcher: what `bwd` is on the eager road, when it may skip checks the
        saved tensors already passed; defaults to backward_launcher.
    check(*args) -> args: validates and normalises the arguments before the custom op is
        called while tracing (the fake does not validate; the launchers do on the other roads).
    returns(*args) -> n: how many of the forward launcher's leading outputs the op returns for
        these arguments (n == 1: that tensor alone; otherwise a tuple of n). The outputs past
        them are state for the backward (statistics) or placeholders for outputs these
        arguments do not make: the op marks them non-differentiable on the custom-op road,
        and on the eager roads they never become autograd outputs (each one costs autograd
        bookkeeping a call). None: every output, as the launcher returns them.
    forward_sharding, backward_sharding: how DTensor may shard the forward and the backward
        custom op (a rule in `tritonkit._sharding`'s terms; `tritonkit._dtensor` registers it).
    eager_forward: what runs the forward on the eager roads (the forward launcher by
        default). It validates its arguments as the launcher does and gives the same leading
        `returns` outputs; the outputs past them reach only setup_context and the backward,
        so it may give them in a cheaper form (statistics flat), None (no placeholder), or
        more of them than the launcher has (what it worked out that the backward can reuse).
    """

    def __init__(self, name: str, *, forward: Callable, forward_schema: str, forward_fake: Callable,
                 setup_context: Callable, backward: Callable,
                 backward_launcher: Callable | None = None, backward_schema: str | None = None,
                 backward_fake: Callable | None = None, eager_backward_launcher: Callable | None = None,
                 check: Callable | None = None, returns: Callable | None = None,
                 eager_forward: Callable | None = None, forward_sharding: Callable | None = None,
                 backward_sharding: Callable | None = None):
        if (backward_launcher is None) != (backward_schema is None) or (backward_launcher is None) != (backward_fake is None):
            raise ValueError(f"op {name}: backward_launcher, backward_schema and backward_fake go together")
        if backward_sharding is not None and backward_launcher is None:
            raise ValueError(f"op {name}: backward_sharding is the rule of a backward launcher's custom op")
        self.name = name
        self.forward = forward
        self.eager_forward = eager_forward = eager_forward or forward
        self.check = check
        self.returns = returns
        self.forward_sharding, self.backward_sharding = forward_sharding, backward_sharding
        n_outputs = len(torch._C.parse_schema(f"tritonkit::{name}{forward_schema}").returns)
        has_kernel_backward = backward_launcher is not None
        self.forward_op = _custom_op(f"{name}_fwd" if has_kernel_backward else name,
                                     forward, forward_schema, forward_fake)
        if has_kernel_backward:
            self.backward_op = _custom_op(f"{name}_bwd", backward_launcher, backward_schema, backward_fake)
            compiled_bwd, eager_bwd = self.backward_op, eager_backward_launcher or backward_launcher
        else:
            self.backward_op = None
            compiled_bwd = eager_bwd = None

        def compiled_backward(ctx, *grads):
            return backward(compiled_bwd, ctx, *grads)

        def eager_backward(ctx, *grads):
            # Only the returned outputs were autograd outputs: the others get None, as
            # unused outputs do on the custom-op road (the ops set_materialize_grads(False)).
            if len(grads) < n_outputs:
                grads = (*grads, *(None,) * (n_outputs - len(grads)))
            return backward(eager_bwd, ctx, *grads)

        def compiled_setup_context(ctx, inputs, output):
            setup_context(ctx, inputs, output)
            if returns is not None:
                ctx.mark_non_differentiable(*output[returns(*inputs):])

        self.forward_op.register_autograd(compiled_backward, setup_context=compiled_setup_context)

        def run_forward(ctx, *args):
            output = eager_forward(*args)
            setup_context(ctx, args, output)
            return output if returns is None else _first(output, returns(*args))

        if has_kernel_backward:
            eager_backward = _once_differentiable(eager_backward)
        self.function = type(f"_{name.title().replace('_', '')}Function", (torch.autograd.Function,),
                             {"forward": staticmethod(run_forward), "backward": staticmethod(eager_backward)})
        # torch's C apply, which Function.apply calls after steps of its own in Python that
        # matter only under functorch transforms (vmap, grad, ...): those calls take
        # Function.apply, the others save its host time.
        self._apply = super(torch.autograd.Function, self.function).apply
        DECLARED[name] = self

    def __call__(self, *args: Any) -> Any:
        """Run the op by one of three roads: the custom op while anything traces or intercepts
        torch ops (its registrations are what tracers understand) and for meta tensors; the
        eager Function when autograd records a gradient; the forward launcher alone otherwise."""
        grad = False
        for a in args:  # tracing() and records_grad() in one pass: this runs on every call
            if isinstance(a, torch.Tensor):
                if type(a) not in _PLAIN_TENSORS or a.is_meta:
                    return self._traced(args)
                grad = grad or a.requires_grad
        if torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0:
            return self._traced(args)
        if grad and torch.is_grad_enabled():
            if torch._C._are_functorch_transforms_active():
                return self.function.apply(*args)
            return self._apply(*args)
        return self.returned(args, self.eager_forward(*args))

    def _traced(self, args: tuple) -> Any:
        """The custom-op road."""
        if self.check is not None:
            args = self.check(*args)
        if not torch.compiler.is_compiling() and _has_dtensor(args):
            # DTensor asks for each custom op's sharding rule: registered on first use
            # (under torch.compile, `import tritonkit.distributed` registers them), and
            # placements no rule allows refused here with a ValueError.
            _dtensor.check(self, args)
        return self.returned(args, self.forward_op(*args))

    def returned(self, args: tuple, output: Any) -> Any:
        """What the op returns of its forward launcher's (or custom op's) `output` for `args`."""
        return output if self.returns is None else _first(output, self.returns(*args))


def _first(output: tuple, n: int) -> Any:
    return output[0] if n == 1 else output[:n]


def _once_differentiable(backward: Callable) -> Callable:
    """The backward kernels are not themselves differentiable: a second derivative must
    raise instead of silently missing terms (torch's once_differentiable). Autograd runs a
    backward with grad mode off unless create_graph asks for a graph of it, and only then is
    the wrapper (a no_grad block and checks, host time on every call) needed."""
    refusing = torch.autograd.function.once_differentiable(backward)

    def run(ctx, *grads):
        return refusing(ctx, *grads) if torch.is_grad_enabled() else backward(ctx, *grads)
    return run


def _custom_op(name: str, launcher: Callable, schema: str, fake: Callable):
    # The one place tritonkit creates custom ops. Inductor builds a Python signature from each
    # schema when it lowers the op, which fails on two arguments of one name: refuse it here.
    names = [a.name for a in torch._C.parse_schema(f"tritonkit::{name}{schema}").arguments]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"op {name}: its schema names {', '.join(repeated)} more than once")
    op = torch.library.custom_op(f"tritonkit::{name}", launcher, mutates_args=(), schema=schema)
    op.register_fake(fake)
    return op
