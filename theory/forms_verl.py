"""Loss forms from verl (torch-free declarations: family, source, parameters, numpy weight and interval).

Each form is one `divclip.theory.forms.declare_form(Form(...))`; its torch implementation is registered in
`divclip.theory.modes_verl`. See `divclip.theory.forms` for what a Form holds.

verl 0.9.1 registers twelve policy losses (`verl.trainer.ppo.core_algos`). Six were divclip forms already:
`vanilla` is mode 'clip' (with `dual=` for its dual-clip cap c), `dppo_kl`/`dppo_tv` mode 'gated', `gspo` mode
'clip' at level 'sequence', `cispo` and `sapo` their own modes. This module declares the other six and the
REINFORCE branch of `bypass_mode` (its `ppo_clip` branch is `vanilla` on the rollout log-probs):

  gpg               −A·log π                                            verl `gpg`
  dro               −(A·log π − ½β·(log r)²)                            verl `dro`
  clip_cov          PPO's clip, and a random few high-covariance tokens lose their gradient   verl `clip_cov`
  kl_cov            −A·r, plus κ·|log r| on the top-k covariance tokens                       verl `kl_cov`
  geo_mean          −Ā·exp(mean_t clip(log r)) per sequence (GMPO)                            verl `geo_mean`
  reinforce_is      −A·sg(w)·log π, w = min(r, C) per token (TIS; IcePop zeroes w outside [c, C])
  reinforce_seq_is  the same with one weight per sequence, w = min(Π_t r_t, C)
                                         (verl `bypass_mode` REINFORCE, IS weights per token/sequence)

How each is reached from verl's own settings: `divclip.engines.from_engine("verl", settings)`; where verl's
metric names land in divclip's: docs/theory.md §4.1.
"""

from __future__ import annotations

import numpy as np

from divclip.theory.atlas import Method, declare_method
from divclip.theory.forms import Form, Param, declare_form

IS_SAFETY_BOUND = 20.0  # verl clamps log IS weights to ±20 before exp (rollout_corr_helper.SAFETY_BOUND)

# ------------------------------------------------------------------------------------------ helpers


def _broadcast(q, r=None, adv=None):
    q = np.asarray(q, dtype=float)
    return np.broadcast_arrays(q, *(np.asarray(x, dtype=float) for x in (r, adv) if x is not None))


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


# ---------------------------------------------------------------------------------------------- GPG
def _gpg_weight(spec, q, r, adv):
    q, r, adv = _broadcast(q, r, adv)
    return np.ones_like(r)


declare_form(
    Form(
        "gpg",
        "truncated IS",
        "−A·log π: the plain policy gradient, weight 1 on every token, no ratio and no clip",
        ("arXiv:2504.02546", "verl:gpg", "verl:bypass_mode (REINFORCE, no IS weight)"),
        uses_budget=False,
        weight=_gpg_weight,
        interval=_everywhere,
        example="ratio/gpg",
    )
)


# ---------------------------------------------------------------------------------------------- DRO
def _dro_weight(spec, q, r, adv):
    """∂ℓ/∂log π = −A + β·log r, so w = 1 − β·log r / A; NaN at A = 0, where −A·w cannot carry the
    penalty's gradient β·log r (the frame's w is undefined there)."""
    q, r, adv = _broadcast(q, r, adv)
    beta = spec.param("dro_beta")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(adv != 0, 1.0 - beta * np.log(r) / np.where(adv != 0, adv, 1.0), np.nan)


declare_form(
    Form(
        "dro",
        "penalty",
        "−(A·log π − ½β·(log r)²): policy gradient with a quadratic log-ratio penalty, no clip",
        ("arXiv:2405.19107", "verl:dro"),
        params=(
            Param(
                "dro_beta",
                0.05,
                "β of the quadratic penalty ½β·(log r)² (verl policy_loss.dro_beta; "
                "verl has no default and refuses none)",
                above=0.0,
            ),
        ),
        uses_budget=False,
        weight=_dro_weight,
        weight_note="w = 1 − β·log r / A: the penalty pulls r back to 1 whatever the sign of A; w is undefined "
        "(NaN) at A = 0, where the gradient is β·log r alone; no interval (where w changes sign depends "
        "on |A|, not on its sign)",
        example="ratio/dro",
    )
)


# ----------------------------------------------------------------------------------------- Clip-Cov
declare_form(
    Form(
        "clip_cov",
        "batch-selective",
        "max(−A·r, −A·clip(r, lo, hi))·c, c = 0 on a random ⌊ρ·N⌋ of the unclipped tokens whose "
        "(A − Ā)(log π − mean log π) lies in (lb, ub)",
        ("arXiv:2505.22617", "verl:clip_cov"),
        params=(
            Param(
                "clip_cov_ratio",
                2e-4,
                "ρ: the share of the batch's tokens whose gradient is removed (at least one)",
                above=0.0,
                at_most=1.0,
            ),
            Param("clip_cov_lb", 1.0, "lower bound of the covariance window the picked tokens come from"),
            Param("clip_cov_ub", 5.0, "upper bound of that window"),
        ),
        token_level=False,
        interval=_ppo_interval,
        weight_note="PPO's w on the tokens not picked, 0 on the picked ones; which tokens are picked depends on "
        "the whole batch (the covariance uses batch means) and on a random draw, so w is not a "
        "function of (q, r, A); the interval is the PPO clip's",
        example="ratio:0.2:0.2/clip_cov",
    )
)


# ------------------------------------------------------------------------------------------- KL-Cov
declare_form(
    Form(
        "kl_cov",
        "penalty",
        "−A·r, plus κ·|log r| on the ⌊ρ·N⌋ tokens of largest (A − Ā)(log π − mean log π)",
        ("arXiv:2505.22617", "verl:kl_cov"),
        params=(
            Param(
                "kl_cov_ratio",
                2e-4,
                "ρ: the share of the batch's tokens that get the penalty (at least one)",
                above=0.0,
                at_most=1.0,
            ),
            Param("kl_cov_coef", 0.1, "κ, the penalty's coefficient (verl's kl_cov κ)", above=0.0),
        ),
        uses_budget=False,
        token_level=False,
        weight_note="w = r off the selected tokens and r − κ·sign(log r)/A on them; the selection is the batch's "
        "top-k covariance, so w is not a function of (q, r, A) alone",
        example="ratio/kl_cov",
    )
)


# --------------------------------------------------------------------------------------------- GMPO
def _geo_interval(spec, q, sign):
    """Each token's log r is clipped in A's direction before the geometric mean: kept for r <= e^ε_high when
    A > 0, r >= e^−ε_low when A < 0."""
    (q,) = _broadcast(q)
    if sign > 0:
        return np.zeros_like(q), np.full_like(q, np.exp(spec.param("gmpo_eps_high")))
    return np.full_like(q, np.exp(-spec.param("gmpo_eps_low"))), np.full_like(q, np.inf)


declare_form(
    Form(
        "geo_mean",
        "sequence-level",
        "−Ā·exp(mean_t sgn(A)·min(sgn(A)·log r, sgn(A)·clip(log r, −ε_low, ε_high))) per sequence, mean over sequences",
        ("arXiv:2507.20673", "verl:geo_mean"),
        params=(
            Param(
                "gmpo_eps_low",
                0.4,
                "log-space lower clip width: log r >= −ε_low (GMPO's paper recommends "
                "0.4, §4; verl takes its lower clip width)",
                above=0.0,
            ),
            Param(
                "gmpo_eps_high",
                0.4,
                "log-space upper clip width: log r <= ε_high (verl: its upper clip width)",
                above=0.0,
            ),
        ),
        uses_budget=False,
        token_level=False,
        interval=_geo_interval,
        weight_note="the gradient of token t is −Ā·s/|y|·∇log π on kept tokens, s the sequence's geometric-mean "
        "ratio: it depends on the whole sequence, not on (q, r, A) alone; the per-token clip interval "
        "is [e^−ε_low, e^ε_high] in A's direction",
        extra={"aggregation": "mean over sequences (verl's geo_mean ignores loss_agg_mode)"},
        example="ratio/geo_mean",
    )
)


# ------------------------------------------------------------------------- bypass_mode REINFORCE + IS
_IS_PARAMS = (
    Param(
        "rollout_is_threshold",
        2.0,
        "C: the IS weight is truncated at C (TIS), or zeroed above C with a lower threshold (IcePop)",
        above=0.0,
    ),
    Param(
        "rollout_is_threshold_lower",
        0.0,
        "c: with c > 0, weights outside [c, C] are zeroed (IcePop, "
        "verl's 'c_C' threshold string); 0 = plain truncation",
        above=-1e-300,
    ),
    Param(
        "rollout_is_batch_normalize",
        0.0,
        "1: divide the weights by their batch mean (verl rollout_is_batch_normalize); 0: off",
        above=-1e-300,
        at_most=1.0,
    ),
)


def _is_weight(spec, q, r, adv):
    """w = min(r, C), or r·1[c <= r <= C] with IcePop, r's log clamped to ±20 as verl; refuses batch
    normalisation (a batch mean)."""
    q, r, adv = _broadcast(q, r, adv)
    r = np.exp(np.clip(np.log(r), -IS_SAFETY_BOUND, IS_SAFETY_BOUND))
    if spec.param("rollout_is_batch_normalize"):
        raise ValueError(
            "reinforce_is with rollout_is_batch_normalize=1 divides by the batch's mean weight: "
            "its w is not a function of (q, r, A)"
        )
    cap, floor = spec.param("rollout_is_threshold"), spec.param("rollout_is_threshold_lower")
    if floor > 0:
        return np.where((r >= floor) & (r <= cap), r, 0.0)
    return np.minimum(r, cap)


def _is_interval(spec, q, sign):
    (q,) = _broadcast(q)
    floor = spec.param("rollout_is_threshold_lower")
    if floor > 0:  # IcePop: the gradient is zeroed outside [c, C], whatever the sign of A
        return np.full_like(q, floor), np.full_like(q, spec.param("rollout_is_threshold"))
    return _everywhere(spec, q, sign)


declare_form(
    Form(
        "reinforce_is",
        "truncated IS",
        "−A·sg(w)·log π, w = min(r, C) per token (TIS), or r on [c, C] and 0 outside (IcePop)",
        ("verl:bypass_mode (REINFORCE, IS weight per token)",),
        params=_IS_PARAMS,
        uses_budget=False,
        weight=_is_weight,
        interval=_is_interval,
        example="ratio/reinforce_is",
    )
)

declare_form(
    Form(
        "reinforce_seq_is",
        "sequence-level",
        "−A·sg(w)·log π, w = min(Π_t r_t, C) per sequence (TIS), or zeroed outside [c, C] (IcePop)",
        ("verl:bypass_mode (REINFORCE, IS weight per sequence)",),
        params=_IS_PARAMS,
        uses_budget=False,
        token_level=False,
        weight_note="every token of a sequence gets the sequence's weight min(Π_t r_t, C): w depends on the "
        "whole sequence, not on (q, r, A) alone",
        example="ratio/reinforce_seq_is",
    )
)


# ------------------------------------------------------------------------------ the atlas's verl rows
for _m in (  # verl's own defaults (actor.yaml): ratio width 0.2, loss_agg_mode token-mean
    Method("verl:gpg", "ratio/gpg", ("arXiv:2504.02546", "verl:gpg"), "token-mean"),
    Method(
        "verl:dro",
        "ratio/dro",
        ("arXiv:2405.19107", "verl:dro"),
        "token-mean",
        "verl requires policy_loss.dro_beta; β = 0.05 here",
    ),
    Method("verl:clip_cov", "ratio:0.2:0.2/clip_cov", ("arXiv:2505.22617", "verl:clip_cov"), "token-mean"),
    Method("verl:kl_cov", "ratio/kl_cov", ("arXiv:2505.22617", "verl:kl_cov"), "token-mean"),
    Method(
        "verl:geo_mean",
        "ratio/geo_mean/gmpo_eps_low=0.2/gmpo_eps_high=0.2",
        ("arXiv:2507.20673", "verl:geo_mean"),
        None,
        "verl's default width 0.2 as log-space widths; the mean over sequences whatever loss_agg_mode says",
    ),
    Method(
        "verl:bypass_ppo_clip",
        "grpo/dual=3",
        ("verl:bypass_mode",),
        "token-mean",
        "its PPO-clip branch: vanilla on the rollout log-probs",
    ),
    Method(
        "verl:bypass_reinforce_token",
        "ratio/reinforce_is",
        ("verl:bypass_mode",),
        "token-mean",
        "REINFORCE, IS weight per token, threshold 2",
    ),
    Method(
        "verl:bypass_reinforce_sequence",
        "ratio/reinforce_seq_is",
        ("verl:bypass_mode",),
        "token-mean",
        "REINFORCE, IS weight per sequence, threshold 2",
    ),
):
    declare_method(_m)
