#!/usr/bin/env bash
# The GPU runs of 06_train_step (issue 17) at the documented GPU shape: each optimizer and
# precision, eager or compiled, with --strict --bench; or --memory. Logs, traces and memory
# PNGs/snapshots go to OUT_DIR; a summary of every run's checks is printed at the end.
#   bash tools/dev/gpu_runs/train_step_gpu.sh OUT_DIR eager|compile|memory     (PYTHON=python3 without uv)
set -u
out=${1:?usage: tools/dev/gpu_runs/train_step_gpu.sh OUT_DIR eager|compile|memory}
what=${2:?usage: tools/dev/gpu_runs/train_step_gpu.sh OUT_DIR eager|compile|memory}
py=${PYTHON:-uv run python}
shape="--batch 8 --seq 1024 --dim 1024 --hidden 4096 --heads 16 --layers 4 --vocab 32768"
mkdir -p "$out"
$py -c "import torch; print(torch.cuda.get_device_name(), torch.__version__)" > "$out/versions.txt" 2>&1
case $what in
    eager) extra="--bench" ;;
    compile) extra="--bench --compile" ;;
    memory) extra="--memory" ;;
    *) echo "unknown: $what" >&2; exit 2 ;;
esac
failed=0
for precision in autocast bf16 fp32; do
    for optimizer in fused foreach forloop; do
        log="$out/${what}_${precision}_${optimizer}.log"
        $py 06_train_step.py $shape --precision $precision --optimizer $optimizer $extra \
            --strict --gzip --traces-dir "$out/traces" > "$log" 2>&1
        rc=$?
        [ $rc -ne 0 ] && failed=1
        echo "=== $what $precision $optimizer: exit $rc"
        grep -E "correctness|^(forward|backward|optimizer):|MISMATCH|zero_grad|bench|peak|MiB, arith" "$log"
    done
done
exit $failed
