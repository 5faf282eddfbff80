"""No kernel promises alignment the launcher has not checked.

`tl.multiple_of` and `tl.max_contiguous` are promises the compiler does not verify: a
false one produces misaligned vector accesses (the seed's crash). This scans every
Python file of the package for them. A use is allowed only if it is listed in ALLOWED
with the launcher check that makes the promise true.
"""

import ast
from pathlib import Path

import tritonkit

HINTS = {"multiple_of", "max_contiguous"}
PACKAGE = Path(tritonkit.__file__).parent

# (file relative to the package, enclosing function, hint) -> the launcher check that
# guarantees it, e.g. "attention_fwd: only when q.data_ptr() % 16 == 0 and strides % 8 == 0".
ALLOWED: dict[tuple[str, str, str], str] = {}


def hints_in(source: str, filename: str):
    """((filename, enclosing function, hint), line) for each alignment hint in `source`."""
    for function in ast.walk(ast.parse(source, filename=filename)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Call):
                name = (node.func.attr if isinstance(node.func, ast.Attribute)
                        else node.func.id if isinstance(node.func, ast.Name) else None)
                if name in HINTS:
                    yield (filename, function.name, name), node.lineno


def hint_uses():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield from hints_in(path.read_text(), str(path.relative_to(PACKAGE)))


def test_scanner_finds_hints():
    source = ("@triton.jit\ndef k(x_ptr, n):\n    offs = tl.max_contiguous(tl.multiple_of(offs, 16), 16)\n"
              "def other():\n    return multiple_of(1, 2)\n")
    found = {key for key, _ in hints_in(source, "k.py")}
    assert found == {("k.py", "k", "multiple_of"), ("k.py", "k", "max_contiguous"),
                     ("k.py", "other", "multiple_of")}


def test_scanner_sees_every_module():
    files = {p.name for p in PACKAGE.rglob("*.py")}
    assert {"add.py", "softmax.py", "forward.py", "backward.py", "compiling.py"} <= files


def test_no_unchecked_alignment_hints():
    unchecked = [f"{key[0]}:{line} {key[2]} in {key[1]}" for key, line in hint_uses() if key not in ALLOWED]
    assert not unchecked, ("alignment hints without a launcher check (add the check, then list it in "
                           f"ALLOWED with its reason): {unchecked}")


def test_allow_list_has_no_stale_entries():
    used = {key for key, _ in hint_uses()}
    assert set(ALLOWED) <= used, f"ALLOWED lists uses that no longer exist: {set(ALLOWED) - used}"
