#!/usr/bin/env bash
# The GPU run for the reader's nn.Module attribution (issue 15): a Llama-shaped training step
# (transformers) and timm's ResNet-50 training step recorded with their module events
# (tools/dev/reader_validation/record_model_traces.py --with-modules), then each read back: the summary, the whole
# module tree and the JSON, into OUT_DIR, and one line per trace saying where its GPU time
# went (inside modules, launched from threads without module events, outside modules).
#   bash tools/dev/gpu_runs/record_module_traces.sh OUT_DIR [--tiny --device cpu]
# PYTHON=python3 where transformers and timm are installed (the GPU machine, without network).
set -u
out=${1:?usage: tools/dev/gpu_runs/record_module_traces.sh OUT_DIR [--tiny --device cpu]}
shift
py=${PYTHON:-uv run --with transformers>=5 --with timm python}
mkdir -p "$out"
$py -m tools.dev.reader_validation.record_model_traces --with-modules --only llama_train,timm_train --out "$out" "$@"
rc=$?
for trace in "$out"/*_modules*.json.gz; do
    [ -e "$trace" ] || continue
    stem=${trace%.json.gz}
    $py -m tracereader.commands.explain "$trace" > "$stem.txt"
    $py -m tracereader.commands.explain "$trace" --modules > "$stem.modules.txt"
    $py -m tracereader.commands.explain "$trace" --json > "$stem.reading.json"
    $py - "$stem.reading.json" "$trace" <<'EOF'
import json, os, sys
summary = json.load(open(sys.argv[1]))["traces"][0]["summary"]
found, busy = summary["modules"], summary["gpu_busy_us"]["median"] or 0.0
name = os.path.basename(sys.argv[2])
if not found:
    sys.exit(f"{name}: no module events read")
head = f"{name}: {os.path.getsize(sys.argv[2]) / 1e6:.2f} MB, {len(found['tree'])} modules"
out = found["outside_modules"]
if out is None:
    sys.exit(print(f"{head}, no GPU work (CPU trace)"))
roots = sum(n["gpu_us"] for n in found["tree"] if n["depth"] == 0)
print(
    f"{head}, GPU busy {busy:.0f} us per step: {roots:.0f} us in modules, "
    f"{out['other_threads_gpu_us']:.0f} us from threads without module events, "
    f"{out['module_threads_gpu_us']:.0f} us outside modules"
)
EOF
done
exit $rc
