"""The chunk loop shared by the linear-head ops (`linear_cross_entropy`, `linear_logprobs`, the
post-training losses): a head's (tokens x vocabulary) logits made a chunk of tokens at a time,
each chunk handed to the op's row kernels, and the gradients made from the chunk's dlogits.

For each chunk of tokens [start, end):
    logits         = hidden_c @ weight^T (+ bias)   cuBLAS, in hidden's dtype, into one buffer
    rows(logits, start, end)                        the op's row kernels; where gradients are
                                                    wanted they write dlogits over the logits
    grad_hidden_c  = dlogits @ weight               cuBLAS, into the preallocated grad_hidden
    grad_weight   += dlogits^T @ hidden_c           cuBLAS addmm, accumulated in weight's dtype
    grad_bias     += sum of dlogits rows            fp32 accumulator
So the three products run at cuBLAS speed, the logits are rounded to the input dtype exactly as
F.linear rounds them, and dlogits is rounded to it as torch's backward of `.float()` rounds it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..._checks import check_same_device, check_tensor
from .kernel import same_dtype

# Logits buffer per chunk. grad_weight += dlogits^T @ hidden_c reads and writes all of
# grad_weight (4*V*H bytes in bf16) for 2*V*H*chunk flops: it is bound by memory rather than
# by the tensor cores below chunk = 2 * rate / bandwidth tokens, about 2 * 687e12 / 4.2e12 =
# 330 on the H200 (its bf16 GEMM rate and copy bandwidth), and each chunk's re-read of
# grad_weight costs a share of its product's time that falls as 1 / chunk above that.
# 512 MiB gives 2048 tokens at V = 128256, where the three products run near their full
# rate; smaller chunks cost time, larger ones memory (docs/block-ops.md has the trade).
CHUNK_BYTES = 512 << 20
CHUNK_MULTIPLE = 128     # chunk rows rounded to whole GEMM tiles
MIN_CHUNK_TOKENS = 128

# rows(logits, start, end): the chunk's row kernels on its (end - start, V) logits.
Rows = Callable[[torch.Tensor, int, int], None]


def chunk_tokens_for(n_tokens: int, n_classes: int, element_size: int) -> int:
    """Tokens per chunk: CHUNK_BYTES of logits, in whole GEMM tiles, at least MIN_CHUNK_TOKENS."""
    rows = CHUNK_BYTES // max(1, n_classes * element_size) // CHUNK_MULTIPLE * CHUNK_MULTIPLE
    return max(1, min(n_tokens, max(MIN_CHUNK_TOKENS, rows)))


def check_chunk_tokens(chunk_tokens: object) -> None:
    if chunk_tokens is not None and (not isinstance(chunk_tokens, int) or isinstance(chunk_tokens, bool)):
        raise TypeError(f"chunk_tokens must be None or a positive int, got {type(chunk_tokens).__name__}")
    if chunk_tokens is not None and chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be None or a positive int, got {chunk_tokens!r}")


def head_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                out: torch.Tensor) -> torch.Tensor:
    """F.linear(hidden, weight, bias) into `out`, rounded as F.linear rounds it."""
    if bias is None:
        return torch.mm(hidden, weight.t(), out=out)
    return torch.addmm(bias, hidden, weight.t(), out=out)


def chunk_buffer(n_tokens: int, n_classes: int, chunk_tokens: int | None, like: torch.Tensor) -> tuple[torch.Tensor, int]:
    """One chunk's logits buffer in like's dtype, and the tokens a chunk takes."""
    step = chunk_tokens or chunk_tokens_for(n_tokens, n_classes, like.element_size())
    return torch.empty((min(step, n_tokens), n_classes), dtype=like.dtype, device=like.device), step


def chunk_loop(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, chunk_tokens: int | None,
               want: tuple[bool, bool, bool], rows: Rows):
    """Run the chunk loop over hidden (T, H) and weight (V, H): logits, `rows`, then the products
    for the gradients in `want` (hidden, weight, bias flags), from the dlogits that `rows`
    wrote over the logits wherever a gradient is wanted. Returns (grad_hidden, grad_weight,
    grad_bias), each None where not wanted."""
    n_tokens, n_classes = hidden.shape[0], weight.shape[0]
    want_hidden, want_weight, want_bias = want
    grad_hidden = torch.empty(hidden.shape, dtype=hidden.dtype, device=hidden.device) if want_hidden else None
    grad_weight = torch.empty_like(weight) if want_weight else None  # weight's layout, as autograd prefers
    grad_bias32 = None  # fp32 accumulator, started by the first chunk's sum
    buffer, step = chunk_buffer(n_tokens, n_classes, chunk_tokens, hidden)
    for start in range(0, n_tokens, step):
        end = min(n_tokens, start + step)
        logits, h = buffer[: end - start], hidden[start:end]
        head_logits(h, weight, bias, logits)
        rows(logits, start, end)
        if want_hidden:
            torch.mm(logits, weight, out=grad_hidden[start:end])
        if want_weight:
            if start == 0:
                torch.mm(logits.t(), h, out=grad_weight)
            else:
                grad_weight.addmm_(logits.t(), h)
        if want_bias:
            sums = logits.sum(0, dtype=torch.float32)
            grad_bias32 = sums if grad_bias32 is None else grad_bias32.add_(sums)
    if want_weight and n_tokens == 0:
        grad_weight.zero_()
    if want_bias and grad_bias32 is None:  # no tokens
        grad_bias32 = torch.zeros(n_classes, dtype=torch.float32, device=hidden.device)
    grad_bias = grad_bias32.to(hidden.dtype) if want_bias else None
    return grad_hidden, grad_weight, grad_bias


def check_head(hidden: object, weight: object, bias: object, chunk_tokens: object) -> None:
    """hidden (T, H), weight (V, H) and bias (V,) or None, of one dtype and device."""
    check_tensor("hidden", hidden)
    check_tensor("weight", weight)
    if hidden.dim() != 2:
        raise ValueError(f"hidden has {hidden.dim()} dims; the launchers take (tokens, hidden) "
                         "(the public function flattens leading dims)")
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[1]:
        raise ValueError(f"weight has shape {tuple(weight.shape)}; expected (vocabulary, {hidden.shape[1]}) "
                         f"for hidden of shape {tuple(hidden.shape)}")
    if weight.shape[0] == 0:
        raise ValueError("weight has 0 rows (an empty vocabulary)")
    same_dtype("weight", weight, "hidden", hidden)
    check_same_device(hidden=hidden, weight=weight)
    if bias is not None:
        check_tensor("bias", bias)
        if bias.shape != (weight.shape[0],):
            raise ValueError(f"bias has shape {tuple(bias.shape)}; expected ({weight.shape[0]},)")
        same_dtype("bias", bias, "hidden", hidden)
        check_same_device(hidden=hidden, bias=bias)
    check_chunk_tokens(chunk_tokens)
