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
What then remains is the kernels themselves, and four flags change those: `--fuse` reads q, k,
v with one GEMM and gate, up with another (the same weights: at one row per sequence a small
GEMM cannot keep the memory busy, a larger one can); `--attention split` runs decode's attention
through modules/decode_attention.py's Triton kernels, which split the cache across the SMs and read
only
the positions written (SDPA's kernels give each key/value head to one block: 8 blocks at batch
1); `--attention flex` through FlexAttention; `--gemv` (batch 1, with --fuse) runs each of a
token's projections as modules/decode_gemv.py's Triton GEMV, its RMSNorm or SiLU gate and its
residual
add inside it, on tiles fixed per shape rather than tuned on the machine (and the prompt's head);
`--fused-gate` (with --fuse, SM90) computes a prompt's gate/up GEMM and SiLU gate in one Gluon
kernel (modules/geglu/gluon.py), so the [B x P, 2 x hidden] product never leaves it. `--impl hf`
runs the
same weights through transformers' LlamaForCausalLM and its `generate` with a static cache
(compiled by transformers itself on a GPU, into CUDA graphs).

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
        (a GPU: tools/dev/generate_gpu.sh runs eager, compile, CUDA graphs, hf and the sweep)
"""

import sys
from collections import Counter
from dataclasses import dataclass

import torch
from torch.profiler import profile, record_function, schedule

import tracereader
from common import cli, fused_kernel, outputs, profiling
from common import generation as plumbing
from common.measuring import ceilings, traffic
from modules import decode_attention, decode_gemv, llama
from modules.geglu import fused as fused_geglu
from tracereader import Expect

SCRIPT = "08_generate"


def events_per_step(layers: int) -> int:
    """Profiler events a recorded step (a decode token; the prefill is one more) adds
    (cli.ensure_fits bounds --active with it): 27 measured on the CPU for the tiny preset's
    2 layers (tools/dev/step_memory.py); taken as 20 a layer and 20 besides, rounded up for
    the transformers implementation's extra ops."""
    return 20 + 20 * layers


OP_SPLIT = "profiling_pytorch::decode_attention"  # --attention split's op, at one query
OP_GEMV = "profiling_pytorch::decode_gemv"  # --gemv's op, decode's projections at batch 1
GATE_KERNEL = "gluon-silu"  # --fused-gate's configuration, fused_geglu.CONFIGS
ANNOTATION = "decode"  # each new token's step; the prompt's is "prefill"
PHASES = ("prefill", "decode")
# The first divergence from the reference is rounding when the reference itself scores our
# token within this share of its logits' root-mean-square of its own choice. Measured: bf16
# logits stray from float32's by up to 3% of that rms (a 4-layer, 512-wide model); a wrong
# cache or position puts the right token several rms away.
TIE = {torch.bfloat16: 0.25, torch.float16: 0.05, torch.float32: 0.01}


@dataclass(frozen=True)
class Variant:
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
    generator = torch.Generator(run.device).manual_seed(seed)
    return torch.randint(
        0, v.cfg.vocab, (v.batch, v.prompt), device=run.device, generator=generator
    )


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
            return hf_generate(self.model, self.prompt, n)
        self.prefill()
        for _ in range(n - 1):
            self.step()
        return self.state.tokens[:, self.state.prompt : self.state.prompt + n].clone()


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


def agree(tokens: torch.Tensor, ref_tokens: torch.Tensor, ref_logits, dtype) -> None:
    """Equal to the reference, or parted from it at a near tie of the reference's own."""
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
    print(f"correctness: {same} of {tokens.shape[0]} sequences give the float32 reference's "
          f"{tokens.shape[1]} greedy tokens exactly: ok")  # fmt: skip
    for b, i, gap in rows:
        print(f"  sequence {b} parts from it at new token {i}, a near tie of the reference's "
              f"(its token {gap:.3f} rms above ours, within {tie} for {dtype}): rounding; "
              "the tokens after it continue another text and are not compared")  # fmt: skip


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
    gated = _gated(v, "prefill")
    return Expect(
        gpu=_gemm_count(v, "prefill") | _gluon_kernels(v, "prefill"),
        cpu_present=_host_ops(v, "prefill"),
        why=f"{_gemms(v, 'prefill')} GEMMs, M = batch x prompt = {v.batch * v.prompt} rows "
        f"(the head's M = {v.batch}: the last position only)"
        + f"; {v.cfg.layers} gate/up + SiLU kernels"
        * gated,
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
        lines.append((all(rows == one for one in seen),
                      f"GEMMs by rows M, per step: {' / '.join(map(str, seen))} "
                      f"(expected {rows})"))  # fmt: skip
    if phase == "decode" and v.impl == "ours":
        keys = [sorted(set(tracereader.key_lengths(s))) for s in steps]
        want = [
            [v.max_len] if v.cache == "static" else [v.prompt + 1 + i] for i in range(len(steps))
        ]
        if any(keys):
            lines.append((keys == want, f"attention read {keys} keys per step (expected {want})"))
    if phase == "decode" and v.graphs and steps and steps[-1].runtime:
        launches = [dict(tracereader.launch_calls(s)) for s in steps]
        lines.append((all(n == {"graph": 1} for n in launches),
                      f"launch calls per token {launches} (expected one graph launch, nothing "
                      "else)"))  # fmt: skip
    for held, line in lines:
        print(f"  {'ok      ' if held else 'MISMATCH'}  {line}  (record_shapes)")
    return verdict.ok and all(held for held, _ in lines)


def traffic_model(v: Variant, keys: int, elt: int) -> list[traffic.Kernel]:
    """One decode step's minimum traffic: each GEMM reads its weight once for the B rows, and
    attention reads `keys` cached keys and values per sequence and layer, once."""
    c, b = v.cfg, v.batch
    kv = c.kv_heads * c.head_dim
    layer = [
        traffic.gemm("q_proj", b, c.dim, c.dim, elt),
        traffic.gemm("k_proj", b, c.dim, kv, elt),
        traffic.gemm("v_proj", b, c.dim, kv, elt),
        traffic.Kernel(
            "attention (cache read)",
            "attention",
            4 * b * c.heads * keys * c.head_dim,
            2 * b * keys * kv * elt,
            elt,
        ),  # fmt: skip
        traffic.gemm("o_proj", b, c.dim, c.dim, elt),
        *(traffic.gemm(n, b, c.dim, c.hidden, elt) for n in ("gate_proj", "up_proj")),
        traffic.gemm("down_proj", b, c.hidden, c.dim, elt),
    ]
    return layer * c.layers + [traffic.gemm("lm_head", b, c.dim, c.vocab, elt)]


def prefill_gemms(v: Variant) -> dict[tuple[int, int, int], int]:
    """Prefill's GEMMs (M, K, N) -> how many: the layers' at M = B x P rows, the head's at M = B."""
    c, m = v.cfg, v.batch * v.prompt
    kv = c.kv_heads * c.head_dim
    if v.fused:
        layer = [(m, c.dim, c.dim + 2 * kv), (m, c.dim, c.dim), (m, c.dim, 2 * c.hidden)]
    else:
        layer = [(m, c.dim, c.dim)] * 2 + [(m, c.dim, kv)] * 2 + [(m, c.dim, c.hidden)] * 2
    shapes = {}
    for shape in [*layer, (m, c.hidden, c.dim)] * c.layers + [(v.batch, c.dim, c.vocab)]:
        shapes[shape] = shapes.get(shape, 0) + 1
    return shapes


def prefill_weights(v: Variant, model) -> list[tuple[int, torch.Tensor]]:
    """(rows, weight) of prefill's GEMMs in the order it runs them: the layers' projections at
    B x P rows, the head's at B (ours and transformers' models name them alike)."""
    attn = ("qkv_proj", "o_proj") if v.fused else ("q_proj", "k_proj", "v_proj", "o_proj")
    mlp = ("gate_up_proj", "down_proj") if v.fused else ("gate_proj", "up_proj", "down_proj")
    rows, calls = v.batch * v.prompt, []
    for layer in model.model.layers:
        calls += [(rows, getattr(layer.self_attn, name).weight) for name in attn]
        calls += [(rows, getattr(layer.mlp, name).weight) for name in mlp]
    return calls + [(v.batch, model.lm_head.weight)]


def prefill_flops(v: Variant) -> float:
    """Its GEMMs' 2MKN, and attention's: q.k and p.v over the causal half (position i sees
    i + 1 keys), 2 x 2 x head_dim FLOPs per query head and key seen."""
    c, p = v.cfg, v.prompt
    return (
        plumbing.gemm_flops(prefill_gemms(v))
        + c.layers * v.batch * c.heads * 4 * c.head_dim * p * (p + 1) / 2
    )


def kv_arithmetic(cfg: llama.Config, tokens: int, batch: int, elt: int) -> int:
    """2 (keys, values) x layers x kv_heads x head_dim x tokens x bytes, per sequence."""
    return 2 * cfg.layers * cfg.kv_heads * cfg.head_dim * tokens * elt * batch


def floor_s(v: Variant, new_tokens: int, elt: int, bytes_per_s: float) -> tuple[float, int]:
    """(seconds, bytes) a decode token must take at least, at the generation's mean cache
    length: its traffic over the measured copy bandwidth (its FLOPs are far below the
    matrix ceiling at any batch this lesson sweeps)."""
    _, moved = traffic.total(traffic_model(v, v.prompt + new_tokens // 2, elt))
    return moved / bytes_per_s, moved


# --- measuring, without the profiler ---------------------------------------------------------


def sweep(args, v: Variant, model, run: cli.Run, bytes_per_s: float | None) -> list[dict]:
    """Decode at every batch of --sweep-batch: tokens/s and the share of the floor's speed."""
    rows = []
    for batch in args.sweep_batch:
        w = Variant(**{**v.__dict__, "batch": batch})
        generation = Generation(w, model, make_prompt(w, args.seed, run), args.new_tokens, run)
        _, token, _ = plumbing.time_generation(generation, args.new_tokens, run, repeats=3)
        elt = cli.element_size(run)
        floor = floor_s(w, args.new_tokens, elt, bytes_per_s)[0] if bytes_per_s else None
        rows.append({"batch": batch, "token_s": token.median_s,
                     "tokens_per_s": batch / token.median_s,
                     "of_floor": floor / token.median_s if floor else None})  # fmt: skip
        pct = f", {rows[-1]['of_floor']:.0%} of the floor's speed" if floor else ""
        print(f"  batch {batch:>4}: {token.median_s * 1e3:.3f} ms per token, "
              f"{rows[-1]['tokens_per_s']:,.0f} tokens/s{pct}")  # fmt: skip
    return rows


def parse(argv):
    parser = cli.make_parser(
        __doc__,
        prog=f"{SCRIPT}.py",
        bench_help="after profiling, time prefill and a decode token without the profiler "
        "(medians), against the bandwidth floor",
    )
    parser.add_argument("--preset", choices=list(llama.PRESETS), default="tiny",
                        help="the model's shape: tiny (CPU-sized), 1b (Llama-3.2-1B's), 8b "
                        "(Llama-3-8B's) (default: tiny)")  # fmt: skip
    parser.add_argument("--batch", type=cli.positive_int, default=1,
                        help="sequences generated together (default: 1, decode's worst "
                        "case)")  # fmt: skip
    parser.add_argument("--prompt", type=cli.positive_int, default=16,
                        help="prompt tokens, random (default: 16)")  # fmt: skip
    parser.add_argument("--new-tokens", type=cli.positive_int, default=8,
                        help="tokens generated, the first by prefill (default: 8)")  # fmt: skip
    parser.add_argument("--cache", choices=("static", "dynamic"), default="static",
                        help="static: allocated once, written in place; dynamic: grows by "
                        "torch.cat (default: static, what compile and graphs need)")  # fmt: skip
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="capture the decode step in a CUDA graph, replayed per token "
                        "(GPU only)")  # fmt: skip
    parser.add_argument("--fuse", action="store_true",
                        help="q, k and v as one GEMM, gate and up as another: the same weights "
                        "read by fewer, larger GEMMs")  # fmt: skip
    parser.add_argument("--attention", choices=list(llama.ATTENTION), default="sdpa",
                        help="sdpa: PyTorch's fused kernels (cuDNN, FlashAttention, ...); flex: "
                        "FlexAttention, compiled by Inductor; split: decode's attention split "
                        "across the SMs by modules/decode_attention.py's Triton kernels (a GPU, or "
                        "TRITON_INTERPRET=1) (default: sdpa)")  # fmt: skip
    parser.add_argument("--gemv", action="store_true",
                        help="with --fuse, batch 1: each decode projection (and the prompt's "
                        "head) one Triton GEMV (modules/decode_gemv.py) with its RMSNorm or SiLU "
                        "gate "
                        "and residual add inside, tiles fixed per shape (a GPU, or "
                        "TRITON_INTERPRET=1)")  # fmt: skip
    parser.add_argument("--fused-gate", action="store_true",
                        help="with --fuse, on an SM90 GPU (H100, H200): gate/up GEMM and SiLU "
                        "gate in one Gluon kernel (modules/geglu/gluon.py) where batch x "
                        "positions fill "
                        "a 128-row tile of it (a prompt; fewer rows take cuBLAS), their "
                        "weight's rows in its blocks of 8 units, which decode reads "
                        "too")  # fmt: skip
    parser.add_argument("--autotune", action="store_true",
                        help="with --compile: Inductor times its own GEMM kernels against "
                        "cuBLAS for every shape, tunes its kernels' tiles and launches "
                        "independent small kernels as one (minutes of compiling)")  # fmt: skip
    parser.add_argument("--impl", choices=("ours", "hf"), default="ours",
                        help="ours: this loop; hf: transformers' generate on the same weights, "
                        "static cache (needs the [hf] extra) (default: ours)")  # fmt: skip
    parser.add_argument("--sweep-batch", type=plumbing.batches, default=None, metavar="B,B,...",
                        help="after the run, time decode at each batch and plot tokens/s and "
                        "the share of the floor's speed (a PNG beside the trace)")  # fmt: skip
    args = parser.parse_args(argv)
    args.active = min(args.active, args.new_tokens - 1)  # decode steps recorded
    if args.new_tokens < 2:
        raise cli.UsageError("--new-tokens must be at least 2: one from prefill, one decoded")
    cfg = llama.PRESETS[args.preset]
    if args.prompt + args.new_tokens > cfg.context:
        raise cli.UsageError(f"--prompt {args.prompt} + --new-tokens {args.new_tokens} do not "
                             f"fit the {args.preset} preset's {cfg.context} positions")  # fmt: skip
    if (args.compile or args.cuda_graphs) and args.cache == "dynamic":
        raise cli.UsageError("--compile and --cuda-graphs need --cache static: a growing cache "
                             "changes the step's shapes every token")  # fmt: skip
    if args.impl == "hf" and (args.compile or args.cuda_graphs or args.cache == "dynamic"
                              or args.fuse or args.attention != "sdpa" or args.gemv
                              or args.fused_gate):  # fmt: skip
        raise cli.UsageError("--impl hf runs transformers' generate as it comes (static cache, "
                             "compiled by transformers on a GPU): no --compile, --cuda-graphs, "
                             "--cache dynamic, --fuse, --attention, --gemv, "
                             "--fused-gate")  # fmt: skip
    if args.gemv and (not args.fuse or args.batch != 1 or args.sweep_batch):
        raise cli.UsageError("--gemv reads the fused projections of one sequence: add --fuse, "
                             "at --batch 1, without --sweep-batch")  # fmt: skip
    if args.fused_gate and not args.fuse:
        raise cli.UsageError("--fused-gate runs the fused gate/up projection's kernel: add --fuse")
    if args.autotune and not args.compile:
        raise cli.UsageError("--autotune tunes what torch.compile generates: add --compile")
    if args.fused_gate:
        cli.require_gpu(f"{SCRIPT}.py --fused-gate", args, "its kernel is Gluon's, for SM90, "
                        "which has no CPU backend or interpreter")  # fmt: skip
    if args.cuda_graphs:
        cli.require_gpu(f"{SCRIPT}.py --cuda-graphs", args, "a CUDA graph records GPU work; "
                        "on a CPU, run without it")  # fmt: skip
    return args


def bytes_needed(cfg: llama.Config, batch, prompt, new_tokens, elt, *, reference: bool,
                 bench: bool = False) -> int:  # fmt: skip
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


def main(argv=None) -> int:
    args = parse(argv)
    run = cli.resolve(args)
    for flag, wanted in (("--attention split", args.attention == "split"), ("--gemv", args.gemv)):
        why = wanted and decode_attention.usable(run.device, args.compile, flag)
        if why:
            raise cli.UsageError(why)
    if args.fused_gate:
        fused_kernel.require_gluon(run, "--fused-gate")
    cfg, elt = llama.PRESETS[args.preset], cli.element_size(run)
    sizes = (args.prompt, args.new_tokens, elt)
    need = bytes_needed(cfg, args.batch, *sizes, reference=True, bench=args.bench)
    for batch in args.sweep_batch or ():  # the sweep checks no tokens: no reference
        need = max(need, bytes_needed(cfg, batch, *sizes, reference=False))
    cli.ensure_fits(need, run, trace=cli.profiled(args, events_per_step(cfg.layers)))
    # A static cache holds every token fed through the model (prompt + new - 1), rounded up
    # to 16 positions: SDPA's fused kernels want the mask's rows aligned (else pad it per call).
    max_len = -(-(args.prompt + args.new_tokens - 1) // 16) * 16
    # transformers compiles its generate on a GPU (static cache: into CUDA graphs) by itself
    compiled = args.compile or (args.impl == "hf" and run.on_gpu)
    v = Variant(cfg, args.batch, args.prompt, max_len, args.cache, args.impl, compiled,
                args.cuda_graphs, args.fuse, args.attention, args.autotune, args.gemv,
                args.fused_gate)  # fmt: skip
    mode = "hf" if v.impl == "hf" else args.cache + ("_graphs" if args.cuda_graphs else "")
    mode += "_fused" * args.fuse + f"_{args.attention}" * (args.attention != "sdpa")
    mode += "_gemv" * args.gemv + "_gate" * args.fused_gate + "_autotune" * args.autotune
    tag = outputs.run_tag(f"{args.preset}_b{args.batch}_p{args.prompt}_n{args.new_tokens}",
                          args, run, extra=mode)  # fmt: skip
    out = outputs.prepare(args.traces_dir, SCRIPT, tag, gzip=args.gzip)

    # Guess first: the bytes a decode token must read, and on a GPU the floor they set.
    bytes_per_s = copy_bandwidth(run, fresh=args.fresh_ceilings) if run.on_gpu else None
    floor, moved = floor_s(v, args.new_tokens, elt, bytes_per_s or 1.0)
    kv_read = kv_arithmetic(cfg, args.prompt + args.new_tokens // 2, args.batch, elt)
    print(f"guess: a decode token reads {moved / 1e9:.3g} GB: the weights (and activations) "
          f"{(moved - kv_read) / 1e9:.3g} GB, the KV cache at the mean length "
          f"{args.prompt + args.new_tokens // 2} {kv_read / 1e9:.3g} GB")  # fmt: skip
    if bytes_per_s:
        print(f"  floor: {floor * 1e3:.3f} ms per token at {bytes_per_s / 1e12:.2f} TB/s: at most "
              f"{args.batch / floor:,.0f} tokens/s")  # fmt: skip

    # The model in float32 for the reference first, then in the run's dtype: the same weights.
    model = llama.build(cfg, v.max_len + 1, run.device, torch.float32)
    prompt = make_prompt(v, args.seed, run)
    ref_tokens, ref_logits = reference(model, prompt, args.new_tokens)
    model = model.to(run.dtype)
    if v.impl == "hf":
        model = llama.hf_model(model, v.max_len + 1)
    else:  # the variant's own kernels, on the reference's weights
        model.attend = llama.ATTENTION[v.attention]
        if v.fused_gate:  # modules/geglu/gluon.py's weight layout, and its SiLU configuration
            model.fuse_projections(gate_kernel=GATE_KERNEL)
        elif v.fused:
            model.fuse_projections()
        if v.gemv:
            model.decode, model.head = decode_gemv.decode, decode_gemv.head
    generation = Generation(v, model, prompt, args.new_tokens, run)
    tokens = profiling.warm_up(lambda: generation(args.new_tokens), run, compiling=args.compile)
    agree(tokens, ref_tokens, ref_logits, run.dtype)
    del ref_logits

    # wait and warm-up steps run the prefill again (discarded); then the prefill and --active
    # decode steps are recorded, one profiler step each.
    profiling.reset_peak_memory(run)  # the peak printed below: the profiled steps' own
    with profile(
        activities=profiling.activities(run),
        schedule=schedule(
            wait=args.wait, warmup=args.warmup_steps, active=1 + args.active, repeat=1
        ),  # fmt: skip
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
    plumbing.print_reading(tracereader.generation(seen.trace), floor if bytes_per_s else None)
    if v.impl == "ours":
        generation(args.new_tokens)  # a whole one: the dynamic cache at its longest
        kv = sum(t.nbytes for t in (*generation.cache.k, *generation.cache.v))
        held = v.max_len if args.cache == "static" else args.prompt + args.new_tokens - 1
        print(f"KV cache: {kv / 2**20:.3f} MiB held; 2 x {cfg.layers} layers x {cfg.kv_heads} "
              f"kv heads x {cfg.head_dim} x {held} tokens x {elt} bytes x batch "
              f"{args.batch} = {kv_arithmetic(cfg, held, args.batch, elt) / 2**20:.3f} MiB; "
              f"the weights {cfg.params() * elt / 2**30:.3f} GiB")  # fmt: skip
    if args.bench:
        bench(v, generation, args, run, floor if bytes_per_s else None)
    if args.sweep_batch:
        print(f"sweep (decode, {args.new_tokens} new tokens, profiler detached):")
        rows = sweep(args, v, model, run, bytes_per_s)
        plumbing.plot_sweep(rows, out.table.with_name(f"{out.table.stem}_sweep.png"), tag)
    return profiling.finish(args, out, as_expected)


def copy_bandwidth(run: cli.Run, *, fresh: bool) -> float:
    """The device's measured copy ceiling (bytes/s), cached as --bench caches it."""
    name = torch.cuda.get_device_name(run.device)
    measure = lambda what, probe: ceilings.measure(run.device, what, probe)  # noqa: E731
    copy = ceilings.get(name, torch.__version__, {ceilings.MEMORY: ()}, measure, fresh=fresh)
    print(f"copy ceiling: {copy[ceilings.MEMORY].describe(name)}")
    return copy[ceilings.MEMORY].per_s


def bench(v: Variant, generation, args, run: cli.Run, floor: float | None) -> None:
    peak = None
    if run.on_gpu:  # a generation's own peak, before the rulers below allocate theirs
        torch.cuda.reset_peak_memory_stats(run.device)
        generation(args.new_tokens)
        torch.cuda.synchronize(run.device)
        peak = torch.cuda.max_memory_allocated(run.device)
    weights = prefill_weights(v, generation.model)
    gemms = plumbing.gemm_sequence(weights, run)
    prefill_t, token, gemms_t = plumbing.time_generation(generation, args.new_tokens, run,
                                                         gemms=gemms)  # fmt: skip
    print(f"bench (profiler detached): prefill {prefill_t.us()}")
    flops, gemm_flops = prefill_flops(v), plumbing.gemm_flops(prefill_gemms(v))
    # Its floor: its GEMMs back to back, on the model's weights, as prefill runs them (each
    # shape timed alone by do_bench, after an L2 flush whose dirty lines are written back
    # during the GEMM, reaches less: prefill with --fused-gate beat that "floor"; there
    # cuBLAS's gate/up GEMM stands for the gate kernel, the same FLOPs). Prefill against
    # them: what its other kernels and the gaps between them cost.
    rate = gemm_flops / gemms_t.median_s  # the same GEMMs (prefill_weights' test)
    print(f"  its {len(weights)} GEMMs in prefill's order on the model's weights"
          f"{', one CUDA graph' * run.on_gpu}, timed beside it: {gemms_t.us()} = "
          f"{rate / 1e12:.3g} TFLOP/s; prefill's FLOPs at that rate take "
          f"{flops / rate * 1e3:.3f} ms: prefill at {prefill_t.median_s * rate / flops:.2f}x "
          "that")  # fmt: skip
    print(f"  decode: {token.median_s * 1e3:.3f} ms per token (20th-80th percentile "
          f"{token.p20_s * 1e3:.3f}-{token.p80_s * 1e3:.3f}), "
          f"{args.batch / token.median_s:,.1f} tokens/s")  # fmt: skip
    if floor:
        print(f"  = {token.median_s / floor:.2f}x the bandwidth floor: "
              f"{floor / token.median_s:.0%} of the floor's speed")  # fmt: skip
    if peak is not None:
        print(f"  peak device memory in a generation: {peak / 2**30:.2f} GiB")


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
        hf_generate(hf, prompt, n, each_token)
        span.__exit__(None, None, None)


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
