"""The token explainer's words: one token (q, r, A) under each chosen method, its loss term with the numbers filled
in, its gradient weight and whether the gradient is zero, and which rule made it so, one sentence each.

Every number comes from theory: the loss and the clip flags from `divclip.theory.policy_terms` (the per-token loss
the trainers use), the gradient weight w (∂ℓ/∂log π = −A·w) from `divclip.theory.gradient_weight` (the atlas), the
bounds from the spec or the measure. This module only says them (docs/theory.md §1.1 for the rules).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from divclip import theory
from divclip.sanity.loaders import load_rollouts
from divclip.theory import gradient_weight
from divclip.theory.atlas import arithmetic, verl_arithmetic
from divclip.theory.forms._numpy import clip_bounds, upper_delta
from divclip.theory.spec import AllOf, ClipSpec, spec_label


@dataclass(frozen=True)
class TokenTerm:
    """One method's view of one token."""

    method: str  # the method string as given
    label: str  # spec_label
    loss: float  # theory's per-token loss ℓ
    loss_text: str  # the formula with the numbers filled in
    weight: float  # w, with ∂ℓ/∂log π = −A·w
    gradient: float  # ∂ℓ/∂log π
    zero: bool  # the gradient is zero
    rule: str  # which rule made it so (or why the gradient is kept), one sentence
    bounds: tuple[float, float] | None  # (l, u) at this token's q where the method has an interval
    arithmetic: tuple[str, ...] = ()  # the engine arithmetic the method string carries and what it does here


def _n(x: float) -> str:
    return f"{x:.6g}"


def token_bounds(spec: ClipSpec, q: float) -> tuple[float, float] | None:
    """(l, u) of the spec's interval at old probability q: its ratio clip, or the measure's per-token roots."""
    if isinstance(spec, AllOf) or spec.form == "sapo":
        return None
    if spec.p_dependent:  # the upper root at δ_high where the gated form has two widths (`clip_bounds`)
        lo, hi = clip_bounds(spec, q)
        return float(lo), float(hi)
    return spec.ratio_bounds()


def theory_terms(spec: ClipSpec, q: float, r: float, adv: float):
    """theory's PolicyTerms for the one token (log π_old = log q, log π = log q + log r), float64."""
    import torch

    old = torch.tensor([[math.log(q)]], dtype=torch.float64)
    lp = old + math.log(r)
    return theory.policy_terms(lp, old, torch.tensor([[adv]], dtype=torch.float64), torch.ones_like(old), spec)


def _flag(t) -> bool:
    return t is not None and float(t[0, 0]) > 0.5


def _loss_text(spec: ClipSpec, r: float, adv: float, bounds, loss: float) -> str:
    """The loss form with this token's numbers (form clip), else the form's formula and theory's value."""
    a = f"({_n(adv)})"
    if spec.form == "clip" and bounds is not None and spec.level == "token":
        lo, hi = bounds
        clipped = min(max(r, lo), hi)
        text = (
            f"ℓ = max(−A·r, −A·clip(r, l, u)) = max(−{a}·{_n(r)}, −{a}·clip({_n(r)}, {_n(lo)}, {_n(hi)})) "
            f"= max({_n(-adv * r)}, {_n(-adv * clipped)})"
        )
        c = spec.param("dual_clip_c", None)
        if c is not None and adv < 0:
            text += f", capped at −A·c = {_n(-adv * c)} (dual clip c = {c:g})"
        return f"{text} = {_n(loss)}"
    forms = {
        "gated": "ℓ = −A·sg(min(r, c))·log π, zeroed where the bound is crossed in A's direction",
        "cispo": "ℓ = −sg(clip(r, l, u))·A·log π",
        "sapo": "ℓ = −A·σ(τ(r − 1))·4/τ, SAPO's soft gate (τ by the sign of A)",
        "clip": "ℓ = max(−A·r, −A·clip(r))",
    }
    if spec.form == "gated" and spec.param("surrogate") == "ratio":  # SkyRL's dppo: −A·r, r differentiable
        forms["gated"] = "ℓ = −A·r (r differentiable), zeroed where the bound is crossed in A's direction"
    forms["importance_sampling"] = "ℓ = −A·r (r differentiable, no clip)"
    return f"{forms.get(spec.form, f'loss form {spec.form!r}')}: ℓ = {_n(loss)} for this token"


def _clamp_rule(spec: ClipSpec, r: float) -> str | None:
    """The sentence for a gradient verl's log-ratio clamp stopped (the spec clamps, as verl; '/noclamp' specs,
    slime's, TRL's and OpenRLHF's gspo, keep it), or None."""
    from divclip.theory.losses import LOG_RATIO_CLAMP, SEQ_LOG_RATIO_MAX

    if isinstance(spec, AllOf) or not spec.param("clamp_log_ratio", True) or not r > 0:
        return None
    log_r = math.log(r)
    limit = SEQ_LOG_RATIO_MAX if spec.level == "sequence" else LOG_RATIO_CLAMP
    if (log_r if spec.level == "sequence" else abs(log_r)) <= limit:
        return None
    what = "log s" if spec.level == "sequence" else "|log r|"
    return (
        f"Zero gradient: {what} = {_n(abs(log_r))} > {limit:g}, where verl's log-ratio clamp stops the gradient; "
        "an engine that does not clamp (slime, TRL, OpenRLHF's gspo: '/noclamp') keeps it (docs/theory.md §1)."
    )


def _rule(spec: ClipSpec, terms, r: float, adv: float, bounds, weight: float) -> str:
    """Which rule zeroed the gradient (theory's clip flags say which bound acted), or why it is kept."""
    if adv == 0:
        return "Zero gradient: A = 0, so there is nothing to learn from this token (docs/theory.md §1.1)."
    where = f" [{_n(bounds[0])}, {_n(bounds[1])}]" if bounds else ""
    if _flag(terms.dual):
        return (
            f"Zero gradient: A < 0 and r = {_n(r)} > c = {spec.param('dual_clip_c', None):g}, so the dual clip caps "
            "the loss at −A·c, where it is flat (docs/theory.md §1.1)."
        )
    if _flag(terms.clipped) and weight == 0:
        if _flag(terms.clipped_low):
            return (
                f"Zero gradient: A < 0 and r = {_n(r)} is below the lower bound {_n(bounds[0]) if bounds else ''}: "
                "the token already became rarer than the clip allows (docs/theory.md §1.1)."
            )
        return (
            f"Zero gradient: A > 0 and r = {_n(r)} is above the upper bound {_n(bounds[1]) if bounds else ''}: "
            "the token already became likelier than the clip allows (docs/theory.md §1.1)."
        )
    if _flag(terms.clipped):
        return (
            f"Gradient kept, weight clipped: r = {_n(r)} is outside{where}, and this loss form caps the "
            f"importance weight at w = {_n(weight)} instead of zeroing the gradient."
        )
    if weight == 0 and (why := _clamp_rule(spec, r)):
        return why
    if weight == 0:
        return f"Zero gradient: theory's weight for this form is 0 at r = {_n(r)}."
    if bounds and not bounds[0] <= r <= bounds[1]:
        side = "below" if r < bounds[0] else "above"
        return (
            f"Gradient kept: r = {_n(r)} is {side}{where}, but it moved against its advantage "
            "((r − 1)·A < 0), so the gradient pulls it back (docs/theory.md §1)."
        )
    if bounds:
        return f"Gradient kept: r = {_n(r)} lies inside{where}, where no bound acts."
    return f"Gradient kept: this form has no hard clip; its weight at r = {_n(r)} is {_n(weight)}."


def _arithmetic(spec, q: float, r: float, adv: float, weight: float) -> tuple[str, ...]:
    """One sentence per engine option the spec carries (`divclip.theory.atlas.arithmetic`): what it changes, and
    this token's w under it and under verl's arithmetic (`verl_arithmetic`), or where the two part."""
    out = []
    for a in arithmetic(spec):
        option, ex = a["option"], a["example"]
        if option == "noclamp":
            log_r = math.log(r)
            seq = spec.level == "sequence"
            beyond = log_r > 10.0 if seq else abs(log_r) > 20.0
            verl_w = float(np.asarray(gradient_weight(verl_arithmetic(spec), q, r, adv)))
            if beyond or verl_w != weight:
                here = f"here (log r = {_n(log_r)}) w = {_n(weight)}, under verl's clamp w = {_n(verl_w)}"
            else:
                i = 0 if "A<0" in ex and ex["A<0"][0] != ex["verl A<0"][0] else 1
                key = "A<0" if i == 0 else "A>0"
                part = (
                    f" (e.g. q = {ex['q']:g}, log r = {ex['log_r'][i]:+g}, {key}: w = {_n(ex[key][i])}, under "
                    f"verl's clamp {_n(ex['verl ' + key][i])})"
                    if key in ex
                    else ""
                )
                here = f"at this token's log r = {_n(log_r)} the two agree; they part at {a['where']}{part}"
            out.append(f"Engine arithmetic, /noclamp: {a['text']}; {a['verl']}. {here[0].upper()}{here[1:]}.")
        elif option == "seq_grad_mean=1":
            out.append(
                f"Engine arithmetic, {option}: {a['text']}. For this one-token sequence the two agree; one row with "
                f"A = (1, −1), both kept at s = 1, gets ∂ℓ/∂log π = ({ex['gradient'][0]:+g}, {ex['gradient'][1]:+g}),"
                f" verl ({ex['verl gradient'][0]:+g}, {ex['verl gradient'][1]:+g})."
            )
        elif option.startswith("delta_high"):
            bounds = token_bounds(spec, q)
            one = theory.get_measure(spec.measure).bounds(spec.delta, min(q, 1.0 - np.finfo(float).eps))[1]
            out.append(
                f"Engine arithmetic, {option}: {a['text']}. At q = {_n(q)}: u = {_n(bounds[1])} at "
                f"δ_high = {upper_delta(spec):g}, l = {_n(bounds[0])} at δ = {spec.delta:g}; one δ would put u "
                f"at {_n(float(one))}."
            )
        elif option == "surrogate=ratio":
            verl_w = float(np.asarray(gradient_weight(verl_arithmetic(spec), q, r, adv)))
            out.append(
                f"Engine arithmetic, {option}: {a['text']}; {a['verl']}. Here (log r = {_n(math.log(r))}) "
                f"w = {_n(weight)}, under verl's surrogate w = {_n(verl_w)}."
            )
        else:
            out.append(f"Engine arithmetic, {option}: {a['text']}.")
    return tuple(out)


def explain_token(methods: dict[str, ClipSpec], q: float, r: float, adv: float) -> list[TokenTerm]:
    """One TokenTerm per method for the token (q, r, A); a method theory refuses raises its ValueError."""
    out = []
    for text, spec in methods.items():
        bounds = token_bounds(spec, q)
        terms = theory_terms(spec, q, r, adv)
        loss = float(terms.loss[0, 0]) + 0.0  # + 0.0: no '-0' on the page
        weight = float(np.asarray(gradient_weight(spec, q, r, adv)))
        gradient = -adv * weight + 0.0  # + 0.0: no "-0"
        out.append(
            TokenTerm(
                text,
                spec_label(spec),
                loss,
                _loss_text(spec, r, adv, bounds, loss),
                weight,
                gradient,
                gradient == 0,
                _rule(spec, terms, r, adv, bounds, weight),
                bounds,
                _arithmetic(spec, q, r, adv, weight) if not isinstance(spec, AllOf) else (),
            )
        )
    return out


def example_token(name: str, data: bytes) -> dict | None:
    """A token of an uploaded rollout file to explain: the counted token whose ratio moved most (largest |log r|,
    ratios from the file's log_prob; without one, the largest |A| at r = 1). Returns {q, r, adv, i, t} or None."""
    ro = load_rollouts(data, name)
    return token_at(ro, *most_moved(ro)) if ro.n_tokens else None


def most_moved(ro) -> tuple[int, int]:
    inside = ro.response_mask > 0
    score = np.abs(ro.log_prob - ro.old_log_prob) if ro.log_prob is not None else np.abs(ro.advantages)
    score = np.where(inside, score.astype(np.float64), -1.0)
    i, t = np.unravel_index(int(np.argmax(score)), score.shape)
    return int(i), int(t)


def token_at(ro, i: int, t: int) -> dict:
    """{q, r, adv, i, t, log_r} of token (i, t); r is inf where log r is beyond float64 (log r = 1000 is a valid
    pair of log-probabilities 0 and -1000)."""
    old = float(ro.old_log_prob[i, t])
    log_r = float(ro.log_prob[i, t]) - old if ro.log_prob is not None else 0.0
    return {"q": _exp(old), "r": _exp(log_r), "adv": float(ro.advantages[i, t]), "i": i, "t": t, "log_r": log_r}


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf
