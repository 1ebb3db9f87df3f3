"""The numpy pieces several forms' weights and intervals share (docs/theory.md §1), and verl's log-ratio clamps.

For a token with old probability q = π_old(a), ratio r = π_θ(a)/q and advantage A, a token-level form's
per-token loss ℓ has ∂ℓ/∂log π = −A·w; each form's module gives its w (`weight`) and keep interval (`interval`),
tested equal to autograd through `policy_loss` (tests/theory/test_atlas.py). The keep interval `(lo, hi)` of a
form and sign of A is the ratio range where the form keeps the token's gradient (w != 0); verl's ±20 log-ratio
clamp is left out of it.

Everything here is numpy on float64 arrays that broadcast; `divclip.theory.atlas.gradient_weight` validates
and dispatches. `clip_bounds(spec, q)` is the per-token [lo(q), hi(q)] of any clip budget (p-independent, the
exact per-token roots of binary KL/TV at p = q, or an intersection), for the forms to reuse.
"""

from __future__ import annotations

import numpy as np

from divclip.theory.measures import get_measure

LOG_RATIO_CLAMP = 20.0
"""verl clamps log r to ±20 before exp (token level; its rollout IS weights' SAFETY_BOUND too), and the clamp stops
the gradient: the one constant of the numpy weights and the torch kernels (`divclip.theory.forms._kernels`)."""
SEQ_LOG_RATIO_MAX = 10.0
"""verl's gspo clamps the sequence log-ratio above at 10 (numpy weights and torch kernels alike)."""

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
    measure, qq = get_measure(spec.measure), np.minimum(q, _Q_MAX)
    lo, hi = measure.bounds(spec.delta, qq)
    if upper_delta(spec) != spec.delta:  # δ_high: the upper side's own budget (the gated form's delta_high)
        _, hi = measure.bounds(upper_delta(spec), qq)
    return np.broadcast_to(np.asarray(lo, dtype=np.float64), q.shape), np.broadcast_to(
        np.asarray(hi, dtype=np.float64), q.shape
    )


def upper_delta(spec):
    """The budget of the upper side (r > 1): the form's `delta_high` where the spec sets one (DPPO with
    two clip widths, verl `dppo_kl`/`dppo_tv`), else δ; None for a budget-free spec or one of
    measure 'ratio' (whose upper side is eps_high)."""
    for name, value in getattr(spec, "params", ()):
        if name == "delta_high" and value is not None:
            return value
    return spec.delta


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


def _spec_ratio(spec, r):
    """r as the spec's loss sees it: verl's clamp (`_verl_ratio`), or with `clamp_log_ratio` False (TRL, slime,
    OpenRLHF's gspo) r itself, every gradient kept."""
    if spec.param("clamp_log_ratio", True):
        return _verl_ratio(r)
    r = np.asarray(r, dtype=np.float64)
    return r, np.ones(r.shape, dtype=bool)


# ---------------------------------------------------------------------------------------- intervals
def _shaped(q, lo, hi):
    q = np.asarray(q, dtype=np.float64)
    return (
        np.broadcast_to(np.asarray(lo, dtype=np.float64), q.shape).copy(),
        np.broadcast_to(np.asarray(hi, dtype=np.float64), q.shape).copy(),
    )


def _broadcast(q, r=None, adv=None):
    q = np.asarray(q, dtype=float)
    return np.broadcast_arrays(q, *(np.asarray(x, dtype=float) for x in (r, adv) if x is not None))


def _arrays(*xs):
    """float64 numpy arrays broadcast to one shape."""
    return np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in xs))


def _ppo_interval(spec, q, sign):
    """PPO's kept interval by the sign of A: r <= hi for A > 0, r >= lo for A < 0 (no dual clip)."""
    (q,) = _broadcast(q)
    lo, hi = spec.ratio_bounds()
    if sign > 0:
        return np.zeros_like(q), np.full_like(q, hi)
    return np.full_like(q, lo), np.full_like(q, np.inf)


def _everywhere(spec, q, sign):
    """No ratio is clipped away: the gradient is kept on (0, ∞)."""
    (q,) = _broadcast(q)
    return np.zeros_like(q), np.full_like(q, np.inf)


# ------------------------------------------------------------------------------------- spec checks
def _zero_or_one(spec, name: str):
    """A 0/1 number parameter (`gate`): refused otherwise."""
    if spec.param(name) not in (0.0, 1.0):
        raise ValueError(f"ClipSpec.{name} must be 0 or 1, got {spec.param(name)!r}")


def _ratio_only(name: str):
    """Form.check of a form whose budget is a ratio clip's ε_low/ε_high (they enter its own formula)."""

    def check(spec):
        if spec.measure_name != "ratio":
            raise ValueError(
                f"form {name!r} takes the ratio clip widths eps_low/eps_high (method "
                f"'ratio:EPS_LOW:EPS_HIGH/{name}'), got measure={spec.measure_name!r}"
            )

    return check


def _p_free(name: str):
    """Form.check of a form built on a scalar clip interval [lo, hi]: any p-independent measure gives one."""

    def check(spec):
        if spec.p_dependent:
            raise ValueError(
                f"form {name!r} needs one clip interval [lo, hi] for every token: a p-independent "
                f"measure (ratio, kl3, ...), got measure={spec.measure_name!r}"
            )

    return check
