#!/usr/bin/env bash
# Ceilings per precision, checked on a GPU: --bench on a GEMM in bf16, fp16, fp32 and TF32, on
# 04_c's math backend (fp32 GEMMs under bf16 inputs), attention, the GeGLU MLPs (05's on one
# rank: bench_ranks' roofline) and the fused MLP's tuner.
# Fails (exit 1) on a failing run or on any line that puts a kernel or a forward above a
# measured ceiling (bytes served from the L2 faster than HBM allows are said, not failed).
# The ceilings are measured afresh into OUT_DIR/cache/ (XDG_CACHE_HOME); logs go to OUT_DIR.
#   bash tools/dev/gpu_runs/check_ceilings.sh OUT_DIR [all|lessons|tuner]   (PYTHON=python3 without uv)
set -u
out=${1:?usage: tools/dev/gpu_runs/check_ceilings.sh OUT_DIR [all|lessons|tuner]}
part=${2:-all}
py=${PYTHON:-uv run python}
mkdir -p "$out"
export XDG_CACHE_HOME="$out/cache"
traces=$(mktemp -d)
$py -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)" \
    > "$out/versions.txt" 2>&1
linear="--batch 8192 --in_dim 4096 --out_dim 4096"
mlp="--batch 64 --seq 128 --dim 768 --hidden 3072"
failed=()
run() {  # a name for the log, then the command
    local name=$1
    shift
    echo "=== $*" | tee "$out/$name.log"
    "$@" --bench --traces-dir "$traces" >> "$out/$name.log" 2>&1 || failed+=("$name (exit $?)")
}
# TF32 as a reader turns it on: set_float32_matmul_precision("high") before the lesson runs.
tf32() {
    $py -c 'import runpy, sys, torch
torch.set_float32_matmul_precision("high")
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")' "$@"
}
lessons() {
    run linear_bf16 $py 02_linear.py $linear --dtype bf16 --fresh-ceilings
    run linear_fp16 $py 02_linear.py $linear --dtype fp16
    run linear_fp32 $py 02_linear.py $linear --dtype fp32
    run linear_tf32 tf32 02_linear.py $linear --dtype fp32
    run linear_bf16_again $py 02_linear.py $linear --dtype bf16  # from the cache this time
    run simple_mlp $py 03_simple_mlp.py $mlp
    run simple_mlp_compile $py 03_simple_mlp.py $mlp --compile
    run fused_mlp $py 03_fused_mlp.py $mlp
    run fused_mlp_fp32 $py 03_fused_mlp.py --batch 16 --seq 128 --dim 768 --hidden 3072 --dtype fp32
    run sdpa_math $py 04_c_sdpa_attention.py --backend math
    run sdpa_flash $py 04_c_sdpa_attention.py --backend flash
    run naive_attention $py 04_a_naive_attention.py
    run tp_mlp_1_rank $py -m torch.distributed.run --nproc-per-node 1 05_tp_mlp.py $mlp
}
tuner() {
    echo "=== python -m tools.tune_fused_mlp --quick" | tee "$out/tuner.log"
    $py -m tools.tune_fused_mlp --quick >> "$out/tuner.log" 2>&1 || failed+=("tuner (exit $?)")
}
case $part in
    all) lessons; tuner ;;
    lessons) lessons ;;
    tuner) tuner ;;
    *) echo "usage: tools/dev/gpu_runs/check_ceilings.sh OUT_DIR [all|lessons|tuner]" >&2; exit 2 ;;
esac
cp "$XDG_CACHE_HOME/profiling-pytorch/ceilings.json" "$out/" 2>/dev/null
# What to read: the ceilings against the datasheet, each forward and kernel against them.
grep -hE "^===|datasheet|achieved|floor|x[0-9]+\.[0-9]+|not a ceiling|L2|compute floor" \
    "$out"/*.log > "$out/summary.txt"
cat "$out/summary.txt"
above=$(grep -hE "not a ceiling" "$out"/*.log)
if [ -n "$above" ]; then
    echo "ABOVE A CEILING:"
    echo "$above"
    failed+=("a ratio above a measured ceiling")
fi
if [ ${#failed[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${failed[@]}"
    exit 1
fi
echo "every run passed; no ratio above a measured ceiling"
