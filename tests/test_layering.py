"""The package's shape: which module may import which, how long a file and a kernel's argument
list may grow. Read from the source with `ast` (nothing is imported), so the whole file costs
well under a second.

Layers, lowest first; a module may import its own layer and the ones below it, never one above
(an "upward import"), and no chain of imports may come back to where it started (a cycle).
Imports inside functions count: they are the same dependency, only deferred. Imports under
`if TYPE_CHECKING:` do not (they never run).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import runpy
import sys
from functools import cache
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "tritonkit"

# A name matches itself; "x.*" matches the package x and everything below it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # What every op stands on: the runtime, checks, layouts, launches, the op scaffold, and
    # how its declarations become torch's custom ops, autocast and DTensor rules.
    ("base", ("tritonkit._runtime", "tritonkit._triton_version", "tritonkit._cuda_context", "tritonkit._launch",
              "tritonkit._templates", "tritonkit._checks", "tritonkit._layout", "tritonkit._counters", "tritonkit._streams",
              "tritonkit._graphs", "tritonkit._autocast", "tritonkit._sharding",
              "tritonkit._dtensor", "tritonkit._op", "tritonkit._progress")),
    # The ops: kernels, launchers, declarations, public functions (each op its own parts).
    ("ops", ("tritonkit.ops.*",)),
    # The public surface built from the ops.
    ("api", ("tritonkit", "tritonkit.nn", "tritonkit.flash_attn.*")),
    # One entry per op, read by the tools and the cross-op tests.
    ("registry", ("tritonkit.registry.*",)),
    # tritonkit inside other libraries: torch.distributed, Hugging Face transformers.
    ("integrations", ("tritonkit.distributed.*", "tritonkit.transformers.*", "tritonkit.integrations.*")),
    # The two commands' work: measuring (over the registry and the integrations) and compiling.
    ("tools", ("tritonkit.bench.*", "tritonkit.inspector.*")),
    ("cli", ("tritonkit.cli", "tritonkit.__main__")),
]

# Known exceptions, each to be deleted by the change that removes it (a stale one fails).
KNOWN_CYCLES: list[set[str]] = []
KNOWN_UPWARD: set[tuple[str, str]] = set()
MAX_FILE_LINES = 600
MAX_KERNEL_PARAMETERS = 25
KNOWN_LONG_KERNELS: dict[str, set[str]] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _runtime_imports(tree: ast.AST):
    """Every Import / ImportFrom node that can run: module level or inside functions, but not
    under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in _runtime_imports_of(child))
            continue
        yield from _runtime_imports_of(node)


def _runtime_imports_of(node: ast.AST):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _runtime_imports(node)


@cache
def _graph() -> dict[str, set[str]]:
    """module -> the tritonkit modules it imports."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
                continue
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                targets.add(submodule if submodule in modules else source)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _layer(module: str) -> int | None:
    for index, (_, patterns) in enumerate(LAYERS):
        for pattern in patterns:
            if module == pattern or (pattern.endswith(".*") and (module == pattern[:-2]
                                                                 or module.startswith(pattern[:-1]))):
                return index
    return None


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_imports():
    # The reader must resolve relative, function-level and `from . import x` imports, and skip
    # TYPE_CHECKING ones, or the two tests below would pass on a graph with no edges.
    graph = _graph()
    assert "tritonkit._runtime" in graph["tritonkit"]                       # from . import _runtime
    assert "tritonkit.inspector" in graph["tritonkit.cli"]                  # inside a function
    assert "tritonkit.ops.norms._rows" in graph["tritonkit.ops.norms.rms_norm"]
    assert "tritonkit.registry" not in graph["tritonkit.registry._accuracy"]  # under TYPE_CHECKING
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_every_module_has_a_layer():
    unplaced = [m for m in _modules() if _layer(m) is None]
    assert not unplaced, f"place these modules in LAYERS: {unplaced}"


def test_no_import_cycles():
    cycles = _cycles(_graph())
    unknown = [sorted(c) for c in cycles if not any(known <= c for known in KNOWN_CYCLES)]
    stale = [sorted(known) for known in KNOWN_CYCLES if not any(known <= c for c in cycles)]
    assert not unknown, f"import cycles: {unknown}"
    assert not stale, f"these known cycles are gone: delete them from KNOWN_CYCLES: {stale}"


def test_no_upward_imports():
    upward = {(a, b) for a, targets in _graph().items() for b in targets if _layer(a) < _layer(b)}
    names = [name for name, _ in LAYERS]
    unknown = sorted(f"{a} ({names[_layer(a)]}) imports {b} ({names[_layer(b)]})" for a, b in upward - KNOWN_UPWARD)
    assert not unknown, "imports of a higher layer:\n" + "\n".join(unknown)
    stale = sorted(KNOWN_UPWARD - upward)
    assert not stale, f"these known upward imports are gone: delete them from KNOWN_UPWARD: {stale}"


def test_no_file_over_600_lines():
    long = {str(p.relative_to(SRC)): n for p in _modules().values()
            if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES}
    assert not long, f"split these files (lines): {long}"


def _kernels():
    """(path relative to the package, function name, parameter count) of every @triton.jit
    and @gluon.jit function (also under autotune or heuristics decorators)."""
    for path in _modules().values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef) and any(
                    ast.unparse(d.func if isinstance(d, ast.Call) else d) in ("triton.jit", "gluon.jit", "jit")
                    for d in node.decorator_list):
                a = node.args
                count = (len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None)
                         + (a.kwarg is not None))
                yield str(path.relative_to(PACKAGE)), node.name, count


def test_kernel_signatures_stay_short():
    kernels = list(_kernels())
    assert len(kernels) > 20  # the reader finds the kernels
    long = {(path, name): n for path, name, n in kernels
            if n > MAX_KERNEL_PARAMETERS and name not in KNOWN_LONG_KERNELS.get(path, ())}
    assert not long, f"kernels over {MAX_KERNEL_PARAMETERS} parameters (bundle them): {long}"
    present = {(path, name) for path, name, n in kernels if n > MAX_KERNEL_PARAMETERS}
    stale = sorted((path, name) for path, names in KNOWN_LONG_KERNELS.items() for name in names
                   if (path, name) not in present)
    assert not stale, f"these kernels are short now: delete them from KNOWN_LONG_KERNELS: {stale}"


# ---------------------------------------------------------------------------------------
# The public surface: what users import stays where it is
# ---------------------------------------------------------------------------------------

PUBLIC = {
    "tritonkit": ("INTERPRETED", "default_device", "add", "softmax", "attention", "attention_varlen", "rms_norm",
                  "layer_norm", "rope", "swiglu", "geglu", "gated_linear", "cross_entropy", "linear_cross_entropy",
                  "linear_logprobs", "grpo_loss", "dpo_loss", "orpo_loss", "simpo_loss", "kto_loss", "distill_loss",
                  "nn"),
    "tritonkit.nn": ("Attention", "RMSNorm", "LayerNorm", "LinearCrossEntropyLoss"),
    "tritonkit.distributed": ("ring_attention", "ring_chunks", "ring_positions", "shard_for_ring", "unshard_from_ring",
                              "register_shardings"),
    "tritonkit.inspector": ("ArgInfo", "KernelReport", "MemOp", "Occupancy", "available_ops", "build_parser",
                            "compile_report", "explain", "format_compare", "format_report", "kernel_report", "main",
                            "occupancy", "parse_arch", "record"),
    "tritonkit.transformers": ("patch", "patch_classes", "unpatch_classes", "PatchReport", "FAMILIES", "PARTS",
                               "family_of", "tritonkit_attention_forward", "tritonkit_mask"),
    "tritonkit.registry": ("OpEntry", "BenchCase", "InspectRequest", "entries", "get"),
    "tritonkit.cli": ("main",),
    # Each op's launchers and float64 reference (docs/design.md: tests and benchmarks reach each pass).
    "tritonkit.ops.add": ("add", "add_fwd", "add_reference"),
    "tritonkit.ops.softmax": ("softmax", "softmax_fwd", "softmax_bwd", "softmax_reference"),
    "tritonkit.ops.attention": ("attention", "attention_varlen", "attention_fwd", "attention_bwd",
                                "attention_varlen_fwd", "attention_varlen_bwd", "attention_reference",
                                "attention_varlen_reference"),
    "tritonkit.ops.norms": ("rms_norm", "rms_norm_fwd", "rms_norm_bwd", "rms_norm_reference", "layer_norm",
                            "layer_norm_fwd", "layer_norm_bwd", "layer_norm_reference"),
    "tritonkit.ops.rope": ("rope", "rope_fwd", "rope_bwd", "rope_reference"),
    "tritonkit.ops.gated": ("swiglu", "geglu", "swiglu_fwd", "swiglu_bwd", "geglu_fwd", "geglu_bwd",
                            "swiglu_reference", "geglu_reference"),
    "tritonkit.ops.gated_linear": ("gated_linear", "gated_linear_fwd", "gated_linear_bwd", "gated_linear_reference"),
    "tritonkit.ops.cross_entropy": ("cross_entropy", "cross_entropy_fwd", "cross_entropy_bwd",
                                    "cross_entropy_reference", "linear_cross_entropy", "linear_cross_entropy_fwd",
                                    "linear_cross_entropy_bwd", "linear_cross_entropy_reference"),
}


def test_public_names_import():
    import tritonkit

    assert set(PUBLIC["tritonkit"]) <= set(tritonkit.__all__), "a public name left tritonkit.__all__"
    missing = []
    for module_name, names in PUBLIC.items():
        if module_name == "tritonkit.transformers" and importlib.util.find_spec("transformers") is None:
            continue
        module = importlib.import_module(module_name)
        missing += [f"{module_name}.{name}" for name in names if not hasattr(module, name)]
        missing += [f"{module_name}.{name} (in __all__)" for name in getattr(module, "__all__", ())
                    if not hasattr(module, name)]
    assert not missing, f"public names gone: {missing}"


def test_python_m_tritonkit(monkeypatch, capsys):
    # `python -m tritonkit --version`, in this process (runpy runs __main__ as -m does).
    monkeypatch.setattr(sys, "argv", ["tritonkit", "--version"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_module("tritonkit", run_name="__main__")
    assert exited.value.code == 0 and capsys.readouterr().out.startswith("tritonkit ")
