"""The trace reader checked from outside: against Holistic Trace Analysis (`hta_compare`), at scale
(`trace_bench`), on real models' and GPUs' traces, and its op-name table against torch's."""
