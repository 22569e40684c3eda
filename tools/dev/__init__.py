"""The maintainers' scripts, in folders by purpose: gpu_runs/ (the GPU runs behind docs/ and the
smoke test before them), kernel_lab/ (the kernels' probes and benches), reader_validation/ (the
reader against HTA, at scale, on real traces), ranks/ (several GPUs), labelled/ (the labelled
trace set); beside them the lessons' own gauges, plumbing_share and step_memory, and
lesson_help (the snapshot of their --help that common/early.py serves before torch loads). Run
from the repository root: `uv run python -m tools.dev.FOLDER.NAME` (`tools.dev.NAME` for the
three)."""
