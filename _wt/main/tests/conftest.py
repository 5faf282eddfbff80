import os

import pytest
import torch

import tritonkit

# Larger sizes when the kernels run compiled on a GPU (the project's GPU script).
ON_GPU = not tritonkit.INTERPRETED


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(int(os.environ.get("TRITONKIT_TEST_SEED", "0")))


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device (kernels run compiled)")
    for item in items:
        if "gpu" in item.keywords and not ON_GPU:
            item.add_marker(skip_gpu)


@pytest.fixture
def device():
    return tritonkit.default_device()
