"""Reading traces back: the reader, kernel classes, footprints, findings, declared expectations,
and the multi-rank reading. Torch-free, so `explain` and `compare` start fast."""
