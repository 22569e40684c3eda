"""Run in a subprocess by test_kernel_source.py: `get_kernel(REPO, version=N)` through
common.kernel_source.load, as the lessons call it, for any publisher's repository, and print
where it came from (or the reason it could not be loaded)."""

import sys

from kernels import get_kernel

from common import kernel_source

repo_id, version = sys.argv[1], int(sys.argv[2])
module, source = kernel_source.load(
    lambda: get_kernel(repo_id, version=version),
    repo_id,
    fallback=lambda reason: (None, f"FAILED {reason}"),
)
print(f"SOURCE {source}")
print(f"ORIGIN {getattr(module, 'ORIGIN', None)}")
