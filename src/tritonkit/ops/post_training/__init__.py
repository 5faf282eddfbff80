"""Post-training losses over a linear head, none of which holds the (tokens x vocabulary)
logits: the GRPO family's policy loss (policy.py, fused into the chunk loop by
policy_fused.py), the preference losses DPO, ORPO, SimPO (preference.py) and KTO (kto.py), and
distillation from a teacher's head (distill.py, with its row kernel in distill_kernel.py).
docs/post-training.md has the math and the usage."""

from .policy import grpo_loss, grpo_loss_reference, policy_objective

__all__ = ["grpo_loss", "grpo_loss_reference", "policy_objective"]
