"""Analyses of the trace model, one module each; every one is a function of a `model.Trace`
(or one of its steps) that returns plain data (numbers, lists, dicts) for `findings` and
`render` to use: `breakdown` (GPU busy and time by class, by union), `idle` (HTA's split),
`launches`, `syncs`, `phases`, `tops`, `variation`, `collectives`."""
