"""modules/geglu/gluon.py on a CPU: Gluon has no interpreter, so its kernel is compiled for sm_90
here
(under the installed Triton and, where a copy is present, Triton 3.6, the GPU machines') and its
SASS read for the shape a warp-specialized Hopper GEMM must have; its registers and shared
memory worked out; its packing; and the one-line refusals where it cannot run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from common import cli, fused_kernel
from modules import triton_support
from modules.geglu import fused as fused_geglu
from modules.geglu import shared as geglu_shared
from tests.helpers import ROOT, load_script, run_script

gluon_geglu = pytest.importorskip(
    "modules.geglu.gluon", reason="this Triton has no Gluon Hopper API"
)
# Triton 3.6 (the GPU machines'): `uv pip install --target /tmp/triton36 triton==3.6.0`
TRITON36 = Path(os.environ.get("TRITON36_PATH", "/tmp/triton36"))
SMEM_LIMIT = 227 * 1024  # an SM90 CTA's dynamic shared memory
PINGPONG = fused_geglu.CONFIGS["gluon"]
COOPERATIVE = geglu_shared.Config(
    "gluon", 128, 256, 64, stages=4, warps=8, consumers=1, fast_tanh=True
)
# QuACK's tile width, no power of two: two accumulators of 128 and 64 columns (split_n)
WIDE192 = geglu_shared.Config("gluon", 128, 192, 64, stages=4, warps=4, consumers=2, fast_tanh=True)

# Compile both shapes in a child process: prints {config: [shared, regs, counts]} as JSON, so
# that the same code runs under another Triton by PYTHONPATH alone.
COMPILE = """
import json, sys
from modules.geglu import fused as fused_geglu, gluon as gluon_geglu, shared as geglu_shared
from tools.dev.kernel_lab.fused_geglu_sass import sass_counts
import triton
configs = {"pingpong": fused_geglu.CONFIGS["gluon"], "cooperative": geglu_shared.Config(
    "gluon", 128, 256, 64, stages=4, warps=8, consumers=1, fast_tanh=True),
    "wide192": geglu_shared.Config(
    "gluon", 128, 192, 64, stages=4, warps=4, consumers=2, fast_tanh=True),
    "silu": fused_geglu.CONFIGS["gluon-silu"], "split": geglu_shared.Config(
    "gluon", 128, 192, 64, stages=5, warps=4, consumers=2, fast_tanh=True, epi_split=2),
    "split128": geglu_shared.Config(
    "gluon", 128, 128, 64, stages=6, warps=4, consumers=2, epi_split=2)}
result = {"triton": triton.__version__}
for name, cfg in configs.items():
    kernel = gluon_geglu.compile_sm90(cfg)
    regs, counts = sass_counts(kernel.asm["cubin"])
    result[name] = [kernel.metadata.shared, regs, counts]
print("RESULT " + json.dumps(result))
"""


def compiled(pythonpath: str) -> dict:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run(
        [sys.executable, "-c", COMPILE], cwd=ROOT, env=env, capture_output=True, text=True
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[0].removeprefix("RESULT "))


def check_sass(result: dict) -> None:
    """What makes it the kernel the issue asks for: wgmma (HGMMA), TMA loads and stores,
    register reallocation between producer and consumers, and the GeGLU's special functions."""
    for name in ("pingpong", "cooperative", "wide192", "silu", "split", "split128"):
        shared, regs, counts = result[name]
        assert shared <= SMEM_LIMIT, (name, shared)
        assert counts["HGMMA"] > 0 and counts["UTMALDG"] >= 2 and counts["UTMASTG"] >= 1, name
        assert counts["SETMAXNREG"] > 0, name  # warp_specialize's worker_num_regs took effect
        assert counts["STSM"] > 0, name  # the product stored by stmatrix (pack's blocks of 8)
        assert counts["STL"] == 0, name  # no register spilled to local memory
        # each tile's first K step ignores the accumulator it carries from the last tile, so
        # no tile zeroes its registers first (the 6% of docs/kernel_lab.md, 2026-11-27): one
        # such HGMMA per accumulator chain, of the 4 k16 HGMMA a 64-wide K step issues per chain
        assert 4 * counts["HGMMA0"] == counts["HGMMA"], (name, counts)
    # exp2 and a fast division (pingpong) against tanh.approx (cooperative: fast_tanh)
    assert result["pingpong"][2]["MUFU.EX2"] > 0 and result["pingpong"][2]["MUFU.TANH"] == 0
    assert result["cooperative"][2]["MUFU.TANH"] > 0 and result["cooperative"][2]["MUFU.EX2"] == 0
    # 08_generate's SwiGLU: the same pingpong, one tanh.approx per unit (sigmoid by tanh)
    assert result["silu"][2]["MUFU.TANH"] == result["pingpong"][2]["MUFU.EX2"] > 0
    # two consumer warpgroups each issue their own wgmma: twice the HGMMA of one 128 x 128 tile
    assert result["pingpong"][2]["HGMMA"] == 2 * (128 // 64) * (64 // 16)
    # 128 x 192: per consumer, the head's and the tail's wgmma (two m64 halves, 4 K steps each);
    # the weight in two boxes (x's, the head's, the tail's), the output in two per consumer
    wide = result["wide192"][2]
    assert wide["HGMMA"] == 2 * 2 * (128 // 64) * (64 // 16) and wide["MUFU.TANH"] > 0
    assert wide["UTMALDG"] >= 3 and wide["UTMASTG"] >= 4
    # epi_split=2: the same tile's output in boxes of 128 x 32, one box a consumer (room for a
    # fifth stage): 3 stores a tile each (the head's two halves, the tail), the same stmatrix
    split = result["split"]
    stage = 128 * 64 * 2 + 192 * 64 * 2  # x's box and the weight's two
    boxes, box = 2 * (128 * 64 * 2 + 128 * 32 * 2), 2 * 128 * 32 * 2  # two consumers'
    expected = result["wide192"][0] + stage - boxes + box
    assert expected <= split[0] <= expected + 64  # and the stage's two mbarriers, aligned
    assert split[2]["UTMASTG"] == 2 * 3 and split[2]["STSM"] == wide["STSM"]
    assert split[2]["HGMMA"] == wide["HGMMA"]
    # a power-of-two tile: the head's two halves through the box, the same ring and stmatrix
    split128, ping = result["split128"], result["pingpong"]
    assert split128[0] == ping[0] - 2 * (128 * 64 * 2 - 128 * 32 * 2)
    assert (
        split128[2]["UTMASTG"] == 2 * ping[2]["UTMASTG"] and split128[2]["STSM"] == ping[2]["STSM"]
    )


@pytest.mark.slow  # a child process compiling six kernels for sm_90: ~20 s on two cores
def test_compiles_for_sm90_under_the_installed_triton():
    if triton_support.INTERPRETING:
        pytest.skip("TRITON_INTERPRET=1 compiles nothing")
    check_sass(compiled(str(ROOT)))


def test_compiles_for_sm90_under_triton_3_6():
    if not (TRITON36 / "triton" / "__init__.py").is_file():
        pytest.skip(f"no Triton 3.6 copy at {TRITON36} (set TRITON36_PATH)")
    result = compiled(f"{ROOT}{os.pathsep}{TRITON36}")
    assert result["triton"].startswith("3.6")
    check_sass(result)


def test_register_budgets_fit_the_register_file():
    """setmaxnreg moves registers between warpgroups: the consumers' and the producer's
    budgets must add up to what the launch reserves, in multiples of 8 (PTX's rule)."""
    lists = load_script("tools.fused_mlp_candidates")
    for cfg in lists.gluon_candidates(False):
        plan = gluon_geglu.plan(cfg)
        warpgroups = plan.warps // 4
        consumer_groups = cfg.consumers * cfg.warps // 4
        assert plan.warps * 32 * plan.maxnreg <= gluon_geglu.REGISTERS_PER_SM, cfg
        spent = consumer_groups * plan.consumer_regs + gluon_geglu.PRODUCER_REGS
        assert spent <= warpgroups * plan.maxnreg, cfg
        assert plan.consumer_regs % 8 == 0 and 24 <= plan.consumer_regs <= 256, cfg
        # the accumulator (fp32, a thread's share of its tile) must fit with room to spare: 40
        # registers, QuACK's and CUTLASS's margin for 128 x 192 pingpong (192 of 232; the SASS
        # test checks that nothing spills)
        acc = cfg.block_m * cfg.block_n // (cfg.warps * 32)
        assert acc + 40 <= plan.consumer_regs, cfg
    assert gluon_geglu.plan(PINGPONG).consumer_regs == 232  # QuACK's split: 2 x 232 + 40


def test_every_candidate_fits_shared_memory():
    lists = load_script("tools.fused_mlp_candidates")
    for cfg in lists.gluon_candidates(False):
        ring = cfg.stages * (cfg.block_m + cfg.block_n) * cfg.block_k * 2
        # output boxes: the tile's columns, or (epi_split=2) one box of a quarter of its head
        cols = cfg.block_n // 2 if cfg.epi_split == 1 else gluon_geglu.split_n(cfg.block_n)[0] // 4
        stores = cfg.consumers * cfg.block_m * cols * 2
        assert ring + stores + 1024 <= SMEM_LIMIT, cfg.describe()


def test_pack_puts_gate_and_up_in_blocks_of_8_units_padded_with_zeros():
    gate = torch.arange(60.0).view(12, 5)
    up = -torch.arange(60.0).view(12, 5) - 1
    packed = gluon_geglu.pack(gate, up)
    assert packed.shape == (32, 5) and packed.is_contiguous()  # 12 units padded to 16
    assert torch.equal(packed[0:8], gate[0:8]) and torch.equal(packed[8:16], up[0:8])
    assert torch.equal(packed[16:20], gate[8:12]) and torch.equal(packed[24:28], up[8:12])
    assert not packed[20:24].any() and not packed[28:32].any()
    assert torch.equal(fused_geglu.pack(PINGPONG, gate, up), packed)


@pytest.mark.parametrize("block_n", [64, 128, 256])
def test_geglu_relabelling_pairs_each_unit_with_its_own_up_column(block_n):
    """The kernel's geglu in torch: the packed weight's product, reshaped [M, N / 16, 2, 8],
    permuted and split, must give every output column its own unit's gate and up."""
    torch.manual_seed(0)
    hidden, dim, m = 300, 24, 5
    x = torch.randn(m, dim, dtype=torch.float64)
    gate, up = (torch.randn(hidden, dim, dtype=torch.float64) for _ in "gu")
    packed = gluon_geglu.pack(gate, up)
    units = gluon_geglu.UNITS.value
    for n0 in range(0, packed.shape[0], block_n):  # one tile's columns, zero rows past the end
        acc = x @ torch.nn.functional.pad(packed[n0 : n0 + block_n], (0, 0, 0, block_n)).T
        acc = acc[:, :block_n]
        blocks = acc.reshape(m, block_n // (2 * units), 2, units).permute(0, 1, 3, 2)
        g, u = blocks[..., 0].reshape(m, block_n // 2), blocks[..., 1].reshape(m, block_n // 2)
        cols = slice(n0 // 2, min(n0 // 2 + block_n // 2, hidden))
        width = cols.stop - cols.start
        torch.testing.assert_close(g[:, :width], x @ gate[cols].T)
        torch.testing.assert_close(u[:, :width], x @ up[cols].T)


def test_split_n_cuts_a_tile_into_powers_of_two_of_whole_unit_blocks():
    assert gluon_geglu.split_n(192) == (128, 64) and gluon_geglu.split_n(96) == (64, 32)
    for block_n in (16, 64, 128, 256):
        assert gluon_geglu.split_n(block_n) == (block_n, 0)
    for block_n in (8, 40, 112, 224):  # under a block; tails of 8 rows (half a block), 48, 96
        with pytest.raises(ValueError, match="block_n"):
            gluon_geglu.split_n(block_n)
    assert gluon_geglu.constexprs(WIDE192)["TAIL_N"] == 64
    assert gluon_geglu.constexprs(PINGPONG)["TAIL_N"] == 0


def test_a_split_epilogue_needs_a_tail_of_one_piece():
    """epi_split=2 stores a tile's output in boxes of a quarter of its head; a 192-wide tile's
    tail is one such box, a 160-wide one's (128 + 32: a tail of 16 units) is not."""
    meta = torch.empty(16, 16, dtype=torch.bfloat16, device="meta")
    ok = replace(WIDE192, epi_split=2, stages=5)
    descs = gluon_geglu.descriptors(meta, meta, meta, ok)
    assert [d.block_shape for d in descs[:3]] == [[128, 64], [128, 64], [128, 32]]
    for bad in (replace(WIDE192, block_n=160, epi_split=2), replace(WIDE192, epi_split=3)):
        with pytest.raises(ValueError, match="epi_split"):
            gluon_geglu.descriptors(meta, meta, meta, bad)


@pytest.mark.parametrize("block_n", [96, 192])
def test_split_tile_pairs_each_unit_with_its_own_up_column(block_n):
    """The kernel's two accumulators in torch: tile p reads packed rows [p * block_n, + head)
    into the first and the next `tail` into the second; each goes through geglu's relabelling
    and lands at output columns p * block_n / 2 + [0, head / 2) and + [head / 2, block_n / 2)."""
    torch.manual_seed(0)
    hidden, dim, m = 300, 24, 5  # 300 units: the last tile partial, its tail past the end
    x = torch.randn(m, dim, dtype=torch.float64)
    gate, up = (torch.randn(hidden, dim, dtype=torch.float64) for _ in "gu")
    packed = gluon_geglu.pack(gate, up)
    units = gluon_geglu.UNITS.value
    head, tail = gluon_geglu.split_n(block_n)
    zeros = torch.zeros(block_n, dim, dtype=torch.float64)  # TMA's zeros past the weight's end
    padded = torch.cat([packed, zeros])
    out = torch.zeros(m, triton_cdiv(hidden, block_n // 2) * block_n // 2, dtype=torch.float64)
    for pid_n in range(triton_cdiv(hidden, block_n // 2)):
        n0 = pid_n * block_n
        for start, width in ((0, head), (head, tail)):
            acc = x @ padded[n0 + start : n0 + start + width].T  # one accumulator
            blocks = acc.reshape(m, width // (2 * units), 2, units).permute(0, 1, 3, 2)
            g = blocks[..., 0].reshape(m, width // 2)
            u = blocks[..., 1].reshape(m, width // 2)
            col = pid_n * (block_n // 2) + start // 2  # the kernel's store coordinate
            out[:, col : col + width // 2] = torch.nn.functional.gelu(g, approximate="tanh") * u
    want = torch.nn.functional.gelu(x @ gate.T, approximate="tanh") * (x @ up.T)
    torch.testing.assert_close(out[:, :hidden], want)  # the TMA store clips the rest


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--kernel", "gluon"], "--kernel gluon needs an SM90 GPU"),
        (["--proton"], "--proton needs an SM90 GPU"),
        (["--kernel", "gluon", "--proton"], "--proton needs an SM90 GPU"),
        (["--kernel", "hopper", "--proton"], "--proton needs an SM90 GPU"),
        (["--kernel", "plain", "--proton"], "--proton instruments the gluon and hopper kernels"),
    ],
)
def test_refused_on_a_cpu_in_one_line(argv, message, tmp_path, capsys):
    assert run_script("03_fused_mlp", *argv, "--traces-dir", str(tmp_path)) == 2
    captured = capsys.readouterr()
    assert message in captured.err and len(captured.err.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("*"))  # no trace, not even the folder


def test_gluon_under_torch_compile_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # past the CPU refusal
    with pytest.raises(cli.UsageError, match="eagerly only"):
        fused_kernel.refuse_unrunnable("cuda", True, "gluon")


def test_sweep_lists_fused_gluon_on_sm90_only(capsys):
    sweep = load_script("tools.shape_sweep")
    assert "fused-gluon" in sweep.choose_variants(None, on_gpu=True, major=9)
    assert "fused-gluon" not in sweep.choose_variants(None, on_gpu=True, major=8)
    assert "the fused-gluon variant is skipped: SM90 only" in capsys.readouterr().out
    with pytest.raises(cli.UsageError, match="fused-gluon variant cannot run"):
        sweep.choose_variants(["fused-gluon"], on_gpu=True, major=10)


def test_tuner_candidates_are_distinct_and_pasteable():
    lists = load_script("tools.fused_mlp_candidates")
    for quick in (False, True):
        candidates = lists.gluon_candidates(quick)
        assert len(set(candidates)) == len(candidates) and PINGPONG in candidates
        for cfg in candidates:
            assert cfg.path == "gluon" and cfg.consumers in (1, 2)
            assert eval(lists.as_code(cfg), {"Config": lists.Config}) == cfg
    # the GPU script's list: every quick candidate is one of the full tuner's, at most 10
    quick = lists.gluon_candidates(True)
    assert set(quick) <= set(lists.gluon_candidates(False)) and len(quick) <= 10


def bench_outcome(tool: str, argv: list[str], capsys) -> tuple[int, str]:
    """tools/dev/kernel_lab's `tool` run in this process: (exit code, stderr)."""
    main = load_script(f"tools.dev.kernel_lab.{tool}").main
    try:
        code = main(argv)
    except SystemExit as exit_:  # the parser's refusals
        code = exit_.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("tool", ["gluon_bench", "gluon_depth"])
def test_the_gpu_bench_refuses_a_cpu_in_one_line(tool, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, err = bench_outcome(tool, [], capsys)
    assert code == 2 and err == "error: needs an SM90 GPU (H100, H200)\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dim", "100"], "must be multiples of 8"),
        (["--m", "1048576", "--hidden", "1048576"], "pass 2^31 elements"),
        (["--m", "99999999999999999999"], "must be at most 1048576"),
        (["--hidden", "0"], "must be at least 1"),
    ],
)
def test_the_gpu_benches_refuse_a_shape_the_kernels_cannot_take(argv, message, capsys):
    for tool in ("gluon_bench", "gluon_depth"):
        code, err = bench_outcome(tool, argv, capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and message in lines[0], err


@pytest.mark.parametrize("name", ["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA H100 PCIe"])
def test_auto_takes_gluon_only_on_gpus_where_it_measured_faster(name, monkeypatch):
    """The rule, not a result: on SM90 in bf16, auto runs gluon's configuration measured on that
    GPU where GLUON_MEASURED_FASTER lists it, Hopper's Triton kernel elsewhere and when compiling;
    an asked-for gluon runs its default configuration everywhere."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    run = cli.Run(torch.device("cuda"), torch.bfloat16, "bf16")
    listed = fused_kernel.GLUON_MEASURED_FASTER.get(name)
    kernel = fused_kernel.choose_kernel("auto", run, 768, 3072)
    assert kernel == ("gluon" if listed else "hopper")
    assert fused_kernel.config_name(kernel, run, auto=True) == (listed or "hopper")
    assert fused_kernel.choose_kernel("auto", run, 768, 3072, compiling=True) == "hopper"
    assert fused_kernel.config_name("gluon", run) == "gluon"
    for config in fused_kernel.GLUON_MEASURED_FASTER.values():
        assert fused_geglu.CONFIGS[config].path == "gluon"


class _Recorder:
    """Stands in for the GPU (a Gluon kernel cannot run on a CPU): the JIT's launch compiles and
    returns a 'compiled kernel'; calling that records what the launcher would be handed."""

    def __init__(self):
        self.compiles, self.launches = [], []
        self.arg_names = gluon_geglu.fused_gate_up_geglu_gluon_kernel.arg_names

    def __getitem__(self, grid):
        def jit(*args, **kwargs):
            self.compiles.append((args, kwargs))
            self.launches.append(args)
            return self.compiled

        return jit

    @property
    def compiled(self):
        recorder = self

        class Compiled:
            def __getitem__(self, grid):
                return lambda *args: recorder.launches.append(args)

        return Compiled()


def test_the_direct_launch_reads_each_calls_own_tensors(monkeypatch):
    """After the first launch compiles, later ones skip the JIT: still each call's descriptors
    (a new x of the same shape is the one read, and a fresh output each time), a new compile
    when an integer's specialization changes, and every argument in the kernel's own order."""
    recorder = _Recorder()
    monkeypatch.setattr(gluon_geglu, "fused_gate_up_geglu_gluon_kernel", recorder)
    monkeypatch.setattr(gluon_geglu, "_COMPILED", {})
    gluon_geglu._constexpr_values.cache_clear()
    gate, up = torch.randn(2, 96, 64, dtype=torch.bfloat16).unbind()
    packed = gluon_geglu.pack(gate, up)
    x1, x2 = (torch.randn(256, 64, dtype=torch.bfloat16) for _ in range(2))
    out1 = gluon_geglu.launch(x1, packed, 96, COOPERATIVE, programs=4)
    out2 = gluon_geglu.launch(x2, packed, 96, COOPERATIVE, programs=4)
    assert len(recorder.compiles) == 1 and len(recorder.launches) == 2
    first, second = recorder.launches
    assert first[0].base is x1 and second[0].base is x2  # x's descriptor: this call's x
    assert first[2].base is out1 and second[2].base is out2 and out1 is not out2
    assert second[1].base is packed and second[5:8] == (256, 96, 64)
    by_name = dict(zip(recorder.arg_names, second, strict=True))
    compiled_with = recorder.compiles[0][1]
    for name in recorder.arg_names[8:]:  # the constexprs, by name, as the JIT was given them
        assert by_name[name] == compiled_with[name], name
    gluon_geglu.launch(torch.randn(256, 72, dtype=torch.bfloat16),
                       gluon_geglu.pack(*torch.randn(2, 96, 72, dtype=torch.bfloat16).unbind()),
                       96, COOPERATIVE, programs=4)  # fmt: skip
    assert len(recorder.compiles) == 2  # K = 72: 16 no longer divides it, a new specialization
