#!/usr/bin/env bash
# Issue 26's GPU runs on one host of 4 GPUs, in two calls of under 10 minutes each; predict
# between them. Logs, CSVs and plots go to OUT_DIR; each part ends with one archive.
#   bash tools/dev/gpu_runs/multi_gpu.sh OUT_DIR n2     # N = 1 and 2, two lanes of 2 GPUs side by side
#                                          # (GPUs 0,1 and 2,3), then the link at N = 2 and 4,
#                                          # then tools/dev/ranks/predict_scaling.py for N = 4 and 8
#   bash tools/dev/gpu_runs/multi_gpu.sh OUT_DIR n4     # N = 4: 05's scaling, 07's five variants, DDP
#   bash tools/dev/gpu_runs/multi_gpu.sh OUT_DIR comm4  # N = 4 at 07's communication-bound shape
# PYTHON=python3 on the GPU machines (no uv there). The two lanes of n2 share the host's CPUs
# and its NVSwitch, not a GPU: docs/several_gpus.md says which numbers came from them.
set -u
out=${1:?usage: tools/dev/gpu_runs/multi_gpu.sh OUT_DIR n2|n4|comm4}
part=${2:?usage: tools/dev/gpu_runs/multi_gpu.sh OUT_DIR n2|n4|comm4}
export PYTHON=${PYTHON:-python3}
py=$PYTHON
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nvidia-smi topo -m
  $py -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  date -u +%Y-%m-%dT%H:%MZ; env | grep -E '^(NCCL|TORCH_SYMM|NVSHMEM)_' ; } > "$out/machine_$part.txt" 2>&1
link() {  # N GPUS: the curve into OUT_DIR/link
    CUDA_VISIBLE_DEVICES=$2 $py -m torch.distributed.run --standalone --nproc-per-node "$1" \
        -m tools.dev.ranks.link_curve "$out/link" > "$out/link_n$1.log" 2>&1
    echo "=== link N=$1: exit $?"; tail -n 3 "$out/link_n$1.log"
}
case $part in
n2)
    ( export CUDA_VISIBLE_DEVICES=0,1
      link 2 0,1
      $py -m tools.tp_scaling "$out/tp" --ranks 1,2 > "$out/tp_n12.log" 2>&1
      echo "=== tp N=1,2: exit $?"
      bash tools/dev/gpu_runs/fsdp_gpu.sh "$out/comm" 1 comm > "$out/fsdp_comm_n1.log" 2>&1
      echo "=== fsdp comm N=1: exit $?"
      bash tools/dev/gpu_runs/fsdp_gpu.sh "$out/comm" 2 comm > "$out/fsdp_comm_n2.log" 2>&1
      echo "=== fsdp comm N=2: exit $?" ) > "$out/laneA.log" 2>&1 &
    ( export CUDA_VISIBLE_DEVICES=2,3
      bash tools/dev/gpu_runs/fsdp_gpu.sh "$out/gpu" 1 gpu > "$out/fsdp_gpu_n1.log" 2>&1
      echo "=== fsdp gpu N=1: exit $?"
      bash tools/dev/gpu_runs/fsdp_gpu.sh "$out/gpu" 2 gpu > "$out/fsdp_gpu_n2.log" 2>&1
      echo "=== fsdp gpu N=2: exit $?"
      bash tools/dev/gpu_runs/fsdp_gpu.sh "$out/ddp" 2 gpu ddp > "$out/ddp_gpu_n2.log" 2>&1
      echo "=== ddp gpu N=2: exit $?" ) > "$out/laneB.log" 2>&1 &
    wait
    cat "$out/laneA.log" "$out/laneB.log"
    link 4 0,1,2,3
    $py -m tools.dev.ranks.predict_scaling --tp "$out/tp" --train "$out/gpu" "$out/comm" \
        --curve "$out"/link/*_n2.csv "$out"/link/*_n4.csv --ranks 4,8 --out "$out/prediction"
    ;;
n4)
    $py -m tools.tp_scaling "$out/tp4" --ranks 4 > "$out/tp_n4.log" 2>&1
    echo "=== tp N=4: exit $?"; tail -n 6 "$out/tp_n4.log"
    bash tools/dev/gpu_runs/fsdp_gpu.sh "$out/gpu4" 4 gpu > "$out/fsdp_gpu_n4.log" 2>&1
    echo "=== fsdp gpu N=4: exit $?"
    bash tools/dev/gpu_runs/fsdp_gpu.sh "$out/ddp4" 4 gpu ddp > "$out/ddp_gpu_n4.log" 2>&1
    echo "=== ddp gpu N=4: exit $?"
    ;;
comm4)
    bash tools/dev/gpu_runs/fsdp_gpu.sh "$out/comm4" 4 comm > "$out/fsdp_comm_n4.log" 2>&1
    echo "=== fsdp comm N=4: exit $?"
    ;;
*) echo "unknown part: $part (n2, n4 or comm4)" >&2; exit 2 ;;
esac
grep -H -E "^=== |train-scaling|MISMATCH" "$out"/*.log "$out"/*/*.log 2>/dev/null | head -80
[ -f "$out/prediction/prediction.txt" ] && cat "$out/prediction/prediction.txt"
true
