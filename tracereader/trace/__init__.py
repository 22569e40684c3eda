"""Reading a trace file into the trace model: the streaming loader (`load`), the model itself
(`model`: ranks' steps, CPU ops, runtime calls, GPU items, modules) and the arithmetic of time
on it (`intervals`: unions of intervals)."""
