"""Analyses of the trace model, one module each; every one is a function of a `model.Trace`
(or one of its steps) and its arguments, opening no file, that returns plain data (numbers,
lists, dicts) for `judge`, `reading` and `render` to use: `breakdown` (GPU busy and time by
class, by union: the one definition of GPU busy), `idle` (HTA's split), `launches`, `syncs`,
`phases`, `tops`, `variation`, `collectives`, `modules`; one rank of a run (`ranks`) and its
ranks side by side (`cross_ranks`), the link's bandwidth against message size
(`linkcurve`); two traces (`diff`); the lessons' own readings
(`training`, `sdpa`, `bench`)."""
