"""The labelled rank folders on GPUs: the rank cases of `ranks.py` with NCCL, one process a
GPU (cuda:LOCAL_RANK), under one torchrun launch; each case with ONE planted cause, timed
against its twin without the profiler, then profiled:

    ddp_host_straggler   DDP; rank 1 sleeps inside `load_batch` before its forward (its host
                         is late) vs no sleep
    ddp_gpu_straggler    DDP; rank 1 runs extra GEMMs inside its `forward` (its GPU is late)
                         vs none
    fsdp_gpu_straggler   FSDP2 (fully_shard per layer and the root); rank 1 runs extra GEMMs
                         inside its `forward` vs none
    uneven_all_to_all    an all_to_all_single of tokens then an expert MLP on what each rank
                         received (DDP: its gradients all-reduced after the backward): rank 0
                         receives UNEVEN times the tokens of the other ranks vs every rank
                         receiving the small share
    exposed_all_reduce   DDP of a large fp32 model (8 layers of 8192^2, buckets of 256 MB) at a
                         batch of 1 row: the gradients' all-reduces have no compute to hide
                         behind vs the same step under `no_sync()` (forward and backward)

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc-per-node 2 \\
        -m tools.dev.labelled.gpu_ranks --out OUT        # on GPUs (backend nccl)
    torchrun --standalone --nproc-per-node 2 -m tools.dev.labelled.gpu_ranks --out OUT --cpu
                                                         # the same code on a CPU (gloo, tiny)

Each case writes `<out>/<case>/<case>_rank<r>.json.gz` and `<out>/<case>.label.json` (the
fields of ranks.py's labels); `<out>/provenance.json` names device, versions, date, command.
The stake: the step's time planted less twin, each the median of timed steps, every step
between a barrier and a device sync on every rank (rank 0's clock).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gzip
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from tracereader import Parser, run

UNEVEN = 8  # uneven_all_to_all: rank 0 receives this many times the tokens of each other rank

CASES = {
    "ddp_host_straggler": {"cause": "late rank", "culprit": ["load_batch"], "late_rank": 1,
                           "late": "host", "region": "load_batch"},
    "ddp_gpu_straggler": {"cause": "late rank", "culprit": ["forward"], "late_rank": 1,
                          "late": "GPU", "region": "forward"},
    "fsdp_gpu_straggler": {"cause": "late rank", "culprit": ["forward"], "late_rank": 1,
                           "late": "GPU", "region": "forward"},
    "uneven_all_to_all": {"cause": "uneven all-to-all", "culprit": ["all_to_all", "alltoall"],
                          "late_rank": 0, "late": None, "region": None},
    "exposed_all_reduce": {"cause": "exposed communication",
                           "culprit": ["all_reduce", "allreduce"], "late_rank": None,
                           "late": None, "region": None},
}  # fmt: skip


class Sizes:
    """GPU sizes, or --cpu's tiny ones (the code paths in seconds)."""

    def __init__(self, cpu: bool):
        self.width = 256 if cpu else 2048  # the stragglers' MLP
        self.rows = 64 if cpu else 4096
        self.extra = 4 if cpu else 40  # extra GEMMs of extra_dim^3 on the late rank
        self.extra_dim = 256 if cpu else 4096
        self.sleep_s = 0.010  # ddp_host_straggler's plant
        self.tokens = 64 if cpu else 2048  # uneven_all_to_all: tokens each rank sends a rank
        self.model = 512 if cpu else 2048  # token width
        self.big = 512 if cpu else 8192  # exposed_all_reduce's layers: big x big, fp32
        self.layers = 4 if cpu else 8
        self.bucket_mb = 256  # its DDP buckets: a few large all-reduces
        # fsdp_gpu_straggler: FSDP2's host is slow (~15 ms a step on the H200's host), so its
        # GPU work must be larger than that for a late GPU to show at all
        self.fsdp_width = 256 if cpu else 4096
        self.fsdp_rows = 64 if cpu else 32768
        self.steps = 6 if cpu else 20  # timed steps each way
        self.dtype = torch.float32 if cpu else torch.bfloat16


class Case:
    """One case's model and step on this rank; `step(planted)` runs one whole step."""

    def __init__(self, name: str, rank: int, world: int, dev: torch.device, s: Sizes):
        from torch.nn.parallel import DistributedDataParallel as DDP

        self.name, self.rank, self.world, self.dev, self.s = name, rank, world, dev, s
        torch.manual_seed(0)
        self.extra_w = torch.randn(s.extra_dim, s.extra_dim, device=dev, dtype=s.dtype)
        kw = {"device_ids": [dev.index]} if dev.type == "cuda" else {}
        if name == "exposed_all_reduce":
            layers = [nn.Linear(s.big, s.big) for _ in range(s.layers)]
            model = nn.Sequential(*layers).to(dev, torch.float32)
            self.model = DDP(model, bucket_cap_mb=s.bucket_mb, **kw)
            self.width, self.rows = s.big, 1
        elif name == "uneven_all_to_all":
            self.model = DDP(_mlp(s.model, 4 * s.model, dev, s.dtype), **kw)
            self.width, self.rows = s.model, s.tokens * world
        elif name == "fsdp_gpu_straggler":
            from torch.distributed.fsdp import fully_shard

            model = _mlp(s.fsdp_width, s.fsdp_width, dev, s.dtype, layers=4)
            for layer in model:
                if isinstance(layer, nn.Linear):
                    fully_shard(layer)
            self.model = fully_shard(model)
            self.width, self.rows = s.fsdp_width, s.fsdp_rows
        else:
            self.model = DDP(_mlp(s.width, s.width, dev, s.dtype, layers=4), **kw)
            self.width, self.rows = s.width, s.rows

        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-4)
        dtype = torch.float32 if name == "exposed_all_reduce" else s.dtype
        self.x = torch.randn(self.rows, self.width, device=dev, dtype=dtype)
        self.a2a = {p: self._a2a_buffers(p) for p in (True, False)}

    def _received(self, planted: bool) -> list[int]:
        """Tokens this rank receives from each rank: planted, every rank sends UNEVEN x tokens
        to rank 0; the twin (and every other destination), `tokens`."""
        big = planted and self.rank == 0
        return [self.s.tokens * (UNEVEN if big else 1)] * self.world

    def _sent(self, planted: bool) -> list[int]:
        return [self.s.tokens * (UNEVEN if planted and dst == 0 else 1)
                for dst in range(self.world)]  # fmt: skip

    def _a2a_buffers(self, planted: bool):
        if self.name != "uneven_all_to_all":
            return None
        shape = (sum(self._sent(planted)), self.s.model)
        out = (sum(self._received(planted)), self.s.model)
        t = dict(device=self.dev, dtype=self.s.dtype)
        return torch.randn(shape, **t), torch.empty(out, **t)

    def step(self, planted: bool) -> float:
        late = planted and self.rank == 1
        with record_function("load_batch"):
            x = self.x + 0.0
            if late and self.name == "ddp_host_straggler":
                time.sleep(self.s.sleep_s)
        # the twin of exposed_all_reduce: no all-reduce (DDP decides in the forward)
        quiet = self.name == "exposed_all_reduce" and not planted
        with self.model.no_sync() if quiet else contextlib.nullcontext():
            return self._step(x, planted, late)

    def _step(self, x, planted: bool, late: bool) -> float:
        with record_function("forward"):
            if self.name == "uneven_all_to_all":
                send, got = self.a2a[planted]
                dist.all_to_all_single(got, send, self._received(planted), self._sent(planted))
                y = self.model(got)
            else:
                y = self.model(x)
            if late and self.name in ("ddp_gpu_straggler", "fsdp_gpu_straggler"):
                with torch.no_grad():
                    z = self.extra_w
                    for _ in range(self.s.extra):
                        z = torch.tanh(z @ self.extra_w)
            loss = y.float().square().mean()
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        return loss.item()  # the loop logs its loss: one sync a step


def _mlp(width, hidden, dev, dtype, layers: int = 2) -> nn.Sequential:
    dims = [width] + [hidden] * (layers - 1) + [width]
    mods: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims, dims[1:], strict=False)):
        mods += [nn.Linear(a, b)] + ([nn.ReLU()] if i < len(dims) - 2 else [])
    return nn.Sequential(*mods).to(dev, dtype)


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(case: Case, planted: bool) -> float:
    """The step's time in ms, median of timed steps (barrier and sync around each)."""
    for _ in range(3):
        case.step(planted)
    samples = []
    for _ in range(case.s.steps):
        dist.barrier()
        _sync(case.dev)
        start = time.perf_counter()
        case.step(planted)
        _sync(case.dev)
        dist.barrier()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def recorded(case: Case, folder: Path, planted: bool = True) -> None:
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if case.dev.type == "cuda" else [])
    with profile(activities=acts, schedule=schedule(wait=1, warmup=1, active=3),
                 record_shapes=True) as prof:  # fmt: skip
        for _ in range(5):
            case.step(planted)
            prof.step()
    raw = folder / f".{case.name}_rank{case.rank}.json"
    prof.export_chrome_trace(str(raw))
    dst_path = folder / f"{case.name}_rank{case.rank}.json.gz"
    with open(raw, "rb") as src, gzip.open(dst_path, "wb", 9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()


def run_case(name, out: Path, rank: int, world: int, dev, s: Sizes, common, twins) -> None:
    folder = out / name
    if rank == 0:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    dist.barrier()
    case = Case(name, rank, world, dev, s)
    twin = timed(case, False)
    planted = timed(case, True)
    recorded(case, folder)
    if twins:  # the twin's trace too (not committed: a check that it names no such cause)
        (out / "twins" / name).mkdir(parents=True, exist_ok=True)
        recorded(case, out / "twins" / name, planted=False)
    dist.barrier()
    if rank:
        return
    label = {"name": name, "folder": name, **CASES[name],
             "planted_ms": round(planted - twin, 3), "planted_step_ms": round(planted, 3),
             "twin_step_ms": round(twin, 3), "world": world, **common}  # fmt: skip
    (out / f"{name}.label.json").write_text(json.dumps(label, indent=1) + "\n")
    print(f"{name}: planted {planted:.2f} ms, twin {twin:.2f} ms, difference "
          f"{planted - twin:.2f} ms", flush=True)  # fmt: skip


def _common(dev, world: int, backend: str, argv: list[str]) -> dict:
    if dev.type == "cuda":
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
        device = f"{torch.cuda.get_device_name(dev)} x{world}, {backend} {nccl}"
    else:
        device = f"CPU ({platform.machine()}, {os.cpu_count()} cores), {world} gloo ranks"
    return {"backend": backend, "device": device, "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "command": " ".join(["torchrun --standalone --nproc-per-node", str(world),
                                 "-m tools.dev.labelled.gpu_ranks", *argv])}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = Parser(
        prog="tools.dev.labelled.gpu_ranks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default=",".join(CASES))
    parser.add_argument("--cpu", action="store_true", help="gloo on the CPU, tiny sizes")
    parser.add_argument("--twins", action="store_true", help="profile each twin too")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.cpu:
        dev, backend = torch.device("cpu"), "gloo"
        torch.set_num_threads(1)
    else:
        dev, backend = torch.device("cuda", int(os.environ["LOCAL_RANK"])), "nccl"
        torch.cuda.set_device(dev)
    dist.init_process_group(backend, device_id=dev if dev.type == "cuda" else None)
    args.out.mkdir(parents=True, exist_ok=True)
    common = _common(dev, world, backend, argv)
    names = [c.strip() for c in args.only.split(",") if c.strip()]
    for name in names:
        run_case(name, args.out, rank, world, dev, Sizes(args.cpu), common, args.twins)
    if rank == 0:
        prov = {**common, "cases": names, "nccl_env": {k: v for k, v in os.environ.items()
                                                       if k.startswith("NCCL_")}}  # fmt: skip
        (args.out / "provenance.json").write_text(json.dumps(prov, indent=1) + "\n")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
