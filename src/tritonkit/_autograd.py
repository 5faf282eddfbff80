"""How the public ops reach autograd.

Each op is a torch custom op with fake and autograd registrations, which is what
torch.compile(fullgraph=True) traces. Called eagerly, though, a custom op's autograd path
costs far more host time than the kernels it launches on small inputs: on the CPU machine,
~47 us a forward against ~9 us for the launcher, and ~26 us for the backward op against
~9 us; a plain (old-style) torch.autograd.Function costs ~5 us, one with a separate
setup_context ~21 us (the style custom ops use internally). So the public functions take
three roads: while anything traces or intercepts torch ops (torch.compile, torch.export,
make_fx, FakeTensorMode or any other torch dispatch mode, tensor subclasses such as
FakeTensor or DTensor), the custom op, whose registrations those understand; eagerly with a
gradient to record, the op's plain Function, whose backward calls the backward launcher
directly; without one, the forward launcher alone. All three run the same launchers on the
same arguments.
"""

from __future__ import annotations

import torch


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def tracing(*tensors: object) -> bool:
    """Whether the call must go through the custom op: torch.compile is tracing, a torch
    dispatch mode is active (make_fx, export, FakeTensorMode, FlopCounterMode...), or an
    argument is a tensor subclass. A launcher given such tensors would touch data pointers
    that do not exist, or launch kernels the tracer never sees."""
    return (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0
            or any(isinstance(t, torch.Tensor) and type(t) not in _PLAIN_TENSORS for t in tensors))


def records_grad(*tensors: object) -> bool:
    """Whether autograd would record an op on these arguments."""
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def eager_function(name: str, forward, setup_context, backward, *, differentiable_backward: bool = False):
    """A plain torch.autograd.Function for an op's eager road: `forward(*args)` (the op's
    launcher) records with the op's own `setup_context(ctx, args, output)`, and `backward`
    (ctx, *grads) runs as given. Unless the backward is made of differentiable torch ops,
    it is marked once-differentiable: a gradient of it raises instead of missing terms."""
    def run_forward(ctx, *args):
        output = forward(*args)
        setup_context(ctx, args, output)
        return output

    if not differentiable_backward:
        backward = torch.autograd.function.once_differentiable(backward)
    return type(name, (torch.autograd.Function,),
                {"forward": staticmethod(run_forward), "backward": staticmethod(backward)})
