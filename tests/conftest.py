"""The test session's one setting for every worker: setuptools' distutils shim.

Inductor's C++ builder imports setuptools (torch.utils.cpp_extension). setuptools' shim then
insists that `distutils` be its own copy, and asserts when the standard library's was loaded
first; under pytest-xdist a worker can run a test that loads the standard library's before
its first compile (with the serial order the suite never did). On Python 3.11 the standard
library still has distutils, so the shim is told to leave it be."""

import os
import sys

if sys.version_info < (3, 12):
    os.environ.setdefault("SETUPTOOLS_USE_DISTUTILS", "stdlib")
