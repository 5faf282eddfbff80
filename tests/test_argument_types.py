"""Every public argument is type-checked: a wrong type is a TypeError naming the argument,
as torch's own functions give, never a value that passes silently (causal="no" is truthy)."""

import functools

import numpy as np
import pytest
import torch

from tritonkit._checks import check_bool, check_choice, check_float, check_int, checked_arguments, choice_of


@pytest.mark.parametrize("check, good, bad", [
    (check_bool, [True, False], ["no", 1, 0, None, 1.0, np.float64(1.0)]),
    (check_int, [0, -3, np.int64(7)], [1.5, True, "2", None, torch.tensor(2)]),
    (check_float, [0, 1e-6, np.float32(0.5), -2.0], [True, "1e-5", None, torch.tensor(1.0), 1j]),
])
def test_scalar_checks_name_the_argument(check, good, bad):
    for value in good:
        assert check("arg", value) is value
    for value in bad:
        with pytest.raises(TypeError, match=r"^arg must be"):
            check("arg", value)


def test_optional_scalars_take_none():
    assert check_int("n", None, optional=True) is None
    assert check_float("c", None, optional=True) is None
    with pytest.raises(TypeError, match=r"^c must be a float or None, got str"):
        check_float("c", "x", optional=True)


def test_choice_is_a_type_error_for_non_strings_and_a_value_error_for_other_strings():
    assert check_choice("mode", "sum", ("mean", "sum")) == "sum"
    with pytest.raises(TypeError, match=r"^mode must be one of 'mean', 'sum', got int 1"):
        check_choice("mode", 1, ("mean", "sum"))
    with pytest.raises(ValueError, match=r"^mode must be one of 'mean', 'sum', got 'avg'"):
        check_choice("mode", "avg", ("mean", "sum"))


def test_checked_arguments_checks_positional_and_keyword_arguments():
    @checked_arguments(scale=check_float, mode=choice_of("a", "b"))
    def f(x, scale=1.0, *, mode="a"):
        return x * scale, mode

    assert f(2, 3) == (6, "a") and f(2, scale=0.5, mode="b") == (1.0, "b")
    with pytest.raises(TypeError, match=r"^scale must be a float, got str"):
        f(2, "3")
    with pytest.raises(TypeError, match=r"^mode must be one of 'a', 'b', got int 1"):
        f(2, mode=1)
    assert f.__name__ == "f"


# ---------------------------------------------------------------------------------------
# The public API: each argument of each public function, given a wrong type
# ---------------------------------------------------------------------------------------

import tritonkit  # noqa: E402

NOT_A_TENSOR = [[1.0, 2.0]]   # a list where a tensor belongs: the usual slip


def _t(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


def _rows():
    return dict(x=_t(3, 16))


def _gated():
    return dict(gate=_t(3, 16), up=_t(3, 16))


def _qkv():
    return dict(q=_t(1, 2, 4, 16, dtype=torch.float16), k=_t(1, 2, 4, 16, dtype=torch.float16),
                v=_t(1, 2, 4, 16, dtype=torch.float16))


def _varlen():
    cu = torch.tensor([0, 3, 4], dtype=torch.int32)
    return dict(q=_t(4, 2, 16, dtype=torch.float16), k=_t(4, 2, 16, dtype=torch.float16),
                v=_t(4, 2, 16, dtype=torch.float16), cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=3,
                max_seqlen_k=3)


def _sequences(n):
    """n sequences of 3 tokens through a head of 7 classes: a post-training loss's inputs."""
    return dict(hidden=_t(n, 3, 8), weight=_t(7, 8), target=torch.randint(0, 7, (n, 3)))


# name -> (function, valid arguments, {argument: a value of the wrong type})
CASES = {
    "add": (tritonkit.add, lambda: dict(x=_t(3, 5), y=_t(3, 5)),
            dict(x=NOT_A_TENSOR, y=NOT_A_TENSOR, out=NOT_A_TENSOR)),
    "softmax": (tritonkit.softmax, _rows, dict(x=NOT_A_TENSOR, dim=1.5)),
    "rms_norm": (tritonkit.rms_norm, _rows, dict(x=NOT_A_TENSOR, weight=NOT_A_TENSOR, eps="1e-6",
                                                 residual=NOT_A_TENSOR, weight_offset="1")),
    "layer_norm": (tritonkit.layer_norm, _rows, dict(x=NOT_A_TENSOR, weight=NOT_A_TENSOR, bias=NOT_A_TENSOR,
                                                     eps="1e-5", residual=NOT_A_TENSOR)),
    "rope": (tritonkit.rope, lambda: dict(q=_t(1, 2, 3, 8), k=_t(1, 1, 3, 8), cos=_t(3, 8), sin=_t(3, 8)),
             dict(q=NOT_A_TENSOR, k=NOT_A_TENSOR, cos=NOT_A_TENSOR, sin=NOT_A_TENSOR, interleaved="no")),
    "swiglu": (tritonkit.swiglu, _gated, dict(gate=NOT_A_TENSOR, up=NOT_A_TENSOR)),
    "geglu": (tritonkit.geglu, _gated, dict(gate=NOT_A_TENSOR, up=NOT_A_TENSOR, approximate=True)),
    "gated_linear": (tritonkit.gated_linear, lambda: dict(**_gated(), weight=_t(4, 16)),
                     dict(gate=NOT_A_TENSOR, up=NOT_A_TENSOR, weight=NOT_A_TENSOR, bias=NOT_A_TENSOR,
                          activation=None)),
    "cross_entropy": (tritonkit.cross_entropy, lambda: dict(logits=_t(3, 7), target=torch.tensor([0, 6, 2])),
                      dict(logits=NOT_A_TENSOR, target=NOT_A_TENSOR, ignore_index=-1.5, label_smoothing="0.1",
                           reduction=0, softcap="30", inplace_backward="no")),
    "linear_cross_entropy": (
        tritonkit.linear_cross_entropy,
        lambda: dict(hidden=_t(3, 8), weight=_t(7, 8), target=torch.tensor([0, 6, 2])),
        dict(hidden=NOT_A_TENSOR, weight=NOT_A_TENSOR, target=NOT_A_TENSOR, bias=NOT_A_TENSOR,
             ignore_index=-1.5, label_smoothing="0.1", reduction=0, softcap="30", chunk_tokens=2.0)),
    "linear_logprobs": (
        tritonkit.linear_logprobs,
        lambda: dict(hidden=_t(3, 8), weight=_t(7, 8), target=torch.tensor([0, 6, 2])),
        dict(hidden=NOT_A_TENSOR, weight=NOT_A_TENSOR, target=NOT_A_TENSOR, bias=NOT_A_TENSOR, temperature="1",
             softcap="30", ignore_index=-1.5, return_entropy="no", chunk_tokens=2.0)),
    "grpo_loss": (
        tritonkit.grpo_loss, lambda: dict(**_sequences(2), advantages=_t(2)),
        dict(hidden=NOT_A_TENSOR, weight=NOT_A_TENSOR, target=NOT_A_TENSOR, advantages=NOT_A_TENSOR,
             old_logprobs=NOT_A_TENSOR, ref_logprobs=NOT_A_TENSOR, beta="0.1", kl_estimator=3, epsilon_low="0.2",
             epsilon_high="0.3", delta="2", loss_type=0, importance_sampling_level=True, max_completion_length=3.5,
             num_items_in_batch="8", entropy_coef="0.1", policy_weights=NOT_A_TENSOR, temperature="1",
             bias=NOT_A_TENSOR, softcap="30", ignore_index=-1.5, chunk_tokens=2.0, return_logprobs="no")),
    "dpo_loss": (
        tritonkit.dpo_loss, lambda: dict(**_sequences(4), ref_chosen_logps=_t(2), ref_rejected_logps=_t(2)),
        dict(hidden=NOT_A_TENSOR, weight=NOT_A_TENSOR, target=NOT_A_TENSOR, ref_chosen_logps=NOT_A_TENSOR,
             ref_rejected_logps=NOT_A_TENSOR, beta="0.1", loss_type=0, label_smoothing="0", nll_alpha="0",
             bias=NOT_A_TENSOR, temperature="1", softcap="30", ignore_index=-1.5, chunk_tokens=2.0,
             return_logps="no")),
    "simpo_loss": (
        tritonkit.simpo_loss, lambda: _sequences(4),
        dict(hidden=NOT_A_TENSOR, weight=NOT_A_TENSOR, target=NOT_A_TENSOR, beta="2", gamma="0.5",
             label_smoothing="0", nll_alpha="0", bias=NOT_A_TENSOR, temperature="1", softcap="30",
             ignore_index=-1.5, chunk_tokens=2.0, return_logps="no")),
    "orpo_loss": (
        tritonkit.orpo_loss, lambda: _sequences(4),
        dict(hidden=NOT_A_TENSOR, weight=NOT_A_TENSOR, target=NOT_A_TENSOR, beta="0.1", bias=NOT_A_TENSOR,
             temperature="1", softcap="30", ignore_index=-1.5, chunk_tokens=2.0, return_logps="no")),
    "kto_loss": (
        tritonkit.kto_loss,
        lambda: dict(**_sequences(2), desirable=torch.tensor([True, False]), ref_logps=_t(2)),
        dict(hidden=NOT_A_TENSOR, weight=NOT_A_TENSOR, target=NOT_A_TENSOR, desirable=NOT_A_TENSOR,
             ref_logps=NOT_A_TENSOR, kl="0", beta="0.1", desirable_weight="1", undesirable_weight="1",
             bias=NOT_A_TENSOR, temperature="1", softcap="30", ignore_index=-1.5, chunk_tokens=2.0,
             return_logps="no")),
    "distill_loss": (
        tritonkit.distill_loss,
        lambda: dict(hidden=_t(3, 8), weight=_t(7, 8), teacher_hidden=_t(3, 8), teacher_weight=_t(7, 8)),
        dict(hidden=NOT_A_TENSOR, weight=NOT_A_TENSOR, teacher_hidden=NOT_A_TENSOR, teacher_weight=NOT_A_TENSOR,
             target=NOT_A_TENSOR, kind=1, beta="0.5", temperature="1", bias=NOT_A_TENSOR,
             teacher_bias=NOT_A_TENSOR, ignore_index=-1.5, reduction=0, chunk_tokens=2.0)),
    "moe_experts": (
        tritonkit.moe_experts,
        lambda: dict(hidden=_t(3, 8), expert_indices=torch.tensor([[0, 1], [1, 0], [0, 0]]),
                     routing_weights=_t(3, 2), gate_up_weight=_t(2, 8, 8), down_weight=_t(2, 8, 4)),
        dict(hidden=NOT_A_TENSOR, expert_indices=NOT_A_TENSOR, routing_weights=NOT_A_TENSOR,
             gate_up_weight=NOT_A_TENSOR, down_weight=NOT_A_TENSOR, gate_up_bias=NOT_A_TENSOR,
             down_bias=NOT_A_TENSOR, activation=1, interleaved="no", alpha="1.7", limit="7")),
    "attention": (tritonkit.attention, _qkv,
                  dict(q=NOT_A_TENSOR, k=NOT_A_TENSOR, v=NOT_A_TENSOR, causal="no", scale="0.5",
                       window=(1.5, 0), softcap="30", causal_alignment=1, alibi_slopes=NOT_A_TENSOR,
                       sinks=NOT_A_TENSOR, return_lse="yes")),
    "attention_varlen": (tritonkit.attention_varlen, _varlen,
                         dict(q=NOT_A_TENSOR, k=NOT_A_TENSOR, v=NOT_A_TENSOR, cu_seqlens_q=NOT_A_TENSOR,
                              cu_seqlens_k=NOT_A_TENSOR, max_seqlen_q=3.0, max_seqlen_k="3", causal="no",
                              scale="0.5", window=(0, "1"), softcap="30", causal_alignment=1,
                              alibi_slopes=NOT_A_TENSOR, sinks=NOT_A_TENSOR, return_lse="yes")),
    # the modules: their constructors' arguments, and what forward takes
    "nn.Attention": (tritonkit.nn.Attention, lambda: dict(dim=32, num_heads=2),
                     dict(dim=32.0, num_heads="2", num_kv_heads=1.0, causal="no", bias="no",
                          dtype="float16")),
    "nn.RMSNorm": (tritonkit.nn.RMSNorm, lambda: dict(normalized_shape=8),
                   dict(normalized_shape=8.0, eps="1e-6", elementwise_affine="no", weight_offset="1",
                        dtype="float16")),
    "nn.LayerNorm": (tritonkit.nn.LayerNorm, lambda: dict(normalized_shape=8),
                     dict(normalized_shape="8", eps="1e-5", elementwise_affine="no", bias="no",
                          dtype="float16")),
    "nn.LinearCrossEntropyLoss": (tritonkit.nn.LinearCrossEntropyLoss, dict,
                                  dict(ignore_index=-1.5, label_smoothing="0.1", reduction=0, softcap="30",
                                       chunk_tokens=2.0)),
}

# tritonkit.distributed: the wrong types are refused before any process group is needed
# (the valid calls below stop at the missing process group instead)
DISTRIBUTED = {
    "distributed.ring_attention": ("ring_attention", lambda: dict(**_qkv(), causal=False),
                                   dict(q=NOT_A_TENSOR, k=NOT_A_TENSOR, v=NOT_A_TENSOR, causal="no",
                                        group="world", scale="0.5")),
    "distributed.shard_for_ring": ("shard_for_ring", lambda: dict(x=_t(1, 2, 8, 16)),
                                   dict(x=NOT_A_TENSOR, dim=2.0, group="world")),
    "distributed.unshard_from_ring": ("unshard_from_ring", lambda: dict(shard=_t(1, 2, 8, 16)),
                                      dict(shard=NOT_A_TENSOR, dim=2.0, group="world")),
    "distributed.ring_positions": ("ring_positions", lambda: dict(seq_len=8),
                                   dict(seq_len=8.0, group="world", device=1.5)),
    "distributed.ring_chunks": ("ring_chunks", lambda: dict(world_size=2, rank=0),
                                dict(world_size=2.0, rank="0")),
}


def _distributed(name: str):
    import tritonkit.distributed
    return getattr(tritonkit.distributed, name)


def _call_distributed(name: str, **arguments):
    return _distributed(name)(**arguments)


CASES.update({key: (functools.partial(_call_distributed, name), valid, wrong)
              for key, (name, valid, wrong) in DISTRIBUTED.items()})


def _cases():
    for function, (_, _, wrong) in CASES.items():
        for argument in wrong:
            yield pytest.param(function, argument, id=f"{function}-{argument}")


@pytest.mark.parametrize("function, argument", list(_cases()))
def test_a_wrong_type_is_a_type_error_naming_the_argument(function, argument):
    fn, valid, wrong = CASES[function]
    arguments = valid()
    arguments[argument] = wrong[argument]
    with pytest.raises(TypeError, match=rf"\b{argument}\b"):
        fn(**arguments)


@pytest.mark.parametrize("function", list(CASES))
def test_the_valid_calls_run(function):
    # The baseline of the test above: each call fails only for the argument it was given.
    fn, valid, _ = CASES[function]
    if function in DISTRIBUTED and function != "distributed.ring_chunks":
        with pytest.raises(ValueError, match="process group"):
            fn(**valid())
    else:
        fn(**valid())


def test_every_public_argument_is_covered():
    import inspect
    public = {name: getattr(tritonkit, name) for name in tritonkit.__all__
              if callable(getattr(tritonkit, name)) and name not in ("default_device",)}
    public.update({f"nn.{name}": getattr(tritonkit.nn, name)
                   for name in ("Attention", "RMSNorm", "LayerNorm", "LinearCrossEntropyLoss")})
    public.update({key: _distributed(name) for key, (name, _, _) in DISTRIBUTED.items()})
    missing = []
    for name, fn in public.items():
        if name not in CASES:
            missing.append(name)
            continue
        params = set(inspect.signature(fn).parameters) - {"device"}
        missing += [f"{name}({p})" for p in sorted(params - set(CASES[name][2]))]
    assert not missing, f"arguments without a wrong-type case: {missing}"
