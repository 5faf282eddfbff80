"""tritonkit.transformers: patched Hugging Face models against the unpatched ones.

Every comparison takes the unpatched model in float64 as the reference and asks the patched
model to be within twice the unpatched model's own error in the same dtype (tests/_tolerance.py),
for logits, loss and every parameter's gradient. float32 models exercise the norms, rotary, MLP
and loss ops (attention then runs SDPA: the kernels take float16/bfloat16); float16 models
exercise the attention kernels. A part whose op is not in this tritonkit is skipped, naming it.
Generation with each KV cache is tested in test_generation.py. The rotary replacement is family-wide, so each test takes its references before patching and
the `_restore` fixture undoes the class-level changes after.
"""

from __future__ import annotations

import copy
import operator
import subprocess
import sys

import pytest
import torch

import tritonkit

transformers = pytest.importorskip("transformers")

import tritonkit.transformers as tkt  # noqa: E402
from tritonkit.transformers import _attention  # noqa: E402

from _tolerance import assert_close_to_reference, eps_for  # noqa: E402

SMALL = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _config(family: str):
    t = transformers
    return {
        "llama": lambda: t.LlamaConfig(**SMALL),
        "mistral": lambda: t.MistralConfig(**SMALL, sliding_window=8),  # shorter than the rows: the window acts
        "qwen2": lambda: t.Qwen2Config(**SMALL),
        "qwen3": lambda: t.Qwen3Config(**SMALL, head_dim=16),
        "gemma2": lambda: t.Gemma2Config(**SMALL, head_dim=16, query_pre_attn_scalar=16, sliding_window=8,
                                         attn_logit_softcapping=50.0, final_logit_softcapping=30.0),
        "gemma3": lambda: t.Gemma3TextConfig(**SMALL, head_dim=16, query_pre_attn_scalar=16, sliding_window=8,
                                             final_logit_softcapping=30.0),
        "phi3": lambda: t.Phi3Config(**SMALL, partial_rotary_factor=0.5),  # rotary on half of each head
    }[family]()


# The families since Qwen3-MoE (mixtures of experts, sinks, MLA, OLMo): test_transformers_families.py
FAMILIES = ["gemma2", "gemma3", "llama", "mistral", "phi3", "qwen2", "qwen3"]
DEVICE = tritonkit.default_device()  # CPU under the interpreter; the GPU suite runs the same on CUDA

@pytest.fixture(autouse=True)
def _restore():
    yield
    tkt.unpatch_classes()


def _model(family: str, dtype=torch.float32):
    torch.manual_seed(0)
    cls = transformers.AutoModelForCausalLM
    model = cls.from_config(_config(family), attn_implementation="sdpa").to(DEVICE, dtype)
    return model.train()


def _labels(ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    labels = ids.clone()
    labels[:, 3] = -100  # some ignored tokens
    if mask is not None:
        labels[mask == 0] = -100
    return labels


def _run(model, ids, labels, **kwargs):
    """(logits, loss, gradients by name): logits from a forward without labels, the rest with."""
    with torch.no_grad():
        logits = model(input_ids=ids, **kwargs).logits
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=labels, **kwargs).loss
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits, loss.detach(), grads


def _compare(family, parts, ids, labels, dtype=torch.float32, valid=None, setup=None, **kwargs):
    """Patched (with `parts`) against unpatched, both against the unpatched model in float64;
    `setup(model)` prepares the unpatched model before it is copied (hooks, checkpointing)."""
    base = _model(family, dtype)
    if setup is not None:
        setup(base)
    ref = _run(copy.deepcopy(base).double(), ids, labels, **kwargs)
    theirs = _run(base, ids, labels, **kwargs)
    model = tkt.patch(copy.deepcopy(base), **parts)
    ours = _run(model, ids, labels, **kwargs)
    sel = (lambda t: t[valid.bool()]) if valid is not None else (lambda t: t)
    assert_close_to_reference(sel(ours[0]), sel(ref[0]), sel(theirs[0]), what="logits")
    assert_close_to_reference(ours[1], ref[1], theirs[1], what="loss")
    assert set(ours[2]) == set(ref[2])
    for name in ref[2]:
        assert_close_to_reference(ours[2][name], ref[2][name], theirs[2][name],
                                  eps=eps_for(dtype, gradient=True), what=f"grad {name}")
    return model


def _only(part: str) -> dict:
    return {p: p == part for p in tkt.PARTS}


# Each part alone where its form differs: Llama's plain forms, Gemma's (1 + w) norm, tanh GeGLU and
# logit softcap, Phi-3's packed gate_up and half-width rotary, Qwen3's per-head q/k norms. The other
# families meet every part in the padding, packing and generate tests below.
PART_CASES = [("llama", "norms"), ("llama", "rope"), ("llama", "mlp"), ("llama", "loss"), ("gemma2", "norms"),
              ("gemma2", "mlp"), ("gemma2", "loss"), ("phi3", "rope"), ("phi3", "mlp"), ("qwen3", "norms")]


@pytest.mark.parametrize("family,part", PART_CASES)
def test_part_matches_unpatched(family, part):
    ids = torch.randint(3, 1000, (2, 16), device=DEVICE)
    model = _compare(family, _only(part), ids, _labels(ids))
    assert part in model.tritonkit_report.replaced, model.tritonkit_report


@pytest.mark.parametrize("family", FAMILIES)
def test_all_parts_with_left_padding(family):
    ids = torch.randint(3, 1000, (2, 16), device=DEVICE)
    mask = torch.ones_like(ids)
    mask[1, :5] = 0  # left padding, as generate pads a batch
    ids[mask == 0] = 0
    model = _compare(family, {}, ids, _labels(ids, mask), valid=mask, attention_mask=mask)
    report = model.tritonkit_report
    for part in tkt.PARTS:
        assert part in report.replaced or part in report.left


@pytest.mark.parametrize("family", FAMILIES)
def test_packed_sequences(family):
    # DataCollatorWithFlattening's form: one row, position ids restarting at each sequence.
    lengths = [5, 11, 3, 7]
    ids = torch.randint(3, 1000, (1, sum(lengths)), device=DEVICE)
    position_ids = torch.cat([torch.arange(n, device=DEVICE) for n in lengths])[None]
    labels = ids.clone()
    labels[0, torch.cumsum(torch.tensor(lengths), 0)[:-1].to(DEVICE)] = -100  # no token predicts across a boundary
    # use_cache=False as Trainer sets it: transformers detects packed rows only without a cache.
    _compare(family, {}, ids, labels, position_ids=position_ids, use_cache=False)


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_gradient_accumulation_num_items_in_batch(family):
    base = _model(family)
    micro = [torch.randint(3, 1000, (2, 12), device=DEVICE) for _ in range(2)]
    labels = [_labels(ids) for ids in micro]
    labels[1][:, 5:9] = -100  # micro-batches with different token counts: a mean per batch would be wrong
    count = sum(int((lab[:, 1:] != -100).sum()) for lab in labels)

    def accumulate(model):
        model.zero_grad(set_to_none=True)
        total = 0.0
        for ids, lab in zip(micro, labels):
            loss = model(input_ids=ids, labels=lab, num_items_in_batch=torch.tensor(count, device=DEVICE)).loss
            loss.backward()
            total += loss.detach()
        return total, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    ref = accumulate(copy.deepcopy(base).double())
    theirs = accumulate(base)
    ours = accumulate(tkt.patch(copy.deepcopy(base)))
    assert_close_to_reference(ours[0], ref[0], theirs[0], what="accumulated loss")
    for name in ref[1]:
        assert_close_to_reference(ours[1][name], ref[1][name], theirs[1][name],
                                  eps=eps_for(torch.float32, gradient=True), what=f"grad {name}")


# ---------------------------------------------------------------- the attention kernels (float16)

class _Layer(torch.nn.Module):
    is_causal = True


def _attend(q, k, v, mask=None, sliding_window=None, softcap=None):
    return _attention.tritonkit_attention_forward(_Layer().eval(), q, k, v, mask, scaling=0.3,
                                                  sliding_window=sliding_window, softcap=softcap)[0]


def _fallback(q, k, v, mask=None, sliding_window=None, softcap=None):
    return _attention.sdpa_fallback(q, k, v, mask, True, 0.3, sliding_window, softcap, 0.0)


def _qkv(B, Nq, Nk, dtype=torch.float16):
    def draw(heads, n):
        return torch.randn(B, heads, n, 16, dtype=dtype, device=DEVICE)
    return draw(4, Nq), draw(2, Nk), draw(2, Nk)


def _check_attention(q, k, v, valid_rows=None, **kwargs):
    ours = _attend(q, k, v, **kwargs)
    ref = _fallback(q.double(), k.double(), v.double(), **kwargs)
    theirs = _fallback(q, k, v, **kwargs)
    if valid_rows is not None:
        ours, ref, theirs = ours[valid_rows], ref[valid_rows], theirs[valid_rows]
    assert_close_to_reference(ours, ref, theirs, what="attention")


@pytest.mark.parametrize("Nq,Nk,window", [(16, 16, None), (1, 19, None), (1, 19, 8), (16, 16, 8), (5, 21, None)])
def test_attention_alignment_against_the_end_of_the_keys(Nq, Nk, window):
    # Decoding (one query against a cache) and chunked prefill: transformers aligns queries to the
    # last keys; tritonkit's causal mask is top-left. Inexpressible shapes must still be right (SDPA).
    _check_attention(*_qkv(2, Nq, Nk), sliding_window=window)


@pytest.mark.parametrize("Nq,window", [(16, None), (1, None), (5, None), (16, 5), (1, 5), (5, 5)])
def test_attention_padding_mask(Nq, window, monkeypatch):
    fallbacks = []
    monkeypatch.setattr(_attention, "_warn_fallback", lambda module, why: fallbacks.append(why))
    q, k, v = _qkv(3, Nq, 16)
    mask = torch.ones(3, 16, dtype=torch.bool, device=DEVICE)
    mask[0, :4] = False  # left padding
    mask[2, 11:] = False  # right padding
    # Padding query rows: transformers leaves them undefined, tritonkit writes zeros; compare the rest.
    _check_attention(q, k, v, valid_rows=mask[:, -Nq:], mask=mask, sliding_window=window)
    # Decoding under a window (the window's keys only) and a chunk after cached keys (each row's
    # queries end at its last key: bottom-right within each sequence) run the kernels too.
    assert not fallbacks, fallbacks
    if window is not None and Nq > 1:
        # A hole: the window counts positions, which the packed tokens no longer are. SDPA.
        mask[1, 9:11] = False
        _check_attention(q, k, v, valid_rows=mask[:, -Nq:], mask=mask, sliding_window=window)
        assert fallbacks == ["a sliding window over a padding mask with holes"], fallbacks


def test_attention_packed_rows():
    seg = torch.tensor([[0] * 5 + [1] * 8 + [2] * 3], device=DEVICE)
    _check_attention(*_qkv(1, 16, 16), mask=_attention.Packed.from_segment_ids(seg))


def test_packed_rows_pass_one_cu_seqlens(monkeypatch):
    # Packed rows give attention_varlen one tensor for the queries' and the keys' lengths: on
    # Hopper the Gluon kernels take a causal sliding window only then (docs/attention.md).
    shared = []
    varlen = tritonkit.attention_varlen

    def spy(q, k, v, cu_q, cu_k, *args, **kwargs):
        shared.append(cu_q is cu_k)
        return varlen(q, k, v, cu_q, cu_k, *args, **kwargs)

    monkeypatch.setattr(tritonkit, "attention_varlen", spy)
    seg = torch.tensor([[0] * 5 + [1] * 8 + [2] * 3], device=DEVICE)
    _check_attention(*_qkv(1, 16, 16), mask=_attention.Packed.from_segment_ids(seg), sliding_window=4)
    assert shared == [True]


def test_attention_softcap_and_4d_mask():
    q, k, v = _qkv(2, 16, 16)
    _check_attention(q, k, v, softcap=5.0)
    mask4 = torch.rand(2, 1, 16, 16, device=DEVICE) > 0.3
    mask4[..., 0] = True
    _check_attention(q, k, v, mask=mask4)


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_float16_model_through_the_attention_kernels(family):
    ids = torch.randint(3, 1000, (2, 16), device=DEVICE)
    _compare(family, _only("attention"), ids, _labels(ids), dtype=torch.float16)


@pytest.mark.parametrize("rope", [True, False])
def test_float32_model_under_autocast(rope, monkeypatch):
    # The Trainer's bf16 setup: float32 weights, a bf16 autocast region around the forward. Every
    # part patched runs its kernel (attention and the loss in bf16, as SDPA and lm_head would),
    # and the loss and gradients match the unpatched model under the same region. Without the
    # rope part, transformers' rotary embedding hands attention float32 q and k (its cos and sin
    # are float32), which attention casts as SDPA would.
    fallbacks = []
    monkeypatch.setattr(_attention, "_warn_fallback", lambda module, why: fallbacks.append(why))
    ids = torch.randint(3, 1000, (2, 16), device=DEVICE)
    labels = _labels(ids)
    base = _model("llama")
    ref = _run(copy.deepcopy(base).double(), ids, labels)

    def under_autocast(model):
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
            return _run(model, ids, labels)

    theirs = under_autocast(base)
    model = tkt.patch(copy.deepcopy(base), rope=rope)
    ours = under_autocast(model)
    assert not fallbacks and "loss" in model.tritonkit_report.replaced
    assert_close_to_reference(ours[1], ref[1], theirs[1], eps=eps_for(torch.bfloat16), what="loss")
    for name in ref[2]:
        assert ours[2][name].dtype == torch.float32
        assert_close_to_reference(ours[2][name], ref[2][name], theirs[2][name],
                                  eps=eps_for(torch.bfloat16, gradient=True), what=f"grad {name}")


# ---------------------------------------------------------------- API

def test_patched_rotary_takes_what_transformers_takes():
    # The family-wide rotary function keeps transformers' own for what tritonkit.rope does not
    # take (q and k of two dtypes, float64), with transformers' result, and runs the kernel otherwise.
    from transformers.models.llama import modeling_llama
    original = modeling_llama.apply_rotary_pos_emb
    tkt.patch(_model("llama"), **_only("rope"))
    patched = modeling_llama.apply_rotary_pos_emb
    assert patched is not original
    q, k = torch.randn(2, 4, 6, 16, device=DEVICE), torch.randn(2, 2, 6, 16, device=DEVICE)
    cos, sin = torch.randn(2, 6, 16, device=DEVICE), torch.randn(2, 6, 16, device=DEVICE)
    for qq, kk in ((q, k.to(torch.bfloat16)), (q.double(), k.double())):
        for a, b in zip(patched(qq, kk, cos, sin), original(qq, kk, cos, sin)):
            assert a.dtype == b.dtype and torch.equal(a, b)
    for a, b in zip(patched(q, k, cos, sin), original(q, k, cos, sin)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("family", ["llama", "phi3"])
def test_whole_patched_model_survives_torch_save(family, tmp_path):
    # torch.save of the whole model (not just its weights) and torch.load: the patch comes back
    # with it (the forwards set on its modules pickle as what they were made from), so the
    # reloaded model gives the same loss and gradients, bit for bit, without logits.
    import inspect
    model = tkt.patch(_model(family))
    torch.save(model, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    ids = torch.randint(3, 1000, (2, 16), device=DEVICE)
    for m in (model, loaded):
        assert "input_ids" in inspect.signature(m.forward).parameters  # what Trainer reads
    runs = [_run(m, ids, _labels(ids)) for m in (model, loaded)]
    assert runs[1][1].item() == runs[0][1].item()
    assert runs[1][2].keys() == runs[0][2].keys()
    for name in runs[0][2]:
        assert torch.equal(runs[1][2][name], runs[0][2][name]), name
    with torch.enable_grad():
        assert loaded(input_ids=ids, labels=ids).logits is None  # the patched loss, not transformers'


def test_report_names_what_was_left():
    model = tkt.patch(_model("llama", torch.float16), loss=False)
    report = model.tritonkit_report
    assert report.left == {"loss": "not requested"} and "loss: not requested" in str(report)
    base = tkt.patch(_model("llama", torch.float16).model)  # the decoder stack alone has no loss to replace
    assert base.tritonkit_report.left == {"loss": "not a LlamaForCausalLM"}, base.tritonkit_report
    # A float32 model's attention runs SDPA (the kernels only inside a float16/bfloat16 autocast region).
    assert "float32" in tkt.patch(_model("llama")).tritonkit_report.left["attention"]
    with pytest.raises(ValueError, match="family"):
        tkt.patch_classes("gpt2")
    with pytest.raises(TypeError, match="norms"):
        tkt.patch(_model("llama"), norms="yes")


def test_attn_implementation_and_patch_classes():
    config = _config("llama")
    model = transformers.LlamaForCausalLM._from_config(config, attn_implementation="tritonkit")
    assert model.config._attn_implementation == "tritonkit"
    report = tkt.patch_classes("llama")
    assert "attention" in report.replaced
    built = transformers.AutoModelForCausalLM.from_config(_config("llama")).to(DEVICE)
    assert built.config._attn_implementation == "tritonkit"
    ids = torch.randint(3, 1000, (1, 8), device=DEVICE)
    assert built(input_ids=ids).logits.shape == (1, 8, 1000)
    tkt.unpatch_classes("llama")
    assert transformers.AutoModelForCausalLM.from_config(_config("llama")).config._attn_implementation == "sdpa"


def _saved_bytes(module, x) -> int:
    """Bytes autograd saves for the backward while `module(x)` runs."""
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel() * t.element_size()) or t,
                                                  lambda t: t):
        module(x)
    return sum(saved)


@pytest.mark.parametrize("family", ["llama", "gemma2", "phi3"])
def test_patched_mlp_does_not_save_h(family, monkeypatch):
    # down_proj runs as tritonkit.gated_linear: h = act(gate) * up is recomputed in the backward,
    # so the MLP saves one (tokens x intermediate) tensor less than the swiglu/geglu path does,
    # and less than transformers' own MLP (which also keeps act(gate) and x twice).
    from tritonkit.transformers import _parts
    base = _model(family)
    x = torch.randn(2, 8, SMALL["hidden_size"], device=DEVICE, requires_grad=True)
    theirs = _saved_bytes(base.model.layers[0].mlp, x)
    patched = tkt.patch(copy.deepcopy(base), **_only("mlp"))
    assert "gated_linear" in patched.tritonkit_report.replaced["mlp"], patched.tritonkit_report
    ours = _saved_bytes(patched.model.layers[0].mlp, x)
    monkeypatch.setattr(_parts, "gated_linear_op", lambda config: None)  # the activation op alone
    unfused = _saved_bytes(tkt.patch(copy.deepcopy(base), **_only("mlp")).model.layers[0].mlp, x)
    h_bytes = 2 * 8 * SMALL["intermediate_size"] * x.element_size()
    assert ours == unfused - h_bytes and ours < theirs, (ours, unfused, theirs)


def test_patched_mlp_under_autocast_does_not_save_h(monkeypatch):
    # Under autocast gate and up come out of their projections in bf16 while down_proj's weight
    # stays float32; gated_linear casts it as down_proj would, so the fused tail still applies:
    # the same output bits and gradients, one bf16 (tokens x intermediate) tensor less saved.
    from tritonkit.transformers import _parts
    base = _model("llama")
    x = torch.randn(2, 8, SMALL["hidden_size"], device=DEVICE, requires_grad=True)

    def run(mlp):
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
            saved = _saved_bytes(mlp, x)
            out = mlp(x)
        return saved, out, torch.autograd.grad(out, (x, *mlp.parameters()), torch.ones_like(out))

    ours = run(tkt.patch(copy.deepcopy(base), **_only("mlp")).model.layers[0].mlp)
    monkeypatch.setattr(_parts, "gated_linear_op", lambda config: None)  # the activation op alone
    unfused = run(tkt.patch(copy.deepcopy(base), **_only("mlp")).model.layers[0].mlp)
    assert ours[0] == unfused[0] - 2 * 8 * SMALL["intermediate_size"] * 2, (ours[0], unfused[0])
    assert torch.equal(ours[1], unfused[1]) and ours[1].dtype == torch.bfloat16
    for a, b in zip(ours[2], unfused[2]):
        assert torch.equal(a, b)


def test_import_tritonkit_does_not_import_transformers():
    code = "import sys, tritonkit; assert 'transformers' not in sys.modules, 'transformers imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_training_step_builds_no_cache():
    # transformers' default (config.use_cache) would copy every layer's keys and values into a
    # DynamicCache (two cats a layer) in a training step; the patched loss path asks for none.
    model = tkt.patch(_model("llama"))
    ids = torch.randint(3, 1000, (1, 8), device=DEVICE)
    assert model(input_ids=ids, labels=ids).past_key_values is None
    assert model(input_ids=ids, labels=ids, use_cache=True).past_key_values is not None


# ---------------------------------------------------------------- residual adds inside the norms

class _Ops(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts aten ops by name, with the shapes of their outputs."""
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.seen.append((func.overloadpacket.__name__, tuple(out.shape) if isinstance(out, torch.Tensor) else None))
        return out

    def count(self, name, shape=None):
        return sum(1 for n, s in self.seen if n == name and (shape is None or s == shape))


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_training_step_has_no_residual_add_and_no_cache_cat(family, monkeypatch):
    from tritonkit.transformers import _residual
    ids = torch.randint(3, 1000, (2, 16), device=DEVICE)
    hidden = (2, 16, SMALL["hidden_size"])

    def count(model):  # forward adds and 4D cats, backward adds and fills, of a training step
        with _Ops() as forward:
            loss = model(input_ids=ids, labels=_labels(ids)).loss
        with _Ops() as backward:
            loss.backward()
        fills = sum(backward.count(n) for n in ("zeros", "zeros_like", "new_zeros", "zero_", "fill_", "full"))
        return (forward.count("add", hidden), sum(1 for n, s in forward.seen if n == "cat" and len(s) == 4),
                backward.count("add", hidden), fills)

    theirs, ours = count(_model(family)), count(tkt.patch(_model(family)))
    monkeypatch.setattr(_residual, "layer_fits", lambda *args: False)  # everything patched but the layers
    unfused = count(tkt.patch(_model(family)))
    layers = SMALL["num_hidden_layers"]
    assert unfused[0] == 2 * layers and ours[0] == 0, (unfused, ours)  # the adds went into the norms
    # Backward, autograd summed each residual's two gradients; the fused norms add them in-kernel
    # (the embedding's, which feeds the first norm and the first add, is still summed by autograd).
    assert unfused[2] - ours[2] == 2 * layers - 1, (unfused, ours)
    # The projections of one input (q/k/v, gate/up) sum their input gradients in the GEMMs: the
    # embedding's two gradients are the one add left.
    assert ours[2] == 1, ours
    assert theirs[1] > 0 and ours[1] == 0, (theirs, ours)  # no DynamicCache copies in a training step
    assert ours[3] == 0, ours  # no zero gradients materialised (the embedding's own zeroing is inside its op)


def test_residual_fusion_with_hooks_checkpointing_and_hidden_states():
    ids = torch.randint(3, 1000, (2, 12), device=DEVICE)
    norms = _only("norms")

    def replacing_hook(model):  # a hook that returns a new output: the next norm computes from it
        model.model.layers[0].register_forward_hook(lambda module, args, out: out * 1.5)
    _compare("llama", norms, ids, _labels(ids), setup=replacing_hook)
    # Checkpointing recomputes each layer in backward (every part: the grouped projections too).
    _compare("llama", {}, ids, _labels(ids), setup=lambda m: m.gradient_checkpointing_enable())

    # A hook that changes the output in place: the norm computed with the sum is stale and must not be used.
    base = _model("llama").eval()
    base.model.layers[0].register_forward_hook(lambda module, args, out: out.mul_(1.5))
    patched = tkt.patch(copy.deepcopy(base), **norms)
    with torch.no_grad():
        ref = base.double()(input_ids=ids, output_hidden_states=True)
        theirs = copy.deepcopy(base).float()(input_ids=ids, output_hidden_states=True)
        ours = patched(input_ids=ids, output_hidden_states=True)
    assert_close_to_reference(ours.logits, ref.logits, theirs.logits, what="logits")
    for i, (o, r, t) in enumerate(zip(ours.hidden_states, ref.hidden_states, theirs.hidden_states, strict=True)):
        assert_close_to_reference(o, r, t, what=f"hidden state {i}")
    assert all(getattr(m, "_tritonkit_ahead", None) is None for m in patched.modules())  # nothing left behind


def test_residual_fusion_under_torch_compile():
    ids = torch.randint(3, 1000, (2, 12), device=DEVICE)
    hidden = (2, 12, SMALL["hidden_size"])
    model = tkt.patch(_model("llama"))
    eager = _run(model, ids, _labels(ids))
    adds = []

    def backend(gm, example_inputs):  # the forward graphs: no add of hidden states (the fusion traced)
        adds.extend(n for n in gm.graph.nodes if n.target in (torch.add, operator.add)
                    and n.meta.get("example_value") is not None and tuple(n.meta["example_value"].shape) == hidden)
        return gm
    compiled = _run(torch.compile(model, backend=backend), ids, _labels(ids))
    assert not adds, adds
    assert torch.allclose(compiled[1], eager[1], rtol=1e-6)
    for name, grad in eager[2].items():
        assert torch.allclose(compiled[2]["_orig_mod." + name], grad, rtol=1e-5, atol=1e-7), name


def test_residual_fusion_by_patch_classes_and_unpatch():
    llama = tkt.family_of("llama")
    layer_cls, base_cls = llama.cls("DecoderLayer"), llama.cls("PreTrainedModel")
    forward = layer_cls.forward
    report = tkt.patch_classes("llama", rope=False, mlp=False, loss=False)
    assert "residual adds" in report.replaced["norms"] and "q/k/v" in report.replaced["attention"], report
    torch.manual_seed(0)
    built = transformers.AutoModelForCausalLM.from_config(_config("llama")).to(DEVICE)
    layers = built.model.layers
    assert [getattr(layer, "_tritonkit_next_norm") for layer in layers] == [layers[1].input_layernorm,
                                                                            built.model.norm]
    assert layer_cls.forward is not forward
    attn = layers[0].self_attn
    assert all(getattr(p, "_tritonkit_group")[0] == (attn.q_proj, attn.k_proj, attn.v_proj)
               for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    ids = torch.randint(3, 1000, (2, 8), device=DEVICE)
    with torch.no_grad():
        ours = built(input_ids=ids).logits
    tkt.unpatch_classes("llama")
    assert layer_cls.forward is forward and "post_init" not in vars(base_cls)
    with torch.no_grad():
        theirs = built(input_ids=ids).logits
    assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_layer_of_another_form_keeps_its_adds():
    from tritonkit.transformers import _residual

    def forward(self, hidden_states, **kwargs):  # a form with one more step: not fused
        return self.mlp(self.input_layernorm(hidden_states)) * self.scale
    assert not _residual.layer_fits(forward, _residual.LayerForm())
    llama = tkt.family_of("llama")
    assert _residual.layer_fits(llama.cls("DecoderLayer").forward, llama.layer)


# ---------------------------------------------------------------- projections of one input

@pytest.mark.parametrize("bias", [False, True])
def test_shared_linear_matches_separate_linears(bias):
    from tritonkit.transformers import _projections
    x = torch.randn(2, 7, 24, device=DEVICE, requires_grad=True)
    mods = [torch.nn.Linear(24, n, bias=bias, device=DEVICE) for n in (16, 8, 8)]
    ups = [torch.randn(2, 7, n, device=DEVICE) for n in (16, 8, 8)]
    params = [p for m in mods for p in m.parameters()]

    def grads(fn, use=(0, 1, 2), dtype=torch.float32):
        xx = x.detach().to(dtype).requires_grad_()
        ps = [p.detach().to(dtype).requires_grad_() for p in params]
        per = 2 if bias else 1
        copies = []
        for i, m in enumerate(mods):
            c = torch.nn.Linear(m.in_features, m.out_features, bias=bias, device=DEVICE, dtype=dtype)
            c.weight, c.bias = (torch.nn.Parameter(ps[per * i]), torch.nn.Parameter(ps[per * i + 1]) if bias else None)
            copies.append(c)
        outs = fn(xx, copies)
        loss = sum((outs[i] * ups[i].to(dtype)).sum() for i in use)  # outputs not in `use` get no gradient
        inputs = [xx, *[p for c in copies for p in c.parameters()]]
        return outs, torch.autograd.grad(loss, inputs, allow_unused=True)

    separate = lambda xx, ms: tuple(m(xx) for m in ms)  # noqa: E731
    shared = lambda xx, ms: _projections.shared_linear(xx, ms)  # noqa: E731
    compiled = torch.compile(shared, backend="aot_eager", fullgraph=True)
    for use in ((0, 1, 2), (0, 2)):
        ref_out, ref = grads(separate, use, torch.float64)
        theirs_out, theirs = grads(separate, use)
        for fn in (shared, compiled):
            ours_out, ours = grads(fn, use)
            for o, t in zip(ours_out, theirs_out):
                assert torch.equal(o, t)  # the same F.linear calls
            for o, r, t in zip(ours, ref, theirs):
                if t is None:  # an unused output's weight: eager gives None, AOTAutograd zeros
                    assert o is None if fn is shared else not o.any()
                else:
                    assert_close_to_reference(o, r, t, eps=eps_for(torch.float32, gradient=True), what="gradient")


@pytest.mark.parametrize("bias", [False, True])
def test_shared_linear_under_autocast(bias):
    # Float32 x and weights in a bf16 autocast region: the outputs are the separate F.linear
    # calls' bit for bit (the same casts, the same products), the gradients float32 and within
    # torch's own error, and x is cast and saved once instead of once a projection.
    from tritonkit.transformers import _projections
    torch.manual_seed(5)
    mods = [torch.nn.Linear(24, n, bias=bias, device=DEVICE) for n in (16, 8, 8)]
    x = torch.randn(2, 7, 24, device=DEVICE, requires_grad=True)
    ups = [torch.randn(2, 7, n, device=DEVICE) for n in (16, 8, 8)]
    leaves = [x, *(p for m in mods for p in m.parameters())]

    def run(fn, autocast=True):
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16, enabled=autocast):
            saved = []
            with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
                outs = fn()
        loss = sum((o.double() * u).sum() for o, u in zip(outs, ups))
        return outs, torch.autograd.grad(loss, leaves), saved

    with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
        assert _projections.shareable(mods, x)
    ours = run(lambda: _projections.shared_linear(x, mods))
    theirs = run(lambda: tuple(m(x) for m in mods))
    ref = run(lambda: tuple(torch.nn.functional.linear(x.to(torch.bfloat16).double(), m.weight.to(torch.bfloat16).double(),
                                     None if m.bias is None else m.bias.to(torch.bfloat16).double())
                            for m in mods), autocast=False)
    for o, t in zip(ours[0], theirs[0]):
        assert o.dtype == torch.bfloat16 and torch.equal(o, t)
    for o, r, t in zip(ours[1], ref[1], theirs[1]):
        assert o.dtype == torch.float32
        assert_close_to_reference(o, r, t, eps=eps_for(torch.bfloat16, gradient=True), what="gradient")
    x_copies = lambda saved: sum(t.numel() == x.numel() and t.dtype == torch.bfloat16 for t in saved)  # noqa: E731
    assert x_copies(ours[2]) == 1 and x_copies(theirs[2]) == 3, (x_copies(ours[2]), x_copies(theirs[2]))


def test_grouped_projections_fall_back_off_the_training_path():
    from tritonkit.transformers import _projections
    attn = tkt.patch(_model("llama")).model.layers[0].self_attn
    x = torch.randn(1, 5, SMALL["hidden_size"], device=DEVICE)
    with torch.no_grad():  # evaluation and generate: the plain linears, nothing left on the modules
        assert torch.equal(attn.k_proj(x), torch.nn.functional.linear(x, attn.k_proj.weight))
    assert all(getattr(m, "_tritonkit_ahead") is None for m in (attn.q_proj, attn.k_proj, attn.v_proj))
    q = attn.q_proj(x)  # the group's first call leaves k and v for their modules' calls on the same x
    assert getattr(attn.k_proj, "_tritonkit_ahead")[0] is x
    assert torch.equal(attn.v_proj(x), torch.nn.functional.linear(x, attn.v_proj.weight))
    y = x.clone()  # another tensor: k is computed anew, and what was left is dropped
    assert torch.equal(attn.k_proj(y), torch.nn.functional.linear(y, attn.k_proj.weight))
    assert getattr(attn.k_proj, "_tritonkit_ahead") is None and q.shape[-1] == attn.q_proj.out_features
    assert not _projections.shareable((attn.q_proj, torch.nn.Linear(4, 4).double()), x)
