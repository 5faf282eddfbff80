"""Post-training losses over a linear head, none of which holds the (tokens x vocabulary)
logits: the GRPO family's policy loss (policy.py, fused into the chunk loop by
policy_fused.py), the preference losses DPO, ORPO, SimPO (preference.py) and KTO (kto.py), and
distillation from a teacher's head (distill.py, with its row kernel in distill_kernel.py).
docs/post-training.md has the math and the usage."""

from .distill import distill_loss, distill_loss_reference, linear_distill_loss_bwd, linear_distill_loss_fwd
from .kto import kto_loss, kto_loss_reference
from .policy import grpo_loss, grpo_loss_reference, policy_objective
from .policy_fused import linear_grpo_loss_fwd
from .preference import (dpo_loss, dpo_loss_reference, orpo_loss, orpo_loss_reference, simpo_loss,
                         simpo_loss_reference)

__all__ = ["distill_loss", "distill_loss_reference", "dpo_loss", "dpo_loss_reference", "grpo_loss",
           "grpo_loss_reference", "kto_loss", "kto_loss_reference", "linear_distill_loss_bwd",
           "linear_distill_loss_fwd", "linear_grpo_loss_fwd", "orpo_loss", "orpo_loss_reference", "policy_objective",
           "simpo_loss", "simpo_loss_reference"]
