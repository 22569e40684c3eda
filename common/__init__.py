"""Plumbing shared by the numbered scripts: flags, the profiling loop, trace files, sharing.

Nothing here defines a model: each script keeps its module in plain sight.
"""
