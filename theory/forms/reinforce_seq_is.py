"""verl `bypass_mode` REINFORCE with a per-sequence IS weight (form 'reinforce_seq_is'): −A·sg(w)·log π,
w = min(Π_t r_t, C) on every token of the sequence (TIS), or zeroed outside [c, C] (IcePop).

The per-token form's parameters and torch code (`divclip.theory.forms.reinforce_is`) at level 'sequence'.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from divclip.theory.forms._form import Form
from divclip.theory.forms.reinforce_is import _IS_PARAMS, _reinforce_is

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms


# ------------------------------------------------------------------------------------------ torch
def loss(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """verl `bypass_mode` REINFORCE, IS weight per sequence: w = min(Π_t r_t, C) on every token.
    `ratio` is that (untruncated, clamped) sequence weight."""
    return _reinforce_is(log_prob, old_log_prob, advantages, mask, spec, "sequence")


FORM = Form(
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
    loss=loss,
)
