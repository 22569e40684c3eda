"""08_generate on the CPU at the tiny preset: every variant a CPU runs, its tokens against the
float32 reference, the guess per phase, the floor's arithmetic, transformers' generate on the
same weights, bad input; and the reader on generation traces (a recorded CPU one, synthetic GPU
ones: launch-bound and GPU-bound)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections import Counter

import pytest
import torch

import tracereader
from common import cli
from common import generation as plumbing
from common.measuring import generation as measured
from modules import llama
from tests.helpers import ROOT, load_script, run_script
from tracereader.commands import explain
from tracereader.judge import findings
from tracereader.trace import load as trace_reader

SCRIPT = "08_generate"
NORMS = ("input_layernorm", "post_attention_layernorm")
SMALL = ["--prompt", "12", "--new-tokens", "6", "--wait", "0", "--warmup-steps", "1"]


@pytest.fixture(autouse=True)
def one_thread():
    """The CPU's cores are shared: OpenMP's threads spin-waiting on a busy core cost a tiny
    GEMM 16 ms instead of 3 us. One thread keeps the tiny model's steps in microseconds."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def generate(folder, *argv):
    return run_script(SCRIPT, *SMALL, "--strict", "--traces-dir", str(folder), *argv)


def trace_of(folder) -> trace_reader.Trace:
    (path,) = (folder / SCRIPT).glob("*.json")
    return trace_reader.load(path)


@pytest.fixture(scope="module")
def eager_run(tmp_path_factory):
    """One eager run with a static cache and --bench, shared: its output and its trace."""
    folder = tmp_path_factory.mktemp("eager")
    torch.set_num_threads(1)
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = generate(folder, "--bench", "--batch", "2")
    return code, printed.getvalue(), folder


def test_eager_static_cache_gives_the_references_tokens_and_holds_its_guess(eager_run):
    code, printed, folder = eager_run
    assert code == 0, printed
    assert "correctness: 2 of 2 sequences give the float32 reference's 6 greedy tokens" in printed
    assert "MISMATCH" not in printed
    assert "GEMMs by rows M, per step: {24: 14, 2: 1}" in printed  # prefill: B x P, head: B
    assert "{2: 15} / {2: 15}" in printed  # decode: M = batch, every step
    assert "attention read [[32], [32], [32]] keys" in printed  # static: all of it, 17 -> 32
    assert "KV cache: 0.016 MiB held" in printed  # 2 x 2 x 2 x 16 x 32 x 2 bytes x 2
    assert "decode:" in printed and "tokens/s" in printed  # --bench's median
    # prefill held to its own 15 GEMMs run in sequence (a CPU: no graph, no do_bench line)
    assert "its 15 GEMMs in prefill's order on the model's weights, timed beside it" in printed
    name = next((folder / SCRIPT).glob("*.json")).name
    assert name == "tiny_b2_p12_n6_bf16_static_eager_w0-1-3_cpu.json"
    phases = tracereader.generation_steps(trace_of(folder))
    assert [len(phases["prefill"]), len(phases["decode"])] == [1, 3]


def test_the_reader_reads_prefill_and_decode_apart(eager_run, capsys):
    _, _, folder = eager_run
    trace = trace_of(folder)
    read = tracereader.generation(trace)
    assert read["decode"]["tokens"] == 3 and read["prefill"]["steps"] == 1
    assert read["bound"] is None  # a CPU trace tells no launch- from bandwidth-bound
    topics = [f.topic for f in findings.read(trace, everything=True)]
    assert "generation" in topics and "cold start" not in topics and "variation" not in topics
    (path,) = (folder / SCRIPT).glob("*.json")
    assert explain.main([str(path)]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith("generation: "))  # the header wraps
    assert line.startswith("generation: decode ") and "per token" in line and "prefill" in line


def test_a_dynamic_cache_reads_one_key_more_every_token(tmp_path, capsys):
    assert generate(tmp_path, "--cache", "dynamic", "--dtype", "fp32") == 0
    printed = capsys.readouterr().out
    assert "attention read [[13], [14], [15]] keys" in printed  # prompt + 1, + 2, + 3
    assert "KV cache: 0.008 MiB held" in printed  # fp32, 17 tokens, batch 1


@pytest.mark.slow  # FlexAttention compiled by Inductor: ~35 s on two cores
def test_fused_projections_and_flex_attention_give_the_tokens_with_fewer_gemms(tmp_path, capsys):
    assert generate(tmp_path, "--fuse", "--attention", "flex", "--batch", "2") == 0
    printed = capsys.readouterr().out
    assert "2 of 2 sequences give the float32 reference's 6 greedy tokens" in printed
    assert "GEMMs by rows M, per step: {24: 8, 2: 1}" in printed  # qkv, o, gate_up, down x 2
    assert "{2: 9} / {2: 9}" in printed
    assert "MISMATCH" not in printed
    assert next((tmp_path / SCRIPT).glob("*.json")).name.endswith(
        "_static_fused_flex_eager_w0-1-3_cpu.json"
    )


@pytest.mark.slow  # FlexAttention compiled by Inductor: ~30 s on two cores
@pytest.mark.parametrize("units", [0, 8])
def test_fusing_the_projections_keeps_the_models_logits(units):
    """qkv_proj and gate_up_proj hold the same weights: the logits of every position agree
    with the unfused model's, SDPA's and FlexAttention's alike, prompt and decode step, and no
    unfused weight is left; so with gate and up in --fused-gate's blocks of 8 units."""
    lesson = load_script(SCRIPT)
    torch.manual_seed(0)
    cfg = llama.PRESETS["tiny"]
    model = llama.build(cfg, 64, "cpu", torch.float32)
    tokens, positions = torch.randint(0, cfg.vocab, (2, 40)), torch.arange(40)

    def prompt_then_token(decode: bool = True):  # split's decode kernels need Triton's runtime
        cache = lesson.DynamicCache(cfg.layers)
        first = model(tokens, positions, cache, decoding=False)
        if not decode:
            return first
        return first, model(first.argmax(-1, keepdim=True), positions[-1:] + 1, cache,
                            decoding=True)  # fmt: skip

    before = prompt_then_token()
    model.fuse_projections(units=units)
    linears = {n.split(".")[-2] for n, _ in model.named_parameters() if "layers" in n}
    assert linears == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj", *NORMS}
    for name, attend in llama.ATTENTION.items():
        model.attend = attend
        decode = name != "split"
        after = prompt_then_token(decode)
        torch.testing.assert_close(after, before if decode else before[0], rtol=1e-4, atol=1e-4)


def test_the_prompts_causal_attention_over_its_own_keys_is_the_masked_one_over_the_cache():
    """Prefill reads only the keys it writes (mask None: causal, the fused kernels skip what
    lies past each query): the same as attending over a longer cache whose later positions
    are masked, whatever they hold, for grouped queries at odd sizes."""
    torch.manual_seed(0)
    for b, heads, kv, s, d, cache_len in [
        (2, 6, 2, 13, 16, 40),
        (1, 4, 4, 1, 8, 8),
        (1, 8, 2, 31, 32, 31),
    ]:
        q, k, v = torch.randn(b, heads, s, d), torch.randn(b, kv, s, d), torch.randn(b, kv, s, d)
        junk = torch.full((b, kv, cache_len - s, d), 1e4)
        k_cache, v_cache = torch.cat([k, junk], dim=2), torch.cat([v, junk], dim=2)
        positions = torch.arange(s)
        mask = torch.arange(cache_len) <= positions[:, None]
        masked = llama.sdpa_attention(q, k_cache, v_cache, positions, mask)
        for attend in (llama.sdpa_attention, llama.split_attention):
            torch.testing.assert_close(attend(q, k, v, positions, None), masked)


@pytest.mark.slow
def test_split_attention_gives_sdpas_result_and_the_references_tokens(tmp_path):
    """modules/decode_attention.py's kernels under Triton's interpreter (a subprocess: Triton reads
    TRITON_INTERPRET when imported): against SDPA at odd shapes, positions at a split's edge
    and the cache's last, unwritten keys that would dominate if read; then the lesson with
    --attention split --fuse holds the float32 reference's tokens and its guess."""
    code = """
import torch
from modules import llama
torch.manual_seed(0)
shapes = [(1, 32, 8, 768, 128, 640), (2, 4, 2, 40, 16, 29), (1, 8, 8, 200, 64, 0),
          (3, 6, 2, 130, 32, 63), (1, 64, 2, 96, 16, 95)]
for b, h, kv, keys, d, pos in shapes:
    q, k, v = torch.randn(b, h, 1, d), torch.randn(b, kv, keys, d), torch.randn(b, kv, keys, d)
    k[:, :, pos + 1 :] = v[:, :, pos + 1 :] = 1e4
    positions = torch.tensor([pos])
    mask = torch.arange(keys) <= positions[:, None]
    got = llama.split_attention(q, k, v, positions, mask)
    torch.testing.assert_close(got, llama.sdpa_attention(q, k, v, positions, mask))
print("split ok")
"""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0 and "split ok" in proc.stdout, proc.stderr[-3000:]
    argv = [*SMALL, "--strict", "--traces-dir", str(tmp_path), "--attention", "split", "--fuse"]
    proc = subprocess.run([sys.executable, f"{SCRIPT}.py", *argv, "--batch", "2"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 of 2 sequences give the float32 reference's 6 greedy tokens" in proc.stdout
    assert "ok        CPU op profiling_pytorch::decode_attention seen: in every step" in proc.stdout


@pytest.mark.slow
def test_decode_gemvs_give_the_linears_result_and_the_references_tokens(tmp_path):
    """modules/decode_gemv.py's kernel under Triton's interpreter (a subprocess, as above): each
    prologue (none, RMSNorm, SiLU gate from halves or from --fused-gate's blocks of 8) and the
    residual against torch at odd sizes (rows and K not multiples of the tiles, in float32 and
    bf16); then the lesson with --gemv holds the float32 reference's tokens, its decode steps
    calling the op and no aten::mm, its prefill (a prompt of one token) aten::mm for the
    layers and the op for the head, the GEMMs' rows as the guess said."""
    code = """
import torch, torch.nn.functional as F
from modules import decode_gemv
from modules.geglu import shared as geglu_shared
torch.manual_seed(0)
for n, k, dtype in [(37, 100, torch.float32), (8, 512, torch.float32), (130, 1030, torch.bfloat16),
                    (33, 520, torch.bfloat16)]:
    x, w = torch.randn(1, 1, 2 * k, dtype=dtype), torch.randn(n, k, dtype=dtype) / k**0.5
    r = torch.randn(1, 1, n, dtype=dtype)
    norm = torch.nn.RMSNorm(k, eps=1e-5 if dtype == torch.float32 else None).to(dtype)
    norm.weight.data = torch.rand(k, dtype=dtype) + 0.5
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else {}
    xk, f = x[..., :k].contiguous(), lambda t: t.float()
    gate, up = x.float().chunk(2, -1)
    cases = [(decode_gemv.gemv(xk, w), F.linear(f(xk), f(w))),
             (decode_gemv.gemv(xk, w, norm=norm, residual=r),
              F.linear(norm.float()(f(xk)), f(w)) + f(r)),
             (decode_gemv.gemv(x, w, gate=True, residual=r),
              F.linear(F.silu(gate) * up, f(w)) + f(r))]
    if k % 8 == 0:  # --fused-gate's order: blocks of 8 gate values, then the same units' up
        blocks = geglu_shared.pack_gate_up(*x.view(2, k, 1), 8).view(1, 1, 2 * k)
        cases.append((decode_gemv.gemv(blocks, w, gate=True, residual=r, units=8),
                      F.linear(F.silu(gate) * up, f(w)) + f(r)))
    for got, want in cases:
        torch.testing.assert_close(got, want.to(dtype), **tol)
bad = [(torch.randn(2, 1, 64), torch.randn(8, 64)), (torch.randn(1, 1, 64), torch.randn(64, 8).t())]
for x, w in bad:  # two rows; a transposed weight
    try:
        decode_gemv.gemv(x, w)
        raise SystemExit(f"no error for x {tuple(x.shape)}, w strides {w.stride()}")
    except ValueError as err:
        assert "one row of 64 values" in str(err)
try:  # gate and up in blocks of 8 over a K that is no multiple of 8
    decode_gemv.gemv(torch.randn(1, 1, 120), torch.randn(8, 60), gate=True, units=8)
    raise SystemExit("no error for K = 60 in blocks of 8")
except ValueError as err:
    assert "multiple of it" in str(err)
print("gemv ok")
"""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0 and "gemv ok" in proc.stdout, proc.stderr[-3000:]
    argv = [*SMALL, "--prompt", "1", "--strict", "--traces-dir", str(tmp_path), "--fuse", "--gemv"]
    proc = subprocess.run([sys.executable, f"{SCRIPT}.py", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 of 1 sequences give the float32 reference's 6 greedy tokens" in proc.stdout
    decode = proc.stdout.split("\ndecode:", 1)[1]
    assert "ok        CPU op profiling_pytorch::decode_gemv  seen: in every step" in decode
    assert "aten::mm" not in decode.split("all as expected", 1)[0]
    assert "ok        CPU op aten::mm" in proc.stdout.split("\ndecode:", 1)[0]  # prefill's


@pytest.mark.slow
@pytest.mark.parametrize(
    "kernels",
    [[], ["--fuse", "--attention", "flex"]],
)
def test_the_compiled_steps_give_the_same_tokens(kernels, tmp_path, capsys, monkeypatch):
    # one layer: Inductor's C++ compile of the steps is most of this test's time
    monkeypatch.setitem(llama.PRESETS, "tiny", llama.Config(256, 64, 1, 4, 2, 192, context=256))
    assert generate(tmp_path, "--compile", "--dtype", "fp32", *kernels) == 0
    printed = capsys.readouterr().out
    assert "give the float32 reference's 6 greedy tokens exactly" in printed
    assert "CPU op Torch-Compiled Region*          seen: in every step" in printed
    assert printed.count("Torch-Compiled Region*") >= 2  # prefill's region and decode's
    assert "PROBLEM" not in printed  # two compiled frames are not a recompile


@pytest.mark.slow
def test_transformers_generate_on_the_same_weights_gives_the_same_tokens(tmp_path, capsys):
    pytest.importorskip("transformers")
    assert generate(tmp_path, "--impl", "hf", "--batch", "2", "--dtype", "fp32") == 0
    printed = capsys.readouterr().out
    assert "2 of 2 sequences give the float32 reference's 6 greedy tokens exactly" in printed
    phases = tracereader.generation_steps(trace_of(tmp_path))
    assert [len(phases["prefill"]), len(phases["decode"])] == [1, 3]


@pytest.mark.slow  # imports transformers: ~2 s
def test_transformers_model_keeps_its_rotary_frequencies_in_float32():
    """A bf16 model handed to transformers: its weights bf16, its rotary frequencies float32
    (rounded to bf16 they turn a far position's angle by radians: an H200 run's first token
    parted from the reference at prompt 512), and its logits those of ours at position 240."""
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = llama.PRESETS["tiny"]
    ours = llama.build(cfg, 256, "cpu", torch.bfloat16)
    hf = llama.hf_model(ours, 256)
    assert {p.dtype for p in hf.parameters()} == {torch.bfloat16}
    assert all(b.dtype == torch.float32 for n, b in hf.named_buffers() if "inv_freq" in n)
    tokens = torch.randint(0, cfg.vocab, (1, 241))
    theirs = hf(tokens).logits[:, -1].float()
    mine = ours(
        tokens, torch.arange(241), load_script(SCRIPT).DynamicCache(cfg.layers), decoding=False
    ).float()
    assert (theirs - mine).pow(2).mean().sqrt() < 0.1 * mine.pow(2).mean().sqrt()


def test_the_cache_gives_what_recomputing_the_whole_sequence_gives():
    lesson = load_script(SCRIPT)
    torch.manual_seed(0)
    cfg = llama.PRESETS["tiny"]
    model = llama.build(cfg, 32, "cpu", torch.float32)
    prompt = torch.randint(0, cfg.vocab, (2, 9))
    tokens, logits = lesson.reference(model, prompt, 6)
    seq = prompt
    for i in range(6):  # no cache at all: the whole sequence every token
        full = model(
            seq, torch.arange(seq.shape[1]), lesson.DynamicCache(cfg.layers), decoding=False
        )
        torch.testing.assert_close(full, logits[:, i], rtol=1e-5, atol=1e-5)
        seq = torch.cat([seq, full.argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(seq[:, 9:], tokens)


def test_a_near_tie_explains_a_divergence_and_a_bug_does_not(capsys):
    ref_tokens = torch.tensor([[3, 1, 2]])
    logits = torch.zeros(1, 3, 8)
    logits[0, 0, 3], logits[0, 1, 1], logits[0, 2, 2] = 1.0, 1.0, 1.0
    logits[0, 1, 5] = 0.99  # a near tie at token 1: 5 is 0.01 below the reference's 1
    plumbing.agree(torch.tensor([[3, 5, 0]]), ref_tokens, logits, torch.bfloat16)
    assert "parts from it at new token 1, a near tie" in capsys.readouterr().out
    with pytest.raises(cli.MismatchError, match="at new token 0"):
        plumbing.agree(torch.tensor([[4, 1, 2]]), ref_tokens, logits, torch.bfloat16)


def test_the_floor_is_the_weights_and_the_cache_over_the_copy_bandwidth():
    lesson = load_script(SCRIPT)
    cfg = llama.PRESETS["8b"]
    assert cfg.params() == 8_030_261_248  # Llama-3-8B's parameter count
    assert measured.kv_arithmetic(cfg, tokens=1, batch=1, elt=2) == 131_072  # 128 KiB a token
    v = lesson.Variant(cfg, 1, 512, 767, "static", "ours", False, True)
    seconds, moved = measured.floor_s(v, 256, 2, 3.0e12)
    weights = (cfg.params() - cfg.vocab * cfg.dim - (2 * cfg.layers + 1) * cfg.dim) * 2
    kv = 131_072 * (512 + 128)
    activations = moved - weights - kv  # each GEMM's input and output rows: 160 KB a layer
    assert 5e6 < activations < 6e6
    assert seconds == pytest.approx(moved / 3.0e12) and 4.9e-3 < seconds < 5.1e-3


def test_the_variant_is_built_from_the_flags():
    """Variant.from_args: the preset's shape, a static cache of prompt + new - 1 positions
    rounded up to 16, and transformers' generate counted as compiled on a GPU only."""
    lesson = load_script(SCRIPT)
    cpu = cli.Run(torch.device("cpu"), torch.bfloat16, "bf16")
    argv = ["--preset", "tiny", "--batch", "2", "--prompt", "12", "--new-tokens", "6", "--fuse"]
    v = plumbing.Variant.from_args(lesson.parse([*argv, "--attention", "flex"]), cpu)
    assert (v.cfg, v.batch, v.prompt, v.max_len) == (llama.PRESETS["tiny"], 2, 12, 32)
    flags = (v.cache, v.impl, v.fused, v.attention, v.compiled, v.graphs)
    assert flags == ("static", "ours", True, "flex", False, False)
    fits = lesson.parse(["--prompt", "12", "--new-tokens", "5"])  # 16 positions: no rounding
    assert plumbing.Variant.from_args(fits, cpu).max_len == 16
    hf = lesson.parse(["--impl", "hf"])
    gpu = cli.Run(torch.device("cuda"), torch.bfloat16, "bf16")
    assert not plumbing.Variant.from_args(hf, cpu).compiled
    assert plumbing.Variant.from_args(hf, gpu).compiled


def test_prefills_flops_are_its_weights_twice_per_token_and_the_causal_attention():
    lesson = load_script(SCRIPT)
    cfg = llama.PRESETS["8b"]
    v = lesson.Variant(cfg, 1, 512, 768, "static", "ours", False, False)
    # the layers' weights (not the embedding, norms, head) x 2 FLOPs x 512 tokens; the head
    # at the last position; attention 2 x 2 x 128 per query head and key seen, causal
    layers = cfg.params() - 2 * cfg.vocab * cfg.dim - (2 * cfg.layers + 1) * cfg.dim
    attention = 32 * 32 * 4 * 128 * (512 * 513 / 2)
    flops = 2 * 512 * layers + 2 * cfg.dim * cfg.vocab + attention
    assert measured.prefill_flops(v) == pytest.approx(flops, rel=1e-12)
    assert 7.2e12 < flops < 7.25e12  # docs/lessons/08_generate.md: 7.217 TFLOP
    fused = lesson.Variant(cfg, 1, 512, 768, "static", "ours", False, False, fused=True)
    assert measured.prefill_flops(fused) == measured.prefill_flops(v)  # the same weights
    assert sum(measured.prefill_gemms(fused).values()) == 4 * 32 + 1
    assert measured.prefill_gemms(fused)[(512, 4096, 2 * 14336)] == 32


@pytest.mark.slow  # transformers' copy of the model: imports transformers
def test_the_ruler_times_the_gemms_prefill_runs_on_the_models_own_weights():
    """The GEMMs prefill is held to are its own: the shapes and counts prefill_gemms counts
    FLOPs from, fused or not, on the weights of our model or of transformers' copy of it."""
    lesson = load_script(SCRIPT)
    cfg = llama.PRESETS["tiny"]
    ours = llama.build(cfg, 32, "cpu", torch.float32)
    hf = llama.hf_model(ours, 32)
    for fused, impl, model in ((False, "ours", ours), (False, "hf", hf), (True, "ours", ours)):
        v = lesson.Variant(cfg, 2, 12, 32, "static", impl, False, False, fused=fused)
        if fused:
            model.fuse_projections()
        calls = measured.prefill_weights(v, model)
        shapes = Counter((rows, w.shape[1], w.shape[0]) for rows, w in calls)
        assert shapes == measured.prefill_gemms(v)
        assert calls[-1][1] is model.lm_head.weight and calls[0][0] == 24
        timed = {id(w) for _, w in calls}
        assert timed == {id(p) for n, p in model.named_parameters() if "proj" in n or "head" in n}


def gpu_generation_trace(path, *, host_gap_us: float, graphs: bool, kernel_us: float = 5,
                         queued: bool = False) -> None:  # fmt: skip
    """A synthetic GPU generation: a prefill step, then 3 decode steps of 4 kernels each,
    launched one by one (the host busy host_gap_us before each; queued: launched at once,
    each kernel starting host_gap_us after its launch) or by one cudaGraphLaunch."""
    events, corr = [], 0

    def cpu(name, ts, dur, cat="cpu_op"):
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts,
                       "dur": dur, "args": {}})  # fmt: skip

    def call(name, ts):
        nonlocal corr
        corr += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1,
                       "ts": ts, "dur": 3, "args": {"correlation": corr}})  # fmt: skip
        return corr

    def kernel(start, dur, correlation):
        events.append({"ph": "X", "cat": "kernel", "name": "gemv2T_kernel_val", "pid": 0,
                       "tid": 7, "ts": start, "dur": dur,
                       "args": {"correlation": correlation, "device": 0, "stream": 7}})  # fmt: skip

    cpu("ProfilerStep#2", 0, 500, cat="user_annotation")
    cpu("prefill", 1, 490, cat="user_annotation")
    kernel(10, 400, call("cudaLaunchKernel", 5))
    for k in range(3):
        t0 = 500 + 200 * k
        cpu(f"ProfilerStep#{3 + k}", t0, 200, cat="user_annotation")
        cpu("decode", t0 + 1, 190, cat="user_annotation")
        if graphs:
            launch = call("cudaGraphLaunch", t0 + 2)
            for i in range(4):  # the GPU's work fills the token: GPU-bound
                kernel(t0 + 5 + 48 * i, 48, launch)
        else:
            for i in range(4):
                start = t0 + 2 + i * (host_gap_us + kernel_us)
                if queued:  # launched now, started host_gap_us later: the GPU idle, work queued
                    kernel(start + host_gap_us, kernel_us, call("cudaLaunchKernel", start))
                else:  # the host busy host_gap_us, then the launch; the kernel right after
                    kernel(start + host_gap_us + 3, kernel_us,
                           call("cudaLaunchKernel", start + host_gap_us))  # fmt: skip
    trace = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
             "traceEvents": events}  # fmt: skip
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))


def test_a_launch_bound_decode_is_told_to_use_cuda_graphs(tmp_path):
    path = tmp_path / "eager.json.gz"
    gpu_generation_trace(path, host_gap_us=40, graphs=False)
    trace = trace_reader.load(path)
    read = tracereader.generation(trace)
    assert read["bound"] == "launch" and read["decode"]["launches"] == {"kernel": 4}
    (found,) = [f for f in findings.read(trace, everything=True) if f.topic == "generation"]
    assert "launch-bound" in found.message and "CUDA graphs" in found.next
    assert not [f for f in findings.read(trace, everything=True) if f.topic == "cold start"]


def test_a_graph_replayed_decode_is_gpu_bound_and_told_to_batch(tmp_path):
    path = tmp_path / "graphs.json.gz"
    gpu_generation_trace(path, host_gap_us=0, graphs=True)
    trace = trace_reader.load(path)
    read = tracereader.generation(trace)
    assert read["bound"] == "gpu" and read["decode"]["launches"] == {"graph": 1}
    steps = tracereader.generation_steps(trace)["decode"]
    assert all(tracereader.launch_calls(s) == {"graph": 1} for s in steps)
    (found,) = [f for f in findings.read(trace, everything=True) if f.topic == "generation"]
    assert "bandwidth-bound" in found.message and "more sequences per step" in found.next


@pytest.mark.parametrize(
    ("layout", "word"),
    [({"host_gap_us": 10, "kernel_us": 30}, "balanced"),
     ({"host_gap_us": 40, "queued": True}, "stalled")],
)  # fmt: skip
def test_the_generation_verdict_and_the_bound_finding_say_one_word(layout, word, tmp_path,
                                                                   capsys):  # fmt: skip
    """Between launch-bound and GPU-bound: a token whose GPU waits on the host a fifth of its
    window (balanced), and one whose kernels wait queued (stalled, not the host's fault).
    The generation's verdict, its finding, the [bound] finding and the lesson's printout say
    the same word and the same share of the window."""
    from common.generation import print_reading

    path = tmp_path / "t.json.gz"
    gpu_generation_trace(path, graphs=False, **layout)
    trace = trace_reader.load(path)
    read = tracereader.generation(trace)
    assert read["bound"] == word
    found = {f.topic: f for f in findings.read(trace, everything=True)}
    assert found["bound"].message.startswith(word) and f": {word}," in found["generation"].message
    print_reading(read, None)
    printed = capsys.readouterr().out
    assert f"-> {word}" in printed
    if word == "balanced":
        share = f"({read['decode']['host_share']:.0%})"
        assert share in found["bound"].message and share in printed
        assert "CUDA graphs" not in found["generation"].next  # not launch-bound: the loop's own
    else:
        assert "with work queued" in found["generation"].message
        assert "host" not in found["generation"].next


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--prompt", "250", "--new-tokens", "8"], "do not fit the tiny preset's 256 positions"),
        (["--new-tokens", "0"], "--new-tokens"),
        (["--new-tokens", "1"], "at least 2"),
        (["--batch", "100000000", "--prompt", "200"], "choose smaller sizes"),
        (["--cuda-graphs"], "needs a CUDA GPU"),
        (["--compile", "--cache", "dynamic"], "need --cache static"),
        (["--impl", "hf", "--compile"], "--impl hf runs transformers' generate as it comes"),
        (["--impl", "hf", "--fuse"], "--impl hf runs transformers' generate as it comes"),
        (["--attention", "split"], "--attention split runs Triton kernels"),
        (["--gemv", "--fuse"], "--gemv runs Triton kernels"),
        (["--gemv"], "--gemv reads the fused projections of one sequence"),
        (["--gemv", "--fuse", "--batch", "2"], "--gemv reads the fused projections"),
        (["--gemv", "--fuse", "--sweep-batch", "1,2"], "without --sweep-batch"),
        (["--impl", "hf", "--gemv"], "--impl hf runs transformers' generate as it comes"),
        (["--autotune"], "add --compile"),
        (["--fused-gate"], "--fused-gate runs the fused gate/up projection's kernel: add --fuse"),
        (["--fused-gate", "--fuse"], "--fused-gate needs a CUDA GPU"),
        (["--impl", "hf", "--fused-gate"], "--impl hf runs transformers' generate as it comes"),
        (["--attention", "paged"], "invalid choice"),
        (["--sweep-batch", "1,x"], "not a list of positive batches"),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_written(argv, message, tmp_path, capsys):
    assert run_script(SCRIPT, *argv, "--traces-dir", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


@pytest.mark.slow
def test_the_batch_sweep_draws_tokens_per_second_against_batch(tmp_path, capsys):
    assert generate(tmp_path, "--sweep-batch", "1,2,4", "--dtype", "fp32") == 0
    printed = capsys.readouterr().out
    assert "batch    4:" in printed
    (png,) = (tmp_path / SCRIPT).glob("*_sweep.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fused_gate_sends_a_prompt_to_the_gluon_kernel_and_a_token_to_the_gemm():
    """--fused-gate: a prompt's rows (a whole tile of the kernel's or more) go to the Gluon
    op, gate/up GEMM and SiLU in one call; a decode token's row to the GEMM and the SiLU gate
    on its blocks of 8 units. Traced with fake tensors: the kernel itself needs an SM90 GPU."""
    from torch.fx.experimental.proxy_tensor import make_fx

    pytest.importorskip("modules.geglu.gluon", reason="this Triton has no Gluon Hopper API")
    lesson = load_script(SCRIPT)
    torch.manual_seed(0)
    cfg = llama.PRESETS["tiny"]
    model = llama.build(cfg, 200, "cpu", torch.bfloat16)
    model.fuse_projections(gate_kernel=lesson.GATE_KERNEL)
    mlp = model.model.layers[0].mlp
    gated = torch.ops.profiling_pytorch.gluon_gate_up.default
    for batch, seq, kernel in ((1, 1, False), (1, 127, False), (1, 128, True), (4, 128, True),
                               (8, 16, True), (127, 1, False), (128, 1, True)):  # fmt: skip
        # the lesson's guess follows the same rule: B x P rows in prefill, B in decode
        v = lesson.Variant(cfg, batch, seq, 256, "static", "ours", False, False, fused=True,
                           fused_gate=True)  # fmt: skip
        assert lesson._gated(v, "prefill" if seq > 1 else "decode") == kernel
        x = torch.randn(batch, seq, cfg.dim, dtype=torch.bfloat16)
        graph = make_fx(mlp, tracing_mode="fake", _allow_non_fake_inputs=True)(x).graph
        ops = [n.target for n in graph.nodes if n.op == "call_function"]
        assert (gated in ops) == kernel, (batch, seq, ops)
        gemms = sum(op in (torch.ops.aten.mm.default, torch.ops.aten.t.default) for op in ops)
        assert gemms == (2 if kernel else 4), (batch, seq, ops)  # down's (mm, t); gate_up's


@pytest.mark.parametrize("vocab", [256, 1000, 128_256])
def test_greedy_picks_argmaxs_token_ties_included(vocab):
    """The two-step argmax the lesson's steps take: argmax's token for every row, the first
    of equal logits included (rows with repeated maxima across and within slices), at a
    vocabulary that 64 slices do not divide."""
    torch.manual_seed(0)
    logits = torch.randn(6, vocab).to(torch.bfloat16)
    logits[1, [3, vocab - 2]] = 50.0  # a tie across slices: the first wins
    logits[2, [5, 6]] = 50.0  # within one slice
    logits[3] = 0.0  # all equal
    logits[4, vocab - 1] = 60.0  # the last position (in the padded slice)
    logits[5, [7, vocab // 2]] = float("nan")  # argmax takes a NaN as the largest: the first
    assert torch.equal(llama.greedy(logits), logits.argmax(-1))
