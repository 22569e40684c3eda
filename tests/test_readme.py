"""Every command in the README runs as shown (the ones marked GPU-only or needing a Hugging Face
token excepted): each is run for real, in order, in a scratch folder, with `uv run` replaced by
this interpreter (the same project environment)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.helpers import ROOT

NOT_HERE = ("GPU only", "needs a token", "needs a network")  # in a trailing comment


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip():
                commands.append(line.strip())
    return commands


def assignments(command: str) -> dict[str, str]:
    """The `NAME=value` words before the command (TRITON_INTERPRET=1 uv run ...)."""
    env = {}
    for word in shlex.split(command.partition("#")[0]):
        name, eq, value = word.partition("=")
        if not eq or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name):
            break
        env[name] = value
    return env


def to_argv(command: str) -> list[str] | None:
    """`uv run X.py ...`, `uv run python -m M ...` or `uv run explain ...` as argv for this
    interpreter; None to skip."""
    code, _, comment = command.partition("#")
    if any(marker in comment for marker in NOT_HERE):
        return None
    words = shlex.split(code)[len(assignments(command)) :]
    if words[:2] != ["uv", "run"] or words[2:3] == ["pytest"]:
        return None  # `uv run pytest` is this very test run
    rest = words[2:]
    if rest[0] == "python":
        rest = rest[1:]
    elif rest[0] == "torchrun":  # the console script of torch.distributed.run
        rest = ["-m", "torch.distributed.run", *rest[1:]]
    elif rest[0] in ("explain", "compare"):  # the project's console commands
        rest = ["-m", f"tracereader.commands.{rest[0]}", *rest[1:]]
    rest = [str(ROOT / w) if w.endswith(".py") and not w.startswith("-") else w for w in rest]
    return [sys.executable, *rest]


def test_the_readme_lists_the_commands_it_should():
    commands = readme_commands()
    assert any(c.startswith("uv run explain") for c in commands)
    assert any("GPU only" in c for c in commands)  # the markers this test honours are used
    skipped = [c for c in commands if to_argv(c) is None]
    assert all(
        any(m in c for m in NOT_HERE) or "pytest" in c or c.startswith("uvx") for c in skipped
    ), skipped


def _python_312() -> bool:
    """Whether uv finds a Python 3.12 here without downloading one."""
    try:
        env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
        found = subprocess.run(["uv", "python", "find", "3.12"], capture_output=True,
                               timeout=30, env=env)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return False
    return found.returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "command", [c for c in readme_commands() if c.startswith("uvx") and "needs a token" not in c]
)
def test_readme_trace_util_lines_run_as_shown(command, tmp_path):
    """The pinned trace-util lines: where a Python 3.12 is at hand (uv does not download one
    here), `--help` runs and lists the flags the README's sync line uses."""
    if not _python_312():
        pytest.skip("no Python 3.12 on this machine (trace-util 0.2 needs it)")
    proc = subprocess.run(shlex.split(command.partition("#")[0]), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    if proc.returncode != 0 and "network" in proc.stderr.lower():
        pytest.skip("trace-util could not be fetched here")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for flag in ("-f", "-b", "--no-delete"):
        assert flag in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("command", [c for c in readme_commands() if to_argv(c)])
def test_readme_command_runs_as_shown(command, tmp_path_factory):
    # One scratch folder for all commands, in README order, so a command can read what an
    # earlier one wrote (traces/...). tests/ is linked in for the committed fixtures.
    work = tmp_path_factory.getbasetemp() / "readme"
    if not work.exists():
        work.mkdir()
        (work / "tests").symlink_to(ROOT / "tests")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN",)}
    env.update(assignments(command))
    # the README's commands run from the repository root: `python -m tools.X` finds tools/ there
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        to_argv(command), cwd=work, capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, f"{command}\n{proc.stderr[-2000:]}"
