"""CE-GPPO, the scaled gradient-preserving clip (form 'cegppo'; arXiv:2509.20712 eq. 8 (loss), eq. 10 (gradient)).

−A·r inside [lo, hi]; −β1·A·lo·r/sg(r) for A < 0, r < lo; −β2·A·hi·r/sg(r) for A > 0, r > hi. β = 0 is PPO on that
side; β1 = β2 = 1 is GPPO, whose weight, interval and torch terms (`divclip.theory.forms.gppo`) this form reuses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from divclip.theory.forms._form import Form, Param
from divclip.theory.forms._numpy import _p_free
from divclip.theory.forms.gppo import _gppo_interval, _gppo_terms, _gppo_weight

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms
    from divclip.theory.spec import ClipSpec


def _cegppo_betas(spec):
    return spec.param("cegppo_beta1"), spec.param("cegppo_beta2")


# ------------------------------------------------------------------------------------------ torch
def loss(log_prob, old_log_prob, advantages, mask, spec: ClipSpec) -> PolicyTerms:
    """CE-GPPO (arXiv:2509.20712 eqs. 8, 10) with β1 = cegppo_beta1, β2 = cegppo_beta2."""
    betas = spec.param("cegppo_beta1"), spec.param("cegppo_beta2")
    return _gppo_terms(log_prob, old_log_prob, advantages, spec, *betas)


FORM = Form(
    "cegppo",
    "truncated IS",
    "−A·r inside [lo, hi]; −β1·A·lo·r/sg(r) for A < 0, r < lo; −β2·A·hi·r/sg(r) for A > 0, r > hi",
    ("arXiv:2509.20712 eq. 8", "arXiv:2509.20712 eq. 10"),
    params=(
        Param(
            "cegppo_beta1",
            0.75,
            "β1: scale of the gradient kept below lo for A < 0 (NA&LP tokens); "
            "0 is PPO there. 0.75 and 0.5 are the paper's settings (Table 1), 0.75 its best at 7B",
            at_least=0.0,
        ),
        Param(
            "cegppo_beta2",
            1.0,
            "β2: scale of the gradient kept above hi for A > 0 (PA&LP tokens); 0 is PPO there (Table 1: 1)",
            at_least=0.0,
        ),
    ),
    weight=lambda spec, q, r, adv: _gppo_weight(spec, q, r, adv, *_cegppo_betas(spec)),
    interval=lambda spec, q, sign: _gppo_interval(spec, q, sign, *_cegppo_betas(spec)),
    check=_p_free("cegppo"),
    loss=loss,
    example="ratio:0.2:0.2/cegppo",  # §4.1: ε = 0.2; β1 = 0.75, β2 = 1 (Table 1),
)
