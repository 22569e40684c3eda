"""The trace reader behind `explain` and `compare`: any PyTorch profiler trace, torch-free.

Layers, one file or folder each, in the order data flows: loading the file (`load`), the kernel
classes and footprints the loader attaches (`kernel_names`, `footprint`), the readings
(`findings`, declared `expectations`, the multi-rank reading in `ranks`), and the two commands
(`explain`, `compare`) with their parser (`commandline`). Nothing here imports torch or the
lessons' plumbing in `common/`; the lessons use it through `common.profiling.look`.
"""
