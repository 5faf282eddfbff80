"""TRL: tritonkit's `linear_logprobs` as the kernel of TRL's fused LM head.

TRL's trainers (GRPOTrainer, RLOOTrainer, KTOTrainer, DPOTrainer, SFTTrainer, from TRL 1.16)
patch the model with `trl.trainer.utils.add_fused_lm_head`: `model(..., labels=labels,
fused_lm_head=True)` then runs the backbone and returns per-token log-probabilities (and the
entropy) from the LM head in chunks, through TRL's `ChunkedLogProbFunction`, which that module
looks up by name on every call. `use_tritonkit()` puts `TritonkitLogProbFunction` there
instead, one line before building the trainer:

    import tritonkit.integrations.trl
    tritonkit.integrations.trl.use_tritonkit()
    trainer = GRPOTrainer(model=..., args=GRPOConfig(...), ...)

Everything else stays TRL's (the loss, its normalisation, the metrics), so a step computes the
same loss and gradients within rounding. The log-probabilities and entropy (and the mean
logit, by one matrix-vector product, without a softcap) come from tritonkit; a call that asks
for TRL's other per-token metrics ("log_sum_sq_probs", "is_top1": DPOTrainer and SFTTrainer ask
for them) or for a logit scale of 0 or less runs TRL's own function instead.
"""

from __future__ import annotations

import torch

from ..ops.cross_entropy import linear_logprobs

_SUPPORTED = frozenset(("log_probs", "entropy", "mean_logits"))


def _trl_utils():
    try:
        import trl.trainer.utils as utils
    except ImportError as error:
        raise ImportError("tritonkit.integrations.trl needs TRL (pip install trl)") from error
    if not hasattr(utils, "_ChunkedLogProbFunction"):
        raise RuntimeError("this TRL has no fused LM head (trl.trainer.utils._ChunkedLogProbFunction); "
                           "tritonkit's adapter is made for TRL 1.16")
    return utils


class TritonkitLogProbFunction:
    """TRL's `ChunkedLogProbFunction.apply` signature, computed by `tritonkit.linear_logprobs`.

    apply(hidden (N, H), weight (V, H), bias, targets (N,), temperature, chunk_size,
    final_logit_softcapping, logit_scale, outputs) -> (log_probs, entropy, log_sum_sq_probs,
    mean_logits, is_top1), None where not asked. TRL scales the logits by logit_scale before
    the softcap and divides them by the temperature after it: softcap_c(s * x) / T is
    softcap_{c/s}(x) / (T / s), which is how they reach linear_logprobs. chunk_size (TRL's
    vocabulary tile) is not needed: tritonkit takes whole rows a chunk of tokens at a time.
    """

    fallback = None   # TRL's own function, for what this one does not compute

    @classmethod
    def apply(cls, hidden, weight, bias, targets, temperature, chunk_size, final_logit_softcapping=None,
              logit_scale=1.0, outputs=("log_probs",)):
        if not set(outputs) <= _SUPPORTED or not logit_scale > 0 or (
                "mean_logits" in outputs and final_logit_softcapping is not None):
            return cls.fallback.apply(hidden, weight, bias, targets, temperature, chunk_size,
                                      final_logit_softcapping, logit_scale, outputs)
        if weight.dtype != hidden.dtype and not torch.is_autocast_enabled(hidden.device.type):
            # TRL's cast_lm_head_to_fp32 hands over float32 hidden states and the head as it is:
            # the product runs in hidden's dtype, as TRL's does.
            weight = weight.to(hidden.dtype)
            bias = None if bias is None else bias.to(hidden.dtype)
        softcap = None if final_logit_softcapping is None else final_logit_softcapping / logit_scale
        entropy = "entropy" in outputs
        out = linear_logprobs(hidden, weight, targets, bias=bias, temperature=temperature / logit_scale,
                              softcap=softcap, return_entropy=entropy)
        log_probs, entropy = out if entropy else (out, None)
        mean_logits = None
        if "mean_logits" in outputs:
            with torch.no_grad():
                total = hidden.float() @ weight.sum(0, dtype=torch.float32)
                if bias is not None:
                    total = total + bias.sum(dtype=torch.float32)
                mean_logits = total * (logit_scale / (temperature * weight.shape[0]))
        return log_probs, entropy, None, mean_logits, None


def use_tritonkit() -> None:
    """Make TRL's fused LM head compute with tritonkit (idempotent); `restore_trl()` undoes it."""
    utils = _trl_utils()
    if utils._ChunkedLogProbFunction is not TritonkitLogProbFunction:
        TritonkitLogProbFunction.fallback = utils._ChunkedLogProbFunction
        utils._ChunkedLogProbFunction = TritonkitLogProbFunction


def restore_trl() -> None:
    """Put TRL's own ChunkedLogProbFunction back."""
    utils = _trl_utils()
    if utils._ChunkedLogProbFunction is TritonkitLogProbFunction:
        utils._ChunkedLogProbFunction = TritonkitLogProbFunction.fallback
