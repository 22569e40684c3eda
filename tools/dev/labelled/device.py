"""Workloads whose planted cause is on the GPU, or in its memory: GEMMs all in fp32, GEMM
dimensions off the 16-byte alignment, elementwise chains written out op by op, gradient
checkpointing's recomputation, autocast's casts, and tensors kept alive from step to step."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function
from torch.utils.checkpoint import checkpoint

from .common import Ctx, Plan, mlp


def _precision(value: str) -> None:
    torch.set_float32_matmul_precision(value)  # "highest": fp32 on CUDA cores; "high": TF32


def fp32_mlp(ctx: Ctx) -> Plan:
    rows, width, depth = ctx.size(4096, 64), ctx.size(4096, 64), 4
    with ctx.device:
        model = mlp([width] * (depth + 1), torch.float32, ctx.device)
        x = torch.randn(rows, width)

    def run(precision):
        @torch.no_grad()
        def step():
            _precision(precision)
            with record_function("forward"):
                return model(x)

        return step

    return Plan(
        "fp32 GEMMs",
        ["aten::addmm", "aten::linear", "aten::mm"],
        run("highest"),
        run("high"),
        f"{depth} fp32 Linear({width}) layers at {rows} rows, TF32 off (GEMMs on CUDA cores) vs "
        "torch.set_float32_matmul_precision('high') (TF32)",
    )


def fp32_vit(ctx: Ctx) -> Plan:
    # Sized so that both the fp32 step and its TF32 twin keep the GPU the slower side, also
    # under the profiler (whose host overhead would otherwise hide the GEMMs' time).
    batch, size = ctx.size(192, 2), ctx.size(224, 32)
    extra = {}
    try:
        import timm

        with ctx.device:
            model = timm.create_model(
                "vit_base_patch16_224", pretrained=False, img_size=size, depth=4, num_classes=100
            )
        extra["model"] = f"timm {timm.__version__} vit_base_patch16_224, depth 4, {size}px"
    except ImportError:
        model = mlp([3 * size * size, 256, 100], torch.float32, ctx.device)
        model = nn.Sequential(nn.Flatten(), model)
        extra["model"] = "an MLP (timm not installed)"
    model = model.to(ctx.device).train()
    images = torch.randn(batch, 3, size, size, device=ctx.device)
    labels = torch.randint(0, 100, (batch,), device=ctx.device)

    def run(precision):
        def step():
            _precision(precision)
            with record_function("forward"):
                loss = F.cross_entropy(model(images), labels)
            with record_function("backward"):
                loss.backward()
            model.zero_grad(set_to_none=True)

        return step

    return Plan(
        "fp32 GEMMs",
        ["aten::addmm", "aten::linear", "aten::mm"],
        run("highest"),
        run("high"),
        f"{extra['model']} trained in fp32 at batch {batch} (forward and backward), TF32 off vs "
        "TF32 on",
        active=2,
        extra=extra,
    )


class TinyLM(nn.Module):
    def __init__(self, vocab: int, width: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
            for _ in range(2)
        )
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids):
        h = self.embed(ids)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


def unaligned_vocab(ctx: Ctx) -> Plan:
    tokens, width = ctx.size(8192, 64), ctx.size(2048, 64)
    vocab, padded = ctx.size(50257, 257), ctx.size(50304, 320)

    def run(v):
        with ctx.device:
            model = TinyLM(v, width).to(ctx.half)
        ids = torch.randint(0, vocab, (tokens,), device=ctx.device)

        def step():
            with record_function("forward"):
                loss = F.cross_entropy(model(ids), ids)
            with record_function("backward"):
                loss.backward()
            model.zero_grad(set_to_none=True)

        return step

    return Plan(
        "unaligned GEMM",
        ["aten::mm", "aten::linear", "aten::matmul"],
        run(vocab),
        run(padded),
        f"a small bf16 LM (width {width}, {tokens} tokens) trained with a vocabulary of {vocab} "
        f"(the head's N, and K of its weight gradient, not a multiple of 8) vs {padded}",
    )


def unaligned_mlp(ctx: Ctx) -> Plan:
    rows, width = ctx.size(8192, 64), ctx.size(4096, 64)
    odd = width + 3

    def run(hidden):
        with ctx.device:
            model = mlp([width, width, hidden, width, width], ctx.half, ctx.device)
        x = torch.randn(rows, width, device=ctx.device, dtype=ctx.half)

        @torch.no_grad()
        def step():
            with record_function("forward"):
                return model(x)

        return step

    return Plan(
        "unaligned GEMM",
        ["aten::addmm", "aten::linear", "aten::mm"],
        run(odd),
        run(width),
        f"a bf16 MLP {width}-{width}-{odd}-{width}-{width} at {rows} rows (N, then K = {odd}: "
        f"not a multiple of 8) vs {width} throughout",
    )


def bert_vocab(ctx: Ctx) -> Plan:
    import transformers
    from transformers import BertConfig, BertForMaskedLM

    batch, seq = ctx.size(64, 2), ctx.size(512, 32)  # the GPU the slower side, profiled too
    vocab, padded = ctx.size(30522, 258), ctx.size(30528, 264)

    def run(v):
        config = BertConfig(
            vocab_size=v,
            hidden_size=ctx.size(768, 64),
            num_hidden_layers=2,
            num_attention_heads=ctx.size(12, 2),
            intermediate_size=ctx.size(3072, 128),
            max_position_embeddings=512,
            attn_implementation="sdpa",
        )
        with ctx.device:
            model = BertForMaskedLM(config).to(ctx.half).train()
        ids = torch.randint(0, vocab, (batch, seq), device=ctx.device)

        def step():
            with record_function("forward"):
                loss = model(input_ids=ids, labels=ids).loss
            with record_function("backward"):
                loss.backward()
            model.zero_grad(set_to_none=True)

        return step

    return Plan(
        "unaligned GEMM",
        ["aten::linear", "aten::addmm", "aten::mm", "aten::matmul"],
        run(vocab),
        run(padded),
        f"transformers {transformers.__version__} BertForMaskedLM (2 layers, random weights, "
        f"bf16) trained on {batch}x{seq} tokens with BERT's vocabulary {vocab} vs {padded}",
        active=2,
    )


def gelu_tanh(h: torch.Tensor) -> torch.Tensor:
    """GPT-2's GELU written out: eight elementwise kernels."""
    return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3))))


def gelu_written_out(ctx: Ctx) -> Plan:
    rows, width, hidden = ctx.size(16384, 64), ctx.size(1024, 32), ctx.size(8192, 128)
    with ctx.device:
        ups = [nn.Linear(width, hidden).to(ctx.half) for _ in range(2)]
        downs = [nn.Linear(hidden, width).to(ctx.half) for _ in range(2)]
    x = torch.randn(rows, width, device=ctx.device, dtype=ctx.half)

    def run(act):
        @torch.no_grad()
        def step():
            with record_function("forward"):
                h = x
                for up, down in zip(ups, downs, strict=True):
                    h = down(act(up(h)))
            return h

        return step

    return Plan(
        "unfused elementwise",
        ["aten::mul", "aten::add", "aten::tanh", "aten::pow"],
        run(gelu_tanh),
        run(lambda h: F.gelu(h, approximate="tanh")),
        f"two MLP blocks {width}-{hidden}-{width} at {rows} rows (bf16) with the tanh GELU "
        "written out (8 elementwise kernels) vs F.gelu(approximate='tanh') (one)",
    )


def layer_norm(h: torch.Tensor, weight, bias, eps: float = 1e-5) -> torch.Tensor:
    mean = h.mean(-1, keepdim=True)
    centred = h - mean
    var = centred.pow(2).mean(-1, keepdim=True)
    return centred * torch.rsqrt(var + eps) * weight + bias


def layernorm_written_out(ctx: Ctx) -> Plan:
    rows, width, depth = ctx.size(32768, 64), ctx.size(2048, 64), 3
    with ctx.device:
        linears = [nn.Linear(width, width).to(ctx.half) for _ in range(depth)]
        norms = [nn.LayerNorm(width).to(ctx.half) for _ in range(depth)]
    x = torch.randn(rows, width, device=ctx.device, dtype=ctx.half)

    def run(written):
        @torch.no_grad()
        def step():
            with record_function("forward"):
                h = x
                for linear, norm in zip(linears, norms, strict=True):
                    if written:
                        h = layer_norm(h, norm.weight, norm.bias)
                    else:
                        h = norm(h)
                    h = linear(h)
            return h

        return step

    return Plan(
        "unfused elementwise",
        ["aten::mul", "aten::sub", "aten::mean", "aten::add", "aten::pow", "aten::rsqrt"],
        run(True),
        run(False),
        f"{depth} blocks of LayerNorm + Linear({width}) at {rows} rows (bf16), the LayerNorm "
        "written out (mean, sub, pow, mean, add, rsqrt, mul, mul, add) vs nn.LayerNorm "
        "(one kernel)",
    )


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, h):
        return self.down(F.gelu(self.up(h)))


def checkpoint_mlp(ctx: Ctx) -> Plan:
    rows, width, depth = ctx.size(8192, 64), ctx.size(2048, 64), ctx.size(8, 2)
    with ctx.device:
        blocks = [Block(width).to(ctx.half) for _ in range(depth)]
    x = torch.randn(rows, width, device=ctx.device, dtype=ctx.half)

    def run(recompute):
        def step():
            with record_function("forward"):
                h = x
                for block in blocks:
                    h = h + (checkpoint(block, h, use_reentrant=False) if recompute else block(h))
                loss = h.float().square().mean()
            with record_function("backward"):
                loss.backward()
            for block in blocks:
                block.zero_grad(set_to_none=True)

        return step

    return Plan(
        "recompute",
        ["aten::linear", "aten::addmm", "aten::gelu"],
        run(True),
        run(False),
        f"{depth} MLP blocks {width}-{4 * width}-{width} at {rows} rows (bf16) trained with "
        "torch.utils.checkpoint(use_reentrant=False) around each block vs without",
    )


def checkpoint_gpt2(ctx: Ctx) -> Plan:
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel

    batch, seq = ctx.size(16, 2), ctx.size(1024, 32)
    config = GPT2Config(
        n_layer=2,
        n_embd=ctx.size(1024, 64),
        n_head=ctx.size(16, 2),
        vocab_size=ctx.size(8192, 256),
        n_positions=1024,
        # transformers' fused tanh GELU: GPT-2's own gelu_new is eight elementwise kernels, a
        # second cause beside the planted one
        activation_function="gelu_pytorch_tanh",
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation="sdpa",
    )
    ids = torch.randint(0, config.vocab_size, (batch, seq), device=ctx.device)

    def run(recompute):
        with ctx.device:
            model = GPT2LMHeadModel(config).to(ctx.half).train()
        if recompute:
            model.gradient_checkpointing_enable()

        def step():
            with record_function("forward"):
                loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            with record_function("backward"):
                loss.backward()
            model.zero_grad(set_to_none=True)

        return step

    return Plan(
        "recompute",
        ["aten::addmm", "aten::linear", "aten::mm", "aten::matmul"],
        run(True),
        run(False),
        f"transformers {transformers.__version__} GPT2LMHeadModel ({config.n_layer} layers, "
        f"width {config.n_embd}, gelu_pytorch_tanh, random weights, bf16) trained on "
        f"{batch}x{seq} tokens with "
        "gradient_checkpointing_enable() vs without",
        active=2,
    )


def autocast_infer(ctx: Ctx) -> Plan:
    rows, width, depth = ctx.size(256, 16), ctx.size(8192, 64), ctx.size(12, 3)
    with ctx.device:
        layers = [nn.Linear(width, width) for _ in range(depth)]
        halves = [nn.Linear(width, width).to(ctx.half) for _ in range(depth)]
    x = torch.randn(rows, width, device=ctx.device)

    @torch.no_grad()
    def planted():
        with record_function("forward"), torch.autocast(ctx.device.type, dtype=ctx.half):
            h = x
            for layer in layers:
                h = layer(h)
        return h

    @torch.no_grad()
    def twin():
        with record_function("forward"):
            h = x.to(ctx.half)
            for layer in halves:
                h = layer(h)
        return h

    return Plan(
        "autocast casts",
        ["aten::_to_copy", "aten::to", "aten::copy_"],
        planted,
        twin,
        f"{depth} fp32 Linear({width}) layers at {rows} rows under bf16 autocast (every weight "
        "cast to bf16 on every call) vs the same layers stored in bf16",
    )


def autocast_train(ctx: Ctx) -> Plan:
    rows, width, depth = ctx.size(256, 16), ctx.size(8192, 64), ctx.size(8, 2)
    with ctx.device:
        layers = [nn.Linear(width, width) for _ in range(depth)]
        halves = [nn.Linear(width, width).to(ctx.half) for _ in range(depth)]
    x = torch.randn(rows, width, device=ctx.device)

    def run(stack, autocast):
        def step():
            with record_function("forward"):
                with torch.autocast(ctx.device.type, dtype=ctx.half, enabled=autocast):
                    h = x if autocast else x.to(ctx.half)
                    for layer in stack:
                        h = layer(h)
                loss = h.float().square().mean()
            with record_function("backward"):
                loss.backward()
            for layer in stack:
                layer.zero_grad(set_to_none=True)

        return step

    return Plan(
        "autocast casts",
        ["aten::_to_copy", "aten::to", "aten::copy_", "ToCopyBackward0"],
        run(layers, True),
        run(halves, False),
        f"{depth} fp32 Linear({width}) layers at {rows} rows trained under bf16 autocast (the "
        "weights cast in the forward, their gradients cast back in the backward) vs bf16 layers",
    )


def memory_list(ctx: Ctx) -> Plan:
    rows, width = ctx.size(2048, 16), ctx.size(4096, 64)
    model = mlp([width] * 4, ctx.half, ctx.device)
    x = torch.randn(rows, width, device=ctx.device, dtype=ctx.half)
    kept: list[torch.Tensor] = []
    last: list[torch.Tensor] = []

    def run(keep: list, forget: bool):
        @torch.no_grad()
        def step():
            with record_function("forward"):
                logits = model(x)
            with record_function("predictions"):
                if forget:
                    keep.clear()
                keep.append(logits.softmax(-1))  # kept for the epoch's metrics

        return step

    return Plan(
        "memory growth",
        ["aten::softmax", "aten::_softmax"],
        run(kept, False),
        run(last, True),
        f"each step's softmax [{rows}, {width}] bf16 appended to a list (kept alive) vs "
        "only the last one kept",
        memory=True,
    )


def memory_cat(ctx: Ctx) -> Plan:
    rows, width, classes = ctx.size(2048, 16), ctx.size(2048, 64), ctx.size(1024, 32)
    model = mlp([width, width, classes], ctx.half, ctx.device)
    x = torch.randn(rows, width, device=ctx.device, dtype=ctx.half)
    state = {"all": torch.empty(0, classes, device=ctx.device), "last": None}

    def run(grow: bool):
        @torch.no_grad()
        def step():
            with record_function("forward"):
                logits = model(x).float()
            with record_function("predictions"):
                if grow:
                    state["all"] = torch.cat([state["all"], logits])  # every step's, so far
                else:
                    state["last"] = logits

        return step

    return Plan(
        "memory growth",
        ["aten::cat"],
        run(True),
        run(False),
        f"each step's fp32 logits [{rows}, {classes}] concatenated onto all the earlier ones "
        "(torch.cat: the whole history kept and copied) vs only the last kept",
        memory=True,
    )


WORKLOADS = {
    "fp32_mlp": fp32_mlp,
    "fp32_vit": fp32_vit,
    "unaligned_vocab": unaligned_vocab,
    "unaligned_mlp": unaligned_mlp,
    "bert_vocab": bert_vocab,
    "gelu_written_out": gelu_written_out,
    "layernorm_written_out": layernorm_written_out,
    "checkpoint_mlp": checkpoint_mlp,
    "checkpoint_gpt2": checkpoint_gpt2,
    "autocast_infer": autocast_infer,
    "autocast_train": autocast_train,
    "memory_list": memory_list,
    "memory_cat": memory_cat,
}
