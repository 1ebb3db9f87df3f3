"""The proof's "sign of A" step: the surrogate and its gradient for A > 0 and A < 0, and the equivalence theorem's
check, both computed by theory's own loss (`divclip.theory.policy_terms`, the per-token loss the trainers use).

For a p-free measure at budget δ with interval [l_δ, u_δ] (docs/theory.md §1, §1.1):
* the curves are theory's per-token loss ℓ(r) = max(−A·r, −A·clip(r)) and its autograd gradient ∂ℓ/∂log π
  (−A·r where the token keeps its gradient, 0 where it is clipped), for the measure at δ, for the ratio clip at
  [l_δ, u_δ] (ε from `equivalent_ratio_clip`), and for A < 0 with the dual clip c (on in verl's vanilla, c = 3);
* the check draws random tokens (r, A) and compares the two specs' loss and gradient token by token: the
  gradient-equivalence theorem says they are the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from divclip import theory
from divclip.theory.spec import ClipSpec
from divclip.theory.symbolic import CheckResult

DUAL_CLIP_C = 3.0  # verl's default dual-clip cap c (docs/theory.md §1.1)
N_TOKENS = 2000  # random tokens of the equivalence check
SEED = 20260211  # the derivation's seed (theory/_symbolic_generic.py)


def specs(name: str, delta: float) -> tuple[ClipSpec, ClipSpec]:
    """(the measure at δ, the ratio clip at its [l_δ, u_δ])."""
    eps_low, eps_high = theory.equivalent_ratio_clip(name, delta)
    # the ratio measure |r − 1| ≤ δ is the ratio clip whose two widths are δ (ClipSpec takes them as ε)
    measure = ClipSpec("ratio", eps_low=delta, eps_high=delta) if name == "ratio" else ClipSpec(name, delta=delta)
    return measure, ClipSpec("ratio", eps_low=eps_low, eps_high=eps_high)


def loss_and_gradient(spec: ClipSpec, r: np.ndarray, adv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """theory's per-token loss at ratios r with advantages A (old log-prob 0), and ∂loss/∂log π by autograd."""
    import torch

    log_prob = torch.tensor(np.log(r), dtype=torch.float64)[None].requires_grad_(True)  # (1, N)
    old = torch.zeros_like(log_prob)
    a = torch.tensor(adv, dtype=torch.float64)[None]  # (1, N)
    terms = theory.policy_terms(log_prob, old, a, torch.ones_like(old), spec)
    (grad,) = torch.autograd.grad(terms.loss.sum(), log_prob)
    return terms.loss.detach()[0].numpy(), grad[0].numpy()


@dataclass(frozen=True)
class SignCurves:
    """The surrogate −ℓ and the gradient ∂ℓ/∂log π along r, per sign of A, for the three specs."""

    name: str
    delta: float
    lo: float
    hi: float
    c: float
    r: np.ndarray  # (N,)
    surrogate: dict  # {(spec key, A): (N,) −loss}; spec key "measure", "ratio" or "dual" (A < 0 only)
    gradient: dict  # {(spec key, A): (N,) ∂loss/∂log π}


def sign_curves(name: str, delta: float, c: float = DUAL_CLIP_C, n: int = 400) -> SignCurves:
    measure_spec, ratio_spec = specs(name, delta)
    lo, hi = measure_spec.ratio_bounds()
    eps_low, eps_high = ratio_spec.eps_low, ratio_spec.eps_high
    r = np.linspace(max(lo - 0.6 * (1 - lo), 0.02), max(1.15 * c, hi + 0.5), n)
    dual = ClipSpec("ratio", eps_low=eps_low, eps_high=eps_high, params={"dual_clip_c": c})
    surrogate, gradient = {}, {}
    for key, spec in (("measure", measure_spec), ("ratio", ratio_spec), ("dual", dual)):
        for adv in (1.0, -1.0):
            if key == "dual" and adv > 0:
                continue  # the dual clip acts on A < 0 only
            loss, grad = loss_and_gradient(spec, r, np.full_like(r, adv))
            surrogate[key, adv], gradient[key, adv] = -loss, grad
    return SignCurves(name, delta, lo, hi, c, r, surrogate, gradient)


EQUIVALENCE_METHOD = "numeric: theory.policy_terms at random tokens"


def equivalence_check(name: str, delta: float, n: int = N_TOKENS) -> CheckResult:
    """The theorem at δ: clipping on D ≤ δ and ratio clipping at [l_δ, u_δ] give the same per-token loss and
    gradient, checked on n random tokens (r log-uniform around the interval, A standard normal, some A = 0)."""
    measure_spec, ratio_spec = specs(name, delta)
    lo, hi = measure_spec.ratio_bounds()
    rng = np.random.default_rng(SEED)
    r = np.exp(rng.uniform(np.log(max(lo, 1e-3) / 2), np.log(2 * hi), n))
    adv = rng.standard_normal(n)
    adv[: n // 20] = 0.0
    loss_m, grad_m = loss_and_gradient(measure_spec, r, adv)
    loss_r, grad_r = loss_and_gradient(ratio_spec, r, adv)
    d_loss, d_grad = float(np.max(np.abs(loss_m - loss_r))), float(np.max(np.abs(grad_m - grad_r)))
    clipped = int(np.sum(grad_m == 0) - np.sum(adv == 0))
    passed = d_loss <= 1e-12 and d_grad <= 1e-12
    detail = (
        f"{n} tokens, r in [{r.min():.4g}, {r.max():.4g}], {clipped} of them clipped (A ≠ 0, gradient 0); "
        f"max |Δ loss| = {d_loss:.3g}, max |Δ gradient| = {d_grad:.3g}"
    )
    return CheckResult(passed, EQUIVALENCE_METHOD, detail)
