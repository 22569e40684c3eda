"""Run in a subprocess by test_kernel_source_flash.py: load flash_attn_func the way
04_d_kernels_attention.py does, under whatever LOCAL_KERNELS / HF_HUB_OFFLINE / HF_HUB_CACHE
the test set, and print where it came from, or the one line a user would see instead.
`--fake-fa4` first puts a stand-in `flash_attn.cute` module in sys.modules, as if flash-attn-4
were installed (no GPU here to run the real one); `--no-kernels-library` makes `import kernels`
fail, as in a Python with torch but without this project's environment."""

import sys
from types import ModuleType

from common.cli import UsageError
from tests.helpers import load_script

if "--fake-fa4" in sys.argv:
    sys.argv.remove("--fake-fa4")
    cute = ModuleType("flash_attn.cute")

    def flash_attn_func(q, k, v, causal=False):
        raise NotImplementedError("a stand-in: only its origin is checked")

    flash_attn_func.ORIGIN = "fake-flash-attn-4"
    flash_attn_func.__module__ = "flash_attn.cute.interface"  # where the real one is defined
    cute.flash_attn_func = flash_attn_func
    package = ModuleType("flash_attn")
    package.__path__ = []
    package.cute = cute
    sys.modules.update({"flash_attn": package, "flash_attn.cute": cute})

if "--no-kernels-library" in sys.argv:
    sys.argv.remove("--no-kernels-library")
    sys.modules["kernels"] = None  # `from kernels import ...` now raises ImportError

script = load_script("04_d_kernels_attention")
variant = sys.argv[1] if len(sys.argv) > 1 else "fa2"
try:
    flash_attn_func, source = script.load_flash_attn_func(variant)
except UsageError as err:
    print(f"REFUSED {err}")
else:
    print(f"SOURCE {source}")
    print(f"ORIGIN {getattr(flash_attn_func, 'ORIGIN', flash_attn_func.__module__)}")
