"""Reductions of per-token loss terms, in torch: verl's loss aggregation, the diagnostics computed next to the
loss (CleanRL style), and Schulman's KL estimators.

Means follow verl: Σ m·x / (Σ m + 1e-8), so an empty mask gives 0, never NaN. The diagnostics run under no_grad
as dot products with the mask plus one scratch buffer: no `torch.where` (slow on CPU) and no bool temporaries.
"""

from __future__ import annotations

import math

import torch

from divclip.theory.agg_modes import ENGINE_AGG_MODES, LOSS_AGG_MODES, TRL_AGG_MODES
from divclip.theory.forms._kernels import LOG_RATIO_CLAMP, sequence_column

KL_ESTIMATORS = {"k1": "k1", "kl": "k1", "k2": "k2", "mse": "k2", "k3": "k3", "low_var_kl": "k3", "abs": "abs"}
"""verl's `kl_penalty` names; each also takes a '+' suffix (`kl_penalty`: k2's gradient, straight through)."""
KL3_CLAMP = 10.0  # verl clamps the k3 penalty to ±10 (and its log-ratio to ±LOG_RATIO_CLAMP = ±20)
_FAR = 1e30  # moves masked-out ratios out of reach of min/max (a ratio is at most e^20)


# ---------------------------------------------------------------------------------------- aggregation
def masked_sum_verl(values, mask, dim=None):
    """verl's `masked_sum`: Σ m·x over `dim` (all entries when None); NaN outside the mask cannot leak in."""
    valid = torch.where(mask.bool(), values, 0.0) * mask
    return valid.sum() if dim is None else valid.sum(dim=dim)


def masked_mean_verl(values, mask):
    """verl's `masked_mean` over all entries: Σ m·x / (Σ m + 1e-8), so an empty mask gives 0."""
    return masked_sum_verl(values, mask) / (mask.sum() + 1e-8)


def masked_sum_finite(values, mask):
    """Σ mask·values: verl's numbers for finite values, without its where (the policy loss is finite)."""
    return (values * mask).sum()


def _nonzero(count):
    """count where > 0, else 1, in count's own dtype: an int64 count of a bool mask keeps a bf16 loss bf16,
    as verl's division by it does (a float 1.0 here would promote the quotient to float32)."""
    return torch.where(count > 0, count, torch.ones_like(count))


def _aggregate_trl(loss_mat, loss_mask, loss_agg_mode, loss_scale_factor, masked_sum):
    """TRL 1.16's normalisations (GRPOTrainer._compute_loss), in its arithmetic: a sequence mean counts every
    sequence of the batch, an empty one as 0 (verl's seq-mean-* skip empty sequences)."""
    if loss_agg_mode == "token-sum-norm":  # TRL dr_grpo (B · the longest completion TRL allows), dapo/cispo/vespo
        denominator = max(loss_mask.numel(), 1) if loss_scale_factor is None else loss_scale_factor
        return masked_sum(loss_mat, loss_mask) / denominator  # Σ m·ℓ, as TRL's (ℓ·m).sum()
    masked = loss_mat * loss_mask  # (B, T)
    if masked.shape[0] == 0:
        return masked.sum()  # no sequence: 0, where the mean of none is NaN
    if loss_agg_mode == "seq-mean-token-mean-all":  # TRL grpo, sapo
        return (masked.sum(-1) / loss_mask.sum(-1).clamp(min=1.0)).mean()
    return masked.sum(-1).mean()  # seq-mean-token-sum-all: TRL luspo


def _token_mean_per_micro_batch(loss_mat, loss_mask, rows_per_micro_batch):
    """token-mean-legacy (SkyRL's token_mean_legacy): the mean over the whole micro-batches of `rows_per_micro_batch`
    rows of each one's Σ m·ℓ / max(Σ m, 1); rows past the last whole one get no weight, and with none whole the
    loss is 0, as SkyRL's pre-scaled advantages give. Shapes only decide the cut: no host read."""
    rows = loss_mat.shape[0]
    micro = rows if rows_per_micro_batch is None else int(rows_per_micro_batch)
    count = rows // micro if micro > 0 else 0
    used = count * micro
    if count == 0:
        return (loss_mat * loss_mask).sum() * 0.0  # no whole micro-batch (or no row): 0, the graph kept
    sums = torch.sum(loss_mat[:used] * loss_mask[:used], dim=-1).reshape(count, micro).sum(-1)  # (count,)
    tokens = torch.sum(loss_mask[:used], dim=-1).reshape(count, micro).sum(-1)
    return (sums / _nonzero(tokens)).sum() / count


def aggregate(loss_mat, loss_mask, loss_agg_mode, loss_scale_factor, masked_sum):
    """`agg_loss` without validation; `masked_sum` does the token-level masked sums."""
    if loss_agg_mode in TRL_AGG_MODES:
        return _aggregate_trl(loss_mat, loss_mask, loss_agg_mode, loss_scale_factor, masked_sum)
    if loss_agg_mode == "token-mean":
        return masked_sum(loss_mat, loss_mask) / _nonzero(loss_mask.sum())
    if loss_agg_mode == "token-mean-min1":  # slime per-token: an empty row counts one token
        return masked_sum(loss_mat, loss_mask) / _nonzero(torch.sum(loss_mask, dim=-1).clamp(min=1).sum())
    if loss_agg_mode == "token-mean-legacy":  # SkyRL token_mean_legacy: a token mean per micro-batch, their mean
        return _token_mean_per_micro_batch(loss_mat, loss_mask, loss_scale_factor)
    if loss_agg_mode == "seq-mean-token-mean-noeps":  # OpenRLHF: Σ m·ℓ / n per non-empty row, their mean
        seq_tokens = torch.sum(loss_mask, dim=-1)  # (B,)
        seq_mask = (seq_tokens > 0).to(loss_mat.dtype)
        seq_losses = torch.sum(loss_mat * loss_mask, dim=-1) / _nonzero(seq_tokens)
        return masked_sum_verl(seq_losses, seq_mask) / _nonzero(seq_mask.sum())
    if loss_agg_mode == "token-sum":
        return masked_sum(loss_mat, loss_mask)
    if loss_agg_mode == "seq-mean-token-mean":
        seq_tokens = torch.sum(loss_mask, dim=-1)  # (B,)
        seq_losses = torch.sum(loss_mat * loss_mask, dim=-1) / (seq_tokens + 1e-8)  # (B,) token-mean
        seq_mask = (seq_tokens > 0).float()  # fully masked sequences do not count
        return masked_sum_verl(seq_losses, seq_mask) / _nonzero(seq_mask.sum())
    # seq-mean-token-sum[-norm]
    seq_losses = torch.sum(loss_mat * loss_mask, dim=-1)  # (B,) token-sum
    seq_mask = (torch.sum(loss_mask, dim=-1) > 0).float()
    loss = masked_sum_verl(seq_losses, seq_mask) / _nonzero(seq_mask.sum())
    if loss_agg_mode == "seq-mean-token-sum-norm":
        loss = loss / (loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor)
    return loss


def check_agg(loss_agg_mode, loss_scale_factor):
    allowed = LOSS_AGG_MODES + TRL_AGG_MODES + ENGINE_AGG_MODES
    if loss_agg_mode not in allowed:
        raise ValueError(f"loss_agg_mode must be one of {list(allowed)}, got {loss_agg_mode!r}")
    if loss_agg_mode == "token-mean-legacy":
        if loss_scale_factor is not None and not (
            isinstance(loss_scale_factor, int) and not isinstance(loss_scale_factor, bool) and loss_scale_factor >= 1
        ):
            raise ValueError(
                "loss_scale_factor must be None or a whole number >= 1 for token-mean-legacy (the rows of one "
                f"micro-batch, SkyRL's per-GPU micro-batch size), got {loss_scale_factor!r}"
            )
        return
    if loss_scale_factor is not None and not (
        isinstance(loss_scale_factor, (int, float)) and math.isfinite(loss_scale_factor) and loss_scale_factor > 0
    ):
        raise ValueError(f"loss_scale_factor must be None or a finite number > 0, got {loss_scale_factor!r}")


def agg_loss(loss_mat, loss_mask, loss_agg_mode: str, loss_scale_factor=None):
    """Aggregate a (B, T) loss matrix to a scalar exactly as verl 0.9.1's `agg_loss` on one process.

    token-mean: Σ m·ℓ / Σ m (DAPO); token-sum: Σ m·ℓ; seq-mean-token-mean: mean over non-empty sequences of
    each sequence's token mean (original GRPO); seq-mean-token-sum: mean of per-sequence sums;
    seq-mean-token-sum-norm: that divided by `loss_scale_factor` (default the horizon T; Dr. GRPO).
    TRL 1.16's normalisations, where every sequence of the batch counts (an empty one as 0):
    seq-mean-token-mean-all: mean over all B sequences of Σ m·ℓ / max(Σ m, 1) (TRL grpo, sapo);
    seq-mean-token-sum-all: mean over all B of Σ m·ℓ (TRL luspo); token-sum-norm: Σ m·ℓ / `loss_scale_factor`
    (default B·T; TRL dr_grpo: B · the longest completion allowed; dapo/cispo/vespo: the generation
    batch's token count).
    Two more engines' (`divclip.theory.agg_modes.ENGINE_AGG_MODES`): seq-mean-token-mean-noeps: mean over
    non-empty sequences of Σ m·ℓ / Σ m, no + 1e-8 (OpenRLHF); token-mean-min1: Σ m·ℓ / Σ_rows max(Σ m, 1)
    (slime's per-token loss, an empty row counting one token); token-mean-legacy: the mean over micro-batches of
    `loss_scale_factor` rows (None: all rows) of each one's token mean, rows past the last whole one unweighted
    (SkyRL's token_mean_legacy).
    With dp_size = 1 and no global batch info, verl's global token/sequence counts are these local ones.
    One deliberate difference: an all-zero mask gives 0 here, where verl divides 0 by 0 (NaN).
    """
    check_agg(loss_agg_mode, loss_scale_factor)
    if loss_mat.shape != loss_mask.shape:
        raise ValueError(f"loss_mask has shape {tuple(loss_mask.shape)} but loss_mat has {tuple(loss_mat.shape)}")
    # TRL sums the plain product (ℓ·m).sum(); verl's masked_sum keeps NaN outside the mask out
    masked_sum = masked_sum_finite if loss_agg_mode in TRL_AGG_MODES else masked_sum_verl
    return aggregate(loss_mat, loss_mask, loss_agg_mode, loss_scale_factor, masked_sum)


# ---------------------------------------------------------------------------------------- diagnostics
METRIC_NAMES = (
    "clipfrac",
    "clipfrac_low",
    "clipfrac_high",
    "dual_clipfrac",
    "ppo_kl",
    "kl3",
    "ratio_mean",
    "ratio_min",
    "ratio_max",
)


PLUGIN_METRICS = ("clipfrac", "clipfrac_low", "clipfrac_high", "dual_clipfrac", "ppo_kl")
"""The diagnostics the engine plug-ins (divclip.trainer.integrations, each under its engine's metric names)
report: they compute only these, so no pass runs for kl3 or the ratio's mean, min and max."""


@torch.no_grad()
def clip_stats(terms, mask, extra=(), names=METRIC_NAMES):
    """The diagnostics as one 1-D tensor on the loss's device: the values of `names` (METRIC_NAMES, or a subset of
    it, in METRIC_NAMES' order), the number of unmasked tokens, then the masked means of the 0/1 (B, T) flags in
    `extra`. No host read: turn it into floats with one `.tolist()` (`metrics_from_stats`), one device-to-host
    transfer for everything. A subset computes only what its names need: without ppo_kl, kl3 and the ratio's
    statistics the log-ratio is never read (it may be None), without kl3 and a token ratio's statistics no
    expm1 pass runs, without ratio_min/ratio_max no min/max pass.

    `terms` carries (B, T) tensors: log_ratio, ratio, and 0/1 float flags clipped, clipped_low, dual (or None).
    Each masked sum is a dot product with the mask. ratio None means exp(log_ratio) (`PolicyTerms`): its sums come
    from the expm1(log r) that kl3 needs anyway; a ratio that is one value per sequence (a stride-0 view,
    `sequence_column`) is reduced on its (B, 1) column.

    Those two are fast paths of the plain masked sums over a materialised (B, T) ratio; held equal to them (to
    rounding: the sums run in another order) by tests/theory/test_loss_fast_paths.py::
    test_clip_stats_fast_paths_equal_the_plain_sums; the metrics themselves against numpy by
    tests/theory/test_losses.py::test_metrics_against_numpy; a subset equal to the same entries of the whole set,
    bit for bit, by tests/theory/test_metric_subsets.py.
    """
    wanted = set(names)
    m = mask.reshape(-1)

    def masked_sum(x):
        return torch.dot(x.reshape(-1), m)

    x, ratio = terms.log_ratio, terms.ratio
    n = m.sum()
    zero = torch.zeros((), dtype=m.dtype, device=m.device)
    ratio_stats = wanted & {"ratio_mean", "ratio_min", "ratio_max"}
    sums = {}  # name -> masked sum (divided by the count below)
    if wanted & {"clipfrac", "clipfrac_low", "clipfrac_high", "dual_clipfrac"}:
        n_clip, n_low, n_dual = (
            zero if f is None else masked_sum(f) for f in (terms.clipped, terms.clipped_low, terms.dual)
        )
        sums.update(clipfrac=n_clip, clipfrac_low=n_low, clipfrac_high=n_clip - n_low, dual_clipfrac=n_dual)
    if "ppo_kl" in wanted:
        sums["ppo_kl"] = -masked_sum(x)
    # (B, T) r - 1 of the token ratio, reused below
    scratch = torch.expm1(x) if "kl3" in wanted or (ratio is None and ratio_stats) else None
    ratio_min = ratio_max = zero
    if ratio_stats:
        want_min_max = bool(ratio_stats & {"ratio_min", "ratio_max"})
        if ratio is None:  # the token ratio: Σ m·r = Σ m·(r - 1) + n; min/max of r - 1, plus 1
            sums["ratio_mean"] = masked_sum(scratch) + n
            if want_min_max:
                ratio_min, ratio_max = _masked_min_max(scratch, mask, 1.0, zero)
        elif (column := sequence_column(ratio)) is not None:  # one ratio per sequence: (B, 1) work
            lengths = mask.sum(dim=-1, keepdim=True)  # (B, 1)
            sums["ratio_mean"] = torch.dot(column.reshape(-1), lengths.reshape(-1))
            if want_min_max:
                ratio_min, ratio_max = _masked_min_max(column, torch.clamp(lengths, max=1.0), 0.0, zero)
        else:
            sums["ratio_mean"] = masked_sum(ratio)
            if want_min_max:
                ratio_min, ratio_max = _masked_min_max(ratio, mask, 0.0, zero)
    if "kl3" in wanted:
        sums["kl3"] = masked_sum(scratch.sub_(x))  # Σ m·(r - 1 - log r); expm1 keeps tokens with r ≈ 1 accurate
    mean_names = [k for k in METRIC_NAMES if k in wanted and k not in ("ratio_min", "ratio_max")]
    stacked = [sums[k] for k in mean_names] + [masked_sum(f) for f in extra]
    means = torch.stack(stacked) / (n + 1e-8) if stacked else zero.new_zeros(0)
    by_name = dict(zip(mean_names, means[: len(mean_names)]))
    by_name.update(ratio_min=ratio_min, ratio_max=ratio_max)
    head = [by_name[k] for k in METRIC_NAMES if k in wanted] + [n]
    return torch.cat([torch.stack(head), means[len(mean_names) :]])


def _masked_min_max(values, mask, shift: float, zero):
    """(min, max) of values + shift over the entries where the 0/1 `mask` is 1 (0-d tensors; `zero` when there
    are no entries). Masked-out entries become ±1e30, out of reach (a ratio is at most e^20 under verl's clamp), by
    a lerp towards the values with the mask as weight: exact at weights 0 and 1, and one pass each (on this CPU a
    third of `1 − mask` and an add)."""
    if not values.numel():
        return zero, zero
    far = torch.full((), _FAR, dtype=values.dtype, device=values.device)
    spread = torch.lerp(far, values, mask)
    low = spread.min()
    high = torch.lerp(-far, values, mask, out=spread).max()
    return low + shift, high + shift


def metrics_from_stats(stats: list[float], names=METRIC_NAMES) -> dict[str, float]:
    """The dict of `names` from `clip_stats(..., names=names).tolist()` (its leading entries)."""
    names = [k for k in METRIC_NAMES if k in set(names)]
    metrics = {name: v + 0.0 for name, v in zip(names, stats)}  # + 0.0 turns -0.0 into 0.0
    if stats[len(names)] <= 0:  # empty mask: no ratio was seen
        metrics.update({k: 1.0 for k in ("ratio_mean", "ratio_min", "ratio_max") if k in metrics})
    return metrics


def clip_metrics(terms, mask, names=METRIC_NAMES) -> dict[str, float]:
    """Masked diagnostics of one policy-loss call as floats (see `divclip.theory.losses.policy_loss` for their
    meaning): `clip_stats` of `names` (all of METRIC_NAMES, or the subset a caller reports, which skips the passes
    only the others need) read in one device-to-host transfer."""
    return metrics_from_stats(clip_stats(terms, mask, names=names).tolist(), names)


# ------------------------------------------------------------------------------------- KL estimators
def kl_penalty(log_prob, ref_log_prob, estimator: str = "k3"):
    """Per-token estimate of KL(π_θ‖π_ref) from sampled-token log-probs (Schulman, "Approximating KL"), with
    verl 0.9.1 `kl_penalty`'s names, values and gradients.

    k1 ('kl'): log π - log π_ref (unbiased, can be negative); 'abs': |log π - log π_ref|; k2 ('mse'):
    ½(log π - log π_ref)²; k3 ('low_var_kl'): e^{ref - logp} - (ref - logp) - 1 >= 0, with the log-ratio
    clamped to ±20 and the result to ±10 exactly as verl. Used as a loss, k3's gradient is biased ("A Comedy of
    Estimators"). A '+' suffix ('k1+', 'k3+', 'low_var_kl+', ...) keeps the estimator's value and takes k2's
    gradient, log π - log π_ref, straight through: k2 - sg(k2) + sg(estimate), verl's expression.
    """
    base = estimator[:-1] if isinstance(estimator, str) and estimator.endswith("+") else estimator
    if base not in KL_ESTIMATORS:
        allowed = sorted(KL_ESTIMATORS) + sorted(f"{name}+" for name in KL_ESTIMATORS)
        raise ValueError(f"estimator must be one of {allowed}, got {estimator!r}")
    if not isinstance(log_prob, torch.Tensor) or not isinstance(ref_log_prob, torch.Tensor):
        raise ValueError(
            f"log_prob and ref_log_prob must be torch tensors, got {type(log_prob).__name__} and "
            f"{type(ref_log_prob).__name__}"
        )
    if log_prob.shape != ref_log_prob.shape:
        raise ValueError(
            f"ref_log_prob has shape {tuple(ref_log_prob.shape)} but log_prob has shape {tuple(log_prob.shape)}"
        )
    estimate = _kl_forward(log_prob, ref_log_prob, KL_ESTIMATORS[base])
    if base == estimator:
        return estimate
    k2 = 0.5 * (log_prob - ref_log_prob).square()  # its gradient is the unbiased KL gradient
    return k2 - k2.detach() + estimate.detach()


def _kl_forward(log_prob, ref_log_prob, kind: str):
    if kind == "k1":
        return log_prob - ref_log_prob
    if kind == "abs":
        return (log_prob - ref_log_prob).abs()
    if kind == "k2":
        return 0.5 * (log_prob - ref_log_prob).square()
    log_ratio = torch.clamp(ref_log_prob - log_prob, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)  # log(π_ref/π)
    k3 = (torch.exp(log_ratio) - log_ratio - 1).contiguous()
    return torch.clamp(k3, min=-KL3_CLAMP, max=KL3_CLAMP)
