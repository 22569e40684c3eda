"""Plumbing shared by the numbered scripts: flags, the profiling loop, trace files, sharing.

Nothing here defines a model: each script keeps its module in plain sight. Importing it changes
nothing in torch: what the plumbing changes (where Inductor compiles, the profiler's start-up
probe) happens in the calls that need it, each documented there and named in what it prints.
"""
