#!/usr/bin/env bash
# The GPU runs of 07_fsdp_train (issue 18) at the documented GPU shape (Llama-like, 8 blocks),
# each with --strict --bench: at N=1 the compute baseline (FSDP2 issues no collective), eager
# and compiled; at N>1 (a machine with N GPUs) also --no-reshard-after-forward and --prefetch.
# Logs, versions and traces go to OUT_DIR; each run's checks and readings are printed.
#   bash tools/dev/gpu_runs/fsdp_gpu.sh OUT_DIR            # N=1, one GPU
#   bash tools/dev/gpu_runs/fsdp_gpu.sh OUT_DIR 2          # N=2 (likewise 4, 8)      (PYTHON=python3 without uv)
#   bash tools/dev/gpu_runs/fsdp_gpu.sh OUT_DIR 2 comm     # the same weights, 16x fewer tokens per rank:
#                                             # compute no longer hides the all-gathers
#   bash tools/dev/gpu_runs/fsdp_gpu.sh OUT_DIR 2 gpu ddp  # DDP instead (--ddp): eager, compiled, and with
#                                             # 100 MiB buckets (fewer, larger all-reduces)
# The traces are packed into OUT_DIR/traces_n<N>_<shape>_<fsdp|ddp>.tgz (rank folders for
# tools/dev/reader_validation/hta_compare.py).
set -u
out=${1:?usage: tools/dev/gpu_runs/fsdp_gpu.sh OUT_DIR [RANKS] [gpu|comm] [fsdp|ddp]}
n=${2:-1}
py=${PYTHON:-uv run python}
case ${3:-gpu} in
    gpu) tokens="--batch 4 --seq 2048" ;;
    comm) tokens="--batch 1 --seq 512" ;;
    *) echo "unknown shape: $3 (gpu or comm)" >&2; exit 2 ;;
esac
shape="$tokens --dim 2048 --hidden 5632 --heads 16 --layers 8 --vocab 32000"
mkdir -p "$out"
$py -c "import torch; print(torch.cuda.get_device_name(), torch.cuda.device_count(), 'GPUs', torch.__version__, torch.version.cuda)" > "$out/versions.txt" 2>&1
date -u +%Y-%m-%dT%H:%MZ >> "$out/versions.txt"
cases=("eager:" "compile:--compile")
if [ "${4:-fsdp}" = ddp ]; then
    cases=("ddp_eager:--ddp" "ddp_compile:--ddp --compile" "ddp_bucket100:--ddp --bucket-cap-mb 100")
elif [ "$n" -gt 1 ]; then
    cases+=("keep:--no-reshard-after-forward" "prefetch:--prefetch"
            "keep_prefetch:--no-reshard-after-forward --prefetch")
fi
failed=0
for case in "${cases[@]}"; do
    name=${case%%:*}
    flags=${case#*:}
    log="$out/n${n}_${name}.log"
    $py -m torch.distributed.run --standalone --nproc-per-node "$n" 07_fsdp_train.py $shape \
        $flags --bench --strict --gzip --traces-dir "$out/traces" > "$log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && failed=1
    echo "=== N=$n $name: exit $rc"
    grep -E "correctness|^(forward|backward|optimizer):|MISMATCH|^rank [0-9]+:|per step|^ +[0-9]+ +[0-9.]+|skew|all-gather:|reduce-scatter:|all-reduce:|bench|memory|error|train-scaling" "$log"
done
cat "$out/versions.txt"
[ -d "$out/traces" ] && tar czf "$out/traces_n${n}_${3:-gpu}_${4:-fsdp}.tgz" -C "$out" traces && rm -rf "$out/traces"
exit $failed
