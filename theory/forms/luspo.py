"""LUSPO (form 'luspo'; arXiv:2602.05261, TRL `luspo`): GSPO's clip per token, each sequence's loss weighted by its
length.

The per-token loss is the clip form's (`divclip.theory.forms.clip`, GSPO's at level='sequence'); the length
weighting is the aggregation, 'seq-mean-token-sum-all' (TRL luspo: Σ_t m·ℓ per sequence, mean over the batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from divclip.theory.forms._form import CLAMP_LOG_RATIO, DUAL_CLIP_C, Form
from divclip.theory.forms.clip import loss as clip_loss

if TYPE_CHECKING:
    from divclip.theory.forms._kernels import PolicyTerms


# ------------------------------------------------------------------------------------------ torch
def loss(log_prob, old_log_prob, advantages, mask, spec) -> PolicyTerms:
    """LUSPO (arXiv:2602.05261): per token the clip form (GSPO's at level='sequence'); the length weighting is the
    aggregation, 'seq-mean-token-sum-all' (TRL luspo: Σ_t m·ℓ per sequence, mean over the batch)."""
    return clip_loss(log_prob, old_log_prob, advantages, mask, spec)


FORM = Form(
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
    params=(CLAMP_LOG_RATIO, DUAL_CLIP_C),
    levels=("token", "sequence"),
    loss=loss,
)
