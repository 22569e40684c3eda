"""What the training lessons (06_train_step, 07_fsdp_train) share beside their loops: the
model's flags, 06's memory and profiler estimate, and one step checked against a float32
reference step (with FSDP's bf16 budget).
Their traces cut into phases: tracereader.analyses.training.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch

from common import cli
from common.check import MismatchError

# The model's shape flags, for every lesson that trains it (06, 07): flag, default, meaning.
MODEL_FLAGS = (
    ("--batch", 2, "sequences per batch"),
    ("--seq", 16, "tokens per sequence"),
    ("--dim", 64, "model width"),
    ("--hidden", 128, "MLP width"),
    ("--heads", 2, "attention heads; they must divide --dim"),
    ("--layers", 2, "transformer blocks"),
    ("--vocab", 256, "token ids; the head is [dim, vocab]"),
)


def add_model_flags(parser, **meanings: str) -> None:
    """MODEL_FLAGS on `parser`; `meanings` rewords a flag's help (batch="... per rank")."""
    for flag, default, meaning in MODEL_FLAGS:
        meaning = meanings.get(flag.removeprefix("--"), meaning)
        parser.add_argument(flag, type=cli.positive_int, default=default,
                            help=f"{meaning} (default: {default})")  # fmt: skip


def events_per_step(layers: int) -> int:
    """Profiler events a recorded training step adds (cli.ensure_fits bounds --active with
    it). Measured on the CPU at the tiny shape with the default foreach AdamW: 1,302 events
    a step at 1 layer, 4,113 at 4 (~940 a layer: forward, backward and the optimizer's ops,
    with autograd's), 365 besides; rounded up, as forloop AdamW adds ops per tensor."""
    return 500 + 1_200 * layers


def bytes_needed(args, weight_bytes: int) -> int:
    """Parameters, gradients and AdamW's two states in the weights' dtype (`weight_bytes` an
    element), the float32 reference's four, and the activations the backward keeps (per layer
    about 7 [tokens, dim] and 4 [tokens, hidden] tensors, the logits), twice over for the
    reference."""
    t, d, h, v = args.batch * args.seq, args.dim, args.hidden, args.vocab
    params = v * d * 2 + args.layers * (4 * d * d + 3 * d * h)
    acts = (args.layers * (7 * t * d + 4 * t * h) + 3 * t * v) * 4
    return params * (4 * weight_bytes + 16) + 2 * acts


def ensure_fits(args, run: cli.Run, *, weight_bytes: int) -> None:
    """06's step and the profiler's events, refused before anything is built."""
    events = events_per_step(args.layers)
    if getattr(args, "memory", False):  # every allocation and free too: +42% at the tiny shape
        events += events // 2
    trace = cli.profiled(args, events)
    cli.ensure_fits(bytes_needed(args, weight_bytes), run, trace=trace)


@dataclass(frozen=True)
class StepBudget:
    loss: float  # the largest |loss - loss_ref| / |loss_ref| that passes
    off: float  # the largest share of weights stepped off by over lr / 2 (+ one dtype spacing)
    why: str


# AdamW's first step moves every weight by about lr * sign(grad) whatever the gradient's size
# (m / sqrt(v) = g / |g|), so a gradient rounded across zero flips its weight's step: the count
# of weights off by more than half a step, not a distance, is what tells rounding from a bug
# (no step, a wrong sign or lr moves every weight).
STEP_BUDGETS = {
    "fp32": StepBudget(
        1e-5, 1e-4, "fp32: sums reorder; only a gradient within rounding of 0 flips its step"
    ),  # fmt: skip
    "autocast": StepBudget(
        2e-2, 2e-2, "bf16 GEMMs keep 8 bits: small gradients can round across 0"
    ),  # fmt: skip
    "fsdp-bf16": StepBudget(
        3e-2,
        5e-2,
        "FSDP's bf16 parameters: every op computes in bf16 (not only the GEMMs, as under "
        "autocast), gradients reduced and weights kept in fp32",
    ),  # fmt: skip
    "bf16": StepBudget(
        3e-2,
        5e-2,
        "bf16 also stores the weights: a step lands on a bf16 value, one spacing is allowed",
    ),  # fmt: skip
}


def against_reference_step(
    loss: float,
    ref_loss: float,
    before: dict[str, torch.Tensor],
    after: dict[str, torch.Tensor],
    ref_after: dict[str, torch.Tensor],
    *,
    lr: float,
    precision: str,
) -> float:
    """Print and check one step: the loss, and each weight's step in units of lr, against the
    float32 reference step from the same weights; raise MismatchError past the budget. Returns
    the share of weights off by more than half a step."""
    budget = STEP_BUDGETS[precision]
    loss_err = abs(loss - ref_loss) / max(abs(ref_loss), 1e-30)
    off = total = 0
    for name, start in before.items():
        step = (after[name].double() - start.double()) / lr
        ref = ref_after[name].double()
        # a bf16 weight lands only on bf16 values: one spacing (eps * |w|) on top of lr / 2
        allowed = 0.5 + torch.finfo(after[name].dtype).eps * ref.abs() / lr
        bad = ~torch.isfinite(step) | ((step - (ref - start.double()) / lr).abs() > allowed)
        off += int(bad.sum())
        total += step.numel()
    share = off / max(total, 1)
    ok = loss_err <= budget.loss and share <= budget.off and math.isfinite(loss)
    print(
        f"correctness: loss {loss:.5f} vs float32 reference {ref_loss:.5f} (relative error "
        f"{loss_err:.1e}, budget {budget.loss:.0e}); weights off by more than lr/2 after one "
        f"step: {off} of {total} ({share:.2%}, budget {budget.off:.2%}): "
        f"{'ok' if ok else 'MISMATCH'}\n  ({precision}: {budget.why})"
    )
    if not math.isfinite(loss) or loss_err > budget.loss:
        raise MismatchError(f"loss {loss:.5g} where the reference step has {ref_loss:.5g}")
    if share > budget.off:
        raise MismatchError(f"{share:.2%} of the weights stepped unlike the reference step")
    return share


def reference_step(model, tokens, targets, *, lr: float) -> tuple[float, dict[str, torch.Tensor]]:
    """One float32 step from the same weights, eager, AdamW's plain for-loop: the loss and the
    updated weights (a copy of `model` takes the step; `model` is left as it was)."""
    model = copy.deepcopy(model).float()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, foreach=False)
    loss = model(tokens, targets)
    loss.backward()
    optimizer.step()
    return loss.item(), {n: p.detach() for n, p in model.named_parameters()}
