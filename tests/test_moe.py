"""tritonkit.moe_experts against the float64 per-expert loop, with torch's own error in the
same dtype as the yardstick: the output and the gradient of every input (hidden, routing
weights, both weights, both biases), for the four activations and both gate/up layouts,
uneven and empty experts, slots routed nowhere, k from 1 to 8, odd sizes, views at odd
offsets and transposed layouts, torch.compile, and bad input.

Shapes are small (the kernels run through the interpreter on the CPU): the interpreter's row
tiles are 16 rows and its blocks 32 columns, so 40 hidden and 24 intermediate columns cross a
block, and routings of a few dozen slots split experts into several tiles."""

import pytest
import torch

import tritonkit
from tritonkit.ops.moe import moe_experts_bwd, moe_experts_fwd, moe_experts_reference
from _tolerance import assert_close_to_reference, eps_for

NAMES = ("hidden", "routing_weights", "gate_up_weight", "down_weight", "gate_up_bias", "down_bias")


def _top_k(tokens, experts, k, device):
    """k distinct experts a token, at random."""
    return torch.rand(tokens, experts, device=device).topk(k, dim=1).indices


def make(tokens, hidden, width, experts, k, dtype, device, bias=False, indices=None):
    """The arguments of a call: (tensors by name, expert indices)."""
    tensors = {
        "hidden": torch.randn(tokens, hidden, device=device, dtype=dtype),
        "routing_weights": torch.randn(tokens, k, device=device).softmax(-1),
        "gate_up_weight": torch.randn(experts, 2 * width, hidden, device=device, dtype=dtype) / hidden ** 0.5,
        "down_weight": torch.randn(experts, hidden, width, device=device, dtype=dtype) / width ** 0.5,
    }
    if bias:
        tensors["gate_up_bias"] = torch.randn(experts, 2 * width, device=device, dtype=dtype) * 0.5
        tensors["down_bias"] = torch.randn(experts, hidden, device=device, dtype=dtype) * 0.5
    return tensors, _top_k(tokens, experts, k, device) if indices is None else indices


def _call(f, indices, activation, interleaved, **kw):
    def run(hidden, routing_weights, gate_up_weight, down_weight, gate_up_bias=None, down_bias=None):
        return f(hidden, indices, routing_weights, gate_up_weight, down_weight, gate_up_bias, down_bias,
                 activation=activation, interleaved=interleaved, **kw)
    return run


def _grads(f, tensors, upstream):
    leaves = {name: t.detach().requires_grad_() for name, t in tensors.items()}
    out = f(**leaves)
    return out, dict(zip(leaves, torch.autograd.grad(out, list(leaves.values()), upstream)))


def _eps(dtype, gradient=False):
    # Under the interpreter, bfloat16 casts truncate; gu, h, each weighted row and the sum are
    # four casts in a row, whose truncations all pull the same way.
    return eps_for(dtype, gradient) * (2 if dtype == torch.bfloat16 and tritonkit.INTERPRETED else 1)


def check(tensors, indices, activation="silu", interleaved=False):
    """The output and every gradient against float64, each within twice torch's own error in
    the same dtype; returns ours (output, gradients by name)."""
    dtype = tensors["hidden"].dtype
    ours = _call(tritonkit.moe_experts, indices, activation, interleaved)
    out = ours(**tensors)
    assert out.dtype == dtype and out.shape == tensors["hidden"].shape and out.is_contiguous()
    upstream = torch.randn_like(out)
    out, grads = _grads(ours, tensors, upstream)
    exact_out, exact = _grads(_call(moe_experts_reference, indices, activation, interleaved),
                              {n: t.double() for n, t in tensors.items()}, upstream.double())
    torch_out, theirs = _grads(_call(moe_experts_reference, indices, activation, interleaved, upcast=False),
                               tensors, upstream)
    assert_close_to_reference(out, exact_out, torch_out, eps=_eps(dtype))
    for name, g in grads.items():
        assert g.shape == tensors[name].shape and g.dtype == tensors[name].dtype, name
        assert_close_to_reference(g, exact[name], theirs[name], eps=_eps(dtype, gradient=True), what=f"grad {name}")
    return out, grads


# (activation, interleaved, bias): SwiGLU as Qwen3-MoE / Mixtral / DeepSeek-V3 lay it out, and
# gpt-oss's clamped one with its interleaved gate/up and its biases.
MODELS = [("silu", False, False), ("gpt_oss", True, True)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("activation, interleaved, bias", MODELS)
def test_matches_reference(activation, interleaved, bias, dtype, device):
    # 21 tokens x 3 of 5 experts: uneven experts of one to two 16-row tiles.
    tensors, indices = make(21, 40, 24, 5, 3, dtype, device, bias)
    if activation == "gpt_oss":
        tensors["hidden"] *= 4  # gate and up past the clamp's limit: its zero-gradient side
    check(tensors, indices, activation, interleaved)


@pytest.mark.parametrize("activation, interleaved", [("gelu_tanh", False), ("gelu", True)])
def test_geglu(activation, interleaved, device):
    check(*make(19, 24, 20, 4, 2, torch.float16, device, bias=True), activation, interleaved)


@pytest.mark.parametrize("tokens, hidden, width, experts, k", [
    (1, 16, 8, 4, 2),      # one token: most experts empty
    (29, 33, 40, 7, 1),    # k = 1; odd hidden size; I past one block
    (9, 20, 12, 8, 8),     # k = 8: every expert for every token
])
def test_routing_shapes(tokens, hidden, width, experts, k, device):
    check(*make(tokens, hidden, width, experts, k, torch.float32, device))


def test_uneven_empty_and_unrouted_slots(device):
    # Expert 0 takes most slots (three tiles), experts 2 and 5 none; slots with index -1 or E
    # (an expert-parallel sentinel) are routed nowhere: they add nothing, and their routing
    # weights' gradients are 0.
    tokens, experts = 40, 6
    indices = torch.stack([torch.zeros(tokens, dtype=torch.long), torch.randint(3, 5, (tokens,))], 1).to(device)
    indices[::4, 1] = 1
    indices[3, 1] = experts
    indices[7, 0] = -1
    tensors, _ = make(tokens, 24, 16, experts, 2, torch.float16, device, bias=True, indices=indices)
    _, grads = check(tensors, indices)
    assert grads["routing_weights"][3, 1] == 0 and grads["routing_weights"][7, 0] == 0
    for name in ("gate_up_weight", "down_weight", "gate_up_bias", "down_bias"):
        assert not grads[name][2].any() and not grads[name][5].any(), name


def test_views_at_odd_offsets_and_transposed_layouts(device):
    # gpt-oss's own layouts (weights stored (E, H, 2I) and (E, I, H), passed transposed),
    # hidden one element into its buffer, indices and routing weights transposed, biases
    # strided.
    tokens, hidden, width, experts, k = 18, 24, 20, 4, 2
    dtype = torch.float16
    x = torch.randn(tokens * hidden + 1, device=device, dtype=dtype)[1:].view(tokens, hidden)
    indices = _top_k(tokens, experts, k, device).t().contiguous().t()
    tensors = {
        "hidden": x,
        "routing_weights": torch.rand(k, tokens, device=device).t(),
        "gate_up_weight": (torch.randn(experts, hidden, 2 * width, device=device, dtype=dtype) / 5).transpose(1, 2),
        "down_weight": (torch.randn(experts, width, hidden, device=device, dtype=dtype) / 5).transpose(1, 2),
        "gate_up_bias": torch.randn(experts, 4 * width, device=device, dtype=dtype)[:, ::2],
        "down_bias": torch.randn(experts, hidden + 3, device=device, dtype=dtype)[:, 3:],
    }
    _, grads = check(tensors, indices, "gpt_oss", interleaved=True)
    for name in ("gate_up_weight", "down_weight"):  # in the weight's own layout
        assert grads[name].stride() == tensors[name].stride(), name


def test_deterministic_and_inference_path(device):
    # Two backward passes give the same bits; without a gradient to record the forward keeps
    # no gu and returns the same bits as with one.
    tensors, indices = make(24, 20, 16, 3, 2, torch.float16, device, bias=True)
    f = _call(tritonkit.moe_experts, indices, "silu", False)
    upstream = torch.randn(24, 20, device=device, dtype=torch.float16)
    first_out, first = _grads(f, tensors, upstream)
    second_out, second = _grads(f, tensors, upstream)
    with torch.no_grad():
        plain = f(**tensors)
    assert torch.equal(first_out, second_out) and torch.equal(first_out, plain)
    for name in first:
        assert torch.equal(first[name], second[name]), name


def test_gradients_asked_for(device):
    # Frozen experts (LoRA, a frozen router's consumer): only hidden and the routing weights
    # need gradients; the launcher's want_ flags skip the rest, and what is computed is the
    # same bits as a full backward's.
    tensors, indices = make(17, 24, 16, 4, 2, torch.float32, device, bias=True)
    args = [tensors[n] for n in ("hidden",)] + [indices] + [tensors[n] for n in NAMES[1:]]
    out, gu, *routing = moe_experts_fwd(*args, "silu", False, 1.702, 7.0)
    upstream = torch.randn_like(out)
    full = moe_experts_bwd(upstream, *args, gu, *routing, "silu", False, 1.702, 7.0)
    part = moe_experts_bwd(upstream, *args, gu, *routing, "silu", False, 1.702, 7.0, True, True, False, False)
    assert torch.equal(full[0], part[0]) and torch.equal(full[1], part[1])
    assert all(g.numel() == 0 for g in part[2:])
    leaves = {n: t.requires_grad_(n in ("hidden", "routing_weights")) for n, t in tensors.items()}
    got = torch.autograd.grad(_call(tritonkit.moe_experts, indices, "silu", False)(**leaves),
                              [leaves["hidden"], leaves["routing_weights"]], upstream)
    assert torch.equal(got[0], full[0]) and torch.equal(got[1], full[1])


def test_no_tokens(device):
    tensors, indices = make(0, 16, 8, 3, 2, torch.float32, device, bias=True)
    out, grads = _grads(_call(tritonkit.moe_experts, indices, "silu", False), tensors,
                        torch.empty(0, 16, device=device))
    assert out.shape == (0, 16)
    assert all(not g.any() for g in grads.values())


class _Layer(torch.nn.Module):
    """gpt-oss's experts as a module whose alpha and limit are attributes, as a model's are:
    under dynamic shapes dynamo leaves such floats symbolic, and the op must trace them."""

    def __init__(self, tensors):
        super().__init__()
        self.alpha, self.limit = 1.702, 7.0
        # Parameters as attributes, as a model's experts hold them (torch 2.11's dynamo cannot
        # unpack a ParameterList into a call).
        for name in NAMES[2:]:
            setattr(self, name, torch.nn.Parameter(tensors[name].detach().clone()))

    @property
    def params(self) -> list:
        return [getattr(self, name) for name in NAMES[2:]]

    def forward(self, hidden, indices, routing_weights):
        out = tritonkit.moe_experts(hidden, indices, routing_weights.softmax(-1), *self.params,
                                    activation="gpt_oss", interleaved=True, alpha=self.alpha, limit=self.limit)
        return out * hidden


def test_torch_compile_fullgraph_dynamic(device):
    # Two token counts through one graph compiled with dynamic shapes: the eager module's
    # outputs and gradients, bit for bit (the same kernels run).
    layer = _Layer(make(13, 20, 12, 4, 2, torch.float32, device, bias=True)[0])
    compiled = torch.compile(layer, fullgraph=True, dynamic=True, backend="aot_eager")
    for tokens in (13, 6):
        tensors, indices = make(tokens, 20, 12, 4, 2, torch.float32, device)
        leaves = [tensors["hidden"].requires_grad_(), tensors["routing_weights"].requires_grad_(), *layer.params]
        want = layer(leaves[0], indices, leaves[1])
        got = compiled(leaves[0], indices, leaves[1])
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        upstream = torch.randn_like(want)
        for a, e in zip(torch.autograd.grad(got, leaves, upstream), torch.autograd.grad(want, leaves, upstream)):
            torch.testing.assert_close(a, e, rtol=0, atol=0)


def test_autocast(device):
    # Inside an autocast region hidden, weights and biases are cast to its dtype, as
    # F.linear's operands are; the routing weights keep theirs, and so do the gradients.
    tensors, indices = make(9, 16, 8, 3, 2, torch.float32, device)
    leaves = {n: t.requires_grad_() for n, t in tensors.items()}
    region = torch.float16 if device.type == "cuda" else torch.bfloat16
    with torch.autocast(device.type, dtype=region):
        out = _call(tritonkit.moe_experts, indices, "silu", False)(**leaves)
    assert out.dtype == region
    grads = torch.autograd.grad(out.float().sum(), list(leaves.values()))
    assert all(g.dtype == torch.float32 for g in grads)
    cast = {n: t.detach().to(region) if n != "routing_weights" else t.detach() for n, t in tensors.items()}
    torch.testing.assert_close(out, _call(tritonkit.moe_experts, indices, "silu", False)(**cast), rtol=0, atol=0)


def test_bad_input_names_the_argument(device):
    tensors, indices = make(4, 16, 8, 3, 2, torch.float32, device, bias=True)
    f = _call(tritonkit.moe_experts, indices, "silu", False)
    bad = [
        (TypeError, "gate_up_weight", dict(gate_up_weight=tensors["gate_up_weight"].half())),
        (ValueError, "gate_up_weight", dict(gate_up_weight=tensors["gate_up_weight"][:, :7])),
        (ValueError, "down_weight", dict(down_weight=tensors["down_weight"][:, :, :4])),
        (ValueError, "down_bias", dict(down_bias=tensors["down_bias"][:2])),
        (ValueError, "routing_weights", dict(routing_weights=tensors["routing_weights"][:, :1])),
        (ValueError, "hidden", dict(hidden=tensors["hidden"][None])),
        (TypeError, "hidden", dict(hidden=[[1.0] * 16] * 4)),
    ]
    for error, name, change in bad:
        with pytest.raises(error, match=name):
            f(**{**tensors, **change})
    with pytest.raises(TypeError, match="expert_indices"):
        _call(tritonkit.moe_experts, indices.float(), "silu", False)(**tensors)
    with pytest.raises(ValueError, match="expert_indices"):
        _call(tritonkit.moe_experts, indices[:3], "silu", False)(**tensors)
    with pytest.raises(ValueError, match="activation"):
        _call(tritonkit.moe_experts, indices, "relu", False)(**tensors)
    with pytest.raises(ValueError, match="limit"):
        _call(tritonkit.moe_experts, indices, "gpt_oss", True, limit=float("nan"))(**tensors)
    with pytest.raises(TypeError, match="interleaved"):
        _call(tritonkit.moe_experts, indices, "silu", 1)(**tensors)
