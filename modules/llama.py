"""A Llama-architecture decoder, Llama 3's: RMSNorm, rotary position embeddings, grouped-query
attention (SDPA, or FlexAttention), the gated SiLU MLP; random weights (no checkpoint is ever
loaded).

08_generate.py runs it: the lesson holds the key/value caches it writes and reads, and the
generation loop. The modules carry transformers' names (model.layers.i.self_attn.q_proj, ...,
lm_head), so that `LlamaForCausalLM.load_state_dict(ours.state_dict())` copies the very same
weights into the library's model (`hf_model`).

    x = embed_tokens(tokens)
    per layer:  x = x + o_proj(sdpa(rope(q_proj(n)), cache(rope(k_proj(n)), v_proj(n))))
                    with n = input_layernorm(x)
                x = x + down_proj(silu(gate_proj(m)) * up_proj(m)),  m = post_attention_layernorm(x)
    logits = lm_head(norm(x))[:, -1]     only the last position: a generator needs no other

What a decode step's kernels can be, for 08_generate's flags:
- `fuse_projections()` turns q, k and v into one GEMM (qkv_proj) and gate and up into another
  (gate_up_proj): the same weights, read by fewer and larger GEMMs, which at decode's one row
  per sequence is what sets their speed (a small GEMV cannot keep the GPU's memory busy);
- `attention="flex"`: FlexAttention (compiled by Inductor) instead of SDPA;
- `attention="split"`: at one query per sequence, modules/decode_attention.py's kernels, which split
  the cache's positions across the SMs (SDPA's give a whole key/value head to one block);
- `decode` and `head` (--gemv): a decode step, and the prompt's last position's logits, as
  modules/decode_gemv.py's GEMVs.
And a prompt's: `fuse_projections(gate_kernel=...)` (--fused-gate) computes gate, up and the
SiLU gate in modules/geglu/gluon.py's kernel where the rows fill its tiles (uses_gate_kernel).
`greedy`
picks the next token from the logits (an argmax in two steps).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import flex_attention

from modules import decode_attention  # noqa: F401  (registers profiling_pytorch::decode_attention)
from modules.geglu import fused as fused_geglu
from modules.geglu import shared as geglu_shared


@dataclass(frozen=True)
class Config:
    vocab: int
    dim: int
    layers: int
    heads: int
    kv_heads: int  # grouped-query attention: heads // kv_heads query heads share a key/value head
    hidden: int  # the MLP's width
    rope_theta: float = 500_000.0  # Llama 3's
    eps: float = 1e-5  # RMSNorm's
    context: int = 8192  # the positions it was trained for (max_position_embeddings)

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def params(self) -> int:
        """Weights, the embedding and the (untied) head included."""
        kv = self.kv_heads * self.head_dim
        layer = 2 * self.dim * self.dim + 2 * self.dim * kv + 3 * self.dim * self.hidden
        return 2 * self.vocab * self.dim + self.layers * (layer + 2 * self.dim) + self.dim


# The shapes of Llama-3.2-1B and Llama-3-8B (config.json of each), with an untied head (3.2-1B
# ties it to the embedding: here it is one more [vocab, dim] matrix) and no rope scaling.
PRESETS = {
    "tiny": Config(vocab=256, dim=64, layers=2, heads=4, kv_heads=2, hidden=192, context=256),
    "1b": Config(128_256, dim=2048, layers=16, heads=32, kv_heads=8, hidden=8192, context=131_072),
    "8b": Config(vocab=128_256, dim=4096, layers=32, heads=32, kv_heads=8, hidden=14_336),
}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Rope(nn.Module):
    """cos and sin of every position up to max_len, in float32, looked up by position."""

    def __init__(self, cfg: Config, max_len: int):
        super().__init__()
        inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim)
        angles = torch.outer(torch.arange(max_len).float(), inv_freq).repeat(1, 2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos[positions].to(x.dtype), self.sin[positions].to(x.dtype)  # [seq, hd]
        return x * cos + rotate_half(x) * sin


_compiled = {}  # made on first use: torch.compile's import costs seconds


def _compiled_flex():
    """FlexAttention runs as Triton (GPU) or C++ (CPU) kernels that Inductor generates:
    compiled even where the rest of the step runs eagerly (uncompiled, it would fall back to a
    slow reference); inside a compiled step Dynamo inlines it."""
    if "flex" not in _compiled:
        _compiled["flex"] = torch.compile(flex_attention, dynamic=False)
    return _compiled["flex"]


def sdpa_attention(q, k, v, positions, mask):
    """Grouped-query attention through SDPA without copying k and v per query head.
    mask None (the prompt, from position 0, over its own keys): causal, so that the fused
    kernel skips the keys past each query's position. Else the `group` query heads that share a
    key/value head become rows of one query, [b, kv_heads, group*s, hd] (row g*s + i: head g
    of the group at position i), each masked as its position says."""
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    b, heads, s, hd = q.shape
    group = heads // k.shape[1]
    q = q.reshape(b, k.shape[1], group * s, hd)
    a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.repeat(group, 1))
    return a.reshape(b, heads, s, hd)


def flex(q, k, v, positions, mask):
    """FlexAttention: a key is seen from its own position on (the static cache's unwritten
    positions lie beyond every query's); its kernels read each key/value head once per group."""

    def causal(score, b, h, q_idx, kv_idx):
        return torch.where(kv_idx <= positions[q_idx], score, -float("inf"))

    return _compiled_flex()(q, k, v, score_mod=causal, enable_gqa=True)


def split_attention(q, k, v, positions, mask):
    """At one query per sequence (decode): decode_attention's split kernels, reading the keys
    up to the position; the prompt (mask None) and more queries go to SDPA."""
    head_dim = q.shape[-1]
    if mask is None or q.shape[2] > 1 or head_dim & (head_dim - 1):  # power-of-two tiles
        return sdpa_attention(q, k, v, positions, mask)
    return torch.ops.profiling_pytorch.decode_attention(q, k, v, positions[-1:])


ATTENTION = {"sdpa": sdpa_attention, "flex": flex, "split": split_attention}


class Attention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        hd, kv = cfg.head_dim, cfg.kv_heads * cfg.head_dim
        self.q_proj = nn.Linear(cfg.dim, cfg.heads * hd, bias=False)
        self.k_proj = nn.Linear(cfg.dim, kv, bias=False)
        self.v_proj = nn.Linear(cfg.dim, kv, bias=False)
        self.o_proj = nn.Linear(cfg.heads * hd, cfg.dim, bias=False)
        self.sizes = [cfg.heads * hd, kv, kv]  # q's, k's and v's columns of a fused qkv

    def forward(self, x, positions, rope, cache, layer: int, mask, attend) -> torch.Tensor:
        if hasattr(self, "qkv_proj"):  # fused: one GEMM, its output split in three
            q, k, v = self.qkv_proj(x).split(self.sizes, dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return self.o_proj(self.mix(q, k, v, positions, rope, cache, layer, mask, attend))

    def mix(self, q, k, v, positions, rope, cache, layer: int, mask, attend) -> torch.Tensor:
        """The projections [b, s, *] to heads, rotated, cached, attended: [b, s, heads x hd]."""
        b, s, _ = q.shape
        c = self.cfg
        q = q.view(b, s, c.heads, c.head_dim).transpose(1, 2)
        k = k.view(b, s, c.kv_heads, c.head_dim).transpose(1, 2)
        v = v.view(b, s, c.kv_heads, c.head_dim).transpose(1, 2)
        q, k = rope(q, positions), rope(k, positions)
        cached = cache.update(layer, k, v, positions)  # written, then every key and value so far
        if mask is not None:  # decode reads the cache; the prompt (mask None), written from
            k, v = cached  # position 0, only its own keys: causal over s, not masked over all
        a = attend(q, k, v, positions, mask)  # [b, heads, s, hd], maybe strided
        return a.transpose(1, 2).reshape(b, s, -1)


def gate_and_up(h: torch.Tensor, units: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fused gate/up GEMM's output [..., 2 x hidden] -> gate, up: its two halves (units 0),
    or blocks of `units` gate columns each followed by the same units' up columns."""
    if not units:
        return h.chunk(2, dim=-1)
    gate, up = h.unflatten(-1, (-1, 2, units)).unbind(-2)
    return gate.flatten(-2), up.flatten(-2)


def uses_gate_kernel(gate_kernel: str | None, rows: int) -> bool:
    """Whether a forward of `rows` rows (batch x positions) runs the gate kernel: where they
    fill at least one of its tiles (a prompt); fewer (a decode step) take the GEMM."""
    return bool(gate_kernel) and rows >= fused_geglu.CONFIGS[gate_kernel].block_m


class MLP(nn.Module):
    units = 0  # gate_up_proj's row order (fuse_projections): gate_and_up's `units`
    gate_kernel = None  # a fused_geglu.CONFIGS name: a prompt's gate, up and SiLU in one kernel

    def __init__(self, cfg: Config):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.down_proj = nn.Linear(cfg.hidden, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if uses_gate_kernel(self.gate_kernel, rows):  # SiLU(gate) * up leaves it as one tensor
            m = torch.ops.profiling_pytorch.gluon_gate_up(
                x.reshape(rows, -1), self.gate_up_proj.weight, self.down_proj.in_features,
                self.gate_kernel,
            ).view(*x.shape[:-1], -1)  # fmt: skip
            return self.down_proj(m)
        if hasattr(self, "gate_up_proj"):  # fused: one GEMM, its columns split in two
            gate, up = gate_and_up(self.gate_up_proj(x), self.units)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(F.silu(gate) * up)


class Layer(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(cfg.dim, eps=cfg.eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = nn.RMSNorm(cfg.dim, eps=cfg.eps)
        self.mlp = MLP(cfg)


class Decoder(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.dim)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.layers))
        self.norm = nn.RMSNorm(cfg.dim, eps=cfg.eps)


def _joined(*linears: nn.Linear, weight: torch.Tensor | None = None) -> nn.Linear:
    """One Linear whose output is theirs side by side (their weights stacked by rows), or the
    rows of `weight`, theirs in another order."""
    weight = torch.cat([m.weight for m in linears]) if weight is None else weight
    joined = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device=weight.device)
    joined.weight = nn.Parameter(weight, requires_grad=False)
    return joined


class Llama(nn.Module):
    def __init__(self, cfg: Config, max_len: int, attention: str = "sdpa"):
        super().__init__()
        self.cfg = cfg
        self.attend = ATTENTION[attention]
        self.model = Decoder(cfg)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        self.rope = Rope(cfg, max_len)
        self.decode = None  # a decode step's own forward (decode_gemv.decode), if any
        self.head = None  # the last position's logits by another kernel (decode_gemv.head)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, cache, *, decoding: bool):
        """tokens [batch, seq] at `positions` [seq] (a tensor, so that a CUDA graph can replay
        the step at the next position); returns the last position's logits [batch, vocab].
        decoding: a decode step, reading the cache (self.decode runs it instead of the layers
        where it is set: 08_generate --gemv, decode_gemv.decode). Else a prompt written from
        position 0 (prefill), whose attention needs no more than its own keys; its logits by
        self.head where it is set (decode_gemv.head)."""
        x = self.model.embed_tokens(tokens)
        # [seq, keys]: which cached keys each position sees (FlexAttention computes its own
        # from the positions); None for the prompt, which attends causally over its own keys
        mask = cache.mask(positions) if decoding else None
        if decoding and self.decode is not None:
            return self.decode(self, x, positions, cache, mask)
        for i, layer in enumerate(self.model.layers):
            h = layer.input_layernorm(x)
            x = x + layer.self_attn(h, positions, self.rope, cache, i, mask, self.attend)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        if self.head is not None:
            return self.head(self, x[:, -1])
        return self.lm_head(self.model.norm(x[:, -1]))

    def fuse_projections(self, units: int = 0, gate_kernel: str | None = None) -> Llama:
        """q, k, v -> qkv_proj and gate, up -> gate_up_proj, in place: the same weights (the
        unfused ones freed as each layer is done, so the model never holds both). units > 0:
        gate_up_proj's rows in blocks of `units` gate rows, then the same units' up rows;
        gate_kernel (a fused_geglu.CONFIGS name, gluon's): that kernel then runs a prompt's
        gate, up and SiLU, and its blocks (gluon_geglu.UNITS) are the units."""
        if gate_kernel:
            units = fused_geglu.gluon().UNITS.value
        if units and self.cfg.hidden % units:
            raise ValueError(f"hidden {self.cfg.hidden} is not a multiple of {units} units")
        for layer in self.model.layers:
            a, m = layer.self_attn, layer.mlp
            a.qkv_proj = _joined(a.q_proj, a.k_proj, a.v_proj)
            del a.q_proj, a.k_proj, a.v_proj
            packed = None
            if units:
                packed = geglu_shared.pack_gate_up(m.gate_proj.weight, m.up_proj.weight, units)
            m.gate_up_proj = _joined(m.gate_proj, m.up_proj, weight=packed)
            m.units, m.gate_kernel = units, gate_kernel
            del m.gate_proj, m.up_proj
        return self


def greedy(logits: torch.Tensor, parts: int = 64) -> torch.Tensor:
    """logits.argmax(-1) of [batch, vocab] logits, in two steps: the best of each of `parts`
    slices, then the best slice (the first on a tie, as argmax). Inductor reduces one row of
    128,256 logits in a single program (31 us on an H100, every token); split, the first step
    spreads over `parts` programs."""
    b, vocab = logits.shape
    slices = F.pad(logits, (0, -vocab % parts), value=-float("inf")).view(b, parts, -1)
    best, where = slices.max(-1)  # [b, parts]: each slice's best and its place in the slice
    part = best.argmax(-1, keepdim=True)
    return (part * slices.shape[-1] + where.gather(-1, part)).squeeze(-1)


def build(cfg: Config, max_len: int, device, dtype: torch.dtype, attention="sdpa") -> Llama:
    """Random weights, drawn as transformers initializes Llama (normal, std 0.02; norms at 1),
    made on the device directly (an 8B model in float32 is 32 GB: no CPU detour)."""
    with torch.device(device):
        model = Llama(cfg, max_len, attention).to(dtype)
    for name, p in model.named_parameters():
        if "norm" not in name:
            nn.init.normal_(p, std=0.02)
    return model.eval().requires_grad_(False)


def hf_model(ours: Llama, max_len: int):
    """transformers' LlamaForCausalLM with our weights: built from a LlamaConfig (no Hub, no
    checkpoint), SDPA attention, then load_state_dict from ours (the same names)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    c = ours.cfg
    config = LlamaConfig(
        vocab_size=c.vocab,
        hidden_size=c.dim,
        intermediate_size=c.hidden,
        num_hidden_layers=c.layers,
        num_attention_heads=c.heads,
        num_key_value_heads=c.kv_heads,
        head_dim=c.head_dim,
        max_position_embeddings=max_len,
        rms_norm_eps=c.eps,
        rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta},
        tie_word_embeddings=False,
        attn_implementation="sdpa",
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
    )
    weight = next(ours.parameters())
    with torch.device(weight.device):
        hf = LlamaForCausalLM(config)
    # the parameters in the run's dtype, the buffers left in float32: `.to(bf16)` would round
    # the rotary frequencies too, and at position 500 a 0.4% error in a frequency turns its
    # angle by radians (seen on an H200: transformers' first token off by 0.98 logits' rms)
    for param in hf.parameters():
        param.data = param.data.to(weight.dtype)
    missing, unexpected = hf.load_state_dict(ours.state_dict(), strict=False)
    if unexpected or [m for m in missing if "rotary" not in m]:
        raise RuntimeError(f"weights not copied: missing {missing}, unexpected {unexpected}")
    return hf.eval().requires_grad_(False)
