"""What makes FlashAttention-2's test file run against tritonkit.flash_attn.

- `install_flash_attn()`: `import flash_attn...` resolves to tritonkit.flash_attn. The test file
  imports more than the public functions: `flash_attn.flash_attn_interface._get_block_size_n`
  (the CUDA kernels' key-block width, read only by its dropout checks) and `USE_TRITON_ROCM`,
  and `flash_attn.layers.rotary.apply_rotary_emb` (read only by the KV-cache tests). The
  runner deselects those tests, so here they exist to let the file import, and raise if
  called. They are the runner's, not tritonkit's: tritonkit.flash_attn has FA2's public API.
- `install_cpu()`: where no GPU is, the file's `torch.cuda.get_device_capability("cuda")` and
  `get_device_properties` (read at import, and to skip cases whose float32 reference would not
  fit in 16 GiB) answer for an H100 (9, 0) with this machine's memory; the runner rewrites the
  file's "cuda" strings to "cpu" (`cpu_source`), so tensors are made where the interpreter runs.
"""

from __future__ import annotations

import io
import os
import sys
import tokenize
import types

import torch


def _refuse(name: str):
    def refused(*args, **kwargs):
        raise NotImplementedError(f"{name} is FlashAttention-2's own (dropout and KV-cache tests use it); "
                                  "tests/fa2/run.py deselects the tests that call it")
    refused.__name__ = name
    return refused


def install_flash_attn() -> None:
    import tritonkit.flash_attn as compat
    from tritonkit.flash_attn import bert_padding, flash_attn_interface

    interface = types.ModuleType("flash_attn.flash_attn_interface")
    interface.__dict__.update({k: v for k, v in vars(flash_attn_interface).items() if not k.startswith("__")})
    interface._get_block_size_n = _refuse("_get_block_size_n")
    interface.USE_TRITON_ROCM = False
    layers = types.ModuleType("flash_attn.layers")
    rotary = types.ModuleType("flash_attn.layers.rotary")
    rotary.apply_rotary_emb = _refuse("apply_rotary_emb")
    layers.rotary = rotary
    package = types.ModuleType("flash_attn")
    package.__dict__.update({name: getattr(compat, name) for name in compat.__all__})
    package.__path__ = []  # a package, so that `import flash_attn.x` looks in sys.modules
    package.flash_attn_interface, package.bert_padding, package.layers = interface, bert_padding, layers
    sys.modules.update({"flash_attn": package, "flash_attn.flash_attn_interface": interface,
                        "flash_attn.bert_padding": bert_padding, "flash_attn.layers": layers,
                        "flash_attn.layers.rotary": rotary})


def install_cpu() -> None:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    torch.cuda.get_device_capability = lambda device=None: (9, 0)
    torch.cuda.get_device_properties = lambda device=None: types.SimpleNamespace(
        name="cpu (Triton interpreter)", total_memory=memory, major=9, minor=0, multi_processor_count=132)


def cpu_source(source: str) -> str:
    """The test file with each string literal "cuda" (its `device = "cuda"`) made "cpu"; nothing
    else changes (tokens, so comments and other strings stay as they are)."""
    out = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.STRING and token.string in ('"cuda"', "'cuda'"):
            token = token._replace(string='"cpu"')
        out.append(token)
    return tokenize.untokenize(out)
