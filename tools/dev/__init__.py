"""The maintainers' scripts: the GPU measurements behind docs/, the checks run before them, the
reader's benchmarks against Holistic Trace Analysis, and the generated op-name table. Run from
the repository root: `uv run python -m tools.dev.NAME`."""
