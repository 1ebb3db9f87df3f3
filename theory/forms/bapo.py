"""BAPO, batch-adaptive bounds (form 'bapo'; arXiv:2510.18927 eq. 8, Algorithm 1, §5.1).

PPO's clip at (c_low, c_high), the first pair on Algorithm 1's path (`bapo_path`) whose positive contribution
ρ = P/(P + N) reaches ρ0 over the batch: which tokens are clipped depends on the whole batch, so the form has no
per-token weight.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from divclip.theory.forms._form import Form, Param

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms
    from divclip.theory.spec import ClipSpec


BAPO_MAX_PATH = 10_000
"""The most bound pairs BAPO's Algorithm 1 may visit (a larger movable range / step ratio is refused)."""
_BAPO_PARAMS = ("bapo_low_start", "bapo_low_max", "bapo_high_start", "bapo_high_max", "bapo_high_step", "bapo_low_step")


def bapo_path(spec) -> list[tuple[float, float]]:
    """The (c_low, c_high) pairs Algorithm 1 of arXiv:2510.18927 visits in order while ρ < ρ0: c_high rises from
    a⁺ by δ1 while c_high + δ1 <= b⁺, then c_low rises from a⁻ by δ2; the loop runs only while
    c_low + δ2 <= b⁻. Step counts are floor((b − a)/δ + 1e-9), so a range that is a whole number of steps ends
    exactly on b (repeated float additions would stop one step short)."""
    a_low, b_low, a_high, b_high, d_high, d_low = (spec.param(n) for n in _BAPO_PARAMS)
    n_low = math.floor((b_low - a_low) / d_low + 1e-9)
    if n_low < 1:  # the loop's condition c_low + δ2 <= b⁻ fails at once: the bounds stay at their start
        return [(a_low, a_high)]
    n_high = math.floor((b_high - a_high) / d_high + 1e-9)
    c_high = [round(a_high + k * d_high, 12) for k in range(n_high + 1)]  # round: 0.6 + 15·0.02 is 0.9, not 0.8999…
    return [(a_low, h) for h in c_high] + [(round(a_low + k * d_low, 12), c_high[-1]) for k in range(1, n_low + 1)]


def _bapo_check(spec):
    a_low, b_low, a_high, b_high, d_high, d_low = (spec.param(n) for n in _BAPO_PARAMS)
    if not a_low <= b_low <= 1.0 <= a_high <= b_high:
        raise ValueError(
            f"form 'bapo' needs bapo_low_start <= bapo_low_max <= 1 <= bapo_high_start <= "
            f"bapo_high_max, got {a_low!r}, {b_low!r}, {a_high!r}, {b_high!r}"
        )
    steps = (b_high - a_high) / d_high + (b_low - a_low) / d_low
    if steps > BAPO_MAX_PATH:
        raise ValueError(
            f"form 'bapo': bapo_high_step={d_high!r} and bapo_low_step={d_low!r} give {steps:.0f} "
            f"candidate bounds over the movable ranges; at most {BAPO_MAX_PATH} are allowed"
        )


# ------------------------------------------------------------------------------------------ torch
def loss(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> PolicyTerms:
    """BAPO (arXiv:2510.18927 eq. 8, Algorithm 1): PPO's clip at (c_low, c_high), the first pair on Algorithm 1's
    path (`bapo_path`) whose positive contribution ρ = P/(P + N) reaches ρ0 over the batch's unmasked tokens,
    P = Σ_{A>0} A·min(r, c_high), N = Σ_{A<0} |A|·max(r, c_low) (eq. 8, the min(r·A, clip(r)·A) terms); the
    path's last pair if none does. A batch without nonzero advantages has ρ = 1 (the start pair). Every
    candidate is evaluated and the first passing one picked with argmax: no host sync. The batch is what this
    call sees (one micro-batch; the authors' code all-reduces P and N across data-parallel ranks first)."""
    import torch

    from divclip.theory.forms._kernels import _clamped_ratio, _ppo_terms

    path = bapo_path(spec)
    with torch.no_grad():
        log_ratio, ratio, in_range = _clamped_ratio(log_prob, old_log_prob)
        adv_pos = (advantages.clamp(min=0.0) * mask).reshape(-1)  # (B·T,) A⁺ on unmasked tokens
        adv_neg = ((-advantages).clamp(min=0.0) * mask).reshape(-1)  # |A⁻|
        flat = ratio.reshape(-1)
        pos = {h: torch.dot(flat.clamp(max=h), adv_pos) for h in sorted({h for _, h in path})}
        neg = {lo: torch.dot(flat.clamp(min=lo), adv_neg) for lo in sorted({lo for lo, _ in path})}
        p = torch.stack([pos[h] for _, h in path])  # (J,) P along the path
        n = torch.stack([neg[lo] for lo, _ in path])  # (J,) N along the path
        total = p + n
        rho = torch.where(total > 0, p / torch.where(total > 0, total, 1.0), 1.0)
        reached = rho >= spec.param("bapo_rho0")
        reached[-1] = True  # the loop also ends at the path's last pair
        pick = torch.argmax(reached.to(torch.uint8))  # the first True
        bounds = torch.tensor(path, dtype=ratio.dtype, device=ratio.device)  # (J, 2)
        c_low, c_high = bounds.index_select(0, pick.reshape(1))[0]  # 0-d tensors (a tensor index: no sync)
    return _ppo_terms(log_prob, log_ratio, ratio, in_range, advantages, c_low, c_high)


FORM = Form(
    "bapo",
    "batch-selective",
    "max(−A·r, −A·clip(r, c_low, c_high)); (c_low, c_high) the first pair of Algorithm 1's path whose positive "
    "contribution ρ = P/(P + N) reaches ρ0 in the batch, P = "
    "Σ_{A>0} A·min(r, c_high), N = Σ_{A<0} |A|·max(r, c_low)",
    ("arXiv:2510.18927 eq. 8", "arXiv:2510.18927 Algorithm 1", "arXiv:2510.18927 §5.1"),
    params=(
        Param(
            "bapo_rho0",
            0.4,
            "ρ0: target share of the positive-advantage tokens in the loss (§5.1: 0.4)",
            above=0.0,
            at_most=1.0,
        ),
        Param("bapo_low_start", 0.6, "a⁻: c_low's start (§5.1: 0.6)", above=0.0),
        Param("bapo_low_max", 0.9, "b⁻: c_low's largest value (§5.1: 0.9)", above=0.0),
        Param("bapo_high_start", 1.2, "a⁺: c_high's start (§5.1: 1.2)", above=0.0),
        Param("bapo_high_max", 3.0, "b⁺: c_high's largest value (§5.1: 3.0)", above=0.0),
        Param("bapo_high_step", 0.05, "δ1: c_high's step (§5.1: 0.05)", above=0.0),
        Param("bapo_low_step", 0.02, "δ2: c_low's step (§5.1: 0.02)", above=0.0),
    ),
    uses_budget=False,
    token_level=False,
    weight_note="BAPO's bounds are chosen from the whole batch (eq. 8), so a token's w is not a function of "
    "(q, r, A): for the chosen (c_low, c_high) it is PPO's w = r on kept tokens and 0 on clipped ones, "
    "with c_low in [bapo_low_start, bapo_low_max] and c_high in [bapo_high_start, bapo_high_max]",
    check=_bapo_check,
    loss=loss,
    example="ratio/bapo",  # §5.1,
)
