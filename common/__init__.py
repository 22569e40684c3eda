"""Plumbing shared by the numbered scripts: flags, the profiling loop, trace files, sharing.

Nothing here defines a model: a lesson shows its own, or imports one that several lessons
run from models.py.
"""

import os

# A lesson compiles a graph of one or two Triton kernels. Inductor's default is a pool of
# compile worker processes, one per core: on a 16-core GPU machine it cost seconds to start and
# about 10 s to shut down at exit (tools/startup_breakdown.py, docs/startup.md), far more than
# the compile itself. In-process compiling is plenty here; a user's own setting wins. Set
# before anything imports Inductor's config, which reads it once.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
