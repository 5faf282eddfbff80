"""The pytest plugin of tests/fa2/run.py: installs the flash_attn shim, deselects what
tritonkit.flash_attn does not have, draws a seeded sample of the rest, and writes a summary.

Loaded with `-p fa2_plugin` (so that pytest-xdist's workers load it too); its options are
pytest's (--fa2-*), which run.py sets. Every worker collects the same items and draws the same
sample from the seed; the controller (or the only process) writes the summary.
"""

from __future__ import annotations

import json
import os
import platform
import random
import time
from collections import Counter
from pathlib import Path

import pytest

import fa2_shim

# Tests of FlashAttention-2's parts that tritonkit.flash_attn does not have (and raises for).
UNSUPPORTED_TESTS = {
    "test_flash_attn_kvcache": "KV-cache API",
    "test_flash_attn_kvcache_paged_block_table_bounds": "KV-cache API",
    "test_flash_attn_varlen_paged_kv_num_splits": "paged KV",
    "test_flash_attn_generator_arg_must_be_none": "FA2's CUDA extension entry points (flash_attn_gpu)",
}
# Parameters that ask for what tritonkit.flash_attn does not have.
UNSUPPORTED_PARAMS = (("dropout_p", lambda p: p != 0.0, "dropout"),
                      ("paged_kv_block_size", lambda b: b is not None, "paged KV"))
SEQLEN_PARAMS = ("seqlen", "seqlen_q", "seqlen_k")
# nodeid -> outcome, features, seconds, message: what this process saw run (the controller's
# reports include its workers').
RESULTS: dict[str, dict] = {}
STARTED = time.time()


def pytest_addoption(parser):
    group = parser.getgroup("fa2", "FlashAttention-2's tests on tritonkit.flash_attn")
    group.addoption("--fa2-device", default="cuda", choices=("cuda", "cpu"))
    group.addoption("--fa2-cases", type=int, default=0, help="sample size (0: every eligible case)")
    group.addoption("--fa2-seed", type=int, default=0)
    group.addoption("--fa2-shard", default="1/1", help="k/n: the k-th of n interleaved slices of the sample")
    group.addoption("--fa2-dtypes", default="float16,bfloat16")
    group.addoption("--fa2-max-seqlen", type=int, default=0, help="0: no limit")
    group.addoption("--fa2-max-headdim", type=int, default=0, help="0: no limit")
    group.addoption("--fa2-skip-tests", default="", help="comma-separated test functions to leave out")
    group.addoption("--fa2-summary", default="", help="path of the JSON summary")


def pytest_configure(config):
    if config.getoption("--fa2-device") == "cpu":
        fa2_shim.install_cpu()
    fa2_shim.install_flash_attn()


def _left_out(config) -> dict[str, str]:
    """Test functions not collected at all (their cases are never made: the KV-cache test alone
    has some 300,000), with why."""
    skipped = filter(None, config.getoption("--fa2-skip-tests").split(","))
    return {**UNSUPPORTED_TESTS, **{name: "left out by --fa2-skip-tests" for name in skipped}}


def pytest_pycollect_makeitem(collector, name, obj):
    if name in _left_out(collector.config):
        return []
    return None


def _params(item) -> dict:
    callspec = getattr(item, "callspec", None)
    return dict(callspec.params) if callspec is not None else {}


def _why_not(item, config) -> str | None:
    """Why `item` is left out of the sample (None: it is eligible)."""
    params = _params(item)
    for param, unsupported, why in UNSUPPORTED_PARAMS:
        if param in params and unsupported(params[param]):
            return why
    dtype = params.get("dtype")
    if dtype is not None and str(dtype).removeprefix("torch.") not in config.getoption("--fa2-dtypes").split(","):
        return "dtype not in --fa2-dtypes"
    longest = max((params[p] for p in SEQLEN_PARAMS if p in params), default=0)
    if 0 < config.getoption("--fa2-max-seqlen") < longest:
        return "sequence longer than --fa2-max-seqlen"
    if 0 < config.getoption("--fa2-max-headdim") < params.get("d", 0):
        return "head dim above --fa2-max-headdim"
    return None


def _features(item) -> list[str]:
    """What a case exercises, for the summary's coverage counts."""
    p, name = _params(item), item.originalname
    found = [name] + ([f"dtype={str(p['dtype']).removeprefix('torch.')}"] if "dtype" in p else [])
    found += [flag for flag in ("causal", "local", "alibi", "kvpacked") if p.get(flag)]
    found += ["softcap"] if p.get("softcap", 0) > 0 else []
    found += [p["mha_type"]] if p.get("mha_type") in ("mqa", "gqa") else []
    found += ["varlen"] if "varlen" in name else []
    found += ["qkvpacked"] if "qkvpacked" in name else []
    if "swap_sq_sk" in p or "seqlen_q" in p:
        sq, sk = p.get("seqlen_q", p.get("seqlen")), p.get("seqlen_k", p.get("seqlen"))
        found += ["seqlen_q != seqlen_k"] if sq != sk else []
    return found


@pytest.hookimpl(trylast=True)  # after -k and -m, so that the sample is drawn from what they keep
def pytest_collection_modifyitems(config, items):
    reasons, eligible = Counter(), []
    for item in items:
        why = _why_not(item, config)
        if why is None:
            eligible.append(item)
        else:
            reasons[why] += 1
    cases = config.getoption("--fa2-cases")
    picked = sorted(random.Random(config.getoption("--fa2-seed")).sample(range(len(eligible)), cases)) \
        if 0 < cases < len(eligible) else range(len(eligible))
    k, n = (int(x) for x in config.getoption("--fa2-shard").split("/"))
    sample = [eligible[i] for i in picked][k - 1::n]
    for item in sample:
        item.user_properties.append(("fa2_features", _features(item)))
    chosen = set(map(id, sample))
    config.hook.pytest_deselected(items=[item for item in items if id(item) not in chosen])
    selection = {"tests_left_out": _left_out(config), "collected": len(items), "deselected": dict(reasons),
                 "eligible": len(eligible),
                 "sampled": len(picked), "shard": f"{k}/{n}", "in_this_shard": len(sample),
                 # what this shard's sample holds, known before any case runs
                 "shard_coverage": dict(sorted(Counter(f for item in sample for f in _features(item)).items()))}
    items[:] = sample
    summary = config.getoption("--fa2-summary")
    if summary:  # every process writes the same selection; the summary reads it
        Path(summary).with_suffix(".selection.json").write_text(json.dumps(selection))


def pytest_runtest_logreport(report):
    # "unfinished" until its call passes: a run stopped mid-case does not count that case
    entry = RESULTS.setdefault(report.nodeid, {"outcome": "unfinished", "features": [], "seconds": 0.0})
    entry["seconds"] += report.duration
    for key, value in report.user_properties:
        if key == "fa2_features":
            entry["features"] = value
    if report.failed:
        entry["outcome"] = "failed" if report.when == "call" else "error"
        lines = [line for line in report.longreprtext.splitlines() if line.startswith("E ")]
        entry["message"] = "\n".join(lines[:6])[:800] or report.longreprtext[-800:]
    elif report.passed and report.when == "call" and entry["outcome"] == "unfinished":
        entry["outcome"] = "passed"
    elif report.skipped and entry["outcome"] in ("unfinished", "passed"):
        entry["outcome"] = "skipped"
        entry["message"] = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    path = config.getoption("--fa2-summary")
    if not path or hasattr(config, "workerinput"):  # xdist's workers report to the controller
        return
    results = RESULTS
    outcomes = Counter(entry["outcome"] for entry in results.values())
    selection_file = Path(path).with_suffix(".selection.json")
    selection = json.loads(selection_file.read_text()) if selection_file.exists() else {}
    coverage = Counter(f for entry in results.values() for f in entry["features"])
    summary = {
        "fa2_test_file": os.environ.get("FA2_TEST_FILE", ""), "fa2_test_file_sha256": os.environ.get("FA2_SHA256", ""),
        "device": _device_name(config), "python": platform.python_version(), "seed": config.getoption("--fa2-seed"),
        **selection, "passed": outcomes["passed"], "failed": outcomes["failed"], "errors": outcomes["error"],
        "skipped": outcomes["skipped"], "unfinished": outcomes["unfinished"], "seconds": round(time.time() - STARTED, 1),
        # a run stopped early (Ctrl-C, or a time limit's SIGTERM) counts the cases it finished
        "interrupted": int(exitstatus) == int(pytest.ExitCode.INTERRUPTED),
        "coverage": dict(sorted(coverage.items())),
        "skip_reasons": dict(Counter(e["message"] for e in results.values() if e["outcome"] == "skipped")),
        "failures": [{"test": nodeid, "message": entry.get("message", "")} for nodeid, entry in results.items()
                     if entry["outcome"] in ("failed", "error")],
    }
    Path(path).write_text(json.dumps(summary, indent=1))
    selection_file.unlink(missing_ok=True)


def _device_name(config) -> str:
    import torch
    import triton
    where = (torch.cuda.get_device_name(0) if config.getoption("--fa2-device") == "cuda"
             else "cpu (Triton interpreter)")
    return f"{where}; torch {torch.__version__}, triton {triton.__version__}"


def pytest_terminal_summary(terminalreporter, config):
    path = config.getoption("--fa2-summary")
    if path and Path(path).exists() and not hasattr(config, "workerinput"):
        s = json.loads(Path(path).read_text())
        terminalreporter.write_line(
            f"FA2 tests on tritonkit.flash_attn: {s['passed']} passed, {s['failed']} failed, {s['errors']} errors, "
            f"{s['skipped']} skipped of {s.get('in_this_shard', '?')} sampled (shard {s.get('shard', '?')}) from "
            f"{s.get('eligible', '?')} eligible; deselected {s.get('deselected', {})}; summary: {path}")
