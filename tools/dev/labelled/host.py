"""Workloads whose planted cause is on the host: a data loader augmenting on the main thread, a
sync per layer, an optimizer's for-loop, launches of many small kernels, Python in an annotated
region, a logits processor inside transformers' `generate`, recompilation every step."""

from __future__ import annotations

import collections
import itertools
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function
from torch.utils.data import DataLoader, Dataset

from .common import Ctx, Plan, forever, mlp


def train_step(model, optimizer, images, labels, device, autocast: bool = True) -> None:
    """One training step with the annotations a user writes: forward, backward, optimizer."""
    with record_function("forward"):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            loss = F.cross_entropy(model(images), labels)
    with record_function("backward"):
        loss.backward()
    with record_function("optimizer"):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def small_cnn(device, classes: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, classes),
    ).to(device)


BLUR = torch.ones(3, 1, 7, 7) / 49


def augment(image: torch.Tensor, i: int) -> torch.Tensor:
    """A random crop resized back, a flip, a 7x7 blur, normalization: torch ops on the CPU."""
    size = image.shape[-1]
    g = torch.Generator().manual_seed(i)
    x = image.float().div(255)
    top, left = torch.randint(0, size // 4, (2,), generator=g).tolist()
    crop = x[:, top : top + 3 * size // 4, left : left + 3 * size // 4]
    x = F.interpolate(crop[None], size=(size, size), mode="bilinear", align_corners=False)[0]
    if i % 2:
        x = x.flip(-1)
    x = F.conv2d(x[None], BLUR, padding=3, groups=3)[0]
    return (x - 0.5) / 0.25


class Images(Dataset):
    """Stored uint8 images, each returned through `transform` (None: as stored)."""

    def __init__(self, images: torch.Tensor, transform=None):
        self.images, self.transform = images, transform

    def __len__(self) -> int:
        return 10**7

    def __getitem__(self, i: int):
        image = self.images[i % len(self.images)]
        out = self.transform(image, i) if self.transform else image
        return out, i % 10


def loader_main_thread(ctx: Ctx) -> Plan:
    size, batch = ctx.size(160, 32), ctx.size(16, 4)
    raw = torch.randint(0, 256, (64, 3, size, size), dtype=torch.uint8)
    ready = torch.stack([augment(raw[i], i) for i in range(len(raw))])  # augmented once
    model = small_cnn(ctx.device)
    opt = torch.optim.AdamW(model.parameters(), fused=ctx.cuda)

    def run(loader):
        batches = forever(loader)

        def step():
            images, labels = next(batches)
            images = images.to(ctx.device, non_blocking=True)
            labels = labels.to(ctx.device, non_blocking=True)
            train_step(model, opt, images, labels, ctx.device)

        return step

    planted = DataLoader(Images(raw, augment), batch_size=batch, num_workers=0)
    twin = DataLoader(Images(ready.float()), batch_size=batch, num_workers=0)
    return Plan(
        "data loader",
        ["enumerate(DataLoader)", "DataLoader"],
        run(planted),
        run(twin),
        "a DataLoader (num_workers=0) augmenting each image on the main thread (crop, resize, "
        "flip, 7x7 blur) vs the same images augmented once beforehand",
    )


def _v2_transform(size: int):
    from torchvision.transforms import v2

    return v2.Compose(
        [
            v2.RandomResizedCrop(size, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(0.3, 0.3, 0.3),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize([0.5] * 3, [0.25] * 3),
        ]
    )


def loader_torchvision(ctx: Ctx) -> Plan:
    size, batch = ctx.size(128, 32), ctx.size(16, 4)
    raw = torch.randint(0, 256, (64, 3, size + size // 4, size + size // 4), dtype=torch.uint8)
    extra = {}
    try:
        import torchvision

        model = torchvision.models.resnet18(num_classes=10).to(ctx.device)
        model = model.to(memory_format=torch.channels_last)
        transform = _v2_transform(size)
        extra["model"] = f"torchvision {torchvision.__version__} resnet18"

        def tf(image, i):
            return transform(image)
    except ImportError:  # --quick on a machine without torchvision: the code path only
        model, tf = small_cnn(ctx.device), augment
        extra["model"] = "small CNN (torchvision not installed)"
    opt = torch.optim.AdamW(model.parameters(), fused=ctx.cuda)
    workers = ctx.size(8, 2)

    def run(loader):
        batches = forever(loader)

        def step():
            images, labels = next(batches)
            images = images.to(ctx.device, non_blocking=True)
            labels = labels.to(ctx.device, non_blocking=True)
            train_step(model, opt, images, labels, ctx.device)

        return step

    planted = DataLoader(Images(raw, tf), batch_size=batch, num_workers=0)
    twin = DataLoader(
        Images(raw, tf),
        batch_size=batch,
        num_workers=workers,
        persistent_workers=True,
        prefetch_factor=4,
    )
    return Plan(
        "data loader",
        ["enumerate(DataLoader)", "DataLoader"],
        run(planted),
        run(twin),
        "torchvision's resnet18 fed by transforms.v2 (RandomResizedCrop, flip, ColorJitter) "
        f"on the main thread (num_workers=0) vs {workers} workers",
        active=2,
        extra=extra,
    )


def _layers(ctx: Ctx, width: int, depth: int) -> list[nn.Module]:
    return [nn.Linear(width, width).to(ctx.device, ctx.half) for _ in range(depth)]


def item_per_layer(ctx: Ctx) -> Plan:
    rows, width, depth = ctx.size(4096, 64), ctx.size(4096, 64), ctx.size(12, 4)
    layers = _layers(ctx, width, depth)
    x = torch.randn(rows, width, device=ctx.device, dtype=ctx.half)

    @torch.no_grad()
    def planted():
        with record_function("forward"):
            h = x
            for layer in layers:
                h = torch.relu(layer(h))
                if torch.isnan(h).any():  # a NaN check per layer: .item() in disguise
                    raise FloatingPointError("nan")
        return h

    @torch.no_grad()
    def twin():
        with record_function("forward"):
            h, bad = x, torch.zeros((), dtype=torch.bool, device=ctx.device)
            for layer in layers:
                h = torch.relu(layer(h))
                bad |= torch.isnan(h).any()  # the same check, kept on the GPU
            if bad:  # one sync per step
                raise FloatingPointError("nan")
        return h

    return Plan(
        "sync",
        ["aten::is_nonzero", "aten::item", "aten::_local_scalar_dense", "aten::any"],
        planted,
        twin,
        f"`if torch.isnan(h).any()` after each of {depth} bf16 Linear layers (a host sync per "
        "layer) vs the same check accumulated on the GPU and read once per step",
    )


def nonzero_sync(ctx: Ctx) -> Plan:
    rows, width, depth = ctx.size(4096, 64), ctx.size(4096, 64), ctx.size(12, 4)
    layers = _layers(ctx, width, depth)
    x = torch.randn(rows, width, device=ctx.device, dtype=ctx.half)
    every = torch.arange(rows, device=ctx.device)

    def static(mask):  # the rows to keep without a sync (a fixed index where unsupported)
        try:
            return torch.nonzero_static(mask, size=rows).squeeze(1)
        except (RuntimeError, NotImplementedError, AttributeError):
            return every

    @torch.no_grad()
    def planted():
        with record_function("forward"):
            h = x
            for layer in layers:
                h = torch.relu(layer(h))
                keep = torch.nonzero(h[:, 0] == h[:, 0]).squeeze(1)  # rows without a NaN
                h = h.index_select(0, keep)
        return h

    @torch.no_grad()
    def twin():
        with record_function("forward"):
            h = x
            for layer in layers:
                h = torch.relu(layer(h))
                h = h.index_select(0, static(h[:, 0] == h[:, 0]))
        return h

    @torch.no_grad()
    def fixed():
        with record_function("forward"):
            h = x
            for layer in layers:
                h = torch.relu(layer(h)).index_select(0, every)
        return h

    return Plan(
        "sync",
        ["aten::nonzero"],
        planted,
        twin,
        f"torch.nonzero picking the rows to keep after each of {depth} layers (a data-dependent "
        "shape: a host sync per layer) vs torch.nonzero_static(size=rows): the same work, no sync",
        alternatives={"fixed_index": fixed},
    )


def optimizer_forloop(ctx: Ctx) -> Plan:
    count, width = ctx.size(128, 16), ctx.size(2048, 64)
    small = [nn.Parameter(torch.randn(64, 64, device=ctx.device)) for _ in range(count)]
    big = nn.Linear(width, width).to(ctx.device)
    x = torch.randn(width, width, device=ctx.device)
    params = [*big.parameters(), *small]

    def run(optimizer):
        def step():
            with record_function("forward"):
                loss = big(x).square().mean() + torch.stack(small).square().mean()
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

        return step

    return Plan(
        "optimizer",
        ["Optimizer.step#AdamW.step", "optimizer"],
        run(torch.optim.AdamW(params, foreach=False)),
        run(torch.optim.AdamW(params, fused=True)),
        f"AdamW(foreach=False) over {count + 2} parameter tensors ({count} of 64x64) vs "
        "AdamW(fused=True)",
        active=2,
    )


def optimizer_timm(ctx: Ctx) -> Plan:
    batch, size = ctx.size(16, 2), ctx.size(64, 32)
    extra = {}
    try:
        import timm

        model = timm.create_model("resnet18", pretrained=False, num_classes=10).to(ctx.device)
        extra["model"] = f"timm {timm.__version__} resnet18"
    except ImportError:
        model = small_cnn(ctx.device)
        extra["model"] = "small CNN (timm not installed)"
    images = torch.randn(batch, 3, size, size, device=ctx.device)
    labels = torch.randint(0, 10, (batch,), device=ctx.device)
    params = list(model.parameters())
    extra["parameter_tensors"] = len(params)

    def run(optimizer):
        return lambda: train_step(model, optimizer, images, labels, ctx.device, autocast=False)

    return Plan(
        "optimizer",
        ["Optimizer.step#AdamW.step", "optimizer"],
        run(torch.optim.AdamW(params, foreach=False)),
        run(torch.optim.AdamW(params, fused=True)),
        f"{extra['model']} (fp32, batch {batch} at {size}px) with AdamW(foreach=False) over its "
        f"{len(params)} parameter tensors vs AdamW(fused=True)",
        active=2,
        extra=extra,
    )


def launch_bound(ctx: Ctx) -> Plan:
    depth, width, rows = ctx.size(32, 4), 512, 8
    blocks = [
        nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.GELU()) for _ in range(depth)
    ]
    model = nn.Sequential(*blocks).to(ctx.device, ctx.half).eval()
    x = torch.randn(rows, width, device=ctx.device, dtype=ctx.half)

    @torch.no_grad()
    def planted():
        with record_function("forward"):
            return model(x)

    twin, how = planted, "the same eager forward (no CUDA graphs on a CPU)"
    if ctx.cuda:
        static = x.clone()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.no_grad():
            for _ in range(3):
                model(static)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph), torch.no_grad():
            model(static)

        def twin():
            with record_function("forward"):
                graph.replay()

        how = "the same forward captured once as a CUDA graph and replayed"
    return Plan(
        "launch overhead",
        ["forward"],
        planted,
        twin,
        f"{depth} blocks of Linear({width}) + LayerNorm + GELU at {rows} rows, eager bf16 "
        f"inference ({depth * 3} small kernels a step) vs {how}",
    )


def python_in_region(ctx: Ctx) -> Plan:
    width, rows, count = ctx.size(2048, 64), ctx.size(1024, 16), ctx.size(30000, 3000)
    model = mlp([width] * 5, torch.float32, ctx.device)
    opt = torch.optim.AdamW(model.parameters(), fused=ctx.cuda)
    x = torch.randn(rows, width, device=ctx.device)
    labels = torch.randint(0, width, (rows,), device=ctx.device)

    def log_metrics():
        with record_function("log_metrics"):  # the user's own Python, annotated
            histogram = collections.Counter()
            for i in range(count):
                histogram[int(math.sin(i) * 10)] += 1
        return histogram

    def twin():
        train_step(model, opt, x, labels, ctx.device)

    def planted():
        twin()
        log_metrics()

    return Plan(
        "user code",
        ["log_metrics"],
        planted,
        twin,
        f"a training step followed by a pure-Python histogram over {count} values inside "
        "record_function('log_metrics') vs the step alone",
    )


def generate_processor(ctx: Ctx) -> Plan:
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessor, LogitsProcessorList

    vocab, new, rows = ctx.size(8192, 256), ctx.size(8, 4), ctx.size(4, 2)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=ctx.size(512, 64),
        intermediate_size=ctx.size(1408, 128),
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=8,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=None,
        pad_token_id=0,
    )
    with ctx.device:
        model = LlamaForCausalLM(config).to(ctx.half).eval()
    prompt = torch.randint(3, vocab, (rows, 32), device=ctx.device)

    class BlockWords(LogitsProcessor):
        """A banned-word filter written in Python: the ids to the host, a loop over the
        vocabulary per sequence (the user's code, annotated)."""

        def __call__(self, input_ids, scores):
            with record_function("block_words"):
                banned = []
                for row, seq in enumerate(input_ids.tolist()):
                    seen = set(seq)
                    step = len(seq)
                    banned += [
                        (row, t) for t in range(vocab) if (t * 31 + step) % 7 == 3 and t not in seen
                    ]
                rows = torch.tensor([b[0] for b in banned], device=scores.device)
                cols = torch.tensor([b[1] for b in banned], device=scores.device)
                scores[rows, cols] = -math.inf
            return scores

    def run(processors):
        @torch.no_grad()
        def step():
            with record_function("generate"):
                return model.generate(
                    prompt,
                    max_new_tokens=new,
                    do_sample=False,
                    logits_processor=processors,
                    pad_token_id=0,
                )

        return step

    return Plan(
        "user code",
        ["block_words"],
        run(LogitsProcessorList([BlockWords()])),
        run(LogitsProcessorList()),
        f"transformers {transformers.__version__} LlamaForCausalLM (random weights from a "
        f"config) generating {new} tokens for {rows} prompts with a Python banned-word "
        "LogitsProcessor (annotated 'block_words') vs without it",
        active=2,
        block=2,
        blocks=5,
    )


def _no_recompile_limit() -> None:
    import torch._dynamo.config as dynamo

    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):  # fmt: skip
        if hasattr(dynamo, name):
            setattr(dynamo, name, 100_000)


def recompile_shape(ctx: Ctx) -> Plan:
    torch._dynamo.reset()
    _no_recompile_limit()
    width = ctx.size(256, 32)
    model = mlp([width, 4 * width, width], ctx.half, ctx.device)
    compiled = torch.compile(model, dynamic=False)
    sizes = itertools.count(65)
    fixed = torch.randn(64, width, device=ctx.device, dtype=ctx.half)

    @torch.no_grad()
    def planted():
        x = torch.randn(next(sizes), width, device=ctx.device, dtype=ctx.half)
        with record_function("forward"):
            return compiled(x)

    @torch.no_grad()
    def twin():
        with record_function("forward"):
            return compiled(fixed)

    return Plan(
        "recompilation",
        ["Torch-Compiled Region", "torch.compile", "forward"],
        planted,
        twin,
        "torch.compile(dynamic=False) of a small MLP fed a batch one row larger every step "
        "(a recompile per step) vs the same compiled model fed one shape",
        active=2,  # each recompile records its autotuning too: a large trace per step
        block=1,
        blocks=3,
        warm=1,
        extra={"compiled": True},
    )


class Scaled(nn.Module):
    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x, scale: float):
        return self.inner(x) * scale


def recompile_scalar(ctx: Ctx) -> Plan:
    torch._dynamo.reset()
    _no_recompile_limit()
    width = ctx.size(256, 32)
    model = Scaled(mlp([width, 4 * width, width], ctx.half, ctx.device))
    compiled = torch.compile(model, dynamic=False)
    steps = itertools.count(1)
    x = torch.randn(64, width, device=ctx.device, dtype=ctx.half)

    @torch.no_grad()
    def planted():
        with record_function("forward"):
            return compiled(x, 1.0 + 1e-3 * next(steps))  # a Python float: a guard

    @torch.no_grad()
    def twin():
        with record_function("forward"):
            return compiled(x, 1.0)

    return Plan(
        "recompilation",
        ["Torch-Compiled Region", "torch.compile", "forward"],
        planted,
        twin,
        "torch.compile(dynamic=False) of a small MLP given a Python float that changes every "
        "step (a recompile per step) vs a constant one",
        block=1,
        blocks=3,
        warm=1,
        extra={"compiled": True},
    )


WORKLOADS = {
    "loader_main_thread": loader_main_thread,
    "loader_torchvision": loader_torchvision,
    "item_per_layer": item_per_layer,
    "nonzero_sync": nonzero_sync,
    "optimizer_forloop": optimizer_forloop,
    "optimizer_timm": optimizer_timm,
    "launch_bound": launch_bound,
    "python_in_region": python_in_region,
    "generate_processor": generate_processor,
}
COMPILED = {"recompile_shape": recompile_shape, "recompile_scalar": recompile_scalar}
