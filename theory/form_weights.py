"""The gradient weight w(q, r, A) and the keep interval of the four core loss forms, in numpy (docs/theory.md §1).

For a token with old probability q = π_old(a), ratio r = π_θ(a)/q and advantage A, a token-level form's
per-token loss ℓ has ∂ℓ/∂log π = −A·w. The weights below are written from the torch forms in
`divclip.theory.loss_modes` (verl 0.9.1 semantics) and tested equal to autograd through `policy_loss`
(tests/theory/test_atlas.py):

  clip    w = r on kept tokens, 0 on clipped ones: A > 0 and r > hi(q), A < 0 and r < lo(q), A < 0 and r > c
          with a dual clip, and |log r| > 20 (verl's log-ratio clamp stops the gradient). At level='sequence'
          (GSPO) r is the sequence's length-normalised ratio s, every token of the sequence gets w(s), and the
          clamp is log s <= 10.
  gated   w = min(r, c_tis) on kept tokens (the same keep rule without dual clip), 0 on clipped ones; r is
          verl's clamped ratio e^{clamp(log r, ±20)}, and the clamp does not zero the gradient.
  cispo   w = clip(r, lo(q), hi(q)) whatever the sign of A: every token keeps a gradient.
  sapo    w = r·g(r), g(r) = 4σ(τ(r − 1))(1 − σ(τ(r − 1))) the gate's slope (1 at r = 1), τ by the sign of A;
          0 where |log r| > 20. w/r is the gate; for PPO's kept tokens it is 1.

The keep interval `(lo, hi)` of a form and sign of A is the ratio range where the form keeps the token's
gradient (w != 0); outside it w = 0. verl's ±20 log-ratio clamp is left out of it. A form that never zeroes a
gradient (CISPO caps its weight, SAPO's gate only shrinks it) keeps every ratio: CISPO's interval is (0, ∞);
SAPO, with no hard clip at all, has interval None.

Everything here is numpy on float64 arrays that broadcast; `divclip.theory.atlas.gradient_weight` validates
and dispatches. `clip_bounds(spec, q)` is the per-token [lo(q), hi(q)] of any clip budget (p-independent, the
exact per-token roots of binary KL/TV at p = q, or an intersection), for other forms to reuse.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from divclip.theory.measures import get_measure

LOG_RATIO_CLAMP = 20.0
"""verl clamps log r to ±20 before exp (token level); the torch loss's `loss_modes.LOG_RATIO_CLAMP`."""
SEQ_LOG_RATIO_MAX = 10.0
"""verl's gspo clamps the sequence log-ratio above at 10; the torch loss's `loss_modes.SEQ_LOG_RATIO_MAX`."""
_Q_MAX = 1.0 - np.finfo(np.float64).eps  # the torch loss keeps p below 1 the same way (log p rounds to 0)


# ------------------------------------------------------------------------------------------ bounds
def clip_bounds(spec, q):
    """(lo, hi) float64 arrays shaped like q: the clip interval of `spec`'s budget at old probability q.

    p-independent measures give one interval for every q; binary KL/TV give the exact roots of D(r, q) = δ;
    an intersection (`AllOf`) gives [max lo, min hi] over its parts."""
    q = np.asarray(q, dtype=np.float64)
    parts = getattr(spec, "parts", None)
    if parts:
        each = [clip_bounds(part, q) for part in parts]
        return (np.maximum.reduce([lo for lo, _ in each]), np.minimum.reduce([hi for _, hi in each]))
    if not spec.p_dependent:
        lo, hi = spec.ratio_bounds()
        return np.full(q.shape, lo), np.full(q.shape, hi)
    lo, hi = get_measure(spec.measure).bounds(spec.delta, np.minimum(q, _Q_MAX))
    return np.broadcast_to(np.asarray(lo, dtype=np.float64), q.shape), np.broadcast_to(
        np.asarray(hi, dtype=np.float64), q.shape
    )


def moved_out(spec, q, r, adv):
    """True where the token left the clip interval in the direction its advantage pushes (docs/theory.md §1.1):
    A > 0 and r > hi(q), or A < 0 and r < lo(q). Those are the tokens a hard clip zeroes."""
    lo, hi = clip_bounds(spec, q)
    return ((adv > 0) & (r > hi)) | ((adv < 0) & (r < lo))


def _verl_ratio(r):
    """r as verl's token losses see it: e^{clamp(log r, ±20)}; and whether |log r| <= 20 (gradient kept)."""
    with np.errstate(divide="ignore"):
        log_r = np.log(r)
    return np.exp(np.clip(log_r, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)), np.abs(log_r) <= LOG_RATIO_CLAMP


# ------------------------------------------------------------------------------------------ weights
def clip_weight(spec, q, r, adv):
    """PPO/GRPO/DAPO/KL3/dual clip (mode 'clip'): w = r where kept, else 0; GSPO's s at level='sequence'."""
    if spec.level == "sequence":
        with np.errstate(divide="ignore"):
            in_range = np.log(r) <= SEQ_LOG_RATIO_MAX
        ratio = r
    else:
        ratio, in_range = _verl_ratio(r)
    keep = ~moved_out(spec, q, ratio, adv) & in_range
    if spec.dual_clip_c is not None:
        keep &= ~((adv < 0) & (ratio > spec.dual_clip_c))  # the loss is capped at −A·c: flat, no gradient
    return np.where(keep, ratio, 0.0)


def gated_weight(spec, q, r, adv):
    """DPPO (mode 'gated'): w = min(r, c_tis) on kept tokens, 0 where the bound is crossed in A's direction."""
    ratio, _ = _verl_ratio(r)
    weight = ratio if spec.tis_cap is None else np.minimum(ratio, spec.tis_cap)
    return np.where(moved_out(spec, q, r, adv), 0.0, weight)  # the decision sees the true ratio, as verl's dppo


def cispo_weight(spec, q, r, adv):
    """CISPO (mode 'cispo'): w = clip(r, lo, hi), both bounds whatever the sign of A."""
    ratio, _ = _verl_ratio(r)
    lo, hi = clip_bounds(spec, q)
    return np.broadcast_to(np.minimum(np.maximum(ratio, lo), hi), np.broadcast(ratio, adv).shape).copy()


def sapo_weight(spec, q, r, adv):
    """SAPO (mode 'sapo'): w = r·4σ(1 − σ), σ = σ(τ(r − 1)), τ = tau_pos for A > 0 else tau_neg."""
    ratio, in_range = _verl_ratio(r)
    tau = np.where(adv > 0, spec.tau_pos, spec.tau_neg)
    x = tau * (ratio - 1.0)
    slope = 4.0 * expit(x) * expit(-x)  # σ(x)(1 − σ(x)) without cancellation for large |x|
    out = np.where(in_range, ratio * slope, 0.0)
    return np.broadcast_to(out, np.broadcast(q, r, adv).shape).copy()


# ---------------------------------------------------------------------------------------- intervals
def _shaped(q, lo, hi):
    q = np.asarray(q, dtype=np.float64)
    return (
        np.broadcast_to(np.asarray(lo, dtype=np.float64), q.shape).copy(),
        np.broadcast_to(np.asarray(hi, dtype=np.float64), q.shape).copy(),
    )


def clip_interval(spec, q, sign: int):
    """A > 0: (0, hi(q)), only the upper bound binds; A < 0: (lo(q), c) with a dual clip, else (lo(q), ∞)."""
    lo, hi = clip_bounds(spec, q)
    if sign > 0:
        return _shaped(q, 0.0, hi)
    return _shaped(q, lo, np.inf if spec.dual_clip_c is None else spec.dual_clip_c)


def gated_interval(spec, q, sign: int):
    """The clip form's ranges without a dual clip: A > 0: (0, hi(q)); A < 0: (lo(q), ∞). The TIS cap truncates
    the weight above c but keeps the gradient, so it does not enter."""
    lo, hi = clip_bounds(spec, q)
    return _shaped(q, 0.0, hi) if sign > 0 else _shaped(q, lo, np.inf)


def cispo_interval(spec, q, sign: int):
    """(0, ∞) for both signs: CISPO caps the IS weight at the bounds but never zeroes a gradient."""
    return _shaped(q, 0.0, np.inf)
