"""The modules that more than one lesson or tool runs, each beside its float32 reference.

A lesson imports its module from here by name (a numbered file cannot be imported that way),
so every lesson, tool and test runs the very same module; the lesson shows what it computes
in its docstring. Built from the same seed, GeGLUMLP has the same weights wherever it is built.
"""

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
