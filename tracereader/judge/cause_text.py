"""The words of the first finding (judge.cause): per cause, what the trace shows and the fix
that helps THAT cause. A compiled program is never told to try torch.compile, one that replays
CUDA graphs never to try CUDA graphs, a data loader never to launch fewer kernels."""

from __future__ import annotations

from tracereader.analyses.generation import GRAPH_LAUNCH
from tracereader.judge.finding import Finding
from tracereader.trace.model import Trace
from tracereader.units import duration

MIB = 2**20


def compiled(trace: Trace) -> bool:
    """The program runs torch.compile's output (Dynamo's regions, Inductor's graphs)."""
    for step in trace.steps:
        for op in step.cpu_ops:
            if op.name.startswith(("Torch-Compiled Region", "## Call CompiledFxGraph")):
                return True
    return False


def graphs(trace: Trace) -> bool:
    """The program replays CUDA graphs."""
    return any(c.name in GRAPH_LAUNCH for s in trace.steps for c in s.runtime)


def launch_fix(trace: Trace) -> str:
    """Fewer launches, by what the program does not do yet: never torch.compile for a compiled
    one, never CUDA graphs for one that replays them."""
    if graphs(trace):
        return "more work per replay: a larger batch, several steps per graph"
    if compiled(trace):
        return "CUDA graphs (torch.compile(mode='reduce-overhead')), or a larger batch"
    return "fewer, larger launches: torch.compile, CUDA graphs, a larger batch"


def _host_line(host: dict, top: dict, wall: float) -> str:
    t = top.get("host_item_us", 0.0)
    return f"{duration(t)} of the host's {duration(host['host_us'])} step ({t / wall:.0%})"


def _rest(host: dict, skip: str) -> str:
    parts = [(k, v) for k, v in host["us"].items() if k != skip and v]
    parts.sort(key=lambda kv: -kv[1])
    return ", ".join(f"{k} {duration(v)}" for k, v in parts[:3])


def _data_loader(trace, top, host, wall):
    return (
        f"the data loader: {top['culprit']} takes {_host_line(host, top, wall)} on the main "
        f"thread while the GPU waits (then: {_rest(host, 'data loader')})",
        "load in worker processes (DataLoader(num_workers=N, pin_memory=True, "
        "persistent_workers=True)), or precompute / move the per-sample transforms to the GPU",
    )


def _optimizer(trace, top, host, wall):
    names = {op.name for s in trace.steps for op in (*s.cpu_ops, *s.other_ops)}
    if any("_fused_" in n for n in names):
        kind, fix = "fused", "a larger batch per step (the optimizer's cost is per parameter)"
    elif any(n.startswith("aten::_foreach_") for n in names):
        kind, fix = "foreach", "fused=True: one kernel for all the parameters"
    else:
        kind = "a for-loop over the parameters"
        fix = "fused=True (or foreach=True): one launch for all the parameters, not ~10 each"
    return (
        f"the optimizer ({kind}): {top['culprit']} takes {_host_line(host, top, wall)} issuing "
        f"its small kernels one parameter at a time (then: {_rest(host, 'optimizer')})",
        fix,
    )


def _compilation(trace, top, host, wall):
    return (
        f"recompilation: torch.compile compiles again inside the recorded steps, "
        f"{_host_line(host, top, wall)}: a guard fails every step (a changing shape, a "
        "changing Python number)",
        "find what changes (TORCH_LOGS=recompiles); mark it dynamic (torch._dynamo."
        "mark_dynamic, dynamic=True), pass changing numbers as tensors, pad shapes to a few "
        "buckets",
    )


def _user_code(trace, top, host, wall):
    return (
        f"your code: the region '{top['culprit']}' runs {_host_line(host, top, wall)} with no "
        "GPU work in it (Python between its few ops); the GPU waits meanwhile",
        f"make '{top['culprit']}' cheaper or take it out of the step: every N steps, on "
        "another thread, or vectorised on the GPU",
    )


def _launches(trace, top, host, wall):
    # the host's launches: a CUDA graph's replay is one, whatever the kernels it runs
    kernels = sum(
        len({id(i.call) if i.call is not None else id(i) for i in s.gpu}) for s in trace.steps
    ) / len(trace.steps)
    busy = host["host_us"] - top["us"]
    parts = ", ".join(
        f"{k} {duration(host['us'][k])}" for k in ("dispatch", "Python between ops",
                                                   "autograd thread") if host["us"][k]
    )  # fmt: skip
    fix = launch_fix(trace)
    return (
        f"launch overhead: the host issues {kernels:.0f} GPU operation"
        f"{'' if round(kernels) == 1 else 's'} a step one by one "
        f"({parts}, in {top['culprit']}); the GPU finishes each before the next arrives "
        f"(about {duration(max(busy, 0.0))} of the step would remain)",
        fix,
    )


def _sync(trace, top, host, wall):
    costs = top["costs"]
    return (
        f"host syncs: {costs['count']:g} per step inside the step ({top['culprit']}); after "
        f"each the GPU sits idle until the host queues work again: {duration(top['us'])} per "
        "step",
        sync_fix(top["culprit"])
        or "keep values on the GPU: no .item(), bool(tensor), .cpu() or data-dependent shapes "
        "(torch.nonzero, boolean indexing) inside the step; check on the GPU and read once per "
        "step (torch.nonzero_static, torch.where, masks)",
    )


DATA_DEPENDENT = frozenset({"nonzero", "masked_select", "unique", "_unique2", "unique_consecutive",
                            "repeat_interleave", "index", "masked_scatter"})  # fmt: skip


def sync_fix(op: str | None, types=()) -> str | None:
    """The fix for a sync by the op that made it (analyses.syncs.culprit); None: no advice
    particular to that op."""
    name = (op or "").removeprefix("aten::")
    if name == "_grouped_mm":
        inputs = "float32 inputs" if "float" in types else "inputs it has no fused kernel for"
        return (
            f"aten::_grouped_mm on {inputs} runs its fallback, which copies the groups' "
            "offsets to the host and waits, every call: give the experts bf16 inputs and "
            "weights (.to(torch.bfloat16)); the fused grouped GEMM then runs with no sync"
        )
    if name == "is_nonzero":
        return (
            "a GPU tensor read as a Python bool (`if t:`, `while t:`, `assert t`): decide "
            "on the GPU (torch.where, masks), or read the flag once per step"
        )
    if name in DATA_DEPENDENT:
        return (
            f"{op} makes an output whose size depends on the data: the host waits to "
            "learn it; use a fixed size (torch.nonzero_static, masks, torch.where)"
        )
    if name in ("item", "_local_scalar_dense"):
        return (
            "keep the value on the GPU (accumulate losses and metrics in a tensor) and "
            "read it once every N steps"
        )
    return None


HOST_TEXT = {
    "data loader": _data_loader,
    "optimizer": _optimizer,
    "compilation": _compilation,
    "user code": _user_code,
    "dispatch": _launches,
    "Python between ops": _launches,
    "autograd thread": _launches,
    "syncs": _sync,
}


def _fp32(trace, top, host, wall):
    return (
        f"fp32 GEMMs on CUDA cores: {duration(top['fp32_us'])} of the step's "
        f"{duration(top['gemm_us'])} of GEMMs run in plain fp32 (most by {top['culprit']}); "
        f"TF32 runs them ~{top['ratio']:.1f}x faster, bf16 faster still",
        "torch.set_float32_matmul_precision('high') (TF32), or bf16 autocast "
        "(torch.autocast('cuda', dtype=torch.bfloat16))",
    )


def _unaligned(trace, top, host, wall):
    m, n, k = top["shape"]
    return (
        f"an unaligned GEMM: {top['culprit']} with M, N, K = {m}, {n}, {k} (not all multiples "
        "of 8 elements) runs on a slow path, below the rate the step's aligned GEMMs reach",
        "pad the odd dimension to a multiple of 64 (a vocabulary: pad the embedding and the "
        "head, ignore the extra logits)",
    )


def _unfused(trace, top, host, wall):
    fix = (
        "one fused op for the chain (F.gelu(x, approximate='tanh'), nn.LayerNorm, F.rms_norm, "
        "F.silu) or torch.compile, which fuses such chains into one kernel"
    )
    if compiled(trace):
        fix = "the fused op for the chain (F.gelu(x, approximate='tanh'), nn.LayerNorm, ...)"
    return (
        f"unfused elementwise work: {top['kernels']:g} elementwise kernels a step in chains "
        f"({', '.join(top['ops'])}), each a full pass over memory where one would do",
        fix,
    )


def _recompute(trace, top, host, wall):
    if "gpu_us" in top:  # the recomputed ops launched GPU work (gpuside.recompute)
        on_host = f" and {duration(top['host_us'])} of the host's" if top.get("host_us") else ""
        cost = f"{duration(top['gpu_us'])} of GPU time{on_host}"
    else:  # the host's time alone: a CPU-only trace, or ops that launched nothing
        cost = f"{duration(top['host_item_us'])} of the host's time"
    return (
        f"recomputation: gradient checkpointing runs the forward again inside the backward "
        f"({top['culprit']} and the ops around it): {cost} a step",
        "checkpoint fewer layers (or only the cheap ops: selective checkpointing) where memory "
        "allows",
    )


def _casts(trace, top, host, wall):
    return (
        f"autocast's casts: fp32 weights cast to 16 bits in every forward and their gradients "
        f"cast back in the backward ({top['culprit']}): {duration(top['gpu_us'])} of copies a "
        "step",
        "keep 16-bit weights for the compute and fp32 master weights in the optimizer (a bf16 "
        "model, FSDP2's MixedPrecisionPolicy)",
    )


GPU_TEXT = {
    "fp32 GEMMs": _fp32,
    "unaligned GEMM": _unaligned,
    "unfused elementwise": _unfused,
    "recompute": _recompute,
    "autocast casts": _casts,
}


def growth_finding(grown: dict) -> Finding:
    kept = ", ".join(f"{r['op']} {r['bytes'] / MIB:.0f} MiB" for r in grown["kept"][:3])
    per = grown["per_step_bytes"] / MIB
    return Finding(
        "cause",
        f"memory grows {per:.1f} MiB per step on {grown['device']} "
        f"({grown['first_bytes'] / 2**30:.2f} -> {grown['last_bytes'] / 2**30:.2f} GiB over "
        f"{grown['steps']} steps): something keeps each step's tensors alive; what the steps "
        f"allocated and never freed: {kept}",
        next="keep numbers, not tensors (.item() once, .cpu()/.detach() copies), clear the "
        "lists that collect outputs, evaluate under torch.no_grad()",
        cause="memory growth",
        culprit=grown["kept"][0]["op"] if grown["kept"] else None,
        mib_per_step=per,
    )
