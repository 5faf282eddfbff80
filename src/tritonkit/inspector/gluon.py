"""Compile a Gluon kernel for a GPU target without a GPU (the CPU tests of the Gluon kernels).

`triton.compile` needs Gluon's own AST source (`compiling.ast_source`): Triton's `ASTSource`
would parse the kernel as plain Triton. Arguments are specialised by Triton's binder exactly as
a launch on the GPU would, so the compiled kernel is the one a launch with these arguments gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# 227 KB: the most shared memory one Hopper block can opt into.
HOPPER_SHARED_LIMIT = 232448


@dataclass
class CompiledGluon:
    asm: dict[str, Any]
    metadata: Any
    options: Any
    arch: int

    @property
    def ptx(self) -> str:
        return self.asm["ptx"]

    @property
    def shared(self) -> int:
        return self.metadata.shared

    def setmaxnreg(self) -> list[tuple[str, int]]:
        """('inc' or 'dec', registers) of each setmaxnreg in the PTX, in order."""
        from .assembly import _setmaxnreg
        return _setmaxnreg(self.ptx)

    def wgmma_waits(self) -> list[int]:
        """The pending-group count of each wgmma.wait_group in the PTX."""
        from .assembly import _WGMMA_WAIT
        return [int(n) for n in _WGMMA_WAIT.findall(self.ptx)]

    def spills(self) -> dict[str, int]:
        """Bytes of spill stores and loads, and the stack frame, that ptxas reports."""
        from .assembly import _ptxas_usage
        return _ptxas_usage(self.ptx, self.arch, self.options)


def compile_sm90(kernel: Any, args: tuple, kwargs: dict, arch: int = 90) -> CompiledGluon:
    """Compile the Gluon `kernel` as launching it with (args, kwargs) would, for sm_`arch`."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    from .compiling import GLUON_MODULES, _jit_functions_visible, ast_source

    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    kwargs = dict(kwargs, debug=False)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization, options)
    with _jit_functions_visible(GLUON_MODULES):
        compiled = triton.compile(ast_source(kernel, signature, constexprs, attrs), target=target,
                                  options=options.__dict__)
    return CompiledGluon(asm=dict(compiled.asm), metadata=compiled.metadata, options=options, arch=arch)
