"""The link as a curve (tracereader.analyses.linkcurve, tools/dev/ranks/link_curve.py) and the
scaling prediction built on it (tools/dev/ranks/predict_scaling.py). What a user relies on: a
collective is judged against the link at its own size and kind and never read as more than 100% of
it; the curve a run measures reads back; the prediction's arithmetic is the one its docstring
states."""

from __future__ import annotations

import csv
import math
import subprocess
import sys

import pytest

import tracereader
from tests.helpers import ROOT
from tests.test_tp_mlp import check
from tracereader.analyses.collectives import bus_factor
from tracereader.analyses.linkcurve import LinkCurve

H200_N2 = ROOT / "docs/link_curve_h200_nccl_n2_2026-11-26.csv"
H200_N4 = ROOT / "docs/link_curve_h200_nccl_n4_2026-11-26.csv"
GB = 1e9


def synthetic(world: int = 2, scale: float = 1.0) -> LinkCurve:
    sizes = [2**20 * 2**i for i in range(11)]  # 1 MiB .. 1 GiB

    def bus(s):  # latency-bound at small sizes, saturating
        return scale * 300 * GB * s / (s + 16 * 2**20)

    points = {k: tuple((s, bus(s)) for s in sizes) for k in ("all-reduce", "all-gather")}
    return LinkCurve("Synthetic GPU", "nccl", world, "made up", points)


def test_a_collective_is_judged_at_its_own_size_not_at_one_reference_size():
    """The 537 MB all-reduce that read "104% of the link" against one 256 MiB all-reduce on
    two H200s: at its own size the measured curve holds it under 100%."""
    curve = LinkCurve.from_csv(H200_N2.read_text())
    at_256 = curve.ceiling("all-reduce", 256 * 2**20)
    assert 313 * GB / at_256 > 1.0  # the old reading's ratio
    judged = curve.judge("all-reduce", 537e6, 313 * GB)
    assert judged.share is not None and 0.9 < judged.share <= 1.0 and not judged.above


@pytest.mark.parametrize("curve", [synthetic(), LinkCurve.from_csv(H200_N4.read_text())])
def test_no_judgement_is_ever_above_100_percent(curve):
    for kind, points in curve.points.items():
        for nbytes in [p[0] * f for p in points for f in (1, 1.3, 1.9)]:
            for bus in (1e6, curve.ceiling(kind, nbytes), 2 * curve.ceiling(kind, nbytes)):
                judged = curve.judge(kind, nbytes, bus)
                assert judged.share is not None and 0 < judged.share <= 1.0
                assert judged.above == (bus > curve.ceiling(kind, nbytes))
                assert "%" not in judged.text() or int(judged.text().split("%")[0]) <= 100


def test_the_curve_interpolates_between_sizes_and_claims_nothing_below_them():
    curve = synthetic()
    points = curve.points["all-reduce"]
    for (s0, b0), (s1, b1) in zip(points, points[1:], strict=False):
        mid = curve.ceiling("all-reduce", math.sqrt(s0 * s1))  # halfway in log2(size)
        assert mid == pytest.approx((b0 + b1) / 2)
    assert curve.ceiling("all-reduce", points[-1][0] * 8) == points[-1][1]  # saturated
    assert curve.ceiling("all-reduce", points[0][0] / 2) is None
    assert curve.judge("all-reduce", 1000, 1 * GB).share is None
    assert "latency-bound" in curve.judge("all-reduce", 1000, 1 * GB).text()
    assert curve.ceiling("reduce-scatter", 2**24) is None  # a kind not measured


def test_the_curve_reads_back_from_its_csv_and_refuses_what_is_not_one():
    curve = synthetic(world=4)
    again = LinkCurve.from_csv(curve.to_csv())
    assert (again.device, again.backend, again.world) == ("Synthetic GPU", "nccl", 4)
    for kind in curve.points:
        for (s, b), (s2, b2) in zip(curve.points[kind], again.points[kind], strict=True):
            assert s == s2 and b2 == pytest.approx(b, rel=1e-5)
    for text in ("", "kind,bytes\n", "# a | b | many | c\nkind,bytes,bus_GBps\n",
                 "# a | nccl | 2 ranks | x\nkind,bytes,bus_GBps\nall-reduce,-1,3\n",
                 "# a | nccl | 2 ranks | x\nkind,bytes,bus_GBps\nall-reduce,10,nan\n"):  # fmt: skip
        with pytest.raises(ValueError):
            LinkCurve.from_csv(text)
    assert bus_factor("all-reduce", 4) == 1.5 and bus_factor("all-gather", 4) == 0.75


def test_the_measured_h200_curves_grow_with_size_and_with_ranks():
    """What the committed curves say (two and four H200s, NVLink NV18): bus bandwidth grows
    with the message size for every kind, and four ranks reach more than two."""
    two, four = (LinkCurve.from_csv(p.read_text()) for p in (H200_N2, H200_N4))
    for curve in (two, four):
        for points in curve.points.values():
            values = [b for _, b in points]
            assert values[-1] > 5 * values[0]
    assert four.ceiling("all-reduce", 2**30) > two.ceiling("all-reduce", 2**30) > 300 * GB


@pytest.mark.slow
def test_the_tool_measures_two_gloo_ranks_writes_csv_and_plot_and_caches(tmp_path):
    env = {**check.launch_env(None), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", "2", "-m", "tools.dev.ranks.link_curve", str(tmp_path / "out"),
               "--device", "cpu", "--min-mib", "0.0625", "--max-mib", "0.25",
               "--kinds", "all-reduce,reduce-scatter"]  # fmt: skip
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (csv_path,) = (tmp_path / "out").glob("link_curve_*.csv")
    curve = LinkCurve.from_csv(csv_path.read_text())
    assert (curve.backend, curve.world) == ("gloo", 2)
    assert [s for s, _ in curve.points["all-reduce"]] == [2**16, 2**17, 2**18]
    assert set(curve.points) == {"all-reduce", "reduce-scatter"}
    assert csv_path.with_suffix(".png").stat().st_size > 1000
    assert "curve" in (tmp_path / "cache/profiling-pytorch/links.json").read_text()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        csv_path.name,
        csv_path.with_suffix(".png").name,
    ]  # nothing partial left


# --- the prediction --------------------------------------------------------------------------


def _predict(*argv):
    return subprocess.run([sys.executable, "-m", "tools.dev.ranks.predict_scaling", *argv],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip


def test_the_tp_prediction_is_its_docstrings_arithmetic(tmp_path):
    """05: compute(N) = a + b/N through N = 1 and 2, plus the all-reduce at the curve."""
    tp = tmp_path / "tp"
    tp.mkdir()
    with open(tp / "tp_scaling.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["shape", "mode", "ranks", "forward_us",
                                               "allreduce_us", "status"])  # fmt: skip
        writer.writeheader()
        writer.writerow({"shape": "8x", "mode": "eager", "ranks": 1, "forward_us": 1000,
                         "allreduce_us": "", "status": "ok"})  # fmt: skip
        writer.writerow({"shape": "8x", "mode": "eager", "ranks": 2, "forward_us": 700,
                         "allreduce_us": 100, "status": "ok"})  # fmt: skip
    curve = tmp_path / "c4.csv"
    curve.write_text(synthetic(world=4).to_csv())
    proc = _predict("--tp", str(tp), "--curve", str(curve), "--ranks", "4", "--out",
                    str(tmp_path / "p"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    import json

    (row,) = json.loads((tmp_path / "p/prediction.json").read_text())
    nbytes = 64 * 128 * 2048 * 2  # the 8x shape's [tokens, dim] bf16 output
    comm = 1.5 * nbytes / synthetic().ceiling("all-reduce", nbytes) * 1e6
    a, b = 200.0, 800.0  # 1000 = a + b, 600 = a + b / 2
    assert row["comm_us"] == pytest.approx(comm)
    assert row["step_us"] == pytest.approx(a + b / 4 + comm)
    assert row["efficiency"] == pytest.approx(1000 / (4 * (a + b / 4 + comm)))


@pytest.mark.parametrize(
    "argv",
    [
        ["--curve", "missing.csv"],
        ["--curve", "README.md"],
        ["--curve", "docs/link_curve_h200_nccl_n2_2026-11-26.csv", "--ranks", "1"],
        ["--curve", "docs/link_curve_h200_nccl_n2_2026-11-26.csv", "--ranks", "x"],
        ["--curve", "docs/link_curve_h200_nccl_n2_2026-11-26.csv"],  # nothing to predict from
    ],
)
def test_bad_inputs_to_the_prediction_are_one_line(argv):
    proc = _predict(*argv)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "Traceback" not in proc.stderr


def _percents(text: str) -> list[float]:
    import re

    return [float(m) for m in re.findall(r"(\d+(?:\.\d+)?)% of the link", text)]


@pytest.mark.parametrize(  # 07's four ranks of an 8-layer model: ~2 s on two busy cores
    "folder",
    [pytest.param("tests/fixtures/h200x4/07_fsdp_train", marks=pytest.mark.slow),
     "tests/fixtures/h200x4/05_tp_mlp", "tests/fixtures/h200x2/05_tp_mlp"],
)  # fmt: skip
def test_no_collective_of_a_real_run_reads_above_the_links_ceiling(folder):
    """Every rank folder recorded on H200s, held against the curve measured on two H200s:
    each kind's bus bandwidth at its own size at most 100% of the curve there, in the data and
    on the screen (a faster kernel reads "at the link's ceiling", never above it)."""
    from tracereader.render import ranks as ranks_text
    from tracereader.trace.runs import runs_at

    curve = LinkCurve.from_csv(H200_N2.read_text())
    for stem, files in runs_at(ROOT / folder).items():
        if len(files) != 2:
            continue
        result = tracereader.read_run(stem, files, link=curve)
        rows = [result["collective"], *result["by_kind"]]
        shares = [r["share_of_link"] for r in rows if r.get("share_of_link") is not None]
        assert shares and all(0 < s <= 1.0 for s in shares)
        assert all(p <= 100 for p in _percents(ranks_text.text(result)))


def test_a_synthetic_run_faster_than_the_curve_reads_at_the_ceiling_not_above():
    slow = synthetic(scale=0.5)  # a curve at half the bandwidth any real kernel reaches
    judged = slow.judge("all-reduce", 12.6e6, 250 * GB)
    assert judged.share == 1.0 and judged.above
    assert "at the link's ceiling" in judged.text() and "%" not in judged.text()
