"""Measuring without the profiler: timing, the device's ceilings, traffic models, `--bench`
(single process and ranks), the shape sweep's report, the measurement caches."""
