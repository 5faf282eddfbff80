"""Every op under `torch.compile(dynamic=True, fullgraph=True)`, called from a module whose float
options (an eps, a scale, a softcap, label smoothing) are attributes, as a model's are.

Under dynamic shapes dynamo does not specialize such floats: the ops' checks see symbolic
floats, and must trace them without a graph break. Two sizes run through one compiled module;
its outputs and gradients are the eager module's, bit for bit (the same kernels run; the
module returns the ops' outputs themselves, since a reduction of them that inductor generates
may add in another order than torch's eager kernel).
"""

import pytest
import torch

import tritonkit

BF16 = torch.bfloat16


class Block(torch.nn.Module):
    """A little of everything a decoder layer calls, its float options as attributes."""

    def __init__(self, device):
        super().__init__()
        self.eps, self.ln_eps, self.offset = 1e-5, 1e-6, 1.0
        self.scaling, self.cap, self.smoothing, self.final_cap = 0.3, 20.0, 0.1, 30.0
        # One parameter a use: a parameter used twice sums its gradients in an order that
        # differs between eager autograd and the compiled graph (in bf16, not bit for bit).
        self.rms_w, self.ln_w, self.ln_b = (torch.nn.Parameter(torch.randn(32, device=device, dtype=BF16))
                                            for _ in range(3))
        self.head = torch.nn.Parameter(torch.randn(40, 32, device=device, dtype=BF16))

    def forward(self, x, q, k, cos, sin, gate, target):
        h = tritonkit.rms_norm(x, self.rms_w, self.eps, weight_offset=self.offset)
        h = tritonkit.layer_norm(h, self.ln_w, self.ln_b, self.ln_eps)
        q, k = tritonkit.rope(q, k, cos, sin)
        o = tritonkit.attention(q, k, k, causal=True, scale=self.scaling, softcap=self.cap)
        a = tritonkit.swiglu(gate)
        loss = tritonkit.linear_cross_entropy(h, self.head, target, label_smoothing=self.smoothing,
                                              softcap=self.final_cap)
        return loss, o, a


def _inputs(n, device):
    leaf = lambda *s: torch.randn(*s, device=device, dtype=BF16).requires_grad_()  # noqa: E731
    return (leaf(n, 32), leaf(1, 2, n, 16), leaf(1, 1, n, 16), torch.randn(1, n, 16, device=device, dtype=BF16),
            torch.randn(1, n, 16, device=device, dtype=BF16), leaf(n, 48), torch.randint(0, 40, (n,), device=device))


def test_module_floats_trace_under_dynamic_shapes(device):
    torch.manual_seed(0)
    block = Block(device)
    compiled = torch.compile(block, dynamic=True, fullgraph=True)
    for n in (9, 14):
        inputs = _inputs(n, device)
        leaves = [t for t in (*inputs, *block.parameters()) if t.requires_grad]
        want = block(*inputs)
        upstream = [torch.randn_like(w) for w in want]
        want_grads = torch.autograd.grad(want, leaves, upstream)
        got = compiled(*inputs)
        got_grads = torch.autograd.grad(got, leaves, upstream)
        for g, w in zip(got, want):
            assert torch.equal(g, w)
        for g, w in zip(got_grads, want_grads):
            assert torch.equal(g, w)


@pytest.mark.parametrize("bad, error", [(float("nan"), ValueError), (float("inf"), ValueError),
                                        (-1e-5, ValueError)])
def test_bad_eps_is_still_refused_when_compiled(bad, error, device):
    norm = torch.ones(8, device=device)

    class Norm(torch.nn.Module):
        eps = bad

        def forward(self, x):
            return tritonkit.rms_norm(x, norm, self.eps)

    # (Without fullgraph: dynamo hands a raised error back to eager Python, which raises it.)
    with pytest.raises(error, match="eps"):
        torch.compile(Norm(), dynamic=True)(torch.randn(4, 8, device=device))
