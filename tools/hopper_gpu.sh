#!/usr/bin/env bash
# Issue 19's GPU runs on an H100/H200, after `tools/carry_wheels.py install` put the Hopper
# wheel set under SITE: FlashAttention-4 in 04_c (direct and routed through SDPA) at the post's
# shape and at seq 4096 / head_dim 128, 04_d with FA4 as its source, 03_fused_mlp --bench beside
# QuACK, tools/tune_fused_mlp.py with QuACK at the post's shape and a Llama-sized one, and two
# small FA4 traces for fixtures. Every log and trace goes into OUT_DIR/hopper_gpu_PART.tar.gz; a
# step that fails is reported and the next one runs. attention: about 5 minutes; mlp (03's bench
# and the tuner at the post's shape) and llama (the tuner at the Llama shape): about 4 each (most
# of it compiles and QuACK's autotuning): one call each where a call is limited to 10.
#   bash tools/hopper_gpu.sh OUT_DIR [attention|mlp|llama|all]       (PYTHON, SITE: see below)
set -u
out=${1:?usage: tools/hopper_gpu.sh OUT_DIR [attention|mlp|llama|all]}
what=${2:-all}
py=${PYTHON:-python3}
site=${SITE:-/tmp/profiling-pytorch-wheels/site}
# nvidia-cutlass-dsl adds dsl_packages/ to sys.path from a .pth file, which PYTHONPATH skips.
b36="$site:$site/nvidia_cutlass_dsl/dsl_packages"
# torch 2.11's SDPA route unpacks two values from FA4's forward: 4.0.0b18 (its own target) first.
b18="$site-fa4b18:$b36"
case $what in attention | mlp | llama | all) ;; *) echo "unknown: $what" >&2; exit 2 ;; esac
if [ ! -d "$site/flash_attn" ] || [ ! -d "$site/quack" ]; then
    echo "error: no Hopper wheel set in $site: run python3 -m tools.carry_wheels install first" >&2
    exit 2
fi
work=$(mktemp -d)
traces="$work/traces"
mkdir -p "$out" "$traces"
out=$(cd "$out" && pwd)  # absolute: the archive is written from inside $work
# A machine without a network: offline at once (a cold cache, so 04_d moves on to FA4).
export HF_HUB_OFFLINE=1 HF_HUB_CACHE="$work/hub-cache" PYTHONUNBUFFERED=1
failed=()

step() {  # step NAME PYTHONPATH LIMIT_S COMMAND...: one run, its log kept, its exit code said
    local name=$1 path=$2 limit=$3
    shift 3
    local start=$SECONDS
    PYTHONPATH="$path" timeout "$limit" "$@" > "$work/$name.log" 2>&1
    local rc=$?
    [ $rc -ne 0 ] && failed+=("$name:$rc")
    echo "=== $name: exit $rc, $((SECONDS - start)) s"
}

PYTHONPATH="$b36" $py - > "$work/versions.txt" 2>&1 <<'EOF'
import sys
from importlib.metadata import version

import torch
import triton

print(torch.cuda.get_device_name(), torch.cuda.get_device_capability(), "Python", sys.version.split()[0])
print("torch", torch.__version__, "triton", triton.__version__)
for name in ("flash-attn-4", "quack-kernels", "nvidia-cutlass-dsl", "kernels", "liger-kernel"):
    try:
        print(name, version(name))
    except Exception as err:
        print(name, "missing:", err)
EOF
cat "$work/versions.txt"

attn="--batch 8 --heads 16 --seq 1024 --head_dim 64"
long="--batch 4 --heads 16 --seq 4096 --head_dim 128"
small="--batch 1 --heads 2 --seq 256 --head_dim 64 --active 1 --gzip"
if [ "$what" = attention ] || [ "$what" = all ]; then
    # One table per shape: cuDNN, SDPA's FA2, efficient, math, FA4 direct and routed (b18, for
    # torch 2.11's route). Then, with --bench, direct against routed at the post's shape with
    # the same FA4 (b18: where the routed call's host time goes), and b36 direct at 4096/128.
    step 04c_all_post "$b18" 240 $py 04_c_sdpa_attention.py $attn --backend all --gzip --traces-dir "$traces"
    step 04c_all_long "$b18" 240 $py 04_c_sdpa_attention.py $long --backend all --gzip --traces-dir "$traces"
    step 04c_fa4_post "$b18" 120 $py 04_c_sdpa_attention.py $attn --backend fa4 --bench --gzip --traces-dir "$traces/b18"
    step 04c_routed_post "$b18" 120 $py 04_c_sdpa_attention.py $attn --backend fa4-sdpa --bench --gzip --traces-dir "$traces/b18"
    step 04c_fa4_long "$b36" 120 $py 04_c_sdpa_attention.py $long --backend fa4 --bench --gzip --traces-dir "$traces/b36"
    step 04d_fa4_post "$b36" 120 $py 04_d_kernels_attention.py $attn --bench --strict --gzip --traces-dir "$traces"
    # Small traces for tests/fixtures (the reader's FA4 names, the EXPECTs on them).
    step 04d_fa4_small "$b36" 120 $py 04_d_kernels_attention.py $small --strict --traces-dir "$traces/fixture"
    step 04c_fa4_small "$b18" 120 $py 04_c_sdpa_attention.py $small --backend fa4-sdpa --strict --traces-dir "$traces/fixture"
fi
# The tuner times both Hopper paths (hopper-epi: what fits from QuACK's kernel) beside QuACK.
if [ "$what" = mlp ] || [ "$what" = all ]; then
    step 03fused_bench "$b36" 150 $py 03_fused_mlp.py --batch 64 --seq 128 --dim 768 --hidden 3072 --bench --traces-dir "$traces"
    step tune_post "$b36" 300 $py -m tools.tune_fused_mlp --quick --paths hopper,hopper-epi --budget-s 90
fi
if [ "$what" = llama ] || [ "$what" = all ]; then
    step tune_llama "$b36" 420 $py -m tools.tune_fused_mlp --quick --paths hopper,hopper-epi --budget-s 120 \
        --m 8192 --dim 4096 --hidden 14336
fi

if ! tar czf "$out/hopper_gpu_${what}.tar.gz" -C "$work" --exclude hub-cache .; then
    echo "error: could not write the archive; the logs stay in $work" >&2
    exit 1
fi
echo "archive: $out/hopper_gpu_${what}.tar.gz ($(du -h "$out/hopper_gpu_${what}.tar.gz" | cut -f1))"
# What to read first, per log (the archive holds everything).
for log in "$work"/*.log; do
    echo "--- $(basename "$log" .log)"
    # {p;d}: a line that several patterns match is printed once
    sed -n -e '/^summary (/,${p;d}' -e '/backends compared/,/^$/{p;d}' -e '/^host time per forward/,+7{p;d}' \
        -e '/^\(error\|Traceback\)/,+3{p;d}' -e '/^flash_attn_func:/{p;d}' -e '/^  forward, /{p;d}' \
        -e '/host dispatch per call/{p;d}' -e '/QuACK/{p;d}' -e '/^expected vs seen/{p;d}' \
        -e '/not as expected/{p;d}' "$log" | cut -c1-160
done
[ ${#failed[@]} -eq 0 ] && echo "all steps ran" || echo "failed steps: ${failed[*]}"
rm -rf "$work"
[ ${#failed[@]} -eq 0 ]
