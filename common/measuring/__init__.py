"""Measuring without the profiler: timing, the device's ceilings per precision, traffic models,
`--bench` (single process and ranks), the shape sweep's report. Caches: tracereader.caches."""
