#!/usr/bin/env bash
# The bench run docs/measuring.md describes: the shape sweep, then --bench on every lesson
# at the posts' shapes. Logs and the sweep's table/CSV/plot go to OUT_DIR.
#   bash tools/dev/gpu_runs/measure_gpu.sh OUT_DIR      (PYTHON=python3 on a machine without uv)
set -u
out=${1:?usage: tools/dev/gpu_runs/measure_gpu.sh OUT_DIR}
py=${PYTHON:-uv run python}
traces=$(mktemp -d)
mkdir -p "$out"
$py -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)" \
    > "$out/versions.txt" 2>&1
$py -m tools.shape_sweep --traces-dir "$traces" > "$out/sweep.log" 2>&1
cp "$traces"/shape_sweep/* "$out"/
mlp="--batch 64 --seq 128 --dim 768 --hidden 3072"
for run in "03_simple_mlp.py $mlp" "03_simple_mlp.py $mlp --compile" \
           "03_kernels_mlp.py $mlp" "03_kernels_mlp.py $mlp --compile" \
           "02_linear.py" "02_linear.py --compile" \
           "01_matmul_add.py --size 64 --warmup" "01_matmul_add.py --size 64 --warmup --compile" \
           "01_matmul_add.py --size 4096 --warmup" "01_matmul_add.py --size 4096 --warmup --compile"; do
    echo "=== $run"
    $py $run --bench --traces-dir "$traces"
done > "$out/bench.log" 2>&1
grep -E "^===|forward:|floor:|achieved|profiler:|ceilings:|datasheet|not a ceiling" "$out/bench.log"
