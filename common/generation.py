"""08_generate's plumbing: its flags and their refusals, the variant they pick, the memory a
run needs and its tag, and the lines the lesson prints around its loop (the guess's bytes and
floor, the reader's generation reading against that floor, the KV cache held); transformers' own
loop for --impl hf. What it measures without the profiler (--bench, --sweep-batch, the
arithmetic of its floors): common/measuring/generation.py."""

from __future__ import annotations

import argparse
import importlib.util
from dataclasses import dataclass

import torch

from common import cli, fused_kernel, outputs
from common.measuring.generation import floor_s, kv_arithmetic
from modules import decode_attention, llama
from tracereader import WORDS, binary_size

# The first divergence from the reference is rounding when the reference itself scores our
# token within this share of its logits' root-mean-square of its own choice. Measured: bf16
# logits stray from float32's by up to 3% of that rms (a 4-layer, 512-wide model); a wrong
# cache or position puts the right token several rms away.
TIE = {torch.bfloat16: 0.25, torch.float16: 0.05, torch.float32: 0.01}


@dataclass(frozen=True)
class Variant:
    """What a generation runs: the model's shape, the batch and the prompt, the cache, and the
    kernels the flags pick."""

    cfg: llama.Config
    batch: int
    prompt: int
    max_len: int  # the positions a static cache holds
    cache: str
    impl: str
    compiled: bool
    graphs: bool
    fused: bool = False  # q, k, v in one GEMM, gate and up in another
    attention: str = "sdpa"
    autotune: bool = False
    gemv: bool = False  # decode's projections and prefill's head as decode_gemv's GEMVs
    fused_gate: bool = False  # prefill's gate, up and SiLU in one Gluon kernel (SM90)

    @classmethod
    def from_args(cls, args: argparse.Namespace, run: cli.Run) -> Variant:
        # A static cache holds every token fed through the model (prompt + new - 1), rounded up
        # to 16 positions: SDPA's fused kernels want the mask's rows aligned (else pad it per call).
        max_len = -(-(args.prompt + args.new_tokens - 1) // 16) * 16
        return cls(
            llama.PRESETS[args.preset],
            args.batch,
            args.prompt,
            max_len,
            cache=args.cache,
            impl=args.impl,
            # transformers compiles its generate on a GPU (static cache: into CUDA graphs) by itself
            compiled=args.compile or (args.impl == "hf" and run.on_gpu),
            graphs=args.cuda_graphs,
            fused=args.fuse,
            attention=args.attention,
            autotune=args.autotune,
            gemv=args.gemv,
            fused_gate=args.fused_gate,
        )


def events_per_step(layers: int) -> int:
    """Profiler events a recorded step (a decode token; the prefill is one more) adds
    (cli.ensure_fits bounds --active with it): 27 measured on the CPU for the tiny preset's
    2 layers (tools/dev/step_memory.py); taken as 20 a layer and 20 besides, rounded up for
    the transformers implementation's extra ops."""
    return 20 + 20 * layers


# --- the flags, and the combinations refused -----------------------------------------------


# long: a table of flags, one add_argument each, as ruff formats them
def add_flags(parser: argparse.ArgumentParser) -> None:
    """The lesson's own flags, beside cli.make_parser's common ones."""
    add = parser.add_argument
    add(
        "--preset",
        choices=list(llama.PRESETS),
        default="tiny",
        help="the model's shape: tiny (CPU-sized), 1b (Llama-3.2-1B's), 8b "
        "(Llama-3-8B's) (default: tiny)",
    )
    add(
        "--batch",
        type=cli.positive_int,
        default=1,
        help="sequences generated together (default: 1, decode's worst case)",
    )
    add("--prompt", type=cli.positive_int, default=16, help="prompt tokens, random (default: 16)")
    add(
        "--new-tokens",
        type=cli.positive_int,
        default=8,
        help="tokens generated, the first by prefill (default: 8)",
    )
    add(
        "--cache",
        choices=("static", "dynamic"),
        default="static",
        help="static: allocated once, written in place; dynamic: grows by "
        "torch.cat (default: static, what compile and graphs need)",
    )
    add(
        "--cuda-graphs",
        action="store_true",
        help="capture the decode step in a CUDA graph, replayed per token (GPU only)",
    )
    add(
        "--fuse",
        action="store_true",
        help="q, k and v as one GEMM, gate and up as another: the same weights "
        "read by fewer, larger GEMMs",
    )
    add(
        "--attention",
        choices=list(llama.ATTENTION),
        default="sdpa",
        help="sdpa: PyTorch's fused kernels (cuDNN, FlashAttention, ...); flex: "
        "FlexAttention, compiled by Inductor; split: decode's attention split "
        "across the SMs by modules/decode_attention.py's Triton kernels (a GPU, or "
        "TRITON_INTERPRET=1) (default: sdpa)",
    )
    add(
        "--gemv",
        action="store_true",
        help="with --fuse, batch 1: each decode projection (and the prompt's "
        "head) one Triton GEMV (modules/decode_gemv.py) with its RMSNorm or SiLU "
        "gate and residual add inside, tiles fixed per shape (a GPU, or "
        "TRITON_INTERPRET=1)",
    )
    add(
        "--fused-gate",
        action="store_true",
        help="with --fuse, on an SM90 GPU (H100, H200): gate/up GEMM and SiLU "
        "gate in one Gluon kernel (modules/geglu/gluon.py) where batch x "
        "positions fill a 128-row tile of it (a prompt; fewer rows take cuBLAS), their "
        "weight's rows in its blocks of 8 units, which decode reads too",
    )
    add(
        "--autotune",
        action="store_true",
        help="with --compile: Inductor times its own GEMM kernels against "
        "cuBLAS for every shape, tunes its kernels' tiles and launches "
        "independent small kernels as one (minutes of compiling)",
    )
    add(
        "--impl",
        choices=("ours", "hf"),
        default="ours",
        help="ours: this loop; hf: transformers' generate on the same weights, "
        "static cache (needs the [hf] extra) (default: ours)",
    )
    add(
        "--sweep-batch",
        type=batches,
        default=None,
        metavar="B,B,...",
        help="after the run, time decode at each batch and plot tokens/s and "
        "the share of the floor's speed (a PNG beside the trace)",
    )


def refuse(args: argparse.Namespace, script: str) -> argparse.Namespace:
    """The parsed flags, --active bounded by the decode steps; combinations that cannot run
    refused in one line (cli.UsageError)."""
    args.active = min(args.active, args.new_tokens - 1)  # decode steps recorded
    if args.new_tokens < 2:
        raise cli.UsageError("--new-tokens must be at least 2: one from prefill, one decoded")
    cfg = llama.PRESETS[args.preset]
    if args.prompt + args.new_tokens > cfg.context:
        raise cli.UsageError(
            f"--prompt {args.prompt} + --new-tokens {args.new_tokens} do not "
            f"fit the {args.preset} preset's {cfg.context} positions"
        )
    if (args.compile or args.cuda_graphs) and args.cache == "dynamic":
        raise cli.UsageError(
            "--compile and --cuda-graphs need --cache static: a growing cache "
            "changes the step's shapes every token"
        )
    our_loop = args.compile or args.cuda_graphs or args.cache == "dynamic" or args.fuse
    if args.impl == "hf" and (our_loop or args.attention != "sdpa" or args.gemv or args.fused_gate):
        raise cli.UsageError(
            "--impl hf runs transformers' generate as it comes (static cache, "
            "compiled by transformers on a GPU): no --compile, --cuda-graphs, "
            "--cache dynamic, --fuse, --attention, --gemv, --fused-gate"
        )
    if args.impl == "hf" and importlib.util.find_spec("transformers") is None:
        raise cli.UsageError(
            "--impl hf runs transformers' LlamaForCausalLM, and transformers is not installed "
            "here: `uv sync --extra hf` installs it (pyproject.toml's [hf] extra)"
        )
    if args.gemv and (not args.fuse or args.batch != 1 or args.sweep_batch):
        raise cli.UsageError(
            "--gemv reads the fused projections of one sequence: add --fuse, "
            "at --batch 1, without --sweep-batch"
        )
    if args.fused_gate and not args.fuse:
        raise cli.UsageError("--fused-gate runs the fused gate/up projection's kernel: add --fuse")
    if args.autotune and not args.compile:
        raise cli.UsageError("--autotune tunes what torch.compile generates: add --compile")
    if args.fused_gate:
        why = "its kernel is Gluon's, for SM90, which has no CPU backend or interpreter"
        cli.require_gpu(f"{script}.py --fused-gate", args, why)
    if args.cuda_graphs:
        why = "a CUDA graph records GPU work; on a CPU, run without it"
        cli.require_gpu(f"{script}.py --cuda-graphs", args, why)
    return args


def refuse_kernels(args: argparse.Namespace, run: cli.Run) -> None:
    """--attention split, --gemv and --fused-gate refused in one line where their kernels
    cannot run on the resolved device."""
    for flag, wanted in (("--attention split", args.attention == "split"), ("--gemv", args.gemv)):
        why = wanted and decode_attention.usable(run.device, args.compile, flag)
        if why:
            raise cli.UsageError(why)
    if args.fused_gate:
        fused_kernel.require_gluon(run, "--fused-gate")


def batches(text: str) -> list[int]:
    try:
        found = [int(b) for b in text.split(",")]
    except ValueError:
        found = []
    if not found or min(found) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of positive batches")
    return found


def print_reading(g: dict | None, floor: float | None, generated: int | None = None) -> None:
    """The reader's reading of the phases: per token (over the decode steps the profiler
    recorded, of the `generated` tokens' decode steps where given), and its verdict
    (launch-bound, balanced, GPU- and so at a small batch bandwidth-bound)."""
    if g is None:
        print("generation: no decode step in the trace")
        return
    d = g["decode"]
    per = d["per_token_us"]["median"]
    of = f" of the {generated - 1} decoded ({generated} generated)" if generated else ""
    steps = "step" if d["tokens"] == 1 else "steps"
    line = (
        f"generation: decode {per / 1e3:.3f} ms per token over the {d['tokens']} profiled decode "
        f"{steps}{of}"
    )
    if g["prefill"]:
        line += f", prefill {g['prefill']['wall_us'] / 1e3:.3f} ms"
    print(line)
    if g["bound"] is None:
        return
    wait = d["host_wait_us"]
    print(
        f"  per token the GPU is busy {d['gpu_busy_us'] / 1e3:.3f} ms and waits on the host "
        f"{wait / 1e3:.3f} ms ({d['host_share']:.0%} of its window); {d['kernels']:g} "
        f"kernels, launch calls {d['launches']}"
    )
    if g["bound"] == "launch":
        print(
            "  -> launch-bound: the host cannot issue the kernels as fast as the GPU runs "
            "them; CUDA graphs replay a token's kernels with one launch"
        )
    elif g["bound"] == "balanced":
        print(
            f"  -> balanced: the host's part ({d['host_share']:.0%}) and the GPU's both "
            "count; CUDA graphs take the launches, not the loop's own CPU work"
        )
    elif g["bound"] == "stalled":
        print(
            f"  -> {WORDS['stalled']}: {d['other_us'] / 1e3:.3f} ms of each token; the "
            "syncs, copies and collectives in `explain`'s findings say on what"
        )
    else:
        near = f" (its busy time {d['gpu_busy_us'] / 1e6 / floor:.2f}x the floor)" if floor else ""
        print(
            f"  -> GPU-bound{near}, and at a small batch bandwidth-bound: more sequences "
            "per step, fewer weight bytes (quantize), a smaller KV cache"
        )


# --- the run's memory and its name ---------------------------------------------------------


def bytes_needed(
    cfg: llama.Config, batch, prompt, new_tokens, elt, *, reference: bool, bench: bool = False
) -> int:
    """What a generation holds at most: the weights, its cache and prefill's largest
    activations (the MLP's [B x P, hidden] three times, float32 at most); with the float32
    reference first, the weights in float32 (converted in place after), its growing cache too
    and its logits for every token. --bench adds its ruler's: the GEMMs' inputs and, in its
    graph's pool, the largest output (gate_up's)."""
    kv = kv_arithmetic(cfg, prompt + new_tokens, batch, 1)
    acts = 3 * batch * prompt * (cfg.hidden + cfg.dim) * 4
    acts += bench * batch * prompt * (cfg.dim + cfg.hidden + 2 * cfg.hidden) * elt
    if not reference:
        return cfg.params() * elt + kv * elt + acts
    return cfg.params() * 4 + kv * (elt + 4) + batch * new_tokens * cfg.vocab * 4 + acts


def ensure_fits(args: argparse.Namespace, run: cli.Run) -> None:
    """Refused before anything is allocated where the run (or a batch of its sweep) or the
    profiler's events would not fit: cli.ensure_fits."""
    cfg, elt = llama.PRESETS[args.preset], cli.element_size(run)
    sizes = (args.prompt, args.new_tokens, elt)
    need = bytes_needed(cfg, args.batch, *sizes, reference=True, bench=args.bench)
    for batch in args.sweep_batch or ():  # the sweep checks no tokens: no reference
        need = max(need, bytes_needed(cfg, batch, *sizes, reference=False))
    cli.ensure_fits(need, run, trace=cli.profiled(args, events_per_step(cfg.layers)))


def run_tag(args: argparse.Namespace, run: cli.Run) -> str:
    """The traces' name: the shape, then the variant's flags."""
    mode = "hf" if args.impl == "hf" else args.cache + ("_graphs" if args.cuda_graphs else "")
    mode += "_fused" * args.fuse + f"_{args.attention}" * (args.attention != "sdpa")
    mode += "_gemv" * args.gemv + "_gate" * args.fused_gate + "_autotune" * args.autotune
    shape = f"{args.preset}_b{args.batch}_p{args.prompt}_n{args.new_tokens}"
    return outputs.run_tag(shape, args, run, extra=mode)


# --- the lines printed around the loop ---------------------------------------------------


def size(n: float) -> str:
    """Bytes in binary units, 3 significant digits: 2.46 KiB, 96.0 MiB, 15.0 GiB."""
    return binary_size(n, three_digits=True)


def print_guess(v: Variant, new_tokens: int, elt: int, bytes_per_s: float | None) -> float | None:
    """The bytes a decode token reads (its traffic model's) and the KV cache's part of them at
    the mean length; on a GPU the floor they set at `bytes_per_s`, returned (seconds a token;
    None on a CPU)."""
    floor, moved = floor_s(v, new_tokens, elt, bytes_per_s or 1.0)
    mean = v.prompt + new_tokens // 2
    kv_read = kv_arithmetic(v.cfg, mean, v.batch, elt)
    print(
        f"guess: a decode token reads {size(moved)}: the weights (and activations) "
        f"{size(moved - kv_read)}, the KV cache at the mean length {mean} {size(kv_read)}"
    )
    if not bytes_per_s:
        return None
    print(
        f"  floor: {floor * 1e3:.3f} ms per token at {bytes_per_s / 1e12:.2f} TB/s: at most "
        f"{v.batch / floor:,.0f} tokens/s"
    )
    return floor


def agree(tokens: torch.Tensor, ref_tokens: torch.Tensor, ref_logits, dtype) -> None:
    """Equal to the reference, or parted from it at a near tie of the reference's own (TIE);
    else cli.MismatchError."""
    tie = TIE[dtype]
    rows = []
    for b in range(tokens.shape[0]):
        differ = (tokens[b] != ref_tokens[b]).nonzero()
        if not len(differ):
            continue
        i = int(differ[0])
        row = ref_logits[b, i].float()
        margin = float(row[ref_tokens[b, i]] - row[tokens[b, i]])
        rms = float(row.square().mean().sqrt())
        rows.append((b, i, margin / rms))
        if margin > tie * rms:
            raise cli.MismatchError(
                f"sequence {b} parts from the float32 reference at new token {i}, where the "
                f"reference scores its token {margin / rms:.2f} rms above ours (a tie is "
                f"within {tie})"
            )
    same = tokens.shape[0] - len(rows)
    print(
        f"correctness: {same} of {tokens.shape[0]} sequences give the float32 reference's "
        f"{tokens.shape[1]} greedy tokens exactly (the first by prefill, then "
        f"{tokens.shape[1] - 1} decode steps): ok"
    )
    for b, i, gap in rows:
        print(
            f"  sequence {b} parts from it at new token {i}, a near tie of the reference's "
            f"(its token {gap:.3f} rms above ours, within {tie} for {dtype}): rounding; "
            "the tokens after it continue another text and are not compared"
        )


def print_kv_cache(cache, v: Variant, new_tokens: int, elt: int) -> None:
    """What the cache holds after a whole generation, against its arithmetic."""
    kv = sum(t.nbytes for t in (*cache.k, *cache.v))
    held = v.max_len if v.cache == "static" else v.prompt + new_tokens - 1
    cfg = v.cfg
    print(
        f"KV cache: {kv / 2**20:.3f} MiB held; 2 x {cfg.layers} layers x {cfg.kv_heads} "
        f"kv heads x {cfg.head_dim} x {held} tokens x {elt} bytes x batch "
        f"{v.batch} = {kv_arithmetic(cfg, held, v.batch, elt) / 2**20:.3f} MiB; "
        f"the weights {size(cfg.params() * elt)}"
    )


def hf_generate(hf, prompt: torch.Tensor, new_tokens: int, each_token=None) -> torch.Tensor:
    """transformers' own loop, greedy, static cache. `each_token` is called on the host once
    per new token (as a stopping criterion that never stops): where a profiler step ends."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    class EachToken(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            each_token()
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    out = hf.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=new_tokens,
        do_sample=False,
        cache_implementation="static",
        stopping_criteria=StoppingCriteriaList([EachToken()] if each_token else []),
    )
    return out[:, prompt.shape[1] :]
