"""Record real model traces for the reader and for tools/dev/reader_validation/hta_compare.py: the
kind of trace a user brings, not a lesson's. One command writes every trace, gzipped, and a
provenance JSON beside them (device, versions, shapes, sizes, date):

    llama_train       a Llama-shaped decoder (transformers' LlamaForCausalLM built from a
                      LlamaConfig, random weights), one training step: bf16 autocast forward,
                      backward, AdamW step, zero_grad
    llama_infer_compile      the same decoder in bf16, inference (a prefill forward, no KV
                      cache), torch.compile'd (default mode)
    llama_infer_cudagraphs   the same with mode="reduce-overhead" (Inductor's CUDA graphs)
    timm_train        a timm ResNet-50 training step, bf16 autocast, AdamW

Each is profiled with schedule(wait=1, warmup=1, active=2) and record_shapes=True: two recorded
steps, each inside its ProfilerStep#N. Models come from configs, never from the Hub (the GPU
machine has no network); transformers and timm are not dependencies of the project:

    # on a GPU (the lead's H100; about 2-3 minutes, most of it compiling):
    uv run --with 'transformers>=5' --with timm \
        python -m tools.dev.reader_validation.record_model_traces --out $OUT
    # anywhere, tiny configs on the CPU (what tests/test_record_model_traces.py runs):
    uv run --with 'transformers>=5' --with timm \
        python -m tools.dev.reader_validation.record_model_traces \
        --tiny --device cpu --out /tmp/model_traces

--only picks some of the four (comma-separated). A trace is written under a temporary name and
renamed when complete; the provenance is written last, listing what was recorded.

--with-modules profiles with with_stack=True, so the trace carries each eager nn.Module call
(`python_function` events named `nn.Module: LlamaDecoderLayer_3`) for the reader's module
attribution; the names end in `_modules`. with_stack records every Python frame too, most of
the file and nothing the reader uses: those are dropped after export, the nn.Module events
kept (the provenance says so). A compiled model records only its outermost module, so this is
for the eager recordings:

    uv run --with 'transformers>=5' --with timm \
        python -m tools.dev.reader_validation.record_model_traces \
        --with-modules --only llama_train,timm_train --out $OUT
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.cli import Parser, one_line
from tracereader import run

WAIT, WARMUP, ACTIVE = 1, 1, 2  # the first steps are discarded: allocator and autotuning settle
RECORDINGS = ("llama_train", "llama_infer_compile", "llama_infer_cudagraphs", "timm_train")
COMMAND = "python -m tools.dev.reader_validation.record_model_traces"  # in the provenance


@dataclass
class LlamaShape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    batch: int
    seq: int


@dataclass
class VisionShape:
    model: str
    batch: int
    image: int
    classes: int


# Full size: a ~0.5 B-parameter decoder (8 of Llama-1B's layers, its width), batch 4 x 1024
# tokens; AdamW's fp32 states take ~9 GB. The tiny shapes run in seconds on a laptop CPU.
LLAMA = {
    "full": LlamaShape(8, 2048, 16, 16, 5632, 32000, 4, 1024),
    "tiny": LlamaShape(2, 64, 4, 4, 128, 256, 2, 32),
}
VISION = {
    "full": VisionShape("resnet50", 64, 224, 1000),
    "tiny": VisionShape("resnet18", 2, 32, 10),  # bf16 convolutions are slow on most CPUs
}


def llama(shape: LlamaShape, device: torch.device) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=shape.seq,
        attn_implementation="sdpa",
        use_cache=False,
    )
    with device:  # weights initialised where they live: no host copy of 0.5 B parameters
        return LlamaForCausalLM(config)


def tokens(shape: LlamaShape, device: torch.device) -> torch.Tensor:
    return torch.randint(0, shape.vocab, (shape.batch, shape.seq), device=device)


def profiled(step, device: torch.device, path: Path, with_modules: bool = False) -> float:
    """Run `step` WAIT + WARMUP + ACTIVE times under the profiler and write the trace to `path`
    (gzipped: the name ends in .gz); `with_modules`: with_stack=True, and of the Python frames
    only the nn.Module calls kept. Returns the median wall time of the recorded steps, ms."""
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    times = []
    with profile(
        activities=activities,
        schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE),
        record_shapes=True,
        with_stack=with_modules,
    ) as prof:
        for i in range(WAIT + WARMUP + ACTIVE):
            start = time.perf_counter()
            step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            if i >= WAIT + WARMUP:
                times.append((time.perf_counter() - start) * 1e3)
            prof.step()
    partial = path.with_name(f".{path.name}.partial.json.gz")
    prof.export_chrome_trace(str(partial))
    if with_modules:
        modules_only(partial)
    os.replace(partial, path)
    return sorted(times)[len(times) // 2]


def modules_only(path: Path) -> None:
    """Drop the Python frames with_stack recorded, keeping the nn.Module calls among them."""
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    data["traceEvents"] = [
        e
        for e in data["traceEvents"]
        if e.get("cat") != "python_function" or str(e.get("name")).startswith("nn.Module: ")
    ]
    with gzip.open(path, "wt") as f:
        json.dump(data, f)


def llama_train(shape: LlamaShape, device: torch.device, dtype: torch.dtype):
    model = llama(shape, device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = tokens(shape, device)

    def step():
        with torch.autocast(device.type, dtype=dtype):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def llama_infer(shape: LlamaShape, device: torch.device, dtype: torch.dtype, mode: str | None):
    model = llama(shape, device).to(dtype).eval()
    torch._dynamo.reset()  # each recording compiles from scratch, not against the last one's
    compiled = torch.compile(model, mode=mode)
    ids = tokens(shape, device)

    @torch.inference_mode()
    def step():
        with record_function("prefill"):
            return compiled(input_ids=ids).logits

    for _ in range(3):  # compile, then (reduce-overhead) warm up and record the CUDA graph
        step()
    return step


def timm_train(shape: VisionShape, device: torch.device, dtype: torch.dtype):
    import timm

    with device:
        model = timm.create_model(shape.model, pretrained=False, num_classes=shape.classes)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    images = torch.randn(shape.batch, 3, shape.image, shape.image, device=device)
    labels = torch.randint(0, shape.classes, (shape.batch,), device=device)

    def step():
        with torch.autocast(device.type, dtype=dtype):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def versions() -> dict:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("transformers", "timm"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = None
    out["cuda"] = torch.version.cuda
    return out


def device_facts(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"type": "cpu", "name": platform.processor() or platform.machine()}
    props = torch.cuda.get_device_properties(device)
    return {
        "type": "cuda",
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "memory_gib": round(props.total_memory / 2**30, 1),
        "sms": props.multi_processor_count,
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog="tools/dev/reader_validation/record_model_traces.py", description=__doc__)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("OUT", "traces/models")),
        help="folder for the traces and provenance.json (default: $OUT, else traces/models)",
    )
    parser.add_argument("--tiny", action="store_true", help="tiny configs: seconds on a CPU")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument(
        "--with-modules",
        action="store_true",
        help="with_stack=True: the traces carry nn.Module calls (names end in _modules)",
    )
    parser.add_argument(
        "--only",
        default=",".join(RECORDINGS),
        help=f"comma-separated subset of {', '.join(RECORDINGS)} (default: all)",
    )
    args = parser.parse_args(argv)
    args.only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(args.only) - set(RECORDINGS))
    if unknown or not args.only:
        parser.error(f"--only: unknown {', '.join(unknown) or '(empty)'}; know {RECORDINGS}")
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    if args.device == "cpu" and not args.tiny:
        parser.error("the full-size models need a GPU; add --tiny to record tiny ones on a CPU")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out}: exists and is not a folder")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    device = torch.device(args.device)
    size = "tiny" if args.tiny else "full"
    lm, vision = LLAMA[size], VISION[size]
    dtype = torch.bfloat16
    torch.manual_seed(0)
    args.out.mkdir(parents=True, exist_ok=True)
    tag = f"l{lm.layers}_h{lm.hidden}_b{lm.batch}_s{lm.seq}_bf16"
    plans = {
        "llama_train": (f"llama_train_{tag}", asdict(lm), lambda: llama_train(lm, device, dtype)),
        "llama_infer_compile": (
            f"llama_infer_{tag}_compile",
            asdict(lm),
            lambda: llama_infer(lm, device, dtype, None),
        ),
        "llama_infer_cudagraphs": (
            f"llama_infer_{tag}_cudagraphs",
            asdict(lm),
            lambda: llama_infer(lm, device, dtype, "reduce-overhead"),
        ),
        "timm_train": (
            f"{vision.model}_train_b{vision.batch}_i{vision.image}_bf16",
            asdict(vision),
            lambda: timm_train(vision, device, dtype),
        ),
    }
    records, failed = [], []
    for name in args.only:
        stem, shape, build = plans[name]
        if args.with_modules:
            stem += "_modules"
        if device.type == "cpu":
            stem += "_cpu"
        path = args.out / f"{stem}.json.gz"
        start = time.perf_counter()
        try:  # one GPU run records all four: a failing one must not cost the others
            step = build()
            setup_s = time.perf_counter() - start
            step_ms = profiled(step, device, path, args.with_modules)
        except Exception as err:  # noqa: BLE001 - reported and recorded, then on to the next
            failed.append({"recording": name, "error": one_line(err, 500)})
            print(f"{name}: FAILED: {one_line(err, 500)}", file=sys.stderr, flush=True)
            continue
        finally:
            step = None
            if device.type == "cuda":
                torch.cuda.empty_cache()
        record = {
            "recording": name,
            "file": path.name,
            "bytes": path.stat().st_size,
            "shape": shape,
            "dtype": "bf16",
            "schedule": {"wait": WAIT, "warmup": WARMUP, "active": ACTIVE},
            "record_shapes": True,
            "with_stack": args.with_modules,
            "python_frames": "nn.Module calls only (the other frames dropped after export)"
            if args.with_modules
            else None,
            "setup_s": round(setup_s, 1),
            "median_profiled_step_ms": round(step_ms, 2),
        }
        records.append(record)
        print(
            f"{path}: {record['bytes'] / 1e6:.2f} MB, setup {setup_s:.1f} s, "
            f"profiled step {step_ms:.1f} ms",
            flush=True,
        )
    provenance = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": device_facts(device),
        "versions": versions(),
        "command": " ".join([COMMAND, *(argv or sys.argv[1:])]),
        "traces": records,
        "failed": failed,
    }
    (args.out / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
