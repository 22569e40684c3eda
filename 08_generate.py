"""Beyond the posts: profile an LLM generating text: prefill against decode, the KV cache, CUDA
graphs, and the bandwidth floor.

You will learn: why generating one token at a time is not compute-bound (each new token reads
every weight once and does almost no arithmetic with it), how to write its floor down before
running anything, how a key/value cache is written and read, and what the host's launches cost
a token until a CUDA graph replays them all at once.

The model, modules/llama.py's Llama 3 decoder with random weights (`--preset tiny|1b|8b`): RMSNorm,
rotary embeddings, grouped-query attention through SDPA, the gated SiLU MLP; 7 GEMMs per layer
(q, k, v, o, gate, up, down) and the head. Generation, greedy:
    prefill  the prompt at once: every layer's keys and values written into the cache, the
             first new token from the last position's logits       record_function("prefill")
    decode   one token per step for every sequence: its keys and values written at its
             position, attention reading every cached one        record_function("decode")
The cache: `--cache dynamic` grows by torch.cat every token (a new tensor, the old one copied
into it, every layer); `--cache static` is allocated once for prompt + new tokens and written
in place, the positions not yet written masked. `--compile` compiles the prefill and the decode
step; `--cuda-graphs` captures each, as it is (eager or compiled), in a torch.cuda.CUDAGraph
replayed once per prompt and once per token (our call: graphs we capture ourselves, rather than
mode="reduce-overhead", so the same steps run both ways and the trace shows exactly one launch).
What then remains is the kernels themselves, and four flags change those: `--fuse` reads q, k, v
with one GEMM and gate, up with another (the same weights: at one row per sequence a small GEMM
cannot keep the memory busy, a larger one can); `--attention split` runs decode's attention
through modules/decode_attention.py's Triton kernels, which split the cache across the SMs and
read only the positions written (SDPA's kernels give each key/value head to one block: 8 blocks
at batch 1); `--attention flex` through FlexAttention; `--gemv` (batch 1, with --fuse) runs each
of a token's projections as modules/decode_gemv.py's Triton GEMV, its RMSNorm or SiLU gate and
its residual add inside it, on tiles fixed per shape rather than tuned on the machine (and the
prompt's head); `--fused-gate` (with --fuse, SM90) computes a prompt's gate/up GEMM and SiLU
gate in one Gluon kernel (modules/geglu/gluon.py), so the [B x P, 2 x hidden] product never
leaves it. `--impl hf` runs the same weights through transformers' LlamaForCausalLM and its
`generate` with a static cache (compiled by transformers itself on a GPU, into CUDA graphs).

Guess first. Per recorded step, with L layers, batch B and a prompt of P tokens:
  prefill  7L + 1 GEMMs (4L + 1 with --fuse, 3L + 1 and L gated Gluon kernels with
           --fused-gate): the layers' with M = B x P rows, the head's with M = B (only the last
           position's logits are needed); L attention kernels, the prompt attending causally
           over its own keys. Its floor: its FLOPs at the rate its GEMMs reach (--bench: all of
           them in sequence, as it runs them, on its weights).
  decode   the same kernels every token: 7L + 1 GEMMs (4L + 1) with M = B (matrix-vector shaped
           at B = 1), L attention kernels reading the whole cache (static: its full length,
           masked; dynamic: every token so far). Eager: one launch per kernel from the host.
           With --cuda-graphs: one cudaGraphLaunch per token and no per-kernel launch.
  floor    a decode step must read every weight and the cache once: (weight bytes + KV-cache
           bytes) / the device's measured copy bandwidth, printed before the run; at batch 1
           an 8B model in bf16 reads 16 GB per token.
On a CPU the phases, the dispatch chains and the GEMMs' rows appear, without kernels.

Correct before fast: the greedy tokens of every variant are held to those of the eager float32
model with a growing cache; where they part, the reference's own logits must show a near tie
there (its token and ours within the dtype's tolerance): rounding, not a bug.

    uv run 08_generate.py
    uv run 08_generate.py --cache dynamic --bench
    uv run 08_generate.py --compile
    uv run 08_generate.py --impl hf
    uv run 08_generate.py --fuse --attention flex --compile
    uv run 08_generate.py --preset 8b --prompt 512 --new-tokens 256 --cuda-graphs --bench
    uv run 08_generate.py --preset 8b --prompt 512 --new-tokens 256 --compile --cuda-graphs \
        --fuse --attention split --autotune --bench
    uv run 08_generate.py --preset 8b --prompt 512 --new-tokens 256 --compile --cuda-graphs \
        --fuse --attention split --gemv --bench
    uv run 08_generate.py --preset 8b --prompt 512 --new-tokens 256 --compile --cuda-graphs \
        --fuse --attention split --gemv --fused-gate --bench
        (a GPU: tools/dev/gpu_runs/generate_gpu.sh runs eager, compile, CUDA graphs, hf and the
        sweep)
"""

import sys
from collections import Counter
from dataclasses import dataclass

import common.startup  # noqa: F401 - before torch: Ctrl-C while it loads is one line  # isort: skip
import torch
from torch.profiler import profile, record_function, schedule

import tracereader
from common import cli, outputs, profiling
from common import generation as plumbing
from common.generation import Variant
from common.measuring import generation as measured
from modules import decode_gemv, llama
from modules.geglu import fused as fused_geglu
from tracereader import Expect

SCRIPT = "08_generate"
OP_SPLIT = "profiling_pytorch::decode_attention"  # --attention split's op, at one query
OP_GEMV = "profiling_pytorch::decode_gemv"  # --gemv's op, decode's projections at batch 1
GATE_KERNEL = "gluon-silu"  # --fused-gate's configuration, fused_geglu.CONFIGS
ANNOTATION = "decode"  # each new token's step; the prompt's is "prefill"
PHASES = ("prefill", "decode")


# --- the key/value caches: what attention writes, then reads ------------------------------


class DynamicCache:
    """Grows by torch.cat: every token, every layer, a new [B, kv_heads, length + 1, head_dim]
    tensor for the keys and one for the values, the old ones copied into them."""

    def __init__(self, layers: int):
        self.k: list = [None] * layers
        self.v: list = [None] * layers

    def reset(self) -> None:
        self.k, self.v = [None] * len(self.k), [None] * len(self.v)

    def update(self, layer, k, v, positions):
        if self.k[layer] is not None:
            k, v = torch.cat([self.k[layer], k], dim=2), torch.cat([self.v[layer], v], dim=2)
        self.k[layer], self.v[layer] = k, v
        return k, v

    def mask(self, positions):  # [seq, keys]: a key is seen from its own position on
        keys = (0 if self.k[0] is None else self.k[0].shape[2]) + positions.numel()
        return torch.arange(keys, device=positions.device) <= positions[:, None]


class StaticCache:
    """Allocated once, [B, kv_heads, max_len, head_dim] per layer for keys and for values,
    written in place at the tokens' positions; attention reads all max_len positions, the
    ones not yet written masked. Fixed shapes and addresses: what compile and graphs need."""

    def __init__(self, cfg: llama.Config, batch: int, max_len: int, device, dtype):
        shape = (batch, cfg.kv_heads, max_len, cfg.head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.layers)]
        self.slots = torch.arange(max_len, device=device)

    def reset(self) -> None:
        pass  # prefill writes from position 0 again; what lies beyond stays masked

    def update(self, layer, k, v, positions):
        self.k[layer][:, :, positions] = k
        self.v[layer][:, :, positions] = v
        return self.k[layer], self.v[layer]

    def mask(self, positions):
        return self.slots <= positions[:, None]


# --- the generation loop: prefill, then one decode step per token -------------------------


@dataclass
class State:
    """Device tensors, so that a step needs nothing from the host: the sequences so far
    [B, prompt + new tokens], the position of the last token written, and the prompt's
    positions (made once, outside any compiled step: CPU Inductor cannot lower FlexAttention
    reading positions that the step itself computes, torch 2.15)."""

    tokens: torch.Tensor
    pos: torch.Tensor  # [1]
    prompt: int
    prompt_positions: torch.Tensor  # [prompt]


def prefill(model, cache, state: State) -> None:
    cache.reset()
    p = state.prompt
    logits = model(state.tokens[:, :p], state.prompt_positions, cache, decoding=False)
    state.tokens[:, p] = llama.greedy(logits)
    state.pos.fill_(p)


def decode_step(model, cache, state: State) -> None:
    """One new token for every sequence: read the last one, write the next (greedy)."""
    token = state.tokens.index_select(1, state.pos)  # [B, 1]
    logits = model(token, state.pos, cache, decoding=True)
    state.tokens.index_copy_(1, state.pos + 1, llama.greedy(logits).unsqueeze(1))
    state.pos += 1


def capture(prefill, step):
    """The prefill and the decode step each recorded once into a CUDA graph: replaying one
    launches all its kernels with one call. Warmed up first on a side stream (lazy
    initialisation, cuBLAS workspaces, compilation must not happen inside a capture). The two
    share one memory pool: they never run at the same time."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            prefill()
            step()
    torch.cuda.current_stream().wait_stream(side)
    graphs = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(graphs[0]):
        prefill()
    with torch.cuda.graph(graphs[1], pool=graphs[0].pool()):
        step()
    return graphs[0].replay, graphs[1].replay


def make_prompt(v: Variant, seed: int, run: cli.Run) -> torch.Tensor:
    rng = torch.Generator(run.device).manual_seed(seed)
    return torch.randint(0, v.cfg.vocab, (v.batch, v.prompt), device=run.device, generator=rng)


def with_kernels(model, v: Variant):
    """The variant's own kernels on the reference's weights; for --impl hf, transformers'
    model holding them."""
    if v.impl == "hf":
        return llama.hf_model(model, v.max_len + 1)
    model.attend = llama.ATTENTION[v.attention]
    if v.fused_gate:  # modules/geglu/gluon.py's weight layout, and its SiLU configuration
        model.fuse_projections(gate_kernel=GATE_KERNEL)
    elif v.fused:
        model.fuse_projections()
    if v.gemv:
        model.decode, model.head = decode_gemv.decode, decode_gemv.head
    return model


class Generation:
    """One variant, ready to generate: its cache, its sequences, its decode step (compiled,
    captured) built once; calling it generates n tokens and returns them [B, n]."""

    def __init__(self, v: Variant, model, prompt, new_tokens: int, run: cli.Run):
        self.model, self.prompt, self.impl = model, prompt, v.impl
        if v.impl == "hf":
            return
        tokens = torch.zeros(v.batch, v.prompt + new_tokens, dtype=torch.long, device=run.device)
        tokens[:, : v.prompt] = prompt
        pos = torch.zeros(1, dtype=torch.long, device=run.device)
        self.state = State(tokens, pos, v.prompt, torch.arange(v.prompt, device=run.device))
        if v.cache == "dynamic":
            self.cache = DynamicCache(v.cfg.layers)
        else:
            self.cache = StaticCache(v.cfg, v.batch, v.max_len, run.device, run.dtype)
        # --autotune: Inductor times its Triton GEMM templates against cuBLAS per shape and
        # tunes its own kernels' tiles (coordinate descent); the graphs stay ours. With it and
        # with --gemv, combo kernels: independent small kernels (q's and k's rotary embeddings,
        # the two cache writes) become one launch, 64 fewer kernels a token at 8B (H200: 4.52
        # -> 4.40 ms with --autotune; --gemv 82 -> 84% of the floor, H100 87 -> 89%)
        mode = "max-autotune-no-cudagraphs" if v.autotune else None
        if v.autotune:  # else Inductor's own defaults (or INDUCTOR_KNOBS', tools/dev)
            torch._inductor.config.coordinate_descent_tuning = True
        if v.autotune or v.gemv:
            torch._inductor.config.combo_kernels = True
        first = torch.compile(prefill, mode=mode) if v.compiled else prefill
        step = torch.compile(decode_step, mode=mode) if v.compiled else decode_step
        self.prefill = lambda: first(model, self.cache, self.state)
        self.step = lambda: step(model, self.cache, self.state)
        if v.graphs:
            self.prefill, self.step = capture(self.prefill, self.step)

    def __call__(self, n: int) -> torch.Tensor:
        if self.impl == "hf":
            return plumbing.hf_generate(self.model, self.prompt, n)
        self.prefill()
        for _ in range(n - 1):
            self.step()
        return self.state.tokens[:, self.state.prompt : self.state.prompt + n].clone()


def reference(model32, prompt: torch.Tensor, new_tokens: int):
    """The greedy tokens of the float32 model, eager, a cache that grows, and each token's
    logits [B, new_tokens, vocab] (to tell a near tie from a bug)."""
    cache, tokens, logits = DynamicCache(model32.cfg.layers), [], []
    positions = torch.arange(prompt.shape[1], device=prompt.device)
    out = model32(prompt, positions, cache, decoding=False)
    for i in range(new_tokens):
        logits.append(out)
        tokens.append(out.argmax(-1, keepdim=True))
        if i + 1 < new_tokens:
            out = model32(tokens[-1], positions[-1:] + i + 1, cache, decoding=True)
    return torch.cat(tokens, dim=1), torch.stack(logits, dim=1)


# --- the guess: per phase, and the bytes a token must move --------------------------------


def _gated(v: Variant, phase: str) -> bool:
    """--fused-gate's kernel runs the phase's gate/up where its rows fill a tile of it
    (llama.uses_gate_kernel): B x P rows in prefill, B in decode."""
    rows = v.batch * v.prompt if phase == "prefill" else v.batch
    return llama.uses_gate_kernel(GATE_KERNEL if v.fused_gate else None, rows)


def _per_layer(v: Variant, phase: str) -> int:
    """qkv, o, gate_up, down; or q, k, v, o, gate, up, down; gate_up is the Gluon kernel's
    where --fused-gate runs it, no GEMM of cuBLAS's."""
    return 3 if _gated(v, phase) else 4 if v.fused else 7


def _gemms(v: Variant, phase: str) -> int:
    """Per layer and the head's; transformers' rotary embedding adds one, its angles
    computed as a matmul of the frequencies and the positions (seen on an H200)."""
    return _per_layer(v, phase) * v.cfg.layers + 1 + (v.impl == "hf")


def _host_ops(v: Variant, phase: str) -> tuple[str, ...]:
    """What the host runs in a step: under a graph's replay nothing of the step; compiled,
    Inductor's region; eager, the ops (FlexAttention's compiled region among them)."""
    if v.impl == "hf":  # transformers compiles its decode step only
        return (phase,) + (("aten::mm",) if phase == "prefill" or not v.compiled else ())
    if v.graphs:
        return (phase,)
    if v.compiled:
        return (phase, "Torch-Compiled Region*")
    sdpa = "aten::scaled_dot_product_attention"  # split's prefill too: more than one query
    split = OP_SPLIT if phase == "decode" else sdpa
    attend = {"flex": "Torch-Compiled*", "split": split}.get(v.attention, sdpa)
    write = ("aten::index_put_",) if v.cache == "static" else ()  # dynamic: torch.cat
    gemm = ("aten::mm",) if phase == "prefill" or not v.gemv else ()
    gemv = (OP_GEMV,) * v.gemv  # decode's projections; prefill's head
    gated = (fused_geglu.GLUON_OP,) if _gated(v, phase) else ()
    return (phase, *gemm, *gemv, attend, *write, *gated)


def _gemm_count(v: Variant, phase: str) -> dict:
    """The GEMMs per step; none claimed under --autotune, where Inductor picks per shape among
    cuBLAS, its Triton GEMM templates and (at one row) a GEMV written as its own reduction."""
    return {} if v.autotune else {"gemm": _gemms(v, phase)}


def _gluon_kernels(v: Variant, phase: str) -> dict:
    """The gate kernel's launches where it runs, one a layer, read as Triton kernels (in
    decode beside --attention split's combine kernels, Triton's too)."""
    if not _gated(v, phase):
        return {}
    combine = phase == "decode" and v.attention == "split"
    return {"triton": v.cfg.layers * (1 + combine)}


def _prefill(v: Variant) -> Expect:
    gated = f"; {v.cfg.layers} gate/up + SiLU kernels" * _gated(v, "prefill")
    return Expect(
        gpu=_gemm_count(v, "prefill") | _gluon_kernels(v, "prefill"),
        cpu_present=_host_ops(v, "prefill"),
        why=f"{_gemms(v, 'prefill')} GEMMs, M = batch x prompt = {v.batch * v.prompt} rows "
        f"(the head's M = {v.batch}: the last position only){gated}",
    )


def _decode(v: Variant) -> Expect:
    ops = _host_ops(v, "decode")
    # --attention split: its partial kernel is attention (named *attention*), the combine not
    return Expect(
        gpu=_gemm_count(v, "decode")
        | ({"attention": v.cfg.layers} if v.impl == "ours" else {})
        | _gluon_kernels(v, "decode"),
        cpu_present=ops,
        why=f"the same kernels every token: {_gemms(v, 'decode')} GEMMs with M = batch = "
        f"{v.batch}" + ("; one graph launch, no kernel launched from the host" * v.graphs),
    )


EXPECT = {"prefill": _prefill, "decode": _decode}


def look(v: Variant, phase: str, expect: Expect, trace, steps: list) -> bool:
    """A phase's steps held to its EXPECT, then to what Expect does not count: the GEMMs' rows
    (record_shapes' dims) in every step, the keys attention read, and under a CUDA graph the
    launches a token makes."""
    verdict = tracereader.check(trace.with_steps(steps), expect)
    print(f"{phase}: {tracereader.phase_line(steps)}")
    print(verdict.text)
    lines = []  # (held, what was seen): each line says its own verdict
    layers = _per_layer(v, phase) * v.cfg.layers
    head = not v.gemv  # --gemv: the head is a GEMV in both phases, no aten::mm
    rows = Counter({v.batch * v.prompt: layers}) + Counter({v.batch: int(head)})
    rows = dict(rows if phase == "prefill" else {v.batch: layers + head})
    seen = [dict(tracereader.gemm_rows(step)) for step in steps]
    if any(seen) and v.impl == "ours":
        text = f"GEMMs by rows M, per step: {' / '.join(map(str, seen))} (expected {rows})"
        lines.append((all(rows == one for one in seen), text))
    if phase == "decode" and v.impl == "ours":
        keys = [sorted(set(tracereader.key_lengths(s))) for s in steps]
        want = [
            [v.max_len] if v.cache == "static" else [v.prompt + 1 + i] for i in range(len(steps))
        ]
        if any(keys):
            lines.append((keys == want, f"attention read {keys} keys per step (expected {want})"))
    if phase == "decode" and v.graphs and steps and steps[-1].runtime:
        launches = [dict(tracereader.launch_calls(s)) for s in steps]
        text = f"launch calls per token {launches} (expected one graph launch, nothing else)"
        lines.append((all(n == {"graph": 1} for n in launches), text))
    for held, line in lines:
        print(f"  {'ok      ' if held else 'MISMATCH'}  {line}  (record_shapes)")
    return verdict.ok and all(held for held, _ in lines)


def parse(argv):
    parser = cli.make_parser(
        __doc__,
        prog=f"{SCRIPT}.py",
        bench_help="after profiling, time prefill and a decode token without the profiler "
        "(medians), against the bandwidth floor",
    )
    plumbing.add_flags(parser)  # --preset, --batch, --prompt, --new-tokens, --cache, ...
    return plumbing.refuse(parser.parse_args(argv), SCRIPT)


def main(argv=None) -> int:
    args = parse(argv)
    run = cli.resolve(args)
    plumbing.refuse_kernels(args, run)  # --attention split, --gemv, --fused-gate
    plumbing.ensure_fits(args, run)
    v = Variant.from_args(args, run)
    tag = plumbing.run_tag(args, run)
    out = outputs.prepare(args.traces_dir, SCRIPT, tag, gzip=args.gzip)

    # Guess first: the bytes a decode token must read, and on a GPU the floor they set.
    elt = cli.element_size(run)
    bytes_per_s = measured.copy_bandwidth(run, fresh=args.fresh_ceilings) if run.on_gpu else None
    floor = plumbing.print_guess(v, args.new_tokens, elt, bytes_per_s)  # None on a CPU

    # The model in float32 for the reference first, then in the run's dtype: the same weights.
    model = llama.build(v.cfg, v.max_len + 1, run.device, torch.float32)
    prompt = make_prompt(v, args.seed, run)
    ref_tokens, ref_logits = reference(model, prompt, args.new_tokens)
    model = with_kernels(model.to(run.dtype), v)
    generation = Generation(v, model, prompt, args.new_tokens, run)
    tokens = profiling.warm_up(lambda: generation(args.new_tokens), run, compiling=args.compile)
    plumbing.agree(tokens, ref_tokens, ref_logits, run.dtype)  # else a near tie, or an error
    del ref_logits

    # wait and warm-up steps run the prefill again (discarded); then the prefill and --active
    # decode steps are recorded, one profiler step each.
    profiling.reset_peak_memory(run)  # the peak printed below: the profiled steps' own
    with profile(
        activities=profiling.activities(run),
        schedule=schedule(
            wait=args.wait, warmup=args.warmup_steps, active=1 + args.active, repeat=1
        ),
        record_shapes=True,  # the GEMMs' rows and attention's keys, read back below
        acc_events=True,  # one cycle (repeat=1): keeps torch from warning it drops old cycles
    ) as prof:
        if v.impl == "hf":
            profile_hf(model, prompt, prof, args)
        else:
            for _ in range(args.wait + args.warmup_steps + 1):
                with record_function("prefill"):
                    generation.prefill()
                prof.step()
            for _ in range(args.active):
                with record_function(ANNOTATION):
                    generation.step()
                prof.step()

    table = prof.key_averages().table(sort_by=profiling.sort_key(run), row_limit=args.rows)
    with outputs.publishing(out.trace, out.table) as (trace_tmp, table_tmp):
        prof.export_chrome_trace(str(trace_tmp))
        table_tmp.write_text(table + "\n")
    profiling.show(table, out, run)

    # Then look, per phase: the prefill step and the decode steps, each held to its guess.
    seen = profiling.look(out, Expect(why="a prefill step, then one step per new token"))
    as_expected = seen.as_expected
    phases = tracereader.generation_steps(seen.trace)
    for phase in PHASES:
        as_expected &= look(v, phase, EXPECT[phase](v), seen.trace, phases.get(phase, []))
    reading = tracereader.generation(seen.trace)
    plumbing.print_reading(reading, floor, generated=args.new_tokens)
    if v.impl == "ours":
        generation(args.new_tokens)  # a whole one: the dynamic cache at its longest
        plumbing.print_kv_cache(generation.cache, v, args.new_tokens, elt)
    if args.bench:
        measured.bench(v, generation, args.new_tokens, run, floor, reading, bytes_per_s)
    if args.sweep_batch:

        def at(w: Variant) -> Generation:  # the same weights, a prompt and a cache per batch
            return Generation(w, model, make_prompt(w, args.seed, run), args.new_tokens, run)

        rows = measured.sweep(v, args.sweep_batch, args.new_tokens, run, at, bytes_per_s)
        measured.plot_sweep(rows, out.table.with_name(f"{out.table.stem}_sweep.png"), tag)
    return profiling.finish(args, out, as_expected)


def profile_hf(hf, prompt, prof, args) -> None:
    """transformers' loop cut into the same steps: the wait and warm-up steps are one-token
    generations (prefill alone); then prefill and --active decode tokens, each token's step
    ended by the stopping criterion transformers calls on the host."""
    span = None

    def each_token():
        nonlocal span
        span.__exit__(None, None, None)
        prof.step()
        span = record_function(ANNOTATION).__enter__()

    for n in [1] * (args.wait + args.warmup_steps) + [1 + args.active]:
        span = record_function("prefill").__enter__()
        plumbing.hf_generate(hf, prompt, n, each_token)
        span.__exit__(None, None, None)


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
