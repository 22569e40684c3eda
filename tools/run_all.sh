#!/usr/bin/env bash
# Run every lesson, eager and compiled: at tiny shapes (a smoke test that also works on a CPU)
# or at the posts' shapes (what docs/observations.md records on a GPU).
#   bash tools/run_all.sh [tiny|posts] [TRACES_DIR] [EXTRA FLAGS...]   (e.g. --bench)
# PYTHON picks the interpreter (default: uv run python; on a machine without uv, PYTHON=python3).
set -u
shapes=${1:-tiny}
traces=${2:-traces}
shift $(( $# < 2 ? $# : 2 ))
extra=("$@")
py=${PYTHON:-uv run python}
case $shapes in
    tiny) s01="--size 16"; s02="--batch 8 --in_dim 4 --out_dim 6"
          s03="--batch 2 --seq 8 --dim 64 --hidden 128"
          s04="--batch 1 --heads 2 --seq 64 --head_dim 64" ;;
    posts) s01="--size 64"; s02="--batch 1024 --in_dim 32 --out_dim 64"
           s03="--batch 64 --seq 128 --dim 768 --hidden 3072"
           s04="--batch 8 --heads 16 --seq 1024 --head_dim 64" ;;
    *) echo "usage: tools/run_all.sh [tiny|posts] [TRACES_DIR] [EXTRA FLAGS...]" >&2; exit 2 ;;
esac
gpu=$($py -c "import torch; print(int(torch.cuda.is_available()))")
failed=()
run() {
    echo "=== $*"
    $py "$@" --traces-dir "$traces" "${extra[@]}" || failed+=("$* (exit $?)")
}
for mode in "" --compile; do
    run 01_matmul_add.py $s01 $mode
    run 01_matmul_add.py $s01 --warmup $mode
    [ "$shapes" = posts ] && run 01_matmul_add.py --size 4096 --warmup $mode
    run 02_linear.py $s02 $mode
    run 03_simple_mlp.py $s03 $mode
    [ "$gpu" = 1 ] && run 03_kernels_mlp.py $s03 $mode
    [ "$gpu" = 1 ] && run 03_fused_mlp.py $s03 $mode
    run 04_a_naive_attention.py $s04 $mode
    run 04_b_inplace_ops_attention.py $s04 $mode
done
# SDPA: every backend this device can run, one trace each, and the comparison table
run 04_c_sdpa_attention.py $s04 --backend all
[ "$gpu" = 1 ] && run 04_d_kernels_attention.py $s04
echo "=== ${#failed[@]} run(s) failed"
for f in "${failed[@]}"; do echo "failed: $f"; done
[ ${#failed[@]} -eq 0 ]
