"""Plumbing shared by the numbered scripts: flags, the profiling loop, trace files, sharing.

Nothing here defines a model: a lesson shows its own, or imports one that several lessons
run from modules/models.py. Importing it changes nothing in torch: what the plumbing changes (where
Inductor
compiles, the profiler's start-up probe) happens in the calls that need it, each documented
there and named in what it prints. One module acts on import: common/startup.py, which every
lesson imports first, handles Ctrl-C while the lesson's imports load (in a lesson run as a
script only).
"""
