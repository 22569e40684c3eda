"""The commands' side of multi-rank runs: explain FOLDER, compare RUN_A RUN_B."""

from __future__ import annotations

import sys
from pathlib import Path

from tracereader import caches
from tracereader.analyses.cross_ranks import compare as compare_runs
from tracereader.analyses.cross_ranks import with_link
from tracereader.analyses.linkcurve import LinkCurve
from tracereader.commands.shared import stdout_closed
from tracereader.reading import Reading, read_run
from tracereader.render.ranks import compare_text, text
from tracereader.render.trace import dump_json
from tracereader.trace.load import Trace, TraceError
from tracereader.trace.runs import RunError, runs_at


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _read(stem: Path, files: dict[int, Path], each=None) -> dict:
    """The run's reading, held against the link's curve this machine measured
    (tools/dev/ranks/link_curve.py or a lesson's --bench cached it), where it has."""
    result = read_run(stem, files, each)
    if not (result["device"] and result["backend"]):
        return result
    return with_link(result, link_curve(result["device"], result["backend"], result["world"]))


def link_curve(device: str, backend: str, world: int) -> LinkCurve | None:
    """The link's curve this machine measured for `world` ranks of `device` over `backend`
    (tools/dev/ranks/link_curve.py or a lesson's --bench cached it); None where never measured or
    damaged, with a note (the next measurement writes it anew)."""
    key = caches.link_curve_key(device, backend, world)
    found = caches.cached_link_curve(key)
    try:
        return LinkCurve.from_csv(found) if found else None
    except ValueError as err:
        why = str(err).splitlines()[0] if str(err).strip() else "not a link curve"
        caches.ignored(caches.path("links.json"), f"its entry '{key}': {why}")
        return None


def explain_main(args) -> int:
    """`uv run explain RUN_OR_FOLDER [--json]`: the reading of every run named."""
    from tracereader.render import trace as render

    results, traces = [], []

    def keep(trace: Trace) -> None:
        if args.json:
            traces.append(render.trace_dict(Reading(trace)))

    try:
        for stem, files in runs_at(args.trace).items():
            results.append(_read(stem, files, keep))
    except (TraceError, RunError) as err:
        return _fail(str(err))
    try:
        if args.json:
            # schema 2: every rank's own reading in `traces`, the cross-rank one in `runs`
            dump_json(render.document(traces, runs=results), sys.stdout)
        else:
            print("\n\n".join(text(r) for r in results))
    except BrokenPipeError:
        return stdout_closed()
    return 0


def _one_run(path: str) -> dict:
    runs = runs_at(path)
    if not runs:
        if Path(path).is_file():  # a single-process trace: a run of one rank
            return _read(Path(path), {0: Path(path)})
        raise RunError(f"{path} holds no rank traces (<stem>_rank<r>.json)")
    if len(runs) > 1:
        stems = ", ".join(p.name for p in runs)
        raise RunError(
            f"{path} holds {len(runs)} runs ({stems}): name one, e.g. {next(iter(runs))}"
        )
    stem, files = next(iter(runs.items()))
    return _read(stem, files)


def compare_main(args) -> int:
    """`uv run compare RUN_A RUN_B [--json]` when either names rank traces."""
    try:
        result = compare_runs(_one_run(args.trace_a), _one_run(args.trace_b))
    except (TraceError, RunError) as err:
        return _fail(str(err))
    try:
        if args.json:
            dump_json(result, sys.stdout)
        else:
            print(compare_text(result))
    except BrokenPipeError:
        return stdout_closed()
    return 0
