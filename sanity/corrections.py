"""The rollout correction checked on a rollout file that holds the inference engine's log-probs beside the trainer's.

For each correction (the config's, read by `divclip.engines.read_correction`, those given with --corrections,
or else a few engines' defaults) the numbers are `divclip.theory.rollout_correction` on the file's tensors:
the kept fraction of tokens and of sequences, the ESS and the weight min/mean/max. Once per file: the mismatch
ρ = π_old/π_rollout as k1 = log π_rollout - log π_old and k3 = ρ - 1 - log ρ per token (mean and quantiles),
and its drift d, the mean log ρ per valid token, from which the length L at which a typical sequence crosses a
sequence-level bound follows: ρ_seq ≈ exp(d·L) crosses a cap C at L = log C / d (d > 0) (docs/theory.md, "The
three policies": a drift of 0.012 over 100 tokens gives ρ_seq ≈ 3.3 > 3.0).

Warnings: a correction that masks every token (verl then raises "Expected at least one valid token" on the
next step's metrics), or more than `max_masked` of them; the length trap (a typical sequence longer than L);
an anchor mistake (old_log_prob equal to rollout_log_prob, or rollout_log_prob equal to log_prob); double
counting (an importance weight in bypass mode, where the loss's own ratio is already to π_rollout).
"""

from __future__ import annotations

import math

import numpy as np

from divclip.sanity.checks import Finding
from divclip.sanity.validation import Rollouts
from divclip.theory.correction import Correction, parse_correction

DEFAULT_CORRECTIONS = {
    "verl token TIS": "is=token:tis=2.0",
    "verl sequence TIS": "is=sequence:tis=2.0",
    "TRL default (sequence_mask 3.0)": "is=sequence:mask=3.0/noclamp",
    "verl geometric RS": "rs=seq_mean_k1:0.999_1.001",
    "token k3 RS": "rs=token_k3:0.01",
}
"""What is checked when neither the config nor --corrections names a correction."""
DEFAULT_MAX_MASKED = 0.5
QUANTILES = (0.5, 0.9, 0.99)
HISTOGRAM_BINS = 50
SOURCES = {
    "correction_masks_everything": "verl 0.9.1 rollout_corr_helper: compute_offpolicy_metrics asserts 'Expected at "
    "least one valid token in response_mask'; docs/theory.md, 'The three policies'",
    "correction_masks_most": "docs/theory.md, 'The three policies': a rejection keeps a token only inside the "
    "threshold's ρ interval",
    "correction_length_trap": "docs/theory.md, 'The three policies': ρ_seq = exp(Σ log ρ_t) grows with length; "
    "verl's docs recommend sequence-level thresholds of 2-10 (RolloutCorrectionConfig)",
    "correction_anchor": "verl 0.9.1 RolloutCorrectionConfig: decoupled mode weights π_old/π_rollout; bypass sets "
    "π_old = π_rollout",
    "correction_double_counting": "verl 0.9.1 core_algos.compute_policy_loss_bypass_mode: with ppo_clip the ratio "
    "π_θ/π_rollout already carries the weight ('would be double-counting')",
    "correction_not_modelled": "docs/engines.md, 'Rollout corrections'",
    "correction_default_differs": "TRL 1.16.0 trl/trainer/grpo_config.py: the field vllm_importance_sampling_mode "
    "defaults to 'sequence_mask' while the class docstring marks 'token_truncate' as the default",
}


def _warn(code: str, message: str, key: str | None = None) -> dict:
    return Finding(code, message, SOURCES[code], key).to_dict()


def parse_corrections(text: str | None) -> dict[str, Correction]:
    """{label: Correction} of a comma-separated list of correction strings (the label is the string)."""
    if text is None:
        return {}
    if not isinstance(text, str):
        raise ValueError(f"--corrections must be a comma-separated list of correction strings, got {text!r}")
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ValueError(f"--corrections names no correction, got {text!r}")
    return {item: parse_correction(item) for item in items}


def mismatch(log_ratio: np.ndarray, inside: np.ndarray, lengths: np.ndarray) -> dict:
    """k1, k3 and the drift of log ρ over the valid tokens (float64)."""
    lr = log_ratio[inside]
    k1 = -lr
    k3 = np.expm1(np.clip(lr, -20, 20)) - np.clip(lr, -20, 20)
    seq = np.where(inside, log_ratio, 0.0).sum(-1)[lengths > 0]
    return {
        "tokens": int(lr.size),
        "drift_mean_log_rho": float(lr.mean()),
        "std_log_rho": float(lr.std()),
        "k1": {"mean": float(k1.mean()), **{f"q{int(q * 100)}": float(np.quantile(k1, q)) for q in QUANTILES}},
        "k3": {
            "mean": float(k3.mean()),
            **{f"q{int(q * 100)}": float(np.quantile(k3, q)) for q in QUANTILES},
            "max": float(k3.max()),
        },
        "seq_log_rho": {"min": float(seq.min()), "median": float(np.median(seq)), "max": float(seq.max())},
        "median_length": float(np.median(lengths[lengths > 0])),
        "max_length": int(lengths.max()),
    }


def crossing_lengths(c: Correction, drift: float, k_means: dict, spread: float = 0.0) -> dict:
    """{bound: L}: the length at which a sequence drifting by `drift` per token (mean log ρ; k_means the mean
    token k2/k3, and AReaL's kl_k2/kl_k3) meets each sequence-level bound (an AReaL filter's sum too); absent
    where the bound is never met at this drift. With the per-token std `spread` of log ρ, also '{bound} (1σ)':
    the length (log C / σ)² at which one standard deviation of Σ log ρ (a random walk, whatever the drift)
    reaches the bound."""
    out = {}
    if c.is_level == "sequence":
        if drift > 0 and c.is_cap is not None:
            out["is_cap"] = math.log(c.is_cap) / drift
        if drift < 0 and c.is_floor is not None and c.is_floor > 0:
            out["is_floor"] = math.log(c.is_floor) / drift
        if spread > 0 and c.is_cap is not None and c.is_cap > 1:
            out["is_cap (1σ)"] = (math.log(c.is_cap) / spread) ** 2
    for r in c.rejections:
        if r.aggregation != "sum":
            continue  # token, mean and max statistics do not grow with length
        if r.is_k1 and drift != 0:  # Σ k1 = -d·L must stay in [log lo, log hi]
            bound = math.log(r.upper) if drift < 0 else math.log(r.lower)
            if bound * -drift > 0:
                out[f"rs={r.option}"] = bound / -drift
        elif not r.is_k1 and k_means[r.estimator] > 0:
            out[f"rs={r.option}"] = r.upper / k_means[r.estimator]
    f = c.filter
    if f is not None and f.level == "sequence" and f.agg == "sum":  # AReaL's sum grows with L (mean, max do not)
        if f.metric in ("ratio", "kl_k1"):  # Σ log ρ_t = d·L must stay in [lower, upper] (ratio: their logs)
            up = math.log(f.upper) if f.metric == "ratio" else f.upper
            low = None if f.lower is None else (math.log(f.lower) if f.metric == "ratio" else f.lower)
            if drift > 0 and up > 0:
                out["filter"] = up / drift
            elif drift < 0 and low is not None and low < 0:
                out["filter"] = low / drift
        elif k_means.get(f.metric, 0) > 0:  # the token mean of AReaL's kl_k2 / kl_k3
            out["filter"] = f.upper / k_means[f.metric]
    return out


def analyse_corrections(
    data: Rollouts,
    corrections: dict[str, Correction],
    *,
    spec=None,
    max_masked: float = DEFAULT_MAX_MASKED,
) -> tuple[dict | None, list[dict]]:
    """(the report's 'corrections' section, warnings) for `data`; (None, []) without rollout_log_prob."""
    import torch

    from divclip.theory.correction_apply import rollout_correction

    if not (isinstance(max_masked, (int, float)) and 0 < max_masked <= 1):
        raise ValueError(f"max_masked must be a fraction in (0, 1], got {max_masked!r}")
    if data.rollout_log_prob is None:
        return None, []
    mask = data.response_mask
    inside = mask > 0
    old = data.old_log_prob.astype(np.float64)
    rollout = data.rollout_log_prob.astype(np.float64)
    log_ratio = np.where(inside, old - rollout, 0.0)
    lengths = mask.sum(-1)
    mis = mismatch(log_ratio, inside, lengths)
    lr = np.clip(log_ratio[inside], -20, 20)
    k_means = {"k2": float((0.5 * lr**2).mean()), "k3": float((np.expm1(lr) - lr).mean())}
    k_means["kl_k2"], k_means["kl_k3"] = k_means["k2"], float((np.expm1(-lr) + lr).mean())  # AReaL's (k3 of 1/ρ)
    warnings = _anchor_warnings(data, inside, old, rollout)
    section = {"file": data.name, "mismatch": mis, "max_masked": max_masked, "corrections": []}
    t = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in (("old", old), ("roll", rollout), ("m", mask))}
    adv = torch.from_numpy(np.ascontiguousarray(data.advantages.astype(np.float64)))
    for label, c in corrections.items():
        anchor = t["old"]
        if c.bypass and data.log_prob is not None:  # bypass: ρ = π_θ/π_rollout
            anchor = torch.from_numpy(np.ascontiguousarray(data.log_prob.astype(np.float64)))
        w, keep, m = rollout_correction(anchor, t["roll"], t["m"], c, advantages=adv if c.opsm is not None else None)
        valid = t["m"].bool()
        applied = torch.ones_like(anchor) if w is None else w
        entry = {
            "label": label,
            "correction": str(c),
            "kept_token_fraction": m["kept_token_fraction"],
            "kept_seq_fraction": m["kept_seq_fraction"],
            "rejected_token_fraction": float(((keep == 0) & valid).sum()) / max(1, int(valid.sum())),
            "weight": None
            if w is None
            else {
                "min": float(w[valid].min()),
                "mean": float(w[valid].mean()),
                "max": float(w[valid].max()),
                "ess": m.get("is_ess", _ess(applied[valid & (keep > 0)])),
            },
            "crossing_length": crossing_lengths(c, mis["drift_mean_log_rho"], k_means, mis["std_log_rho"]),
        }
        entry["per_sequence"] = _per_sequence(applied, keep, valid)
        entry["weight_histogram"] = None if w is None else w[valid].numpy()  # binned below, on shared edges
        section["corrections"].append(entry)
        warnings += _entry_warnings(entry, mis, max_masked)
        warnings += _double_counting(label, c, spec)
    _shared_histograms(section["corrections"])
    return section, warnings


def _shared_histograms(entries: list[dict], bins: int = HISTOGRAM_BINS) -> None:
    """Each entry's weights as counts on one set of edges, [0, the largest weight of any correction]."""
    arrays = [e["weight_histogram"] for e in entries if e["weight_histogram"] is not None]
    hi = max((float(a.max()) for a in arrays if a.size), default=1.0)
    edges = np.linspace(0.0, hi if hi > 0 else 1.0, bins + 1)
    for e in entries:
        if e["weight_histogram"] is not None:
            counts, _ = np.histogram(e["weight_histogram"], bins=edges)
            e["weight_histogram"] = {"edges": edges.tolist(), "counts": counts.tolist()}


def _per_sequence(applied, keep, valid) -> dict:
    """{length, kept}: per valid sequence its length and the share of its tokens kept with a weight > 0."""
    kept = (valid & (keep > 0) & (applied > 0)).sum(-1).double()
    n = valid.sum(-1).double()
    rows = n > 0
    return {"length": n[rows].tolist(), "kept": (kept[rows] / n[rows]).tolist()}


def _ess(w) -> float | None:
    if w.numel() == 0 or float(w.sum()) == 0:
        return None
    return float(w.sum() ** 2 / (w.numel() * (w**2).sum()))


def _entry_warnings(e: dict, mis: dict, max_masked: float) -> list[dict]:
    out = []
    name = f"{e['label']} ({e['correction']})" if e["label"] != e["correction"] else e["correction"]
    if e["kept_token_fraction"] == 0:
        out.append(
            _warn(
                "correction_masks_everything",
                f"correction {name} keeps no token of the file (every weight 0 or every token rejected): "
                "the update has no gradient, and verl stops with 'Expected at least one valid token'",
            )
        )
    elif 1 - e["kept_token_fraction"] > max_masked:
        out.append(
            _warn(
                "correction_masks_most",
                f"correction {name} drops {1 - e['kept_token_fraction']:.1%} of the tokens (weight 0 or rejected), "
                f"more than the stated {max_masked:.0%}",
            )
        )
    for bound, length in e["crossing_length"].items():
        if length <= mis["median_length"]:
            out.append(
                _warn(
                    "correction_length_trap",
                    f"correction {name}: at the file's drift of {mis['drift_mean_log_rho']:+.4g} log ρ per token a "
                    f"sequence reaches its {bound} bound after {length:.0f} tokens, shorter than the median "
                    f"sequence ({mis['median_length']:.0f} tokens): long answers are cut or masked first",
                )
            )
    return out


def _double_counting(label: str, c: Correction, spec) -> list[dict]:
    if not (c.bypass and c.is_level is not None):
        return []
    form = None if spec is None else spec.form
    if form == "gpg":
        return []
    return [
        _warn(
            "correction_double_counting",
            f"correction {label}: an importance weight in bypass mode, where π_old is π_rollout: the loss's ratio "
            f"π_θ/π_rollout already carries it (form {form or 'clip'}); verl's ppo_clip computes it for its metrics "
            "only, and applying it would count the mismatch twice (e.g. CISPO anchored at the rollout plus TIS)",
        )
    ]


def _anchor_warnings(data: Rollouts, inside, old, rollout) -> list[dict]:
    out = []
    if np.array_equal(old[inside], rollout[inside]):
        out.append(
            _warn(
                "correction_anchor",
                f"rollout_log_prob equals old_log_prob at every valid token of {data.name!r}: ρ = 1 and no "
                "correction acts. Either the trainer recomputed nothing (verl's bypass mode, π_old = π_rollout) or "
                "the file holds the trainer's log-probs twice",
                "rollout_log_prob",
            )
        )
    elif data.log_prob is not None and np.array_equal(data.log_prob[inside], rollout[inside]):
        out.append(
            _warn(
                "correction_anchor",
                f"rollout_log_prob equals log_prob (π_θ) at every valid token of {data.name!r}: the inference "
                "engine's log-probs belong there; a correction of π_θ/π_θ does nothing",
                "rollout_log_prob",
            )
        )
    return out


def correction_rows(section: dict) -> list[dict]:
    """One flat row per correction of the section, for a table (the Sanity page)."""
    rows = []
    for e in section["corrections"]:
        w = e["weight"] or {}
        rows.append(
            {
                "correction": e["label"],
                "string": e["correction"],
                "kept tokens": e["kept_token_fraction"],
                "kept sequences": e["kept_seq_fraction"],
                "ESS": w.get("ess"),
                "w min": w.get("min"),
                "w mean": w.get("mean"),
                "w max": w.get("max"),
                "crosses a bound at L": ", ".join(f"{k}: {v:.0f}" for k, v in e["crossing_length"].items()) or None,
            }
        )
    return rows
