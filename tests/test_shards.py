"""TRITONKIT_TEST_SHARD=k/n (tests/conftest.py): the n slices of a collection are disjoint and
cover it, and a malformed value stops the run instead of running everything."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _collect(shard, *paths):
    env = dict(os.environ, TRITONKIT_TEST_SHARD=shard) if shard else {
        k: v for k, v in os.environ.items() if k != "TRITONKIT_TEST_SHARD"}
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", *paths], cwd=os.path.dirname(HERE), env=env, capture_output=True,
                          text=True)
    return done.returncode, [line for line in done.stdout.splitlines() if "::" in line], done.stdout + done.stderr


def test_slices_are_disjoint_and_cover_the_collection():
    paths = ("tests/test_add.py", "tests/test_softmax.py")
    rc, everything, _ = _collect(None, *paths)
    assert rc == 0 and len(everything) > 10
    slices = [_collect(f"{k}/3", *paths)[1] for k in (1, 2, 3)]
    assert sorted(sum(slices, [])) == sorted(everything)
    assert all(abs(len(s) - len(everything) / 3) <= 1 for s in slices)


@pytest.mark.parametrize("shard", ["3", "0/2", "3/2", "a/b"])
def test_a_bad_shard_is_refused(shard):
    rc, _, out = _collect(shard, "tests/test_add.py")
    assert rc != 0 and "TRITONKIT_TEST_SHARD" in out
