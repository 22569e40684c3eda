"""The commands' side of multi-rank runs: explain FOLDER, compare RUN_A RUN_B."""

from __future__ import annotations

import sys
from pathlib import Path

from tracereader.analyses.cross_ranks import compare as compare_runs
from tracereader.commands.shared import stdout_closed
from tracereader.read.load import Trace, TraceError
from tracereader.read.runs import RunError, runs_at
from tracereader.reading import read_run
from tracereader.render.ranks import compare_text, text
from tracereader.render.trace import dump_json


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def explain_main(args) -> int:
    """`uv run explain RUN_OR_FOLDER [--json]`: the reading of every run named."""
    from tracereader.render import trace as render

    results, traces = [], []

    def keep(trace: Trace) -> None:
        if args.json:
            traces.append(render.trace_dict(trace))

    try:
        for stem, files in runs_at(args.trace).items():
            results.append(read_run(stem, files, keep))
    except TraceError as err:
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
            return read_run(Path(path), {0: Path(path)})
        raise RunError(f"{path} holds no rank traces (<stem>_rank<r>.json)")
    if len(runs) > 1:
        stems = ", ".join(p.name for p in runs)
        raise RunError(
            f"{path} holds {len(runs)} runs ({stems}): name one, e.g. {next(iter(runs))}"
        )
    stem, files = next(iter(runs.items()))
    return read_run(stem, files)


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
