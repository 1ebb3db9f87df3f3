"""Loss forms from trl (torch-free declarations: family, source, parameters, numpy weight and interval).

Each form is one `divclip.theory.forms.declare_form(Form(...))`; its torch implementation is registered in
`divclip.theory.modes_trl`. See `divclip.theory.forms` for what a Form holds.

TRL 1.16's eight loss types are divclip methods (docs/theory.md §1; the mapping from a GRPOConfig is
`divclip.engines.from_engine("trl", ...)`): grpo, bnpo, dr_grpo and dapo are the `clip` form and sapo the `sapo`
form, each with TRL's aggregation (`divclip.theory.loss_metrics.LOSS_AGG_MODES`); the forms below are the ones
TRL adds: cispo's absolute cap, LUSPO and VESPO. TRL never clamps log r before exp, so its methods set
`ClipSpec.clamp_log_ratio=False` (method-string option '/noclamp').
"""

from __future__ import annotations

import numpy as np

from divclip.theory.forms import Form, Param, declare_form

VESPO_LOG_W_MIN = float(np.log(1e-8))
"""VESPO clamps the sequence log-weight to [log 1e-8, 20] (as its reference code; TRL 1.16 `get_gamma_weights`)."""
VESPO_LAMBDA_MIN = float(np.float32(1e-4))
"""VESPO's decay λ is used as max(λ, 1e-4), 1e-4 in float32 as TRL 1.16 `get_gamma_weights` clamps it."""


def cispo_cap_as_cispo(spec):
    """The two-sided `cispo` spec (MiniMax's CISPO, verl's and slime's `cispo`) equal to a `cispo_cap` spec:
    lower width 1 (bound 0, which r never crosses) and upper width c − 1; exact in float64 (1 + (c − 1) == c for
    c >= 1). A ValueError for a cap at or below 1 or the sequence ratio, which the two-sided form cannot say."""
    from divclip.theory.spec import ClipSpec

    cap = spec.param("cispo_cap")
    if cap <= 1.0 or spec.level != "token":
        raise ValueError(
            f"cispo clips the token ratio to [1 − ε_low, 1 + ε_high]: an IS weight cap of {cap:g} at "
            f"level {spec.level!r} has no two-sided cispo form (it needs a cap above 1, token level)"
        )
    return ClipSpec("ratio", eps_low=1.0, eps_high=cap - 1.0, mode="cispo", clamp_log_ratio=spec.clamp_log_ratio)


def _cispo_cap_weight(spec, q, r, adv):
    """w = min(r, c): ℓ = −sg(min(r, c))·A·log π has ∂ℓ/∂log π = −A·min(r, c); no token loses its gradient."""
    q, r, adv = np.broadcast_arrays(np.asarray(q, float), np.asarray(r, float), np.asarray(adv, float))
    return np.minimum(r, spec.param("cispo_cap"))


declare_form(
    Form(
        "cispo_cap",
        "truncated IS",
        "−sg(min(r, c))·A·log π: the IS weight capped at an absolute c, no lower bound (TRL cispo, ScaleRL's ε_max)",
        ("arXiv:2510.13786", "trl:cispo"),
        params=(
            Param(
                "cispo_cap",
                5.0,
                "absolute cap c on the IS weight r (TRL's ε_high under its cispo loss, "
                "ScaleRL's ε_max; TRL's default is its ε = 0.2, its docs recommend 5)",
                above=0.0,
            ),
        ),
        uses_budget=False,
        weight=_cispo_cap_weight,
        weight_note="w = min(r, c) for both signs of A; at level 'sequence' r is the sequence ratio",
        example="ratio/cispo_cap/noclamp/cispo_cap=5",
    )
)

declare_form(
    Form(
        "luspo",
        "sequence-level",
        "GSPO's clip max(−A·s, −A·clip(s, lo, hi)) per token, each sequence's loss weighted by its length: "
        "the clip form aggregated with seq-mean-token-sum-all",
        ("arXiv:2602.05261", "trl:luspo"),
        token_level=False,
        weight_note="per token the clip form's w (r inside the interval by A's sign, 0 outside), with r the sequence "
        "ratio s at level 'sequence'; LUSPO's length weighting is its aggregation (Σ_t per sequence, then "
        "the mean over sequences), not part of w",
        example="ratio:0.2:0.28/luspo/seq/noclamp",
    )
)

declare_form(
    Form(
        "vespo",
        "sequence-level",
        "−sg(φ(W))·A·log π, φ(W) = e^λ·W^k·e^(−λW), W = exp(Σ_t log r) the sequence weight (no length "
        "normalisation), (k, λ) by the sign of A",
        ("arXiv:2602.10693", "trl:vespo"),
        params=(
            Param("vespo_k_pos", 2.0, "power k of φ for A >= 0 (down-weights W < 1)"),
            Param(
                "vespo_lambda_pos", 3.0, "decay λ of φ for A >= 0 (down-weights W > 1); used as max(λ, 1e-4)", above=0.0
            ),
            Param("vespo_k_neg", 3.0, "power k of φ for A < 0"),
            Param("vespo_lambda_neg", 2.0, "decay λ of φ for A < 0; used as max(λ, 1e-4)", above=0.0),
        ),
        uses_budget=False,
        token_level=False,
        weight_note="w = φ(W) for every token of a sequence, W the product of its token ratios: a function of the "
        "whole sequence, not of one token's (q, r)",
        example="ratio/vespo",
    )
)
