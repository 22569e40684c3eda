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

    uv run 07_fsdp_train.py --device cpu      # alone: starts torchrun itself, two gloo ranks
    uv run torchrun --nproc-per-node 2 07_fsdp_train.py --device cpu       # two gloo ranks
    uv run torchrun --nproc-per-node 2 07_fsdp_train.py --no-reshard-after-forward --prefetch
    uv run torchrun --nproc-per-node 1 07_fsdp_train.py --batch 4 --seq 2048 --dim 2048 \\
        --hidden 5632 --heads 16 --layers 8 --vocab 32000 --bench   (the GPU shape: Llama-like)
    uv run explain traces/07_fsdp_train/<tag>      # every rank side by side

DDP beside it (--ddp): most multi-GPU training still replicates instead of sharding. Every rank
holds the whole model in fp32 (the forward under bf16 autocast, --dtype bf16), and DDP's
autograd hooks all-reduce the fp32 gradients in buckets of --bucket-cap-mb (25 MiB, DDP's
default; the first bucket 1 MiB), filled in the order the backward produces gradients (the
reverse of the parameters' order). Guess first, per rank and recorded step:
  forward    no collective (the weights are already everywhere);
  backward   one all-reduce per bucket, issued as soon as its last gradient is ready: on a GPU
             on NCCL's stream while the backward's GEMMs run on theirs;
  optimizer  no collective: every rank takes the same step on the same averaged gradients.
  It moves 2(N-1)/N x the fp32 gradients' bytes per step, against FSDP's 3(N-1)/N x the
  parameters' (two bf16 all-gathers and one fp32 reduce-scatter): the price of sharding is
  time, the prize memory (no rank holds the whole of the optimizer's state).

    uv run torchrun --nproc-per-node 2 07_fsdp_train.py --device cpu --ddp --bucket-cap-mb 0.25
"""

import copy
import sys
from collections import Counter

import common.startup  # noqa: F401 - before torch: Ctrl-C while it loads is one line  # isort: skip
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import profile, record_function, schedule

import tracereader
from common import cli, fsdp, profiling, torchrun, training
from common.measuring import timing
from common.training import reference_step
from modules.models import TinyLM
from tracereader import Expect, bytes_text

SCRIPT = "07_fsdp_train"


ANNOTATION = "forward"  # then "backward" and "optimizer": PHASES
PHASES = (ANNOTATION, "backward", "optimizer")
LR = 1e-3  # AdamW's default
BENCH_STEPS = 5  # --bench: the same count on every rank, or the collectives would not pair up
DDP_CAP_MB = 25  # DDP's default bucket, in MiB
FIRST_BUCKET_MB = 1  # DDP's first bucket (dist._DEFAULT_FIRST_BUCKET_BYTES): started sooner


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


def replicate(model: TinyLM, run, *, bucket_cap_mb: float) -> DDP:
    """DDP instead: the whole model on every rank, gradients all-reduced in buckets."""
    ids = [run.device.index] if run.device.type == "cuda" else None
    return DDP(model, device_ids=ids, bucket_cap_mb=bucket_cap_mb)


def train_step(model, optimizer, tokens, targets, *, autocast=None) -> torch.Tensor:
    """One step; `autocast` (a dtype) runs the forward under torch.autocast (--ddp's bf16)."""
    cast = torch.autocast(tokens.device.type, dtype=autocast, enabled=autocast is not None)
    with record_function(ANNOTATION), cast:
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


def ddp_buckets(sizes: list[int], *, cap_bytes: int, first_bytes: int) -> int:
    """How many buckets DDP fills: gradients in the order the backward produces them (the
    reverse of the parameters'), a bucket closed once it holds its limit or more (the first
    bucket's limit is the small one); a tensor larger than the limit is a bucket of its own."""
    count, held, limit = 0, 0, min(first_bytes, cap_bytes)
    for size in reversed(sizes):
        held += size
        if held >= limit:
            count, held, limit = count + 1, 0, cap_bytes
    return count + (held > 0)


def ddp_expectation(buckets: int, *, world: int) -> tuple[Expect, dict[str, Counter]]:
    """DDP: one all-reduce per bucket in the backward, none elsewhere; none at one rank."""
    issue = "c10d::_allgather_base_", "c10d::_reduce_scatter_base_", "FSDP::*"
    reduces = buckets if world > 1 else 0
    per_phase = {
        "forward": Counter(),
        "backward": Counter({"all-reduce": reduces}),
        "optimizer": Counter(),
    }
    why = f"DDP: {reduces} bucketed all-reduce(s) of the gradients per step"
    every = Expect(gpu={"collective": reduces}, cpu_present=PHASES, cpu_absent=issue, why=why)
    return every, per_phase


# Guess first, per rank and recorded step: what every step holds, and the collectives each
# phase issues. FSDP's groups are the blocks and the root: L + 1.
def expectation(layers: int, *, reshard: bool, world: int) -> tuple[Expect, dict[str, Counter]]:
    fsdp = ("FSDP::pre_forward*", "FSDP::post_backward_reduce*")  # at any world size
    issue = ("FSDP::all_gather*", "c10d::_allgather_base_", "c10d::_reduce_scatter_base_")
    if world == 1:
        why = "one rank: FSDP2 skips its collectives, the compute baseline"
        none = Expect(
            gpu={"collective": 0}, cpu_present=(*PHASES, *fsdp), cpu_absent=issue, why=why
        )
        return none, {phase: Counter() for phase in PHASES}
    groups = layers + 1
    per_phase = {
        "forward": Counter({"all-gather": groups}),
        "backward": Counter({"all-gather": groups if reshard else 0, "reduce-scatter": groups}),
        "optimizer": Counter(),
    }
    every = Expect(
        gpu={"collective": sum(sum(c.values()) for c in per_phase.values())},
        cpu_present=(*PHASES, *fsdp, *issue),
        why="all-gathers and reduce-scatters issued by FSDP's hooks",
    )
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
            lines.append(
                f"  {'ok' if good else 'MISMATCH':9} {phase:9} {kind:15} "
                f"{expected:>3} per step   seen: {got}"
            )
    if trace.on_gpu and trace.steps and any(sum(want[p].values()) for p in PHASES):
        step = trace.steps[-1]
        comm = {i.stream for i in step.gpu if i.klass.cls == "collective"}
        compute = {i.stream for i in step.gpu if i.klass.cls == "gemm"}
        apart = bool(comm) and not comm & compute  # none at all is no evidence
        ok &= apart
        lines.append(
            f"  {'ok' if apart else 'MISMATCH':9} collectives on streams "
            f"{sorted(comm)}, GEMMs on {sorted(compute)}: apart"
        )
    return ok, "\n".join(lines)


def parse(argv):
    parser = cli.make_parser(
        __doc__,
        prog=f"{SCRIPT}.py",
        bench_help="after profiling, time whole training steps without the profiler, the "
        "same number on every rank (rank 0 reports), and what its collectives move per step",
    )
    fsdp.add_flags(parser)  # the model's (per rank), --reshard-after-forward, --prefetch, --ddp
    return fsdp.refuse(parser.parse_args(argv))


# long: the lesson's steps in the order the post teaches them (build, check, profile, read);
# split, the profiler loop would hide in a helper
def main(argv=None) -> int:
    args = parse(argv)
    launch = torchrun.launched(f"{SCRIPT}.py", argv, device=args.device)  # from torchrun
    fsdp.refuse_uneven(args, launch.world)  # uneven rows are padded: the gathers move padding
    run = torchrun.resolve(args, launch)  # this rank's GPU (LOCAL_RANK), or the CPU
    tag = fsdp.run_tag(args, run, launch.world)
    out = torchrun.prepare(args.traces_dir, SCRIPT, tag, launch, gzip=args.gzip)
    group = torchrun.init_process_group(run, launch, timeout_s=args.timeout)
    fsdp.ensure_fits(args, run, launch.world)

    # Every rank builds the whole model from the same seed (the same weights everywhere), and
    # draws every rank's batch, keeping its own: the reference trains on all of them at once.
    model = TinyLM(args.vocab, args.dim, args.hidden, args.heads, args.layers).to(run.device)
    data = torch.randint(0, args.vocab, (2, launch.world * args.batch, args.seq), device=run.device)
    mine = slice(launch.rank * args.batch, (launch.rank + 1) * args.batch)
    tokens, targets = data[0, mine], data[1, mine]
    fp32_model = copy.deepcopy(model) if launch.rank == 0 else None  # the reference's start
    if args.compile:  # per block, before wrapping: FSDP's and DDP's hooks stay outside
        for block in model.blocks:
            block.compile()
    param_dtype = None if run.dtype == torch.float32 else run.dtype
    amp = None  # FSDP2 computes in bf16 parameters; DDP keeps fp32 ones under autocast
    if args.ddp:
        sizes = [p.numel() * p.element_size() for p in model.parameters()]
        model, amp = replicate(model, run, bucket_cap_mb=args.bucket_cap_mb), param_dtype
    else:
        mesh = init_device_mesh(run.device.type, (launch.world,))
        shard(
            model,
            mesh,
            param_dtype=param_dtype,
            reshard=args.reshard_after_forward,
            prefetch=args.prefetch,
        )
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)  # over this rank's shards

    def step():
        return train_step(model, optimizer, tokens, targets, autocast=amp)

    loss = profiling.warm_up(step, run, calls=1, compiling=args.compile)
    dist.all_reduce(loss, op=dist.ReduceOp.SUM)  # gloo has no AVG: the sum, then / N
    if args.ddp:  # every rank holds the whole model already
        after = {n: p.detach() for n, p in model.module.named_parameters()}
    else:
        after = {n: p.full_tensor() for n, p in model.named_parameters()}  # every rank gathers
    if launch.rank == 0:
        before = {n: p.detach() for n, p in fp32_model.named_parameters()}
        ref_loss, ref_after = reference_step(fp32_model, data[0], data[1], lr=LR)
        precision = "fp32" if param_dtype is None else ("autocast" if args.ddp else "fsdp-bf16")
        training.against_reference_step(
            float(loss) / launch.world,
            ref_loss,
            before,
            after,
            ref_after,
            lr=LR,
            precision=precision,
        )
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
        measured = timing.time_fixed(step, run, calls=BENCH_STEPS, repeats=BENCH_STEPS)
    if launch.rank != 0:
        return 0

    profiling.show(table, out, run)
    if args.ddp:
        cap = DDP_CAP_MB if args.bucket_cap_mb is None else args.bucket_cap_mb
        first = FIRST_BUCKET_MB if args.bucket_cap_mb is None else cap
        buckets = ddp_buckets(sizes, cap_bytes=int(cap * 2**20), first_bytes=int(first * 2**20))
        expect, want = ddp_expectation(buckets, world=group.world)
    else:
        reshard = args.reshard_after_forward
        expect, want = expectation(args.layers, reshard=reshard, world=group.world)
    if group.world == 1 and not args.ddp:
        print(
            "one rank: FSDP2 skips its all-gathers and reduce-scatters (nothing to gather or "
            "reduce); this run is the compute baseline for N > 1"
        )
    seen = profiling.look(out, expect)
    as_expected = seen.as_expected
    for phase, steps in tracereader.phase_steps(seen.trace, PHASES).items():
        print(f"{phase}: {tracereader.phase_line(steps)}")
    stem = out.trace.parent / tag
    files = torchrun.rank_files(out, tag, launch)
    checked = []  # each rank's trace checked as the reading loads it: read once
    link = (
        tracereader.link_curve(torch.cuda.get_device_name(run.device), group.backend, group.world)
        if run.on_gpu
        else None
    )
    reading = tracereader.read_run(
        stem,
        files,
        each=lambda trace: checked.append(check_rank(trace, expect, want)),
        link=link,  # each collective judged against the link's curve at its own size
        loaded={launch.rank: seen.trace},
    )
    for rank, (ok, text) in enumerate(checked):  # read_run goes through the ranks in order
        print(f"rank {rank}: collectives per step, expected vs seen\n{text}")
        as_expected &= ok
    print(tracereader.run_text(reading))
    print(f"all ranks, side by side: {cli.command_hint('explain', stem)}")
    if measured is not None:
        print(f"bench (profiler detached, rank 0): one step {measured.us()}")
        if args.ddp:  # a ring all-reduce moves 2(N-1)/N of the fp32 gradients
            moved = {"all-reduce": round(2 * (group.world - 1) / group.world * sum(sizes))}
        else:
            moved = traffic_model(
                model,
                world=group.world,
                reshard=args.reshard_after_forward,
                param_dtype=param_dtype,
            )
        if sum(moved.values()):
            print(
                f"  each rank's collectives move {bytes_text(sum(moved.values()))} per "
                f"step ({', '.join(f'{k} {bytes_text(b)}' for k, b in moved.items())}):"
                f" hidden only with {sum(moved.values()) / measured.median_s / 1e9:.3g} GB/s "
                "of bus bandwidth or more, overlapped with the compute"
            )
        per_rank = [r for r in reading["per_rank"] if r["comm_us"] is not None]
        comm, exposed = (
            sum(r[k] for r in per_rank) / max(len(per_rank), 1) for k in ("comm_us", "exposed_us")
        )
        # one machine-readable line for tools/dev/ranks/predict_scaling.py
        print(
            f"train-scaling: ranks={group.world} step_us={measured.median_s * 1e6:.1f} "
            f"comm_us={comm:.1f} exposed_us={exposed:.1f} moved_bytes={sum(moved.values())}"
        )
    return profiling.finish(args, out, as_expected)


if __name__ == "__main__":
    sys.exit(torchrun.run_main(main, self_launch=True))  # alone: starts torchrun
