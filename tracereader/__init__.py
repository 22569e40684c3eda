"""The trace reader behind `explain` and `compare`: any PyTorch profiler trace, torch-free.

Its layers, each a folder or file, import only from the ones above them in this list:

    units, files, commandline, caches   leaves: numbers as text, a small input read safely,
                the parser, the measurement caches
    names/      what a name or an event says: kernel classes and decoded kernel names, torch's
                op names, a kernel's footprint and occupancy, datasheet peaks of devices
    trace/      a trace file into the trace model (load, model), time as unions (intervals),
                the rank files of a run (runs), the allocator's events where asked (memory)
    analyses/   one module per analysis, each a pure function of the model and its arguments:
                breakdown, idle, launches, syncs, phases, tops, variation, collectives,
                modules, a rank's summary (ranks), across ranks (cross_ranks), two traces
                (diff), memory over time (memory), the link as a curve (linkcurve), GEMMs'
                problems (gemms), casts (casts), where the host's step goes (hostside),
                the GPU's nameable causes (gpuside), memory that grows per step (growth),
                the late rank and why (straggle), work one stream cannot have run
                (streams), and the readings the lessons print (training, sdpa, bench)
    judge/      findings ranked by the time at stake, the cause named first (cause,
                cause_text); the lessons' declared expectations
    reading     one Reading per trace (a run: read_run), built once
    render/     text and JSON of a reading, of a diff, of a run: they format, compute nothing
    commands/   explain and compare: argv -> reading -> render

This module is the one door the lessons use: `load`, `read`, `read_run`, `run_text`,
`link_curve` (the link this machine measured),
`bytes_text`, `Expect`, `check`, and the lessons' own readings: the training phases
(`phase_steps`, `phase_line`, `launched_under`, `collectives_by_phase`), 04_c's (`sdpa_row`,
`host_time`) and 08's generation (`generation`, `generation_steps`, `gemm_rows`,
`key_lengths`, `launch_calls`), and what common/ and the tools share with the reader: the
command-line kit (`Parser`, `UsageError`, the whole-number types, `one_line`, `run_cli`,
`read_regular` for an input that may be a FIFO or a device), names
(`classify`, the kernel classes, `datasheet`, `OP_NAMES`), units and the benches' analyses.
common/ and tools/ reach the reader only through here (tests/test_house.py holds them to it).
Nothing here imports torch or the lessons' plumbing in `common/`.
"""

from __future__ import annotations

# What the door hands out, loaded on first use: `import tracereader.commandline` (the lessons'
# parser) must not pull in the reader.
_DOOR = {
    "load": ("tracereader.trace.load", "load"),
    "read": ("tracereader.reading", "Reading"),
    "read_run": ("tracereader.reading", "read_run"),
    "run_text": ("tracereader.render.ranks", "text"),
    "link_curve": ("tracereader.commands.runs", "link_curve"),
    "bytes_text": ("tracereader.units", "bytes_text"),
    "binary_size": ("tracereader.units", "binary_size"),
    "Expect": ("tracereader.judge.expectations", "Expect"),
    "check": ("tracereader.judge.expectations", "check"),
    "phase_steps": ("tracereader.analyses.training", "phase_steps"),
    "phase_line": ("tracereader.analyses.training", "phase_line"),
    "launched_under": ("tracereader.analyses.training", "launched_under"),
    "collectives_by_phase": ("tracereader.analyses.training", "collectives_by_phase"),
    "sdpa_row": ("tracereader.analyses.sdpa", "summarize"),
    "host_time": ("tracereader.analyses.sdpa", "host_time"),
    "generation": ("tracereader.analyses.generation", "read"),
    "generation_steps": ("tracereader.analyses.generation", "split"),
    "gemm_rows": ("tracereader.analyses.generation", "gemm_rows"),
    "key_lengths": ("tracereader.analyses.generation", "key_lengths"),
    "launch_calls": ("tracereader.analyses.generation", "launch_calls"),
    # What common/ and the tools use besides: the command-line kit (commandline is a leaf: these
    # load no more of the reader), names, units and the analyses the benches share.
    "Parser": ("tracereader.commandline", "Parser"),
    "UsageError": ("tracereader.commandline", "UsageError"),
    "int_in": ("tracereader.commandline", "int_in"),
    "non_negative_int": ("tracereader.commandline", "non_negative_int"),
    "one_line": ("tracereader.commandline", "one_line"),
    "positive_int": ("tracereader.commandline", "positive_int"),
    "size_up_to": ("tracereader.commandline", "size_up_to"),
    "run_cli": ("tracereader.commands.shared", "run_cli"),
    "run": ("tracereader.commandline", "run"),
    "read_regular": ("tracereader.files", "read_regular"),
    "NotRegular": ("tracereader.files", "NotRegular"),
    "failure": ("tracereader.commandline", "failure"),
    "interrupted": ("tracereader.commandline", "interrupted"),
    "Stopped": ("tracereader.commandline", "Stopped"),
    "ELEMENT_TYPES": ("tracereader.trace.model", "ELEMENT_TYPES"),
    "Trace": ("tracereader.trace.model", "Trace"),
    "runs_at": ("tracereader.trace.runs", "runs_at"),
    "WORDS": ("tracereader.analyses.generation", "WORDS"),
    "gpu_busy_s": ("tracereader.analyses.bench", "gpu_busy_s"),
    "matched_times": ("tracereader.analyses.bench", "matched_times"),
    "named_precisions": ("tracereader.analyses.bench", "named_precisions"),
    "profiled_step_s": ("tracereader.analyses.bench", "profiled_step_s"),
    "CUDA_CORES": ("tracereader.names.kernel_classes", "CUDA_CORES"),
    "TENSOR_CORES": ("tracereader.names.kernel_classes", "TENSOR_CORES"),
    "TF32": ("tracereader.names.kernel_classes", "TF32"),
    "classify": ("tracereader.names.kernel_names", "classify"),
    "datasheet": ("tracereader.names.devices", "datasheet"),
    "OP_NAMES": ("tracereader.names.op_names", "NAMES"),
    "duration": ("tracereader.units", "duration"),
    "cell": ("tracereader.units", "cell"),
    "LinkCurve": ("tracereader.analyses.linkcurve", "LinkCurve"),
    "LINK_KINDS": ("tracereader.analyses.linkcurve", "KINDS"),
    "bus_factor": ("tracereader.analyses.collectives", "bus_factor"),
    "SdpaRow": ("tracereader.analyses.sdpa", "Row"),
    "sdpa_comparison": ("tracereader.render.sdpa", "comparison"),
    "read_findings": ("tracereader.judge.findings", "read"),
    "cache_path": ("tracereader.caches", "path"),
    "load_cache": ("tracereader.caches", "load"),
    "save_cache": ("tracereader.caches", "save"),
    "link_curve_key": ("tracereader.caches", "link_curve_key"),
    "store_link_curve": ("tracereader.caches", "store_link_curve"),
}


def __getattr__(name: str):
    if name not in _DOOR:
        raise AttributeError(name)
    from importlib import import_module

    module, attribute = _DOOR[name]
    return getattr(import_module(module), attribute)
