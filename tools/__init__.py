"""What a user runs beside the lessons, one script each (the README lists them); the
maintainers' scripts are in tools/dev/. Run them from the repository root by name,
`uv run python -m tools.NAME`, so that they import the package `modules` (models, the GeGLU
kernels, quack_gemm) as the
lessons do."""
