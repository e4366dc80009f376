"""A complete third-party local argmax, written only against README's contract."""

import torch
import torch.nn.functional as F


def local_argmax(hidden, weight, bias, layout, *, scale, soft_cap, d2t, group):
    if not scale > 0 or (soft_cap is not None and not soft_cap > 0):
        raise ValueError(f"scale and soft_cap must be > 0, got scale={scale}, soft_cap={soft_cap}")
    if weight.dtype != hidden.dtype or (bias is not None and bias.dtype != weight.dtype):
        raise ValueError("dtype mismatch between hidden, weight and bias")
    if weight.shape[1] != hidden.shape[1] or (bias is not None and bias.shape != weight.shape[:1]):
        raise ValueError(f"shape mismatch: hidden {tuple(hidden.shape)}, weight {tuple(weight.shape)}, bias")
    logits = F.linear(hidden, weight, bias)
    if soft_cap is not None:
        logits = torch.tanh(logits / soft_cap) * soft_cap
    if scale != 1.0:
        logits = logits * scale
    logits[:, layout.num_real :] = float("-inf")  # padding never wins
    value, index = logits.max(dim=-1)  # first maximum; NaN counts as the maximum
    pairs = group.all_gather(torch.stack([value.double(), (index + layout.start).double()], dim=-1))
    top = pairs[..., 1].gather(0, pairs[..., 0].argmax(dim=0)[None])[0].long()  # lowest rank wins ties
    if d2t is None:
        return top
    targets = torch.arange(len(d2t)) + d2t
    if bool((targets < 0).any()) or targets.unique().numel() != len(targets):
        raise ValueError("d2t must map draft ids to distinct, non-negative targets")
    return targets[top]
