"""The labelled rank folders: two gloo ranks on the CPU (torch.multiprocessing.spawn), each case
with ONE planted cause, timed against its twin without the plant, then profiled:

    host_straggler      rank 1 sleeps inside `load_batch` before its forward (its host is late)
    compute_straggler   rank 1 runs extra matmuls inside its `forward` (its compute is late)
    uneven_all_to_all   an all_to_all_single where rank 0 sends 64 MiB to rank 1 and rank 1 1 KiB
                        back (a skewed routing) vs every rank sending the small share (on one
                        CPU, splitting the same bytes evenly costs as much: its copies share
                        the cores)
    exposed_all_reduce  an all-reduce of a large buffer after the backward that no compute
                        hides vs no all-reduce

    uv run python -m tools.dev.labelled.ranks --out tests/fixtures/labelled/ranks

Each case writes `<out>/<case>/<case>_rank<r>.json.gz` (the profiler's distributedInfo names the
rank) and `<out>/<case>.label.json`: {cause, culprit, late_rank, late, region, planted_ms (the
step's time planted minus twin, median over timed steps, rank 0's clock), device, torch, date,
command}.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import shutil
import socket
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from tracereader import Parser, run

WORLD = 2
WIDTH, ROWS = 512, 64  # little compute: on a shared CPU its noise stays small beside the plants
SLEEP_S = 0.030  # host_straggler's plant
EXTRA = 48  # compute_straggler's extra matmul pairs
BIG, SMALL = 16 * 2**20, 256  # uneven_all_to_all: elements rank 0 sends to rank 1 / the rest
REDUCED = 8 * 2**20  # exposed_all_reduce: elements (fp32: 32 MiB)

CASES = {
    "host_straggler": {
        "cause": "late rank",
        "culprit": ["load_batch"],
        "late_rank": 1,
        "late": "host",
        "region": "load_batch",
    },
    "compute_straggler": {
        "cause": "late rank",
        "culprit": ["forward"],
        "late_rank": 1,
        "late": "compute",
        "region": "forward",
    },
    "uneven_all_to_all": {
        "cause": "uneven all-to-all",
        "culprit": ["all_to_all", "alltoall"],
        "late_rank": 0,
        "late": "communication",
        "region": None,
    },
    "exposed_all_reduce": {
        "cause": "exposed communication",
        "culprit": ["all_reduce", "allreduce"],
        "late_rank": None,
        "late": None,
        "region": None,
    },
}


def _splits(rank: int, planted: bool) -> list[int]:
    """Elements this rank sends to rank 0 and rank 1: planted, rank 0 sends BIG to rank 1 and
    rank 1 almost nothing back (a skewed routing); the twin, every rank the small share."""
    if planted:
        return [SMALL, BIG] if rank == 0 else [SMALL, SMALL]
    return [SMALL, SMALL]


def _buffers(rank: int, planted: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """all_to_all_single's input and output, made once (a model sends activations it has)."""
    sends = _splits(rank, planted)
    gets = [_splits(src, planted)[rank] for src in range(WORLD)]
    return torch.ones(sum(sends)), torch.empty(sum(gets))


def _step(case: str, rank: int, planted: bool, w: list[torch.Tensor], bufs=None) -> None:
    with record_function("load_batch"):
        x = torch.randn(ROWS, WIDTH)
        if planted and case == "host_straggler" and rank == 1:
            time.sleep(SLEEP_S)
    with record_function("forward"):
        h = torch.relu(x @ w[0])
        y = h @ w[1]
        if planted and case == "compute_straggler" and rank == 1:
            for _ in range(EXTRA):
                y = y + torch.relu(x @ w[0]) @ w[1]
    with record_function("backward"):
        grads = [x.t() @ (y @ w[1].t()), h.t() @ y]
    flat = torch.cat([g.flatten() for g in grads])
    dist.all_reduce(flat)
    if case == "uneven_all_to_all":
        sends = _splits(rank, planted)
        gets = [_splits(src, planted)[rank] for src in range(WORLD)]
        send, out = bufs[planted]
        dist.all_to_all_single(out, send, gets, sends)
    if case == "exposed_all_reduce" and planted:
        dist.all_reduce(bufs["reduced"])


def _timed(case: str, rank: int, planted: bool, w, bufs, steps: int = 30) -> float:
    for _ in range(3):
        _step(case, rank, planted, w, bufs)
    samples = []
    for _ in range(steps):
        dist.barrier()
        start = time.perf_counter()
        _step(case, rank, planted, w, bufs)
        dist.barrier()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def _worker(rank: int, case: str, out: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.manual_seed(rank)
    w = [torch.randn(WIDTH, WIDTH) / WIDTH**0.5 for _ in range(2)]
    bufs = {True: _buffers(rank, True), False: _buffers(rank, False)}
    bufs["reduced"] = torch.ones(REDUCED)
    twin = _timed(case, rank, False, w, bufs)
    planted = _timed(case, rank, True, w, bufs)
    folder = Path(out) / case
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=3),
        record_shapes=True,
    ) as prof:
        for _ in range(5):
            _step(case, rank, True, w, bufs)
            prof.step()
    raw = folder / f".{case}_rank{rank}.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(folder / f"{case}_rank{rank}.json.gz", "wb", 9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    if rank == 0:
        (folder / ".times.json").write_text(json.dumps({"planted": planted, "twin": twin}))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record(case: str, out: Path, common: dict) -> dict:
    folder = out / case
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    mp.spawn(_worker, args=(case, str(out), _free_port()), nprocs=WORLD, join=True)
    times = json.loads((folder / ".times.json").read_text())
    (folder / ".times.json").unlink()
    label = {
        "name": case,
        "folder": case,
        **CASES[case],
        "planted_ms": round(times["planted"] - times["twin"], 3),
        "planted_step_ms": round(times["planted"], 3),
        "twin_step_ms": round(times["twin"], 3),
        "world": WORLD,
        "backend": "gloo",
        **common,
    }
    (out / f"{case}.label.json").write_text(json.dumps(label, indent=1) + "\n")
    return label


def main(argv: list[str] | None = None) -> int:
    parser = Parser(
        prog="tools.dev.labelled.ranks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default=",".join(CASES))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    common = {
        "device": f"CPU ({platform.machine()}, {os.cpu_count()} cores), {WORLD} gloo ranks",
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python -m tools.dev.labelled.ranks", *(argv or sys.argv[1:])]),
    }
    for case in [c.strip() for c in args.only.split(",") if c.strip()]:
        label = record(case, args.out, common)
        print(f"{case}: planted {label['planted_step_ms']:.2f} ms, twin "
              f"{label['twin_step_ms']:.2f} ms, difference {label['planted_ms']:.2f} ms",
              flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
