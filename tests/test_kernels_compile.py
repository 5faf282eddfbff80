"""Every kernel of every op in the registry, as its passes launch it at the entry's default
input, through Triton's front end for sm_90 (specialisation, the compiled kernel's key, Python
to TTIR): what the GPU compiler refuses and the interpreter runs (module globals that are not
constexprs, nested tuple targets in a kernel, parameter names Triton's binder reserves) fails
here on the CPU, in seconds, rather than on the first GPU run. (`tritonkit inspect` compiles
to PTX and SASS; tests/test_inspector.py does that for the kernels whose code it checks.)"""

import pytest

from tritonkit import registry
from tritonkit.inspector.api import record
from tritonkit.inspector.compiling import frontend
from tritonkit.registry import InspectRequest

PASSES = [(name, pass_name) for name, entry in registry.entries().items() for pass_name in entry.passes]


@pytest.mark.parametrize("name,pass_name", PASSES, ids=[f"{n}-{p}" for n, p in PASSES])
def test_every_kernel_lowers_for_hopper(name, pass_name):
    launches = record(name, pass_name, InspectRequest(), arch=90)
    assert launches, f"{name} {pass_name} launched nothing"
    for launch in launches:
        ttir = frontend(launch, 90)
        assert "tt.func" in ttir, (name, pass_name, launch.name)
