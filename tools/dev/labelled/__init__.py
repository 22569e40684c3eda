"""The labelled set behind `tests/test_labelled_set.py`: workloads with ONE planted cause each,
recorded beside their unplanted twin (record.py; the causes in host.py and device.py, the CPU
rank folders in ranks.py). Imports torch, torchvision / timm / transformers where installed,
and the standard library, nothing of this repository's."""
