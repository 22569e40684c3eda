#!/usr/bin/env bash
# The GPU runs of 08_generate (issue 28), on one H100 or H200, in under 9 minutes: the 8b preset
# (Llama-3-8B's shapes, random weights), bf16, prompt 512, 256 new tokens, each with --bench
# --strict, then the batch sweep. Every part goes on when one fails; the exit code says whether
# any did. Estimated times on an H100 (each run: torch start-up ~10 s, an 8B model built in
# float32 and its reference generation ~10 s, three warm-up generations, the profiled steps,
# then --bench's 6 pairs of generations of 1 and 256 tokens):
#   eager        ~45 s  (launch-bound: ~8 ms a token)
#   compile      ~110 s (Inductor compiles the 32-layer decode step, ~60 s, in one process)
#   cuda-graphs  ~40 s  (the eager decode step captured once, ~5-6 ms a token)
#   hf           ~120 s (transformers' generate, static cache, compiled into CUDA graphs by it)
#   sweep        ~100 s (CUDA graphs, 128 new tokens, batch 1 to 64, 3 pairs of generations each)
# about 7 minutes in all. OUT gets at most 4 files: versions.txt, summary.txt (each run's
# checks and readings), logs.tar.gz (every log) and traces.tar.gz (the gzipped traces, a prefill
# and 3 decode steps each, their tables and the sweep's PNG).
#   bash tools/dev/generate_gpu.sh OUT           (PYTHON=python3 on a machine without uv)
set -u
out=${1:?usage: tools/dev/generate_gpu.sh OUT}
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
    timeout "${PART_TIMEOUT:-170}" $py 08_generate.py "$@" --strict --gzip --traces-dir \
        "$work/traces" > "$work/logs/$name.log" 2>&1
    local rc=$?
    [ $rc -ne 0 ] && failed=1
    {
        echo "=== $name: exit $rc, $((SECONDS - start)) s: 08_generate.py $*"
        grep -E "copy ceiling|guess:|floor:|correctness|parts from|^(prefill|decode):|MISMATCH|generation:|per token|->|KV cache|bench|decode:|x the bandwidth|peak|batch +[0-9]+:|sweep plot|^error" "$work/logs/$name.log"
    } >> "$out/summary.txt"
}
: > "$out/summary.txt"
run eager $shape --bench
run compile $shape --compile --bench
run cuda-graphs $shape --cuda-graphs --bench
run hf $shape --impl hf --bench
run sweep --preset 8b --dtype bf16 --prompt 512 --new-tokens 128 --cuda-graphs \
    --sweep-batch 1,2,4,8,16,32,64
tar -czf "$out/logs.tar.gz" -C "$work" logs
tar -czf "$out/traces.tar.gz" -C "$work" traces
rm -rf "$work"
cat "$out/summary.txt"
exit $failed
