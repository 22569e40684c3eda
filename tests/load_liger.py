"""Run in a subprocess by test_kernel_source.py: load the Liger layers the way 03_kernels_mlp.py
does, under whatever LOCAL_KERNELS / HF_HUB_OFFLINE / HF_HUB_CACHE the test set, and print
where they came from."""

from common import kernel_source
from tests.helpers import load_script

script = load_script("03_kernels_mlp")
layers, source = kernel_source.liger_layers(script.fetch_liger_layers, script.REPO_ID)
print(f"SOURCE {source}")
print(f"ORIGIN {getattr(layers.LigerGEGLUMLP, 'ORIGIN', layers.LigerGEGLUMLP.__module__)}")
