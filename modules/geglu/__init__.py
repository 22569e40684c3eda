"""The fused gate/up + GeGLU GEMM of 03_fused_mlp.py: shared.py (the epilogue, the tile order, a
configuration, the packed layout), one file per kernel (plain, hopper, hopper_epi, gluon), and
fused.py (the configurations, the launch, the custom ops, the module)."""
