"""Property-based fuzzing of every op in the registry over layouts that break alignment.

Each registry entry declares its fuzz cases (`OpEntry.fuzz`, built on
`tritonkit.registry._fuzz`): inputs are views into a larger buffer at a random element offset
0..15 (the data pointer anywhere relative to a 16-byte boundary), a random order of
dimensions in memory (transposes), random step slices, and sizes chosen to hit edges (1,
primes, one past a block). Every result must match a float64 reference within the error
torch itself makes in the same dtype (`_tolerance`), and nothing may raise. A new op is
covered by adding fuzz cases to its entry.

Through the interpreter in CI with a bounded number of examples; on the GPU machine the
kernels run compiled, and TRITONKIT_FUZZ_EXAMPLES=500 gives a longer search.
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tritonkit
from tritonkit import registry
from tritonkit.registry._fuzz import FuzzInputs
from _tolerance import assert_close_to_reference, eps_for
from conftest import ON_GPU

DEVICE = tritonkit.default_device()
ENTRIES = registry.entries()
CASES = [(name, case) for name, entry in ENTRIES.items() for case in entry.fuzz]


def fuzz(examples: int):
    """Hypothesis settings: `examples` per case in CI (sized so the file runs in about a
    minute through the interpreter), or TRITONKIT_FUZZ_EXAMPLES for every case. CI runs
    a fixed sequence of examples (derandomize) so that a red run is reproducible."""
    examples = int(os.environ.get("TRITONKIT_FUZZ_EXAMPLES", examples))
    return settings(max_examples=examples, deadline=None, derandomize=bool(os.environ.get("CI")),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def fuzz_eps(dtype: torch.dtype, gradient: bool = False, roundings: float = 1.0) -> float:
    """`_tolerance.eps_for`, at least one rounding of the dtype (its unit roundoff), and one ulp
    of the dtype for each rounding the result may carry (`Comparison.roundings`) where it
    carries more than one, or where Triton's interpreter truncates it (bf16).

    One rounding: the fuzz draws tiny outputs (31 two-term dot products, say), where torch's
    own error is a noisy yardstick. Both results round an intermediate (gated_linear's h) and
    a 2-term dot product with cancellation amplifies that rounding by its condition number,
    so on a few draws in a thousand torch is luckily exact where ours is not (5.1e-4 against
    torch's 1.8e-4 for fp16, while on average ours is the smaller error of the two).

    The interpreter's fp32 -> bf16 casts truncate, and a truncated result is off by up to one
    ulp per element. When the output is dominated by a few large entries (a peaked softmax
    row) the relative error of the whole tensor gets close to that bound (7.1e-3 seen for a
    781-long row at 3x randn, where the result was bit-for-bit the truncated fp32 softmax).
    A sum of truncated terms carries each term's error, all toward zero, amplified by the sum's
    condition number: a draw of gated_linear's forward, one 13-term dot product of truncated h,
    read 1.4e-2 against torch's 1.9e-3.

    Rounding to nearest does the same on a smaller scale in any dtype: each term of the sum
    carries its own rounding of h (the activation's and the product's), which the condition
    number amplifies. A float32 draw, one 128-term dot product of near-cancelling terms (out
    0.0507), read 3.5e-6 against torch's luckily exact 1.8e-8."""
    eps = max(eps_for(dtype, gradient=gradient), torch.finfo(dtype).eps / 2)
    if roundings > 1 or (dtype == torch.bfloat16 and tritonkit.INTERPRETED):
        eps = max(eps, torch.finfo(dtype).eps * roundings)
    return eps


class HypothesisDraw:
    """The registry's `Draw`, each choice a hypothesis strategy (so failures shrink and print)."""

    def __init__(self, data):
        self.data = data

    def integer(self, low, high):
        return self.data.draw(st.integers(low, high))

    def choice(self, options):
        return self.data.draw(st.sampled_from(tuple(options)))

    def boolean(self):
        return self.data.draw(st.booleans())

    def permutation(self, items):
        return self.data.draw(st.permutations(tuple(items)))


@pytest.mark.parametrize("op_name, case", CASES, ids=[f"{name}-{case.name}" for name, case in CASES])
def test_fuzz(op_name, case):
    @fuzz(case.examples)
    @given(data=st.data())
    def one_example(data):
        for compared in case.run(FuzzInputs(HypothesisDraw(data), DEVICE, ON_GPU)):
            assert_close_to_reference(compared.ours, compared.reference, compared.torch,
                                      eps=fuzz_eps(compared.precision or compared.ours.dtype, compared.gradient,
                                                   compared.roundings),
                                      what=f"{op_name} {case.name}: {compared.what}")

    one_example()


def test_every_op_is_fuzzed():
    lacking = [name for name, entry in ENTRIES.items() if not entry.fuzz]
    if lacking:
        pytest.skip(f"registry entries without fuzz cases (OpEntry.fuzz): {', '.join(lacking)}")
