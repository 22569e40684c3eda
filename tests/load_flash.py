"""Run in a subprocess by test_kernel_source_flash.py: load flash_attn_func the way
04_d_kernels_attention.py does, under whatever LOCAL_KERNELS / HF_HUB_OFFLINE / HF_HUB_CACHE
the test set, and print where it came from, or the one line a user would see instead."""

import sys

from common.cli import UsageError
from tests.helpers import load_script

script = load_script("04_d_kernels_attention")
variant = sys.argv[1] if len(sys.argv) > 1 else "fa2"
try:
    flash_attn_func, source = script.load_flash_attn_func(variant)
except UsageError as err:
    print(f"REFUSED {err}")
else:
    print(f"SOURCE {source}")
    print(f"ORIGIN {getattr(flash_attn_func, 'ORIGIN', flash_attn_func.__module__)}")
