"""Beyond the posts: 06_train_step.py's model trained with FSDP2 (sharded data parallelism)
over N ranks, one process per rank under torchrun, profiled on every rank.

You will learn: what sharding the weights costs per step (an all-gather before a block's
forward, again before its backward, a reduce-scatter of its gradients after), where those
collectives sit in a trace and on which stream, what --no-reshard-after-forward and explicit
prefetching change, and how to read N traces for "is my communication hidden?".

The sharding plan: `fully_shard` on each transformer block, then on the root (the embedding,
the final norm and the head); every parameter is cut by rows (dim 0) into N shards, one per
rank. MixedPrecisionPolicy: the all-gathered parameters are bf16 (what the GEMMs run in), the
gradients are reduced in fp32, and the optimizer (AdamW) updates fp32 shards. Every rank
trains on its own batch; the reduce-scatter averages the gradients over the ranks. gloo
runs the same policy on CPUs (bf16 all-gathers, fp32 reduce-scatters); --dtype fp32 drops
the casts.

Guess first. Per rank and recorded step, N > 1, with L blocks (L + 1 FSDP groups: the blocks
and the root):
  forward    one all-gather per group, L + 1 (FSDP::all_gather (blocks.i), then
             c10d::_allgather_base_; NCCL's AllGather kernel on a GPU), each just before the
             group's forward (or one group ahead with --prefetch).
  backward   one all-gather per group again (the forward freed the gathered weights:
             reshard_after_forward), L + 1, none with --no-reshard-after-forward (the gathered
             weights stay from the forward: more memory, fewer collectives); one reduce-scatter
             per group (FSDP::post_backward_reduce, c10d::_reduce_scatter_base_), L + 1.
  optimizer  no collective: AdamW updates this rank's shards only.
  On a GPU the collectives run on NCCL's streams, apart from the compute stream: the question
  is how much of them the compute hides. On a CPU (gloo) the calling thread issues them and
  gloo's threads move the data; FSDP's annotations (FSDP::pre_forward, FSDP::all_gather,
  FSDP::post_backward_reduce, ...) sit on the step's thread either way.
  N = 1     FSDP2 skips its collectives (nothing to gather or reduce): the run is the compute
            baseline the N > 1 runs are measured against.

Correct before fast: after one step the loss (averaged over the ranks) and the weights
(gathered with full_tensor()) are checked against a single-process float32 step of the same
model on the same data (all ranks' batches together).

    uv run torchrun --nproc-per-node 2 07_fsdp_train.py --device cpu       # two gloo ranks
    uv run torchrun --nproc-per-node 2 07_fsdp_train.py --no-reshard-after-forward --prefetch
    uv run torchrun --nproc-per-node 1 07_fsdp_train.py --batch 4 --seq 2048 --dim 2048 \\
        --hidden 5632 --heads 16 --layers 8 --vocab 32000 --bench   (the GPU shape: Llama-like)
    uv run explain traces/07_fsdp_train/<tag>      # every rank side by side
"""

import argparse
import copy
import sys
from collections import Counter

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.profiler import profile, record_function, schedule

import tracereader
from common import cli, outputs, profiling, torchrun, training
from common.measuring import bench_ranks
from common.training import reference_step
from models import TinyLM
from tracereader import Expect, bytes_text

SCRIPT = "07_fsdp_train"
ANNOTATION = "forward"  # then "backward" and "optimizer": PHASES
PHASES = (ANNOTATION, "backward", "optimizer")
LR = 1e-3  # AdamW's default
BOOL = argparse.BooleanOptionalAction  # --flag / --no-flag
BENCH_STEPS = 5  # --bench: the same count on every rank, or the collectives would not pair up


def shard(model: TinyLM, mesh, *, param_dtype, reshard: bool, prefetch: bool) -> TinyLM:
    """The sharding plan: each block is one FSDP group (one all-gather, one reduce-scatter),
    the root holds the rest. Bottom-up: a block's parameters belong to its own group."""
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    if prefetch:  # explicit: gather the next block's weights while this one computes
        blocks = list(model.blocks)
        for this, following in zip(blocks, blocks[1:], strict=False):
            this.set_modules_to_forward_prefetch([following])
            following.set_modules_to_backward_prefetch([this])  # backward runs the other way
    return model


def train_step(model, optimizer, tokens, targets) -> torch.Tensor:
    with record_function(ANNOTATION):
        loss = model(tokens, targets)
    with record_function("backward"):
        loss.backward()
    with record_function("optimizer"):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def traffic_model(model: TinyLM, *, world: int, reshard: bool, param_dtype) -> dict[str, int]:
    """What one rank's collectives move over the link per step, in bytes, nccl-tests' way (each
    all-gather and reduce-scatter moves (N-1)/N of its whole buffer): every parameter gathered
    in the forward, again in the backward when resharded, in param_dtype; every gradient
    reduce-scattered once, in fp32 (reduce_dtype)."""
    params = sum(p.numel() for p in model.parameters())  # the whole model's (DTensor sizes)
    share = (world - 1) / world
    gathers = (2 if reshard else 1) * params * (param_dtype or torch.float32).itemsize
    reduces = params * torch.float32.itemsize
    return {"all-gather": round(share * gathers), "reduce-scatter": round(share * reduces)}


# Guess first, per rank and recorded step: what every step holds, and the collectives each
# phase issues. FSDP's groups are the blocks and the root: L + 1.
def expectation(layers: int, *, reshard: bool, world: int) -> tuple[Expect, dict[str, Counter]]:
    fsdp = ("FSDP::pre_forward*", "FSDP::post_backward_reduce*")  # at any world size
    issue = ("FSDP::all_gather*", "c10d::_allgather_base_", "c10d::_reduce_scatter_base_")
    if world == 1:
        why = "one rank: FSDP2 skips its collectives, the compute baseline"
        none = Expect(gpu={"collective": 0}, cpu_present=(*PHASES, *fsdp), cpu_absent=issue,
                      why=why)  # fmt: skip
        return none, {phase: Counter() for phase in PHASES}
    groups = layers + 1
    per_phase = {
        "forward": Counter({"all-gather": groups}),
        "backward": Counter({"all-gather": groups if reshard else 0, "reduce-scatter": groups}),
        "optimizer": Counter(),
    }
    every = Expect(gpu={"collective": sum(sum(c.values()) for c in per_phase.values())},
                   cpu_present=(*PHASES, *fsdp, *issue),
                   why="all-gathers and reduce-scatters issued by FSDP's hooks")  # fmt: skip
    return every, per_phase


def check_rank(trace, expect: Expect, want: dict[str, Counter]) -> tuple[bool, str]:
    """One rank's trace against the guess: the expectation, the collectives per phase, and on
    a GPU the collectives' streams apart from the compute's."""
    verdict = tracereader.check(trace, expect)
    ok = verdict.ok
    lines = [f"  {'ok' if ok else 'MISMATCH':9} {expect.why}"] + [
        f"  MISMATCH  {m}" for m in verdict.mismatches
    ]
    seen = tracereader.collectives_by_phase(trace, PHASES)
    for phase in PHASES:
        for kind in sorted(set(want[phase]) | set(seen[phase])):
            good = seen[phase][kind] == want[phase][kind]
            ok &= good
            expected, got = want[phase][kind], seen[phase][kind]
            lines.append(f"  {'ok' if good else 'MISMATCH':9} {phase:9} {kind:15} "
                         f"{expected:>3} per step   seen: {got}")  # fmt: skip
    if trace.on_gpu and trace.steps and any(sum(want[p].values()) for p in PHASES):
        step = trace.steps[-1]
        comm = {i.stream for i in step.gpu if i.klass.cls == "collective"}
        compute = {i.stream for i in step.gpu if i.klass.cls == "gemm"}
        apart = bool(comm) and not comm & compute  # none at all is no evidence
        ok &= apart
        lines.append(f"  {'ok' if apart else 'MISMATCH':9} collectives on streams "
                     f"{sorted(comm)}, GEMMs on {sorted(compute)}: apart")  # fmt: skip
    return ok, "\n".join(lines)


def parse(argv):
    parser = cli.make_parser(
        __doc__,
        prog=f"{SCRIPT}.py",
        bench_help="after profiling, time whole training steps without the profiler, the "
        "same number on every rank (rank 0 reports), and what its collectives move per step",
    )
    training.add_model_flags(parser, batch="sequences per batch, per rank",
                             layers="transformer blocks, one FSDP group each")  # fmt: skip
    parser.add_argument("--reshard-after-forward", action=BOOL, default=True,
                        help="free the gathered weights after each forward and gather them "
                        "again for the backward (default: on; off keeps them: more memory, "
                        "fewer all-gathers)")  # fmt: skip
    parser.add_argument("--prefetch", action=BOOL, default=False,
                        help="explicit prefetching: each block gathers the next one's weights "
                        "(forward) and the previous one's (backward) (default: off, FSDP2's "
                        "implicit order)")  # fmt: skip
    torchrun.add_flags(parser)
    args = parser.parse_args(argv)
    if args.dtype == "fp16":
        raise cli.UsageError("07_fsdp_train.py takes --dtype bf16 or fp32 (its parameters' "
                             "dtype in compute; fp16 would need a gradient scaler)")  # fmt: skip
    if args.dim % args.heads:
        raise cli.UsageError(f"--heads {args.heads} does not divide --dim {args.dim}")
    return args


def bytes_needed(args, world: int) -> int:
    """In fp32: the whole model as built and its copy for the reference (rank 0), the reference
    step's weights, gradients and AdamW's two states, this rank's shards of the same four;
    activations (per layer about 7 [tokens, dim] and 4 [tokens, hidden] tensors, the logits)
    for this rank's batch and for the reference's N batches."""
    with torch.device("meta"):  # sized, not allocated
        model = TinyLM(args.vocab, args.dim, args.hidden, args.heads, args.layers)
    params = sum(p.numel() for p in model.parameters())
    t = args.batch * args.seq
    acts = (args.layers * (7 * t * args.dim + 4 * t * args.hidden) + 3 * t * args.vocab) * 4
    return int(params * 4 * (2 + 4 + 4 / world) + acts * (world + 1))


def main(argv=None) -> int:
    args = parse(argv)
    launch = torchrun.launched(f"{SCRIPT}.py", argv)  # rank and world size, from torchrun
    for flag in ("dim", "hidden", "vocab"):  # uneven rows are padded: the gathers move padding
        if getattr(args, flag) % launch.world:
            raise cli.UsageError(
                f"--{flag} {getattr(args, flag)} does not shard over {launch.world} ranks: FSDP2 "
                f"cuts every weight by rows (dim 0); choose a multiple of {launch.world}"
            )
    run = torchrun.resolve(args, launch)  # this rank's GPU (LOCAL_RANK), or the CPU
    shape = f"b{args.batch}_s{args.seq}_d{args.dim}_h{args.hidden}_n{args.heads}_l{args.layers}"
    flags = ("" if args.reshard_after_forward else "_keep") + ("_prefetch" if args.prefetch else "")
    tag = outputs.run_tag(shape, args, run, extra=f"fsdp{launch.world}{flags}")
    out = torchrun.prepare(args.traces_dir, SCRIPT, tag, launch, gzip=args.gzip)
    group = torchrun.init_process_group(run, launch, timeout_s=args.timeout)
    cli.ensure_fits(bytes_needed(args, launch.world), run)

    # Every rank builds the whole model from the same seed (the same weights everywhere), and
    # draws every rank's batch, keeping its own: the reference trains on all of them at once.
    model = TinyLM(args.vocab, args.dim, args.hidden, args.heads, args.layers).to(run.device)
    data = torch.randint(0, args.vocab, (2, launch.world * args.batch, args.seq), device=run.device)
    mine = slice(launch.rank * args.batch, (launch.rank + 1) * args.batch)
    tokens, targets = data[0, mine], data[1, mine]
    fp32_model = copy.deepcopy(model) if launch.rank == 0 else None  # the reference's start
    if args.compile:  # per block, before sharding: FSDP's hooks stay outside the graphs
        for block in model.blocks:
            block.compile()
    mesh = init_device_mesh(run.device.type, (launch.world,))
    param_dtype = None if run.dtype == torch.float32 else run.dtype
    shard(model, mesh, param_dtype=param_dtype, reshard=args.reshard_after_forward,
          prefetch=args.prefetch)  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)  # over this rank's shards

    def step():
        return train_step(model, optimizer, tokens, targets)

    loss = profiling.warm_up(step, run, calls=1, compiling=args.compile)
    dist.all_reduce(loss, op=dist.ReduceOp.SUM)  # gloo has no AVG: the sum, then / N
    after = {n: p.full_tensor() for n, p in model.named_parameters()}  # every rank gathers
    if launch.rank == 0:
        before = {n: p.detach() for n, p in fp32_model.named_parameters()}
        ref_loss, ref_after = reference_step(fp32_model, data[0], data[1], lr=LR)
        precision = "fp32" if param_dtype is None else "fsdp-bf16"
        training.against_reference_step(float(loss) / launch.world, ref_loss, before, after,
                                        ref_after, lr=LR, precision=precision)  # fmt: skip
        del before, ref_after
    del fp32_model, after
    profiling.warm_up(step, run, calls=2)

    profiling.reset_peak_memory(run)  # the peak printed below: the profiled steps' own
    # wait steps run untraced, warmup steps are traced and dropped, active steps are kept.
    with profile(
        activities=profiling.activities(run),
        schedule=schedule(wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1),
        record_shapes=True,  # the collectives' input dims give their sizes
        acc_events=True,  # one cycle (repeat=1): keeps torch from warning it drops old cycles
    ) as prof:
        for _ in range(args.wait + args.warmup_steps + args.active):
            step()
            prof.step()

    # Every rank writes its own trace, rank 0 also the table; published only if all succeed.
    with torchrun.publishing(out) as (trace_tmp, table_tmp):
        prof.export_chrome_trace(str(trace_tmp))
        if table_tmp is not None:
            table = prof.key_averages().table(sort_by=profiling.sort_key(run), row_limit=args.rows)
            table_tmp.write_text(table + "\n")

    measured = None
    if args.bench:  # every rank runs the same steps; rank 0 reports its own
        measured = bench_ranks.time_fixed(step, run, calls=BENCH_STEPS, repeats=BENCH_STEPS)
    if launch.rank != 0:
        return 0

    profiling.show(table, out, run)
    expect, want = expectation(args.layers, reshard=args.reshard_after_forward, world=group.world)
    if group.world == 1:
        print("one rank: FSDP2 skips its all-gathers and reduce-scatters (nothing to gather or "
              "reduce); this run is the compute baseline for N > 1")  # fmt: skip
    seen = profiling.look(out, expect)
    as_expected = seen.as_expected
    for phase, steps in tracereader.phase_steps(seen.trace, PHASES).items():
        print(f"{phase}: {tracereader.phase_line(steps)}")
    stem = out.trace.parent / tag
    files = torchrun.rank_files(out, tag, launch)
    checked = []  # each rank's trace checked as the reading loads it: read once
    reading = tracereader.read_run(
        stem,
        files,
        each=lambda trace: checked.append(check_rank(trace, expect, want)),
        loaded={launch.rank: seen.trace},
    )
    for rank, (ok, text) in enumerate(checked):  # read_run goes through the ranks in order
        print(f"rank {rank}: collectives per step, expected vs seen\n{text}")
        as_expected &= ok
    print(tracereader.run_text(reading))
    print(f"all ranks, side by side: {cli.command_hint('explain', stem)}")
    if measured is not None:
        print(f"bench (profiler detached, rank 0): one step {measured.us()}")
        moved = traffic_model(model, world=group.world, reshard=args.reshard_after_forward,
                              param_dtype=param_dtype)  # fmt: skip
        if sum(moved.values()):
            print(f"  each rank's collectives move {bytes_text(sum(moved.values()))} per "
                  f"step ({', '.join(f'{k} {bytes_text(b)}' for k, b in moved.items())}):"
                  f" hidden only with {sum(moved.values()) / measured.median_s / 1e9:.3g} GB/s "
                  "of bus bandwidth or more, overlapped with the compute")  # fmt: skip
    return profiling.finish(args, out, as_expected)


if __name__ == "__main__":
    sys.exit(torchrun.run_main(main))
