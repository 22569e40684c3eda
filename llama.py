"""A Llama-architecture decoder, Llama 3's: RMSNorm, rotary position embeddings, grouped-query
attention through SDPA, the gated SiLU MLP; random weights (no checkpoint is ever loaded).

08_generate.py runs it: the lesson holds the key/value caches it writes and reads, and the
generation loop. The modules carry transformers' names (model.layers.i.self_attn.q_proj, ...,
lm_head), so that `LlamaForCausalLM.load_state_dict(ours.state_dict())` copies the very same
weights into the library's model (`hf_model`).

    x = embed_tokens(tokens)
    per layer:  x = x + o_proj(sdpa(rope(q_proj(n)), cache(rope(k_proj(n)), v_proj(n))))
                    with n = input_layernorm(x)
                x = x + down_proj(silu(gate_proj(m)) * up_proj(m)),  m = post_attention_layernorm(x)
    logits = lm_head(norm(x))[:, -1]     only the last position: a generator needs no other
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


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


class Attention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        hd, kv = cfg.head_dim, cfg.kv_heads * cfg.head_dim
        self.q_proj = nn.Linear(cfg.dim, cfg.heads * hd, bias=False)
        self.k_proj = nn.Linear(cfg.dim, kv, bias=False)
        self.v_proj = nn.Linear(cfg.dim, kv, bias=False)
        self.o_proj = nn.Linear(cfg.heads * hd, cfg.dim, bias=False)

    def forward(self, x, positions, rope, cache, layer: int, mask) -> torch.Tensor:
        b, s, _ = x.shape
        c = self.cfg
        q = self.q_proj(x).view(b, s, c.heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, c.kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, c.kv_heads, c.head_dim).transpose(1, 2)
        q, k = rope(q, positions), rope(k, positions)
        k, v = cache.update(layer, k, v, positions)  # written, then every key and value so far
        # Grouped-query attention without copying k and v per query head: the `group` query
        # heads that share a key/value head become rows of one query, [b, kv_heads, group*s, hd]
        # (row g*s + i: head g of the group at position i), each masked as its position says.
        group = c.heads // c.kv_heads
        q = q.reshape(b, c.kv_heads, group * s, c.head_dim)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.repeat(group, 1))
        a = (
            a.reshape(b, c.heads, s, c.head_dim).transpose(1, 2).reshape(b, s, -1)
        )  # SDPA may return it strided
        return self.o_proj(a)


class MLP(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.down_proj = nn.Linear(cfg.hidden, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


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


class Llama(nn.Module):
    def __init__(self, cfg: Config, max_len: int):
        super().__init__()
        self.cfg = cfg
        self.model = Decoder(cfg)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        self.rope = Rope(cfg, max_len)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, cache) -> torch.Tensor:
        """tokens [batch, seq] at `positions` [seq] (a tensor, so that a CUDA graph can replay
        the step at the next position); returns the last position's logits [batch, vocab]."""
        x = self.model.embed_tokens(tokens)
        mask = cache.mask(positions)  # [seq, keys]: which cached keys each position sees
        for i, layer in enumerate(self.model.layers):
            h = layer.input_layernorm(x)
            x = x + layer.self_attn(h, positions, self.rope, cache, i, mask)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.lm_head(self.model.norm(x[:, -1]))


def build(cfg: Config, max_len: int, device, dtype: torch.dtype) -> Llama:
    """Random weights, drawn as transformers initializes Llama (normal, std 0.02; norms at 1),
    made on the device directly (an 8B model in float32 is 32 GB: no CPU detour)."""
    with torch.device(device):
        model = Llama(cfg, max_len).to(dtype)
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
