"""Run in a subprocess by test_kernel_source.py: load the Liger layers the way 03_kernels_mlp.py
and the sweep do (common.kernel_source.fetch_liger_layers), under whatever LOCAL_KERNELS /
HF_HUB_OFFLINE /
HF_HUB_CACHE the test set, and print where they came from, or the one line a user would see
instead. `--no-kernels-library` and `--no-liger` make `import kernels` and `import
liger_kernel` fail, as in a Python with torch but without this project's environment (the GPU
machines' image)."""

import sys

from common import kernel_source
from common.cli import UsageError
from common.kernel_source import LIGER_REPO, fetch_liger_layers

for flag, module in (("--no-kernels-library", "kernels"), ("--no-liger", "liger_kernel")):
    if flag in sys.argv:
        sys.argv.remove(flag)
        sys.modules[module] = None  # `import` of it now raises ImportError

try:
    layers, source = kernel_source.liger_layers(fetch_liger_layers, LIGER_REPO)
except UsageError as err:
    print(f"REFUSED {err}")
else:
    print(f"SOURCE {source}")
    print(f"ORIGIN {getattr(layers.LigerGEGLUMLP, 'ORIGIN', layers.LigerGEGLUMLP.__module__)}")
