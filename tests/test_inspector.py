"""`tritonkit inspect` pins the fast paths: what each op compiles to for sm_90, on the CPU.

Triton compiles for the H200 without a GPU, so these run in CI. They read the PTX facts
that `tritonkit.inspector.compile_report` returns: widths of global loads and stores per
pointer argument, tensor-core instructions, the specialisation of each argument.
"""

import json
import re

import pytest
import torch

import tritonkit
from tritonkit import inspector
from tritonkit.inspector import compile_report, main, occupancy
from _tolerance import assert_close_to_reference

SMALL = (1 << 16,)          # several full blocks of the contiguous add path, quick to build


def only(reports, launch=None):
    chosen = [r for r in reports if launch is None or r.launch == launch]
    assert len(chosen) == 1, [r.launch for r in reports]
    return chosen[0]


def instructions(report, arg):
    return {m.instruction for m in report.memory if arg in m.args}


@pytest.mark.parametrize("dtype,vector", [("fp32", "ld.global.v4.b32"), ("bf16", "ld.global.v4.b32"),
                                          ("fp16", "ld.global.v4.b32")])
def test_add_aligned_gets_128_bit_loads(dtype, vector):
    report = only(compile_report("add", shape=SMALL, dtype=dtype))
    for arg in ("x_ptr", "y_ptr"):
        assert report.arg(arg).bytes_past_16 == 0 and report.arg(arg).divisible_by_16
        assert report.load_widths(arg) == {128}, instructions(report, arg)
        assert vector in instructions(report, arg)
    assert {m.bits for m in report.stores("out_ptr")} == {128}
    assert report.tensor_cores == {"wgmma": 0, "wgmma_register_a": 0, "mma": 0}
    assert report.registers > 0 and report.occupancy.blocks_per_sm >= 1


@pytest.mark.parametrize("dtype,scalar", [("fp32", "ld.global.b32"), ("bf16", "ld.global.b16")])
def test_add_offset_view_gets_narrower_loads_and_right_result(dtype, scalar, device):
    report = only(compile_report("add", shape=SMALL, dtype=dtype, offset=1))
    x = report.arg("x_ptr")
    assert x.bytes_past_16 == x.element_size and not x.divisible_by_16
    assert max(report.load_widths("x_ptr")) < 128
    assert scalar in instructions(report, "x_ptr")
    assert report.load_widths("x_ptr") == {8 * x.element_size}     # one element per load
    assert report.arg("out_ptr").bytes_past_16 == 0                 # a fresh output stays aligned

    # The misaligned variant is still correct when it runs.
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    buffer = torch.randn(4099, device=device, dtype=torch_dtype)
    a, b = buffer[1:4097], buffer[2:4098]
    assert_close_to_reference(tritonkit.add(a, b), a.double() + b.double(), a + b)


def test_specialisation_matches_the_launch():
    from tritonkit.registry import InspectRequest
    (launch,) = inspector.record("add", "fwd", InspectRequest(shape=(4096, 4096)))
    report = only(compile_report("add", shape=(4096, 4096)))
    # What the launcher chose is what was compiled.
    assert report.constexprs == {k: inspector._value_text(v) for k, v in launch.constexprs.items()}
    assert report.grid == tuple(launch.grid) + (1,) * (3 - len(launch.grid))
    assert (report.num_warps, report.num_stages) == (launch.num_warps, launch.num_stages)
    assert report.config_source == "launcher"
    # Triton's rules: ints divisible by 16 get the hint, ints equal to 1 become constants.
    for arg, value in zip(report.args, launch.args):
        if isinstance(value, int) and value == 1:
            assert arg.equal_to_1 and arg.type == "constexpr"
        elif isinstance(value, int):
            assert arg.divisible_by_16 == (value % 16 == 0), (arg.name, value)
    assert report.arg("n_elements").value == str(4096 * 4096)
    odd = only(compile_report("add", shape=(1001,)))
    assert odd.arg("n_elements").divisible_by_16 is False


def test_softmax_aligned_fp32_gets_128_bit_loads():
    reports = compile_report("softmax", shape=(64, 4096), dtype="fp32")
    fwd, bwd = only(reports, "softmax_fwd"), only(reports, "softmax_bwd")
    assert fwd.load_widths("a_ptr") == {128}
    assert {m.bits for m in fwd.stores("out_ptr")} == {128}
    assert bwd.load_widths("a_ptr") == {128} and bwd.load_widths("b_ptr") == {128}

    shifted = only(compile_report("softmax", pass_="fwd", shape=(64, 4096), dtype="fp32", offset=1))
    assert max(shifted.load_widths("a_ptr")) < 128


def test_occupancy_arithmetic():
    full = occupancy(registers=32, shared=0, num_warps=8)
    assert (full.blocks_per_sm, full.percent, full.by_warps) == (8, 100.0, 8)
    # 40 registers: 1280 per warp, 16384 // 1280 = 12 warps per quarter, 48 // 8 = 6 blocks.
    assert occupancy(registers=40, shared=0, num_warps=8).blocks_per_sm == 6
    heavy = occupancy(registers=255, shared=0, num_warps=4)
    assert heavy.limited_by == "registers" and heavy.blocks_per_sm == 2
    smem = occupancy(registers=32, shared=100 * 1024, num_warps=4)
    assert smem.limited_by == "shared memory" and smem.blocks_per_sm == 2
    assert occupancy(registers=32, shared=228 * 1024, num_warps=4).blocks_per_sm == 0
    assert any("65536" in line or "16384" in line for line in full.arithmetic)


def test_arch_parsing():
    assert inspector.parse_arch("sm_90") == inspector.parse_arch("sm90a") == 90
    assert inspector.parse_arch(80) == 80
    if tritonkit.INTERPRETED:
        assert inspector.parse_arch(None) == 90
    with pytest.raises(ValueError):
        inspector.parse_arch("hopper")


def test_interpreted_helpers_are_restored_after_compiling():
    import triton.language as tl
    before = (tl.max, tl.sum, tl.tensor.__dict__.get("sum"))
    compile_report("softmax", pass_="fwd", shape=(4, 300))
    assert (tl.max, tl.sum, tl.tensor.__dict__.get("sum")) == before
    x = torch.randn(3, 50, device=tritonkit.default_device())   # and kernels still run
    assert torch.allclose(tritonkit.softmax(x, -1), torch.softmax(x, -1), atol=1e-6)


def run_cli(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_compare_explain(capsys):
    code, out, _ = run_cli(capsys, "add", "--shape", "65536", "--compare", "--offset", "1", "--explain")
    assert code == 0
    assert "offset 0 (aligned)" in out and "offset 1" in out
    assert "ld.global.v4.b32" in out and "ld.global.b32" in out
    assert "4 B past 16-byte boundary" in out
    assert "x_ptr is a view 4 bytes past a 16-byte boundary" in out
    assert "128-bit loads (ld.global.v4.b32)" in out


def test_cli_json(capsys):
    code, out, _ = run_cli(capsys, "add", "--shape", "65536", "--dtype", "fp16", "--offset", "3", "--json")
    assert code == 0
    data = json.loads(out)
    (kernel,) = data["kernels"]
    assert data["arch"] == "sm_90" and kernel["kernel"] == "_add_kernel"
    x = next(a for a in kernel["args"] if a["name"] == "x_ptr")
    assert x["bytes_past_16"] == 6 and "NOT 16-byte aligned" in x["specialisation"]
    loads = [m for m in kernel["memory"] if "x_ptr" in m["args"] and m["kind"] == "load"]
    assert loads and max(m["bits"] for m in loads) < 128
    assert kernel["occupancy"]["blocks_per_sm"] >= 1 and kernel["registers"] > 0


def test_cli_emit_ptx_and_report(capsys):
    code, out, _ = run_cli(capsys, "add", "--shape", "65536", "--emit", "ptx", "--explain")
    assert code == 0
    assert ".visible .entry _add_kernel" in out and ".target sm_90a" in out
    assert "occupancy on sm_90" in out and "what it means" in out


def test_cli_errors(capsys):
    code, _, err = run_cli(capsys, "add", "--pass", "bwd")
    assert code == 2 and "has no pass 'bwd'" in err
    code, _, err = run_cli(capsys, "nosuchop")
    assert code == 2 and "unknown op" in err
    code, out, _ = run_cli(capsys, "--list")
    assert code == 0 and "add" in out and "softmax" in out


# Attention: written against its catalogue entry; skipped until that entry exists.

def _attention_entry_present() -> bool:
    return "attention" in inspector.available_ops()


@pytest.mark.skipif(not _attention_entry_present(), reason="attention's catalogue entry has not landed")
def test_attention_uses_wgmma_on_hopper():
    # The Triton kernels (at D=128 the forward's dispatch picks the Gluon kernel on sm_90:
    # tests/test_inspector_gluon.py).
    reports = compile_report("attention", dtype="bf16", shape=(2, 8, 1024, 128), arch="sm_90", path="triton")
    mma_kernels = [r for r in reports if r.launch in ("attention_fwd", "attention_bwd_dkdv", "attention_bwd_dq")]
    assert {r.launch for r in mma_kernels} == {"attention_fwd", "attention_bwd_dkdv", "attention_bwd_dq"}
    for r in mma_kernels:
        assert r.tensor_cores["wgmma"] > 0 and r.tensor_cores["mma"] == 0, (r.kernel, r.tensor_cores)
        assert "HGMMA" in " ".join(r.sass_memory), r.sass_memory
        # The inspector sees the GPU's launch (autotuned, or the fixed GPU config when
        # TRITONKIT_AUTOTUNE=0), not the interpreter's 16-32 row tiles.
        assert r.config_source.startswith("autotune") or r.config_source == "launcher", r.config_source
        assert int(r.constexprs["BLOCK_M"]) >= 64 or int(r.constexprs["BLOCK_N"]) >= 64, r.constexprs
        # The fixed D=128 dK/dV tile (64x128, 8 warps; fastest on the H200) spills 8 bytes.
        assert r.spill_stores <= 64 and r.occupancy.blocks_per_sm >= 1, (r.kernel, r.spill_stores)
    # Aligned q, k, v: the forward reads them through tensor descriptors (TMA), whose tile is
    # the config's (the kernel's pre-run hook sets it, the inspector runs the hook too).
    fwd = only([r for r in reports if r.pass_name == "fwd"], "attention_fwd")  # the plain mask's
    assert fwd.tma and not fwd.cp_async and fwd.constexprs["USE_TMA"] == "True"
    block_m, block_n = fwd.constexprs["BLOCK_M"], fwd.constexprs["BLOCK_N"]
    block_d = re.search(r"\bqk=(\d+)", fwd.constexprs["HEAD"]).group(1)  # HeadTiles(qk=..., ...)
    for name, rows in (("Q", block_m), ("K", block_n), ("V", block_n)):
        arg = fwd.arg(name)
        assert arg.kind == "tensor descriptor" and arg.bytes_past_16 == 0
        assert arg.type == f"tensordesc<bf16[1, 1, {rows}, {block_d}]>", arg.type
        assert {m.kind for m in fwd.loads(name)} == {"tma load"}, instructions(fwd, name)
    # The pointer path (--no-tma) stages the same tiles with 16-byte cp.async.
    pointer = only(compile_report("attention", pass_="fwd", dtype="bf16", shape=(2, 8, 1024, 128), tma=False,
                                  path="triton"))
    assert not pointer.tma and pointer.constexprs["USE_TMA"] == "False"
    for name in ("Q", "K", "V"):
        assert pointer.load_widths(name) == {128}, (name, instructions(pointer, name))


@pytest.mark.skipif(not _attention_entry_present(), reason="attention's catalogue entry has not landed")
@pytest.mark.parametrize("tma", [None, False], ids=["descriptors", "pointers"])
def test_attention_softcap_uses_the_tanh_instruction_and_a_spill_free_dkdv_tile(tma):
    # Compiled for the GPU, the softcap's tanh is one tanh.approx.f32 an element (the
    # interpreter, which cannot run PTX, takes the exact formula: ops/attention/triton_score.py), in
    # every pass; at D=128 its dK/dV tile streams 32-row query blocks past 128 keys on two
    # warpgroups, without spilling. (The Triton kernels: on sm_90 the Gluon forward takes this
    # call; tests/test_inspector_gluon.py has its softcap.)
    reports = [r for p in ("fwd_softcap", "bwd_softcap")
               for r in compile_report("attention", pass_=p, dtype="bf16", shape=(2, 8, 1024, 128), tma=tma,
                                       path="triton")
               if r.launch in ("attention_fwd", "attention_bwd_dkdv", "attention_bwd_dq")]
    assert {r.launch for r in reports} == {"attention_fwd", "attention_bwd_dkdv", "attention_bwd_dq"}
    for r in reports:
        assert "tanh_approx=True" in r.constexprs["SCORE"], r.kernel
        assert "tanh.approx.f32" in r.asm["ptx"], r.kernel
    dkdv = only(reports, "attention_bwd_dkdv")
    assert (dkdv.constexprs["BLOCK_M"], dkdv.constexprs["BLOCK_N"], dkdv.num_warps) == ("32", "128", 8)
    assert dkdv.spill_stores == 0 and dkdv.spill_loads == 0, (dkdv.spill_stores, dkdv.spill_loads)


@pytest.mark.skipif(not _attention_entry_present(), reason="attention's catalogue entry has not landed")
def test_packed_attention_dkdv_tiles():
    # Packed sequences at D=128 on the Triton kernels (on Hopper the Gluon ones take them through
    # descriptors): through descriptors the plain one-warpgroup tile, which spills a little and
    # measured faster than the busy tile all the same (bounded here so that the spills cannot
    # grow unnoticed); through pointers the busy two-warpgroup tile, spill-free.
    for tma, tile, bound in ((None, ("64", "64", 4), 128), (False, ("32", "128", 8), 0)):
        dkdv = only(compile_report("attention_varlen", pass_="bwd", dtype="bf16", shape=(4, 8, 256, 128), tma=tma,
                                   causal=True, path="triton"), "attention_bwd_dkdv")
        assert (dkdv.constexprs["BLOCK_M"], dkdv.constexprs["BLOCK_N"], dkdv.num_warps) == tile
        assert dkdv.spill_stores <= bound and dkdv.spill_loads <= bound, (tma, dkdv.spill_stores, dkdv.spill_loads)


@pytest.mark.skipif(not _attention_entry_present(), reason="attention's catalogue entry has not landed")
def test_attention_tensor_descriptors_only_for_aligned_inputs():
    # Inputs one element into their buffer: no descriptor may cover them.
    for pass_name in inspector.available_ops()["attention"].passes:
        for report in compile_report("attention", pass_=pass_name, dtype="fp16", offset=1):
            assert not report.tma, f"{report.kernel} uses TMA on a misaligned input"
            assert all(a.kind != "tensor descriptor" for a in report.args)


@pytest.mark.skipif(not _attention_entry_present(), reason="attention's catalogue entry has not landed")
@pytest.mark.parametrize("extra,tma", [((), True), (("--no-tma",), False), (("--offset", "1"), False)])
def test_attention_cli_says_which_path(capsys, extra, tma):
    # The Triton forward (causal at D=64, which the Gluon kernel leaves to it): tensor
    # descriptors (TMA) for the aligned input; pointers with --no-tma and for a view one element
    # into its buffer.
    code, out, _ = run_cli(capsys, "attention", "--pass", "fwd", "--shape", "1,2,256,64", "--dtype", "bf16",
                           "--causal", *extra)
    assert code == 0
    assert ("TMA (cp.async.bulk.tensor): yes (tensor descriptors: Q, K, V)" in out) is tma, out
    assert ("TMA (cp.async.bulk.tensor): no" in out) is not tma
    assert ("pointer path (--no-tma)" in out) is (extra == ("--no-tma",))


def test_loop_sync_counts_innermost_loops():
    from tritonkit.inspector.assembly import _loop_sync
    ptx = """
$L__BB0_1:
    bar.sync 0;
$L__BB0_2:
    wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {...};
    wgmma.commit_group.sync.aligned;
    wgmma.wait_group.sync.aligned 1;
    waitLoop:
    mbarrier.try_wait.parity.shared.b64 complete, [%r1], %r2;
    @!complete bra.uni waitLoop;
    bar.sync 0;
    barrier.sync 1, 256;
    wgmma.wait_group.sync.aligned 0;
    @%p1 bra $L__BB0_2;
    @%p2 bra $L__BB0_1;
$L__BB0_3:
    @%p3 bra $L__BB0_4;
$L__BB0_4:
    ret;
"""
    # The inner loop only (the outer one holds it; a forward branch closes no loop).
    (loop,) = _loop_sync(ptx, block_threads=256)
    assert loop.label == "$L__BB0_2" and loop.cta_barriers == 2 and loop.wgmma == 1
    # In a 384-thread (warp-specialized) block, barrier.sync 1, 256 is not CTA-wide.
    assert _loop_sync(ptx, block_threads=384)[0].cta_barriers == 1
    assert loop.wgmma_waits == (1, 0) and loop.mbarrier_waits == 1


@pytest.mark.skipif(not _attention_entry_present(), reason="attention's catalogue entry has not landed")
@pytest.mark.parametrize("seq, warpgroups", [(4096, 2), (2048, 1)])
def test_attention_forward_loop_sync_is_reported_and_explained(seq, warpgroups, capsys, monkeypatch):
    # The fixed D=128 forward tiles (TRITONKIT_AUTOTUNE=0): the 128-row tile's two warpgroups
    # meet at CTA-wide barriers every key block; the 64-row tile has one warpgroup a block.
    monkeypatch.setenv("TRITONKIT_AUTOTUNE", "0")
    report = only(compile_report("attention", pass_="fwd", dtype="bf16", shape=(2, 8, seq, 128), path="triton"),
                  "attention_fwd")
    assert main(["attention", "--pass", "fwd", "--dtype", "bf16", "--shape", f"2,8,{seq},128", "--explain",
                 "--path", "triton"]) == 0
    assert report.num_warps == 4 * warpgroups and report.loops
    for loop in report.loops:  # the unmasked key blocks, then the masked band
        assert loop.wgmma > 0 and loop.cta_barriers >= 1 and 0 in loop.wgmma_waits, loop
    printed = capsys.readouterr().out
    assert "innermost loops" in printed and "wgmma.wait_group 0" in printed
    assert ("keep the block's 2 warpgroups in step" in printed) == (warpgroups == 2)


def test_inspector_under_another_triton_says_so_and_names_the_version(monkeypatch, capsys):
    # It still tries (and here succeeds) under an unverified Triton, with one warning; where
    # Triton's internals have moved, the error names the version and the verified range.
    from tritonkit import _triton_version
    from tritonkit.inspector import api

    monkeypatch.setattr(_triton_version, "TRITON_VERSION", "3.7.0")
    monkeypatch.setattr(_triton_version, "_warned", set())
    with pytest.warns(_triton_version.TritonVersionWarning, match="inspector"):
        assert compile_report("add", shape=(1000,))
    def moved(*args, **kwargs):
        raise AttributeError("'JITFunction' object has no attribute '_pack_args'")
    monkeypatch.setattr(api, "_specialise", moved)
    with pytest.raises(_triton_version.UnsupportedTriton, match=r"triton>=3.6,<3.7.*triton 3.7.0.*_pack_args"):
        compile_report("add", shape=(1000,))
    assert main(["add", "--shape", "1000"]) == 2
    assert "triton 3.7.0" in capsys.readouterr().err


def test_tuple_arguments_are_described_element_by_element():
    # Kernels take a tensor's strides as one tuple; Triton specialises each element, and so
    # does the report (an int not divisible by 16 is what `explain` names).
    from tritonkit.inspector.arguments import _describe

    infos = _describe("a_strides", (1000, 32, 1), ("i32", "i32", "constexpr"), ("", "D", 1), False)
    assert [(i.name, i.specialisation) for i in infos] == [
        ("a_strides[0]", "not divisible by 16"), ("a_strides[1]", "divisible by 16"),
        ("a_strides[2]", "== 1, compiled in as a constant")]
