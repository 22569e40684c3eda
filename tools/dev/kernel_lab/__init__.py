"""The kernel lab: probes, benches and compiles of the lessons' own kernels (GeGLU, Gluon, decode
GEMVs and attention, prefill), each answering one question of an issue on a GPU or in Nsight."""
