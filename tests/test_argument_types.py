"""Every public argument is type-checked: a wrong type is a TypeError naming the argument,
as torch's own functions give, never a value that passes silently (causal="no" is truthy)."""

import numpy as np
import pytest
import torch

from tritonkit._checks import check_bool, check_choice, check_float, check_int


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
