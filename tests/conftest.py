import os

import pytest
import torch

import tritonkit

# Larger sizes when the kernels run compiled on a GPU (the project's GPU script).
ON_GPU = not tritonkit.INTERPRETED


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(int(os.environ.get("TRITONKIT_TEST_SEED", "0")))


def _shard() -> tuple[int, int] | None:
    """TRITONKIT_TEST_SHARD=k/n: run the k-th of n interleaved slices of the collected tests
    (k from 1), so that a suite longer than one call of the GPU machine runs in n calls."""
    spec = os.environ.get("TRITONKIT_TEST_SHARD")
    if not spec:
        return None
    try:
        k, n = (int(part) for part in spec.split("/"))
    except ValueError:
        raise pytest.UsageError(f"TRITONKIT_TEST_SHARD must be k/n, got {spec!r}") from None
    if not 1 <= k <= n:
        raise pytest.UsageError(f"TRITONKIT_TEST_SHARD must have 1 <= k <= n, got {spec!r}")
    return k, n


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device (kernels run compiled)")
    for item in items:
        if "gpu" in item.keywords and not ON_GPU:
            item.add_marker(skip_gpu)
    shard = _shard()
    if shard is not None:
        # Every process collects the same items in the same order (xdist checks it), so the
        # slices are the same in each worker; interleaving spreads each file's cases.
        k, n = shard
        config.hook.pytest_deselected(items=[item for i, item in enumerate(items) if i % n != k - 1])
        items[:] = items[k - 1::n]


@pytest.fixture
def device():
    return tritonkit.default_device()
