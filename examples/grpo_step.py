"""GRPO in plain PyTorch on a small Hugging Face model, with tritonkit's fused policy loss.

Each step samples a group of completions per prompt, scores them with a toy reward, turns the
rewards into group-normalised advantages, and takes one optimizer step on TRL's GRPO loss
("dapo" normalisation, k3 KL to a frozen reference model), computed by `tritonkit.grpo_loss`
from the policy's last hidden states and its LM head: the (tokens x vocabulary) logits are
never built, and the loss's gradients are made in its forward (three matrix products). The
reference model's per-token log-probabilities come from `tritonkit.linear_logprobs`.

    python examples/grpo_step.py                 # a tiny random Llama, on the GPU if there is one
    python examples/grpo_step.py --steps 3 --group 8

On a CPU the kernels run through Triton's interpreter (slow, exact): the default sizes are tiny.
"""

from __future__ import annotations

import argparse
import copy

import torch

import tritonkit  # before transformers, which imports triton: tritonkit picks the interpreter on a CPU
from transformers import LlamaConfig, LlamaForCausalLM

STOP = 0   # the toy vocabulary's end of a completion: what follows it is padding


def completion_states(model, prompts, completions):
    """The hidden states that predict each completion token: (B, C, H)."""
    ids = torch.cat([prompts, completions], dim=1)
    hidden = model.model(input_ids=ids).last_hidden_state
    return hidden[:, prompts.shape[1] - 1: -1]


def targets(completions):
    """The completion tokens to score: ignore_index (-100) after each completion's first STOP."""
    after_stop = (completions == STOP).long().cumsum(1) - (completions == STOP).long() > 0
    return completions.masked_fill(after_stop, -100)


def rewards(completions, target):
    """A toy verifiable reward: the share of a completion's tokens that are even."""
    scored = target != -100
    return ((completions % 2 == 0) & scored).sum(1) / scored.sum(1).clamp(min=1)


def grpo_step(model, ref_model, optimizer, prompts, args):
    with torch.no_grad():
        completions = model.generate(prompts, max_new_tokens=args.completion_len, do_sample=True,
                                     temperature=args.temperature, top_k=0, pad_token_id=STOP,
                                     eos_token_id=None)[:, prompts.shape[1]:]
        target = targets(completions)
        reward = rewards(completions, target).float()
        group = reward.view(-1, args.group)
        advantages = ((group - group.mean(1, keepdim=True)) / (group.std(1, keepdim=True) + 1e-4)).view(-1)
        head = model.lm_head.weight
        # The sampling policy is the current one (one optimizer step per generation): old
        # log-probabilities could be left out (TRL's logp.detach()); they are computed here to
        # show where a second iteration over the same samples would take them from.
        old = tritonkit.linear_logprobs(completion_states(model, prompts, completions), head, target,
                                        temperature=args.temperature)
        ref = tritonkit.linear_logprobs(completion_states(ref_model, prompts, completions),
                                        ref_model.lm_head.weight, target, temperature=args.temperature)
    hidden = completion_states(model, prompts, completions)
    loss, logp, entropy = tritonkit.grpo_loss(hidden, head, target, advantages, old_logprobs=old, ref_logprobs=ref,
                                              beta=args.beta, loss_type="dapo", temperature=args.temperature,
                                              return_logprobs=True)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    scored = target != -100
    kl = (torch.exp(ref - logp) - (ref - logp) - 1)[scored].mean()
    return loss.item(), reward.mean().item(), kl.item(), entropy[scored].mean().item()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--group", type=int, default=4, help="completions sampled per prompt")
    parser.add_argument("--prompt-len", type=int, default=6)
    parser.add_argument("--completion-len", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=0.9)
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    device = tritonkit.default_device()
    config = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(device)
    ref_model = copy.deepcopy(model).eval().requires_grad_(False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    prompts = torch.randint(1, config.vocab_size, (args.prompts, args.prompt_len), device=device)
    prompts = prompts.repeat_interleave(args.group, dim=0)
    for step in range(args.steps):
        loss, reward, kl, entropy = grpo_step(model, ref_model, optimizer, prompts, args)
        print(f"step {step}: loss {loss:+.4f}  reward {reward:.3f}  kl {kl:.5f}  entropy {entropy:.3f}")


if __name__ == "__main__":
    main()
