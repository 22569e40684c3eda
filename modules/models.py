"""The modules that more than one lesson or tool runs, each beside its float32 reference.

A lesson imports its module from here by name (a numbered file cannot be imported that way),
so every lesson, tool and test runs the very same module; the lesson shows what it computes
in its docstring. Built from the same seed, GeGLUMLP has the same weights wherever it is built.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


class GeGLUMLP(nn.Module):
    """The MLP of Part 2 (Gemma's): down(gelu_tanh(gate(x)) * up(x)), no biases."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = self.gate_proj(x)
        u = self.up_proj(x)
        h = F.gelu(g, approximate="tanh")
        m = h * u
        return self.down_proj(m)


@dataclass
class GeGLUConfig:
    """The slice of a transformers config that Liger's LigerGEGLUMLP reads."""

    hidden_size: int
    intermediate_size: int
    hidden_act: str = "gelu_pytorch_tanh"  # Liger implements the tanh GeLU only


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention through SDPA, then the GeGLU MLP."""

    def __init__(self, dim: int, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.attn_norm = nn.RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.mlp_norm = nn.RMSNorm(dim)
        self.mlp = GeGLUMLP(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(self.attn_norm(x)).view(b, s, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # [batch, heads, seq, head_dim] each
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.mlp_norm(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, dim: int, hidden: int, heads: int, layers: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, hidden, heads) for _ in range(layers))
        self.norm = nn.RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def geglu_reference(x: torch.Tensor, mlp: nn.Module) -> torch.Tensor:
    """What a GeGLU MLP must compute, in float32, from any module with gate_proj, up_proj and
    down_proj weights (GeGLUMLP, Liger's LigerGEGLUMLP)."""
    gate, up, down = (
        p.float() for p in (mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight)
    )
    x = x.float()
    return F.linear(F.gelu(F.linear(x, gate), approximate="tanh") * F.linear(x, up), down)


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention in float32, q, k, v [batch, heads, seq, head_dim]:
    softmax(q k^T / sqrt(head_dim), future masked) @ v."""
    q, k, v = q.float(), k.float(), v.float()
    seq = q.size(-2)
    future = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(diagonal=1)
    scores = (q @ k.transpose(-2, -1)).mul_(q.size(-1) ** -0.5)
    return torch.softmax(scores.masked_fill_(future, float("-inf")), dim=-1) @ v
