"""Share traces: sync a folder to a Hugging Face bucket and print a Perfetto link per trace.

This is the posts' `trace-util` workflow, built on huggingface_hub's bucket API (which
trace-util itself uses) so it also runs on Python 3.11. One difference on purpose:
trace-util 0.2 mirrors the folder and deletes remote traces that are not on disk; here
nothing remote is deleted unless --delete is given.

    uv run python -m common.share traces --bucket my-traces
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import huggingface_hub as hf

from tracereader import Parser, UsageError, one_line

PERFETTO = "https://ui.perfetto.dev/#!/?url={bucket_url}/resolve/{path}"
TRACE_SUFFIXES = (".json", ".json.gz")


class ShareError(Exception):
    """Sharing failed (no token, no network, refused); the local traces are untouched."""


def bucket_name(text: str) -> str:
    """An argparse type for --bucket: a Hugging Face bucket id, checked locally by
    huggingface_hub's own repo-id rules before any work is done."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError as err:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a bucket name ('name' or 'user/name': letters, digits, "
            f"'-', '_', '.', at most 96 characters): {one_line(err)}"
        ) from None
    return text


# Seconds each network step may take before the run gives up on it: an endpoint that accepts
# the connection and never answers would otherwise hold the run forever. Creating a bucket is
# one request; the upload moves the whole folder (a 200 MB trace at a slow 1 MB/s: 200 s).
TIMEOUTS_S = {"create": 60.0, "sync": 900.0}


def _step(what: str, timeout_s: float, call, folder: Path):
    """call() on a thread of its own, waited for at most `timeout_s`; ShareError naming the
    step when it does not return. The thread is a daemon: one stuck in a socket does not hold
    the process at exit."""
    done: dict = {}

    def work():
        try:
            done["value"] = call()
        except BaseException as err:  # handed to the caller's thread
            done["error"] = err

    worker = threading.Thread(target=work, name=f"share: {what}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise ShareError(
            f"{what} got no answer within {timeout_s:g} s (the Hub or the network is stuck); "
            f"the traces stay in {folder}"
        )
    if "error" in done:
        raise done["error"]
    return done.get("value")


def perfetto_url(bucket_url: str, path: str) -> str:
    return PERFETTO.format(bucket_url=bucket_url.rstrip("/"), path=path.lstrip("/"))


def local_traces(folder: Path) -> list[str]:
    """Trace files under `folder`, as bucket paths (relative, forward slashes)."""
    return sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and p.name.endswith(TRACE_SUFFIXES) and not p.name.startswith(".")
    )


def share(
    folder: str | Path, bucket: str, *, delete: bool = False, token: str | None = None
) -> list[tuple[str, str]]:
    """Upload `folder` to `bucket` (created if missing); return (path, Perfetto URL) per trace."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"no traces folder at {folder}")
    token = token or hf.get_token()  # HF_TOKEN, or the token saved by `hf auth login`
    if not token:
        raise ShareError(
            "no Hugging Face token (run `hf auth login` or set HF_TOKEN); "
            f"the traces stay in {folder}"
        )
    try:
        bucket_url = _step(
            "creating the bucket",
            TIMEOUTS_S["create"],
            lambda: hf.create_bucket(bucket, exist_ok=True, token=token),
            folder,
        )
        _step(
            "uploading the traces",
            TIMEOUTS_S["sync"],
            lambda: hf.sync_bucket(
                source=str(folder),
                dest=bucket_url.uri.to_uri(),
                delete=delete,
                token=token,
                quiet=True,
            ),
            folder,
        )
    except ShareError:
        raise
    except Exception as err:  # the remote service's failures come in many types
        reason = one_line(err, 200, secret=token)  # scrubbed before it is cut
        raise ShareError(
            f"could not sync to bucket {bucket!r} ({reason}); the traces stay in {folder}"
        ) from None
    base = bucket_url.uri.to_url()
    return [(path, perfetto_url(base, path)) for path in local_traces(folder)]


def print_links(links: Sequence[tuple[str, str]]) -> None:
    print("Perfetto links (the bucket must be public for the links to open for others):")
    for path, url in links:
        print(f"  {path}\n    {url}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog="python -m common.share", description=__doc__)
    parser.add_argument(
        "folder", nargs="?", default="traces", help="folder of traces to sync (default: traces)"
    )
    parser.add_argument(
        "-b",
        "--bucket",
        required=True,
        type=bucket_name,
        metavar="NAME",
        help="Hugging Face bucket to sync to; created if it does not exist",
    )
    parser.add_argument(
        "--delete",
        action="store_true",
        help="also delete remote files that are not in the local folder "
        "(off by default: a shared link should not break)",
    )
    args = parser.parse_args(argv)
    try:
        links = share(args.folder, args.bucket, delete=args.delete)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ShareError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print_links(links)
    return 0


def after_run(traces_dir: str | Path, bucket: str, trace: Path) -> int:
    """A script's --bucket: sync the whole traces folder, print this run's link; exit code."""
    try:
        links = share(traces_dir, bucket)
    except (ShareError, UsageError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    mine = Path(trace).relative_to(traces_dir).as_posix()
    print_links([link for link in links if link[0] == mine])
    return 0


if __name__ == "__main__":
    sys.exit(main())
