#!/usr/bin/env bash
# The GPU runs of 08_generate (issue 28), on one H100 or H200: the 8b preset (Llama-3-8B's
# shapes, random weights), bf16, prompt 512, 256 new tokens, each with --bench --strict, and
# `explain --kernels` on its trace's second decode step; then the batch sweep. Every part goes
# on when one fails; the exit code says whether any did. PARTS picks them (default: all, about
# 13 minutes: two calls where one is limited to 10). Times on an H200 (each run: torch start-up
# ~10 s, the 8B model in float32 and its reference generation ~10 s, warm-up generations, the
# profiled steps, --bench's generations):
#   eager ~45 s, graphs ~40 s
#   compile ~110 s, compile-graphs ~130 s, fused ~130 s (--compile --cuda-graphs --fuse),
#   flex ~140 s (and --attention flex), best ~130 s (--fuse --attention split), split ~50 s
#   (--cuda-graphs --fuse --attention split, eager)
#   hf ~120 s (transformers' generate, compiled into CUDA graphs by it), sweep ~100 s,
#   gemv ~90-175 s (best + --gemv), gemv-autotune ~90-265 s (cold), autotune ~250-300 s (cold)
# OUT gets at most 4 files: versions.txt, summary.txt (each run's checks and readings),
# logs.tar.gz (every log) and traces.tar.gz (the gzipped traces, a prefill and 3 decode steps
# each, their tables and the sweep's PNG).
#   bash tools/dev/gpu_runs/generate_gpu.sh OUT [PART ...]    (PYTHON=python3 on a machine without uv)
set -u
out=${1:?usage: tools/dev/gpu_runs/generate_gpu.sh OUT [eager|compile|dynamic|graphs|compile-graphs|fused|flex|split|best|autotune|pdl|gemv|gate|gemv-autotune|hf|sweep ...]}
shift
parts=${*:-eager compile graphs compile-graphs fused flex split best hf sweep}
py=${PYTHON:-uv run python}
work=$(mktemp -d)
mkdir -p "$out" "$work/logs"
$py -c "import torch, transformers; print(torch.cuda.get_device_name(), 'torch', torch.__version__,
'transformers', transformers.__version__)" > "$out/versions.txt" 2>&1
shape="--preset 8b --dtype bf16 --prompt 512 --new-tokens 256"
failed=0
run() {  # NAME FLAGS...: one run, its log, its lines in the summary
    local name=$1
    shift
    local start=$SECONDS
    # each part bounded: one that hangs or compiles past its share costs that part alone
    # INDUCTOR_KNOBS (tools/dev/kernel_lab/inductor_knobs.py): Inductor settings without a variable
    local knobs=${INDUCTOR_KNOBS:+-m tools.dev.kernel_lab.inductor_knobs}
    timeout "${PART_TIMEOUT:-240}" $py $knobs 08_generate.py "$@" --strict --gzip --traces-dir \
        "$work/traces/$name" > "$work/logs/$name.log" 2>&1
    local rc=$?
    [ $rc -ne 0 ] && failed=1
    local trace
    trace=$(ls "$work/traces/$name"/08_generate/*.json.gz 2>/dev/null | head -1)
    # the kernels of one decode token (steps: 1 prefill, then decode tokens)
    [ -n "$trace" ] && timeout 60 $py -m tracereader.commands.explain "$trace" --kernels \
        --step 2 > "$work/logs/$name.kernels.txt" 2>&1
    {
        echo "=== $name: exit $rc, $((SECONDS - start)) s: 08_generate.py $*"
        grep -E "copy ceiling|guess:|floor:|correctness|parts from|^(prefill|decode):|MISMATCH|generation:|per token|->|KV cache|bench|decode:|x the bandwidth|TFLOP|peak|batch +[0-9]+:|sweep plot|^error" "$work/logs/$name.log"
    } >> "$out/summary.txt"
}
: > "$out/summary.txt"
for part in $parts; do
    case $part in
        eager) run eager $shape --bench ;;
        compile) run compile $shape --compile --bench ;;
        dynamic) run dynamic $shape --cache dynamic --bench ;;  # the cache that grows, eager
        graphs) run graphs $shape --cuda-graphs --bench ;;
        compile-graphs) run compile-graphs $shape --compile --cuda-graphs --bench ;;
        fused) run fused $shape --compile --cuda-graphs --fuse --bench ;;
        flex) run flex $shape --compile --cuda-graphs --fuse --attention flex --bench ;;
        split) run split $shape --cuda-graphs --fuse --attention split --bench ;;
        best) run best $shape --compile --cuda-graphs --fuse --attention split --bench ;;
        autotune) run autotune $shape --compile --autotune --cuda-graphs --fuse --attention \
            split --bench ;;
        # Inductor's kernels launched with programmatic dependent launch (each one's prologue
        # overlapping the previous one's tail): H200, 4.514 against 4.522 ms
        # (docs/lessons/08_generate.md)
        pdl) TORCHINDUCTOR_ENABLE_PDL=1 run pdl $shape --compile --autotune --cuda-graphs \
            --fuse --attention split --bench ;;
        # decode's projections as modules/decode_gemv.py's GEMVs, tiles fixed (no tuner's draw)
        gemv) run gemv $shape --compile --cuda-graphs --fuse --attention split --gemv --bench ;;
        # and a prompt's gate/up + SiLU as one Gluon kernel (SM90)
        gate) run gate $shape --compile --cuda-graphs --fuse --attention split --gemv \
            --fused-gate --bench ;;
        gemv-autotune) run gemv-autotune $shape --compile --autotune --cuda-graphs --fuse \
            --attention split --gemv --bench ;;
        hf) run hf $shape --impl hf --bench ;;
        sweep) run sweep --preset 8b --dtype bf16 --prompt 512 --new-tokens 128 --cuda-graphs \
            --fuse --attention split \
            --sweep-batch 1,2,4,8,16,32,64 ;;
        *) echo "unknown part: $part" >&2; failed=1 ;;
    esac
done
tar -czf "$out/logs.tar.gz" -C "$work" logs
tar -czf "$out/traces.tar.gz" -C "$work" traces
rm -rf "$work"
cat "$out/summary.txt"
exit $failed
