#!/usr/bin/env bash
# Issue 29's GPU run on an H100 or H200 (torch 2.11, Triton 3.6, no network): modules/geglu/gluon.py's
# kernel compiled for sm_90 (its SASS counts), checked at odd shapes and timed beside QuACK's
# gemm_gated, modules/geglu/fused.py's hopper kernel and cuBLAS at the post's shape and the Llama one
# (tools/dev/kernel_lab/gluon_bench.py: round-robin passes), the lesson with --kernel gluon --bench, one
# Proton run, the sweep's fused-gluon variant, and Nsight Compute's figures where ncu exists.
# QuACK comes from the carried wheel set under SITE where it is there (tools/carry_wheels.py
# install .gpu/wheels/part2: quack-kernels 0.6.4 on nvidia-cutlass-dsl 4.6.2), else it is left
# out, said in one line. Every log goes into OUT_DIR/gluon_gpu.tar.gz; a failing step
# is reported and the next one runs; the limits add up to 9.8 minutes.
#   PYTHONPATH=$PWD bash tools/dev/gpu_runs/gluon_gpu.sh OUT_DIR            (PYTHON, SITE: see below)
set -u
out=${1:?usage: tools/dev/gpu_runs/gluon_gpu.sh OUT_DIR}
py=${PYTHON:-python3}
site=${SITE:-/tmp/profiling-pytorch-wheels/site}
path=${PYTHONPATH:-$PWD}
if [ -d "$site/quack" ]; then
    # nvidia-cutlass-dsl adds dsl_packages/ to sys.path from a .pth file, which PYTHONPATH skips.
    path="$path:$site:$site/nvidia_cutlass_dsl/dsl_packages"
else
    echo "note: no wheel set in $site: QuACK is left out of the comparisons"
fi
work=$(mktemp -d)
traces="$work/traces"
mkdir -p "$out" "$traces"
out=$(cd "$out" && pwd)  # absolute: the archive is written from inside $work
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
failed=()
started=$SECONDS

step() {  # step NAME LIMIT_S COMMAND...: one run, its log kept, its exit code said
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    { echo "\$ $*"; PYTHONPATH="$path" timeout "$limit" "$@"; } > "$work/$name.log" 2>&1
    local rc=$?
    [ $rc -ne 0 ] && failed+=("$name:$rc")
    echo "=== $name: exit $rc, $((SECONDS - start)) s"
}

PYTHONPATH="$path" $py - > "$work/versions.log" 2>&1 <<'PY'
import sys
from importlib.metadata import version

import torch
import triton

print(torch.cuda.get_device_name(), torch.cuda.get_device_capability(), "Python", sys.version.split()[0])
print("torch", torch.__version__, "triton", triton.__version__)
for name in ("quack-kernels", "nvidia-cutlass-dsl"):
    try:
        print(name, version(name))
    except Exception as err:
        print(name, "missing:", err)
PY
cat "$work/versions.log"
nvidia-smi > "$work/nvidia-smi.log" 2>&1

post="--m 8192 --dim 768 --hidden 3072"
llama="--m 8192 --dim 4096 --hidden 14336"
step sass 40 $py -m tools.dev.kernel_lab.fused_geglu_sass --candidates gluon
# --graphs: eager do_bench beside CUDA-graph replays and each call's host dispatch (run 1's
# eager gluon timings carried its launch: 274.8 us of host dispatch per forward on the H200)
step bench_post 150 $py -m tools.dev.kernel_lab.gluon_bench $post --graphs
step bench_llama 130 $py -m tools.dev.kernel_lab.gluon_bench $llama --skip-odd
step lesson_gluon 60 $py 03_fused_mlp.py --batch 64 --seq 128 --dim 768 --hidden 3072 \
    --kernel gluon --bench --traces-dir "$traces"
step proton 45 $py 03_fused_mlp.py --batch 64 --seq 128 --dim 768 --hidden 3072 --proton \
    --active 1 --traces-dir "$traces/proton"
# the plain Triton kernel's timeline beside gluon's: main loop and epilogue per warp
step proton_hopper 45 $py 03_fused_mlp.py --batch 64 --seq 128 --dim 768 --hidden 3072 \
    --kernel hopper --proton --active 1 --traces-dir "$traces/proton_hopper"
step sweep 40 $py -m tools.shape_sweep --shapes 8x128,64x128 --variants fused,fused-gluon \
    --hidden-change 0 --traces-dir "$traces"
if command -v ncu > /dev/null; then
    # Two launches each after every check (the profiled range: QuACK's autotuning stays out);
    # the figures the issue asks for: issue efficiency, tensor-pipe utilization, warp stalls.
    step ncu 80 ncu --profile-from-start off --clock-control none --set full \
        -k 'regex:fused_gate_up|quack' -o "$work/ncu_post" \
        $py -m tools.dev.kernel_lab.ncu_fused_mlp --configs gluon-fast,gluon,hopper --quack
    if [ -f "$work/ncu_post.ncu-rep" ]; then
        ncu --import "$work/ncu_post.ncu-rep" --print-summary per-kernel > "$work/ncu_summary.log" 2>&1
        ncu --import "$work/ncu_post.ncu-rep" --page details \
            --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis \
            > "$work/ncu_details.log" 2>&1
    fi
else
    echo "ncu: not on this machine (which ncu: nothing); skipped" | tee "$work/ncu.log"
fi

if ! tar czf "$out/gluon_gpu.tar.gz" -C "$work" .; then
    echo "error: could not write the archive; the logs stay in $work" >&2
    exit 1
fi
echo "archive: $out/gluon_gpu.tar.gz ($(du -h "$out/gluon_gpu.tar.gz" | cut -f1)), $((SECONDS - started)) s in all"
# What to read first, per log (the archive holds everything).
for log in "$work"/*.log; do
    echo "--- $(basename "$log" .log)"
    sed -n -e '/^\(error\|Traceback\)/,+6{p;d}' -e '/FAILED\|WRONG\|BAD/{p;d}' \
        -e '/^ *[0-9.]* us  /{p;d}' -e '/replayed\|eager calls\|host dispatch/{p;d}' \
        -e '/fastest gluon\|paste into/{p;d}' -e '/^gluon /{p;d}' \
        -e '/QuACK\|proton\|reading/{p;d}' "$log" | cut -c1-200 | head -90
done
[ ${#failed[@]} -eq 0 ] && echo "all steps ran" || echo "failed steps: ${failed[*]}"
rm -rf "$work"
[ ${#failed[@]} -eq 0 ]
