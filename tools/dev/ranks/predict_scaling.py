"""Predict, then measure: 05's and 07's step at N GPUs of one NVLink host from what N = 1 and
N = 2 measured and from the link's curve (tools/dev/ranks/link_curve.py), before the larger runs.

    python3 -m tools.dev.ranks.predict_scaling --tp TP_DIR --train FSDP_DIR [FSDP_DIR ...] \\
        --curve CURVE_N2.csv CURVE_N4.csv --ranks 4,8 [--out OUT_DIR]

TP_DIR is tools/tp_scaling.py's output (tp_scaling.csv, rows for N = 1 and 2); each FSDP_DIR
is tools/dev/gpu_runs/fsdp_gpu.sh's (its n<N>_<variant>.log files, N = 1 and 2, each with the
lesson's `train-scaling:` line and phase lines). The model (its assumptions, printed with it):

05 (tensor parallel, the same tokens split over N: strong scaling). Per rank the GEMMs shrink
  as 1/N but launches and small kernels do not: compute(N) = a + b/N, fitted to compute(1) =
  the forward at N = 1 and compute(2) = the forward at N = 2 less its all-reduce timed alone.
  The all-reduce (tokens x dim, whatever N) cannot overlap (it needs the down GEMM's output):
  forward(N) = compute(N) + 2(N-1)/N x bytes / curve(all-reduce, bytes, N).
  Efficiency = forward(1) / (N x forward(N)).
07 (FSDP2, the same tokens per rank: weak scaling). Per rank the compute stays, but AdamW
  updates 1/N of the weights: compute(N) = step(1) - optimizer(1) x (1 - 1/N). The collectives
  per step: per FSDP group an all-gather of its bf16 weights in the forward and, resharded,
  again in the backward, and a reduce-scatter of its fp32 gradients; each takes
  (N-1)/N x bytes / curve(kind, bytes, N). The part no compute hides is taken to scale with the
  collectives' time as it did at N = 2: exposed(N) = exposed(2) x comm(N) / comm(2) (both from
  the curve), so step(N) = compute(N) + exposed(N). Efficiency = step(1) / step(N).
N beyond the largest curve measured: that curve (on an NVSwitch host every GPU reaches every
other at the same rate, so bus bandwidth changes little with N: an assumption the N = 4 runs
check).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import sys
from pathlib import Path

from tracereader import LinkCurve, NotRegular, Parser, UsageError, positive_int, read_regular, run

TRAIN_LINE = re.compile(r"^train-scaling: (.*)$", re.MULTILINE)
SHAPE = re.compile(r"b(\d+)_s(\d+)_d(\d+)_h(\d+)_n(\d+)_l(\d+)")
OPT_LINE = re.compile(r"^optimizer: .*GPU busy ([\d.]+) (us|ms|s) per step", re.MULTILINE)
UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6}
BF16, FP32 = 2, 4
TP_SHAPES = {"post": (64 * 128, 768), "8x": (64 * 128, 2048), "tiny": (8, 16)}  # tokens, dim
TP_COLUMNS = {"shape", "mode", "ranks", "forward_us", "allreduce_us", "status"}
MAX_INPUT_BYTES = 64 << 20  # a curve is ~3 kB, a lesson's log a few MB


def read_input(path: Path, what: str, errors: str = "strict") -> str:
    """`path`'s text, or one line (UsageError) where it cannot be an input: missing, no regular
    file (checked once open, and opened without blocking: a FIFO would hang the open,
    /dev/zero never end), too large, not UTF-8."""
    try:
        data = read_regular(path, MAX_INPUT_BYTES)
    except NotRegular:
        raise UsageError(
            f"{what} {path} is not a regular file (a FIFO, a device, a folder?)"
        ) from None
    except OSError as err:
        raise UsageError(f"cannot read {what} {path}: {err.strerror or err}") from None
    if len(data) > MAX_INPUT_BYTES:
        raise UsageError(f"{what} {path} is larger than {MAX_INPUT_BYTES >> 20} MiB")
    try:
        return data.decode("utf-8", errors)
    except UnicodeDecodeError:
        raise UsageError(f"{what} {path} is not UTF-8 text") from None


def number(text, where: str) -> float:
    if text is None:
        raise UsageError(f"{where} is missing")
    try:
        return float(text)
    except (TypeError, ValueError):
        raise UsageError(f"{where} is not a number: {str(text)[:40]!r}") from None


def time_us(text, where: str, *, zero: bool = False) -> float:
    """A time read from an input: finite, above 0 (or 0, where `zero`); NaN, inf, a negative
    time or a word would otherwise come out as a prediction."""
    value = number(text, where)
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        least = "0 or more" if zero else "above 0"
        raise UsageError(f"{where} must be a finite time {least}, got {str(text)[:40]}")
    return value


def rank_count(text, where: str) -> int:
    value = number(text, where)
    if not (math.isfinite(value) and value >= 1 and value == int(value)):
        raise UsageError(f"{where} must be a whole number of ranks, got {str(text)[:40]}")
    return int(value)


def group_params(*, vocab: int, dim: int, hidden: int, layers: int) -> list[int]:
    """Parameters per FSDP group of 06/07's TinyLM: each block (two RMSNorms, qkv and out,
    the GeGLU MLP's three), then the root (embedding, final norm, head)."""
    block = 2 * dim + 4 * dim * dim + 3 * dim * hidden
    return [block] * layers + [2 * vocab * dim + dim]


def curve_for(curves: dict[int, LinkCurve], n: int) -> tuple[LinkCurve, str]:
    if n in curves:
        return curves[n], f"measured at N={n}"
    top = max(k for k in curves if k <= n) if any(k <= n for k in curves) else max(curves)
    return curves[top], f"N={top}'s curve (N={n} not measured)"


def collective_us(curve: LinkCurve, kind: str, nbytes: float, n: int) -> float:
    bus = curve.ceiling(kind, nbytes)
    if bus is None:  # below the curve: at least its smallest size's time
        smallest, bus = curve.points[kind][0]
        nbytes = smallest
    factor = 2 * (n - 1) / n if kind == "all-reduce" else (n - 1) / n
    return factor * nbytes / bus * 1e6


def predict_tp(rows: list[dict], curves, counts, dim_of) -> list[dict]:
    out = []
    for (shape, mode), group in _by(rows, ("shape", "mode")).items():
        one, two = group.get(1), group.get(2)
        if not one or not two or not two.get("allreduce_us"):
            continue
        c1, c2 = one["forward_us"], two["forward_us"] - two["allreduce_us"]
        b = 2 * (c1 - c2)  # c(N) = a + b / N through (1, c1) and (2, c2)
        a = c1 - b
        if a < 0:  # better than 1/N from 1 to 2 (caches): take 1/N from N = 2 on
            a, b = 0.0, 2 * c2
        tokens, dim = dim_of(shape)
        nbytes = tokens * dim * BF16
        for n in counts:
            curve, which = curve_for(curves, n)
            comm = collective_us(curve, "all-reduce", nbytes, n)
            forward = a + b / n + comm
            out.append({"lesson": "05", "case": f"{shape} {mode}", "ranks": n,
                        "step_us": forward, "comm_us": comm, "exposed_us": comm,
                        "efficiency": c1 / (n * forward), "curve": which})  # fmt: skip
    return out


def predict_train(runs: dict, curves, counts, groups) -> list[dict]:
    out = []
    for (folder, variant), by_n in runs.items():
        # the FSDP variants share N = 1 (no collectives there): eager's, where not their own
        one, two = by_n.get(1) or runs.get((folder, "eager"), {}).get(1), by_n.get(2)
        if not one or not two:
            continue
        reshard = "keep" not in variant
        curve2, _ = curve_for(curves, 2)
        comm2 = _fsdp_comm(curve2, groups, 2, reshard)
        for n in counts:
            curve, which = curve_for(curves, n)
            comm = _fsdp_comm(curve, groups, n, reshard)
            compute = one["step_us"] - one["optimizer_us"] * (1 - 1 / n)
            exposed = two["exposed_us"] * comm / comm2 if comm2 else 0.0
            step = compute + exposed
            out.append({"lesson": "07", "case": f"{folder} {variant}", "ranks": n, "step_us": step,
                        "comm_us": comm, "exposed_us": exposed,
                        "efficiency": one["step_us"] / step, "curve": which})  # fmt: skip
    return out


def _fsdp_comm(curve: LinkCurve, groups: list[int], n: int, reshard: bool) -> float:
    total = 0.0
    for params in groups:
        gathers = 2 if reshard else 1
        total += gathers * collective_us(curve, "all-gather", params * BF16, n)
        total += collective_us(curve, "reduce-scatter", params * FP32, n)
    return total


def _by(rows, keys):
    found: dict = {}
    for row in rows:
        found.setdefault(tuple(row[k] for k in keys), {})[int(row["ranks"])] = row
    return found


def read_tp(folder: Path) -> list[dict]:
    """tools/tp_scaling.py's rows that ran (status ok), their numbers checked."""
    path = folder / "tp_scaling.csv"
    text = read_input(path, "--tp's table")
    rows = []
    try:
        reader = csv.DictReader(io.StringIO(text))
        if missing := TP_COLUMNS - set(reader.fieldnames or ()):
            raise UsageError(f"{path} is not tools/tp_scaling.py's table: it has no "
                             f"{', '.join(sorted(missing))} column")  # fmt: skip
        for line, row in enumerate(reader, 2):
            if row.get("status") != "ok":
                continue
            where = f"{path}, line {line}"
            if row["shape"] not in TP_SHAPES:
                raise UsageError(f"{where}: unknown shape {str(row['shape'])[:40]!r}")
            row["ranks"] = rank_count(row["ranks"], f"{where}: ranks")
            row["forward_us"] = time_us(row["forward_us"], f"{where}: forward_us")
            if row.get("allreduce_us") in (None, ""):
                row["allreduce_us"] = None
            else:
                row["allreduce_us"] = time_us(row["allreduce_us"], f"{where}: allreduce_us")
                if row["allreduce_us"] >= row["forward_us"]:
                    raise UsageError(f"{where}: the all-reduce is not part of the forward")
            rows.append(row)
    except csv.Error as err:
        raise UsageError(f"{path} is not a CSV table: {err}") from None
    return rows


def read_train(folders: list[Path]) -> tuple[dict, tuple[int, ...] | None]:
    """{variant: {N: {step_us, exposed_us, optimizer_us}}} and the shape, from fsdp_gpu.sh logs."""
    runs: dict = {}
    shape = None
    for folder in folders:
        for log in sorted(folder.glob("n*_*.log")):
            text = read_input(log, "the log", errors="replace")
            found = TRAIN_LINE.findall(text)
            if not found:
                continue
            values = dict(p.split("=", 1) for p in found[-1].split() if "=" in p)
            n = rank_count(values.get("ranks"), f"{log}: ranks")
            variant = log.stem.split("_", 1)[1]
            opt = OPT_LINE.search(text)
            row = {"step_us": time_us(values.get("step_us"), f"{log}: step_us"),
                   "exposed_us": time_us(values.get("exposed_us", 0), f"{log}: exposed_us",
                                         zero=True),
                   "optimizer_us": time_us(opt[1], f"{log}: the optimizer's time", zero=True)
                   * UNITS[opt[2]] if opt else 0.0}  # fmt: skip
            if row["optimizer_us"] >= row["step_us"]:
                raise UsageError(f"{log}: the optimizer's time is not part of the step")
            runs.setdefault((folder.name, variant), {})[n] = row
            if shape is None and (m := SHAPE.search(text)):
                shape = tuple(int(x) for x in m.groups())
    return runs, shape


def read_curves(paths: list[Path], train: bool) -> dict[int, LinkCurve]:
    curves = {}
    for path in paths:
        try:
            curve = LinkCurve.from_csv(read_input(path, "the curve"))
        except (ValueError, csv.Error) as err:
            why = str(err).removeprefix("not a link curve: ")[:160]
            raise UsageError(f"{path} is not a link curve: {why}") from None
        if curve.world < 2:
            raise UsageError(f"{path} is a curve of {curve.world} ranks: a link joins 2 or more")
        kinds = ("all-reduce", "all-gather", "reduce-scatter") if train else ("all-reduce",)
        if missing := [k for k in kinds if k not in curve.points]:
            raise UsageError(f"the {curve.world}-rank curve lacks {', '.join(missing)}: measure "
                             "all three kinds (python -m tools.dev.ranks.link_curve)")  # fmt: skip
        curves[curve.world] = curve
    return curves


def rank_counts(text: str) -> list[int]:
    try:
        counts = [int(n) for n in text.split(",")]
    except ValueError:
        raise UsageError(f"--ranks: expected whole numbers such as 4,8, got {text!r}") from None
    if min(counts) < 2:
        raise UsageError("--ranks: predict N of 2 or more")
    return counts


def main(argv=None) -> int:
    parser = Parser(prog="predict_scaling.py", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--tp", type=Path, help="tools/tp_scaling.py's folder (N = 1 and 2)")
    parser.add_argument("--train", type=Path, nargs="*", default=[],
                        help="tools/dev/gpu_runs/fsdp_gpu.sh's folders (N = 1, 2)")  # fmt: skip
    parser.add_argument("--curve", type=Path, nargs="+", required=True,
                        help="link curves (tools/dev/ranks/link_curve.py's CSVs)")  # fmt: skip
    parser.add_argument("--ranks", default="4,8", help="the N to predict (default: 4,8)")
    parser.add_argument("--vocab", type=positive_int, default=32000,
                        help="07's --vocab (fsdp_gpu.sh's)")  # fmt: skip
    parser.add_argument("--out", type=Path, help="write prediction.json and .txt here")
    args = parser.parse_args(argv)
    if args.out and (args.out.exists() or args.out.is_symlink()) and not args.out.is_dir():
        raise UsageError(f"--out {args.out} is not a folder")  # checked before any work
    counts = rank_counts(args.ranks)
    curves = read_curves(args.curve, bool(args.train))
    rows = []
    if args.tp:
        rows += predict_tp(read_tp(args.tp), curves, counts, TP_SHAPES.__getitem__)
    if args.train:
        runs, shape = read_train(args.train)
        if shape:
            _, _, dim, hidden, _, layers = shape
            groups = group_params(vocab=args.vocab, dim=dim, hidden=hidden, layers=layers)
            rows += predict_train(runs, curves, counts, groups)
    if not rows:
        raise UsageError("nothing to predict from: no N = 1 and N = 2 results in the inputs")
    for r in rows:  # the inputs are checked; this is the last guard against a nonsense row
        numbers = (r["step_us"], r["comm_us"], r["exposed_us"], r["efficiency"])
        if not all(map(math.isfinite, numbers)) or r["step_us"] <= 0 or min(numbers) < 0:
            raise UsageError(f"the inputs predict a step of {r['step_us']:.4g} us for "
                             f"{r['case']} at N={r['ranks']}: check them")  # fmt: skip
    lines = [f"{'lesson':6} {'case':28} {'N':>2} {'step us':>10} {'comm us':>10} "
             f"{'exposed us':>10} {'efficiency':>10}  link"]  # fmt: skip
    for r in rows:
        lines.append(f"{r['lesson']:6} {r['case']:28} {r['ranks']:>2} {r['step_us']:>10.1f} "
                     f"{r['comm_us']:>10.1f} {r['exposed_us']:>10.1f} "
                     f"{r['efficiency']:>10.0%}  {r['curve']}")  # fmt: skip
    text = "\n".join(lines)
    print(text)
    if args.out:
        try:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "prediction.txt").write_text(text + "\n")
            (args.out / "prediction.json").write_text(json.dumps(rows, indent=1))
        except OSError as err:  # a file on the way, no permission, a full disk
            raise UsageError(f"cannot write --out {args.out}: {err.strerror or err}") from None
    return 0


if __name__ == "__main__":
    sys.exit(run(main))  # a UsageError, Ctrl-C, a closed stdout: one line each
