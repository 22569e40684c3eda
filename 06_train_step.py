"""Beyond the posts: profile a whole training step: forward, loss, backward, optimizer.

You will learn: what a backward pass and an optimizer add to a trace, how the backward's GEMMs
pair with the forward's, what one optimizer flag changes in its launches, and what autocast's
casts cost. Every earlier lesson profiled a forward under no_grad; this one trains.

The model, a small language model built from the earlier lessons' parts:
    x = embed(tokens)                                        # nn.Embedding(vocab, dim)
    per layer:  x = x + out(sdpa(qkv(rmsnorm(x)), causal))   # 04_c's attention
                x = x + GeGLUMLP(rmsnorm(x))                 # 03's MLP, modules/models.py
    loss = cross_entropy(head(rmsnorm(x)), targets)          # nn.Linear(dim, vocab)
One step: forward and loss, loss.backward(), AdamW's step(), zero_grad(set_to_none=True),
each under its own record_function: forward, backward, optimizer.

Guess first. Per recorded step, on a GPU, with L layers (5 GEMMs each) and the head:
  forward    5L + 1 GEMMs, L attention kernels, the norms, GeLU, mul and the loss around them;
             --precision autocast adds cast kernels (aten::_to_copy: the fp32 weights cast to
             bf16 for every GEMM) that pure bf16 and fp32 do not have.
  backward   two GEMMs per forward GEMM (the gradient of the input and of the weight), each
             layer's attention backward; launched from the autograd engine's own thread.
  optimizer  no GEMM. AdamW's launches depend on one flag: forloop runs 8 elementwise kernels
             per parameter tensor; foreach groups the tensors into a few multi-tensor kernels
             per update term; fused runs the whole update in a few kernels. zero_grad with
             set_to_none=True launches nothing: it drops the gradients.
  --compile  the model (and the loss) compiled: the GEMMs stay, the rest fuses into Triton
             kernels, and the backward comes from AOTAutograd (CompiledFunctionBackward).
On a CPU the same phases and dispatch chains appear, without kernels.

Correct before fast: one step from the same weights is checked against a float32 step (the
loss, and how far each weight moved in units of lr). --memory records every allocation and
free of the profiled steps in their trace (profile_memory=True; the trace is named ..._memory,
apart from the plain run's, for `explain --memory`), then profiles one more step with its
memory events: memory by category over the step as a PNG with the phases marked, the peak per
phase, and the categories against the arithmetic (gradients = parameters, AdamW's state = 2 x
parameters, the activations backward keeps); on a GPU also the allocator's history, a .pickle
for https://pytorch.org/memory_viz.

    uv run 06_train_step.py --batch 2 --seq 16 --dim 64 --hidden 128 --heads 2 --layers 2
    uv run 06_train_step.py --precision fp32 --optimizer forloop --memory
    uv run 06_train_step.py --batch 8 --seq 1024 --dim 1024 --hidden 4096 --heads 16 \\
        --layers 4 --vocab 32768 --optimizer fused --precision autocast      (a GPU shape)
"""

import copy
import sys
import tempfile
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import common.startup  # noqa: F401 - before torch: Ctrl-C while it loads is one line  # isort: skip
import torch
from torch import nn
from torch.profiler import profile, record_function, schedule

import tracereader
from common import cli, memory, outputs, profiling, training
from common.measuring import timing, traffic
from common.training import reference_step
from modules.models import TinyLM
from tracereader import Expect

SCRIPT = "06_train_step"


ANNOTATION = "forward"  # then "backward" and "optimizer": PHASES
PHASES = ("forward", "backward", "optimizer")
LR = 1e-3  # AdamW's default
OPTIMIZERS = {  # AdamW's implementation flags
    "forloop": {"foreach": False},
    "foreach": {"foreach": True},
    "fused": {"fused": True},
}
PRECISIONS = {"autocast": torch.float32, "bf16": torch.bfloat16, "fp32": torch.float32}


def autocast(precision: str, device: torch.device):
    """bf16 autocast over fp32 weights; pure bf16 and fp32 run as stored."""
    if precision != "autocast":
        return nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def train_step(model, optimizer, tokens, targets, precision: str, mark=None) -> torch.Tensor:
    mark = mark or (lambda phase: None)  # --bench's clock, between phases
    with record_function(ANNOTATION), autocast(precision, tokens.device):
        loss = model(tokens, targets)
    mark("forward")
    with record_function("backward"):
        loss.backward()
    mark("backward")
    with record_function("optimizer"):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    mark("optimizer")
    return loss.detach()


@dataclass(frozen=True)
class Variant:
    gemms: int  # forward GEMMs per step: 5 per layer, 1 for the head
    tensors: int  # parameter tensors AdamW updates
    optimizer: str
    precision: str
    compiled: bool


# Guess first: each phase's share of a recorded step, in kernel classes (names differ per GPU).
def _forward(v: Variant) -> Expect:
    ops = (
        ("Torch-Compiled Region*",) if v.compiled else ("aten::linear", "aten::cross_entropy_loss")
    )
    autocasts = v.precision == "autocast" and not v.compiled
    return Expect(
        gpu={"gemm": v.gemms},
        cpu_present=ops + (("aten::_to_copy",) if autocasts else ()),
        why=f"{v.gemms} GEMMs (5 per layer, the head)"
        + ("; autocast casts the fp32 weights to bf16" if v.precision == "autocast" else ""),
    )


def _backward(v: Variant) -> Expect:
    # autocast's casts have a backward of their own: each gradient cast back to fp32
    cast_back = ("autograd::engine::evaluate_function: ToCopyBackward0",)
    autocasts = v.precision == "autocast" and not v.compiled
    return Expect(
        gpu={"gemm": 2 * v.gemms},
        cpu_present=(("CompiledFunctionBackward",) if v.compiled else ("autograd::engine*",))
        + (cast_back if autocasts else ()),
        why="two GEMMs per forward GEMM: the input's gradient and the weight's",
    )


def _optimizer(v: Variant) -> Expect:
    step = {
        "forloop": (("aten::lerp_",), ("aten::_foreach_lerp_", "aten::_fused_adamw_")),
        # a CPU's foreach kernels loop over aten::lerp_ themselves: not told apart by it
        "foreach": (("aten::_foreach_lerp_",), ("aten::_fused_adamw_",)),
        "fused": (("aten::_fused_adamw_",), ("aten::lerp_", "aten::_foreach_lerp_")),
    }[v.optimizer]
    gpu = {"gemm": 0} | ({"elementwise": 8 * v.tensors} if v.optimizer == "forloop" else {})
    return Expect(
        gpu=gpu,
        cpu_present=("Optimizer.step#AdamW.step", "Optimizer.zero_grad#AdamW.zero_grad", *step[0]),
        cpu_absent=step[1],
        why={
            "forloop": f"8 elementwise kernels for each of the {v.tensors} tensors",
            "foreach": "multi-tensor kernels, a few per update term",
            "fused": "the whole update in a few multi-tensor kernels",
        }[v.optimizer],
    )


EXPECT = {"forward": _forward, "backward": _backward, "optimizer": _optimizer}


def traffic_model(args, elt: int) -> list[traffic.Kernel]:
    """The step's GEMMs: per layer qkv, out, gate, up, down, then the head; the backward runs
    each twice (input and weight gradient), same FLOPs each."""
    t, d, h = args.batch * args.seq, args.dim, args.hidden
    layer = [
        traffic.gemm("qkv", t, d, 3 * d, elt),
        traffic.gemm("out", t, d, d, elt),
        *traffic.geglu_projections(t, d, h, elt),
    ]
    forward = layer * args.layers + [traffic.gemm("head", t, d, args.vocab, elt)]
    return forward * 3


def memory_model(args, model: nn.Module, on_gpu: bool) -> dict[str, int]:
    """What the arithmetic says a step holds at most, per category. Gradients as large as the
    parameters, AdamW's state twice them (exp_avg, exp_avg_sq). Activations, what backward
    keeps: per layer the residual stream twice, the two norms' outputs, q, k, v, the attention
    output and its [tokens, dim] copy, g, u, gelu(g) and their product [tokens, hidden], the
    norms' and attention's per-token statistics in fp32; then the last residual, the final
    norm's output and log_softmax's [tokens, vocab], with the logits it was computed from
    alive beside it at the forward's end. Autocast keeps the residual stream and the
    loss in fp32 and what the GEMMs take and give in bf16, the bf16 copy of every weight a
    GEMM used among them (the backward multiplies by it); on a GPU the cross-entropy also
    keeps a bf16 [tokens, vocab] tensor beside its fp32 log-softmax (seen on an H100 with
    torch 2.11: made inside aten::cross_entropy_loss; a CPU run does not keep it)."""
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    t, d, h, v = args.batch * args.seq, args.dim, args.hidden, args.vocab
    hi, lo = {"fp32": (4, 4), "bf16": (2, 2), "autocast": (4, 2)}[args.precision]
    per_layer = 2 * t * d * hi + 7 * t * d * lo + 4 * t * h * lo + (2 + args.heads) * t * 4
    last = t * d * (hi + lo) + t * v * (hi + lo) + t * 4
    casts = sum(m.weight.numel() * 2 for m in model.modules() if isinstance(m, nn.Linear))
    return {
        "parameters": params,
        "gradients": params,
        "optimizer state": 2 * params,
        "activations": args.layers * per_layer
        + last
        + ((casts + (t * v * 2 if on_gpu else 0)) if args.precision == "autocast" else 0),
    }


def parse(argv):
    parser = cli.make_parser(
        __doc__,
        prog=f"{SCRIPT}.py",
        bench_help="after profiling, time the whole training step without the profiler, then each "
        "phase (forward, backward, optimizer) with a clock between them",
    )
    training.add_model_flags(parser)
    parser.add_argument(
        "--optimizer",
        choices=list(OPTIMIZERS),
        default="foreach",
        help="AdamW's implementation (default: foreach, torch's)",
    )
    parser.add_argument(
        "--precision",
        choices=list(PRECISIONS),
        default="autocast",
        help="autocast: bf16 autocast over fp32 weights; bf16: weights and "
        "everything bf16; fp32 (default: autocast)",
    )
    parser.add_argument(
        "--memory",
        action="store_true",
        help="record the profiled steps' allocations in their trace (named ..._memory, "
        "for explain --memory), then profile one more step with its memory events: a PNG of "
        "memory by category over the step, the peak per phase, the categories against the "
        "arithmetic; on a GPU also the allocator's history (.pickle)",
    )
    parser.set_defaults(dtype=None)  # --precision says it
    args = parser.parse_args(argv)
    if args.dtype is not None:
        raise cli.UsageError("06_train_step.py takes --precision autocast|bf16|fp32, not --dtype")
    if args.dim % args.heads:
        raise cli.UsageError(f"--heads {args.heads} does not divide --dim {args.dim}")
    args.dtype = "fp32" if args.precision == "fp32" else "bf16"
    return args


# long: the lesson's steps in the order the post teaches them (build, check, profile, read);
# split, the profiler loop would hide in a helper
def main(argv=None) -> int:
    args = parse(argv)
    run = cli.resolve(args)
    run = cli.Run(run.device, run.dtype, args.precision)
    training.ensure_fits(args, run, weight_bytes=PRECISIONS[args.precision].itemsize)
    shape = f"b{args.batch}_s{args.seq}_d{args.dim}_h{args.hidden}_n{args.heads}_l{args.layers}"
    # --memory's trace holds every allocation too: a name of its own, beside the plain run's
    tag = outputs.run_tag(shape, args, run, extra=args.optimizer) + "_memory" * args.memory
    out = outputs.prepare(args.traces_dir, SCRIPT, tag, gzip=args.gzip)

    model = TinyLM(args.vocab, args.dim, args.hidden, args.heads, args.layers).to(run.device)
    tokens, targets = torch.randint(0, args.vocab, (2, args.batch, args.seq), device=run.device)
    fp32_model = copy.deepcopy(model)  # the reference starts from the very same weights
    model = model.to(PRECISIONS[args.precision])
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, **OPTIMIZERS[args.optimizer])
    forward = torch.compile(model) if args.compile else model

    def step(mark=None):
        return train_step(forward, optimizer, tokens, targets, args.precision, mark)

    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    loss = profiling.warm_up(step, run, calls=1, compiling=args.compile)
    ref_loss, ref_after = reference_step(fp32_model, tokens, targets, lr=LR)
    after = dict(model.named_parameters())
    training.against_reference_step(
        float(loss), ref_loss, before, after, ref_after, lr=LR, precision=args.precision
    )
    del fp32_model, before, after, ref_after
    profiling.warm_up(step, run, calls=2)

    profiling.reset_peak_memory(run)  # the peak printed below: the profiled steps' own
    # wait steps run untraced, warmup steps are traced and dropped, active steps are kept.
    with profile(
        activities=profiling.activities(run),
        schedule=schedule(wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1),
        record_shapes=True,  # the table's input dims tell which GEMM is which
        profile_memory=args.memory,  # every allocation and free: `explain --memory` reads them
        acc_events=True,  # one cycle (repeat=1): keeps torch from warning it drops old cycles
    ) as prof:
        for _ in range(args.wait + args.warmup_steps + args.active):
            step()
            prof.step()

    table = prof.key_averages().table(sort_by=profiling.sort_key(run), row_limit=args.rows)
    with outputs.publishing(out.trace, out.table) as (trace_tmp, table_tmp):
        prof.export_chrome_trace(str(trace_tmp))
        table_tmp.write_text(table + "\n")
    profiling.show(table, out, run)

    seen = profiling.look(out, Expect(cpu_present=PHASES, why="three annotated phases"))
    variant = Variant(
        gemms=5 * args.layers + 1,
        tensors=len(list(model.parameters())),
        optimizer=args.optimizer,
        precision=args.precision,
        compiled=args.compile,
    )
    as_expected = seen.as_expected
    # Then look per phase: each recorded step cut at its annotations, held to its guess.
    phases = tracereader.phase_steps(seen.trace, PHASES)
    for phase, steps in phases.items():
        expect = EXPECT[phase](variant)
        verdict = tracereader.check(seen.trace.with_steps(steps), expect)
        print(f"{phase}: {tracereader.phase_line(steps)}")
        print(verdict.text)
        as_expected &= verdict.ok
    if seen.trace.device is not None:  # set_to_none: the gradients are dropped, not zeroed
        zeroing = tracereader.launched_under(phases["optimizer"], "Optimizer.zero_grad#")
        print(f"zero_grad(set_to_none=True) launched {zeroing} GPU operations (expected 0)")
        as_expected &= zeroing == 0
    if args.memory:  # one more step, apart: recording stacks slows the profiled ones
        with tempfile.TemporaryDirectory() as tmp:
            snapshot = Path(tmp) / "snapshot.pickle" if run.on_gpu else None
            used = memory.record(step, run, PHASES, snapshot)
            png = out.table.with_suffix(".png")  # the tag ends in _memory
            memory.write(used, png, snapshot, f"{SCRIPT} {out.table.stem}")
        as_expected &= memory.report(used, memory_model(args, model, run.on_gpu))
        hint = cli.command_hint("explain", out.trace, "--memory")
        print(f"every allocation of the profiled steps, over time: {hint}")
    if args.bench:
        measured = timing.time_fn(step, on_gpu=run.on_gpu)
        flops, _ = traffic.total(traffic_model(args, cli.element_size(run)))
        print(
            f"bench (profiler detached): one step {measured.us()}, "
            f"{flops / measured.median_s / 1e12:.3g} TFLOP/s in its GEMMs"
        )
        # steps back to back, a clock between phases: the forward waits on the host's launches
        by_phase = timing.time_phases(step, on_gpu=run.on_gpu)
        total = sum(took.median_s for took in by_phase.values())
        for phase, took in by_phase.items():
            print(f"  {phase:<9} {took.us()}: {took.median_s / total:.0%} of the phases' sum")
    return profiling.finish(args, out, as_expected)


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
