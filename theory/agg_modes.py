"""The names of the loss aggregations (`loss_agg_mode`), torch-free: the one list `agg_loss`, `policy_loss`, the
atlas's methods and the trainer's config check against (`divclip.theory.loss_metrics.agg_loss` says what each does).
"""

from __future__ import annotations

__all__ = ["ENGINE_AGG_MODES", "LOSS_AGG_MODES", "TRL_AGG_MODES"]

LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
"""verl 0.9.1's five `loss_agg_mode` names."""
TRL_AGG_MODES = ("seq-mean-token-mean-all", "seq-mean-token-sum-all", "token-sum-norm")
"""TRL 1.16's normalisations that verl's five (LOSS_AGG_MODES) do not give exactly; `agg_loss` takes both."""
ENGINE_AGG_MODES = ("seq-mean-token-mean-noeps", "token-mean-min1", "token-mean-legacy")
"""Three more engines' arithmetic that neither list gives exactly (`agg_loss` takes them too):
seq-mean-token-mean-noeps: verl's seq-mean-token-mean without its + 1e-8 in each row's token count (OpenRLHF
0.11.2 `aggregate_loss`: its bool mask's integer count + 1e-8 rounds back to the count in float32);
token-mean-min1: Σ m·ℓ over the rows' token counts each at least 1, an empty row counting 1 (slime's per-token
loss: `loss_function`'s num_tokens, Megatron's per-token normaliser);
token-mean-legacy: the rows cut into micro-batches of `loss_scale_factor` rows (None: one micro-batch of all
rows), the token mean Σ m·ℓ / max(Σ m, 1) of each whole micro-batch, then their mean; rows past the last whole
micro-batch get no weight (SkyRL 0.3.0's legacy token-mean reduction over micro-batches of its per-GPU micro
batch size, ppo_utils.apply_loss_reduction_to_advantages_minibatch; the keys: divclip.engines.skyrl)."""
