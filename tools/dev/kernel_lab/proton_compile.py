"""The hopper kernel (modules/geglu/fused.py) compiled for sm_90 with Proton's instrumentation, on a
machine without a GPU: what `03_fused_mlp.py --proton --kernel hopper` will run, checked before
a GPU session. Proton's own hook (triton.profiler.hooks.instrumentation) asks the GPU for its
shared memory; here it is an H100's and H200's (227 KB), the rest of the hook as Proton sets it.
Prints the PTX's timer reads and the compiler's diagnostics (on stderr: a scope whose records
do not pair is an "error:" line there, though the compile goes on).

    python -m tools.dev.kernel_lab.proton_compile [--flatten]  (exit 1 if no scope was instrumented)
"""

from __future__ import annotations

import dataclasses
import sys

from tracereader import Parser, run

SM90_SHARED = 232448  # bytes a block may use on an H100 or H200


def compile_instrumented(flatten: bool):
    import triton
    from triton._C.libtriton import passes as triton_passes
    from triton._C.libtriton import proton as triton_proton
    from triton._instrumentation import register_instrumentation
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.profiler import language as pl
    from triton.profiler import mode
    from triton.profiler.flags import flags
    from triton.profiler.hooks.instrumentation import InstrumentationHook, _interpret_mode

    from modules.geglu import fused as fused_geglu
    from modules.geglu import hopper

    chosen = _interpret_mode(mode.Default(buffer_type="global"))  # as record_proton's
    hook = InstrumentationHook(chosen)

    def to_llvmir(pm):
        triton_proton.add_convert_proton_to_protongpu(
            pm, chosen.metric_type, chosen.sampling_strategy, chosen.sampling_options,
            chosen.granularity, chosen.buffer_strategy, chosen.buffer_type, chosen.buffer_size,
            SM90_SHARED, hook.profile_buffer_size, hook.profile_buffer_alignment, True,
        )  # fmt: skip
        triton_passes.common.add_cse(pm)
        triton_proton.add_allocate_proton_shared_memory(pm)

    register_instrumentation(point="load-dialects", backend="nvidia",
                             callback=triton_proton.load_dialects)  # fmt: skip
    register_instrumentation(point="ttgpuir-to-llvmir", backend="nvidia", callback=to_llvmir)
    to_llvm = triton_proton.add_convert_proton_nvidia_gpu_to_llvm
    register_instrumentation(point="llvmir-to-llvm", backend="nvidia", callback=to_llvm)
    triton.knobs.compilation.instrumentation_mode = str(chosen)
    flags.instrumentation_on = True
    pl.enable_semantic("triton")  # as record_proton does

    config = dataclasses.replace(fused_geglu.CONFIGS["hopper"], flatten=flatten)
    kernel = hopper.fused_gate_up_geglu_tma_kernel
    fixed = dict(fused_geglu.constexprs(config), PROTON=True)
    signature = {
        name: "constexpr" if name in fixed else ("*bf16" if name.endswith("_ptr") else "i32")
        for name in kernel.arg_names
    }
    options = {"num_warps": config.warps, "num_stages": config.stages}
    source = ASTSource(kernel, signature, constexprs=fixed)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)


def main() -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--flatten", action="store_true",
                        help="the flattened persistent loop (the hopper config's own)")  # fmt: skip
    args = parser.parse_args()
    ptx = compile_instrumented(args.flatten).asm["ptx"]
    reads = ptx.count("%globaltimer") + ptx.count("%clock")
    print(f"timer reads in the PTX: {reads}")
    return 0 if reads else 1


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
