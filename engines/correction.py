"""Each engine's rollout correction (the third policy, `divclip.theory.correction`) read from and written to its keys.

`read_correction(engine, settings) -> Correction | None` reads the engine's own keys with its own defaults (None:
the engine applies no correction with these settings); `write_correction(correction, engine)` gives the engine's
settings and the list of what the engine cannot say. Per engine (docs/engines.md, "Rollout corrections"):

* verl 0.9.1 `algorithm.rollout_correction.*`: rollout_is (default null) with rollout_is_threshold (2.0: TIS
  cap; 'lo_hi': IcePop band), rollout_is_batch_normalize, rollout_rs / rollout_rs_threshold (comma lists),
  bypass_mode. verl clamps log ρ to ±20 and has no TIS floor.
* TRL 1.16.0: with use_vllm, vllm_importance_sampling_correction (default true) and vllm_importance_sampling_mode
  (default sequence_mask) with clip_max (3.0; the deprecated vllm_importance_sampling_cap) and clip_min (none);
  off_policy_mask_threshold (OPSM). TRL does not clamp log ρ; it has no rejection rules.
* SkyRL 0.3.0 `trainer.algorithm.off_policy_correction.*`: tis_ratio_type with token/sequence caps (2.0 / 5.0);
  sequence_mask_metric geometric ([geo_mask_low, geo_mask_high] on exp(mean log ρ)) or product (on Π ρ); the
  token mask [token_mask_is_threshold_low, _high]. The ρ bands become verl's k1 rules, which bound 1/ρ:
  [c, C] on ρ is [1/C, 1/c] on exp(k1). The outlier-token mask outlier_token_is_threshold_low/high (a
  sequence dropped for one token out of band; either side may be unset) is the rule `seq_any_k1` on the same
  inverted band (an unset side: beyond e^20, where the ±20 clamp of log ρ never reaches; verl has no such
  rule). `policy_loss_type: rollout_is` is the bypass correction
  `is=token:mask=(1 - eps_clip_low)_(1 + eps_clip_high)/bypass` (its loss: that weight under method ratio/gpg).
* slime (624b824a): --use-tis is `vanilla_tis_function`, w = clamp(ρ, --tis-clip-low, --tis-clip) unclamped in
  log; a --custom-tis-function-path (ICEPOP's `icepop_function` among them) and --use-opsm are refused (a
  custom function is code; slime's OPSM compares π_old, not π_rollout).
* OpenRLHF 0.11.2 `--algo.advantage.is_correction_*`: token level, ratio gating: clip is w = clamp(ρ, low,
  high), mask w = ρ inside [low, high] else 0 (one threshold value: low 0), unclamped in log; none under gspo,
  whose ratio is taken to π_rollout instead (`EngineRead.ratio_anchor`). Level seq (mask) is the filter
  `sequence:ratio:mean:mask:LOW_HIGH:token`: each token keeps its own ρ where exp(mean log ρ) of its sequence is
  in [low, high], 0 in the whole sequence elsewhere (it stays in the denominator). Gating binary_kl / tv (mask,
  one δ: band [0, δ]) is the filter `token:binary_kl:mask:0.0_δ` (binary_tv for tv), at level seq
  `sequence:METRIC:mean:mask:0.0_δ`: ρ kept where the divergence of π_old from π_rollout (or its sequence mean)
  is inside the band.
* AReaL 1.0.4 `actor.rejection_sampling` (RejectionSamplingConfig: level, action, metric, agg, upper 5.0,
  lower) is the correction's `filter` and `actor.m2_threshold` its `m2po`, both only with
  `actor.use_decoupled_loss` (without it AReaL ignores rejection_sampling, and π_prox = π_old makes M2PO's
  (log π_old − log π_prox)² zero); unclamped in log. use_decoupled_loss with neither: no correction. With
  importance_sampling_level sequence (GSPO) a mask filter also shrinks the tokens AReaL's sequence ratio and
  advantage are averaged over; `policy_loss` does not (its read says so).

Every part an engine's writer cannot say is named (no part is dropped in silence): a filter is written to the
others only where it is a token weight they have (ratio mask/clamp) or, to OpenRLHF, its own gate; AReaL's M2PO
to none; OpenRLHF's gates (binary metrics, a sequence gate keeping token weights) to AReaL neither.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from divclip.engines.base import ConfigError, Key, typed_values
from divclip.engines.openrlhf import _floats, check_is_flags
from divclip.theory.correction import RS_OPTIONS, SEQ_ANY_K1, Correction, Filter, Rejection, parse_correction

__all__ = ["CORRECTION_KEYS", "read_correction", "write_correction"]

VERL = "algorithm.rollout_correction."
SKYRL = "trainer.algorithm.off_policy_correction."
AREAL_RS = "actor.rejection_sampling."
TRL_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")

CORRECTION_KEYS: dict[str, dict[str, Key]] = {
    "verl": {
        VERL + "rollout_is": Key("str", None, nullable=True, choices=("token", "sequence"), doc="IS level"),
        VERL + "rollout_is_threshold": Key("str", 2.0, nullable=True, doc="TIS cap C or IcePop band 'c_C'"),
        VERL + "rollout_is_batch_normalize": Key("bool", False, doc="divide the weights by their batch mean"),
        VERL + "rollout_rs": Key("str", None, nullable=True, doc="rejection options, comma separated"),
        VERL + "rollout_rs_threshold": Key("str", None, nullable=True, doc="their thresholds, comma separated"),
        VERL + "bypass_mode": Key("bool", False, doc="old_log_prob = rollout_log_prob"),
    },
    "trl": {
        "use_vllm": Key("bool", False, doc="generate with vLLM (the correction applies only then)"),
        "vllm_importance_sampling_correction": Key("bool", True, doc="apply the vLLM IS correction"),
        "vllm_importance_sampling_mode": Key("str", "sequence_mask", choices=TRL_MODES, doc="level and kind"),
        "vllm_importance_sampling_clip_max": Key("float", 3.0, nullable=True, above=0.0, doc="C_max"),
        "vllm_importance_sampling_clip_min": Key("float", None, nullable=True, above=-math.inf, doc="C_min"),
        "vllm_importance_sampling_cap": Key("float", None, nullable=True, above=0.0, doc="deprecated C_max"),
        "off_policy_mask_threshold": Key("float", None, nullable=True, above=-math.inf, doc="OPSM δ"),
    },
    "skyrl": {
        SKYRL + "tis_ratio_type": Key("str", None, nullable=True, choices=("token", "sequence"), doc="TIS level"),
        SKYRL + "token_tis_ratio_clip_high": Key("float", 2.0, above=0.0, doc="token TIS cap"),
        SKYRL + "sequence_tis_ratio_clip_high": Key("float", 5.0, above=0.0, doc="sequence TIS cap"),
        SKYRL + "sequence_mask_metric": Key(
            "str", None, nullable=True, choices=("geometric", "product"), doc="sequence mask"
        ),
        SKYRL + "geo_mask_high": Key("float", 1.01, above=0.0, doc="geometric band high"),
        SKYRL + "geo_mask_low": Key("float", 0.99, above=0.0, doc="geometric band low"),
        SKYRL + "product_mask_high": Key("float", 2.0, above=0.0, doc="product band high"),
        SKYRL + "product_mask_low": Key("float", 0.5, above=0.0, doc="product band low"),
        SKYRL + "outlier_token_is_threshold_low": Key("float", None, nullable=True, above=-math.inf, doc="outlier"),
        SKYRL + "outlier_token_is_threshold_high": Key("float", None, nullable=True, above=-math.inf, doc="outlier"),
        SKYRL + "token_mask_is_threshold_low": Key("float", None, nullable=True, above=0.0, doc="token mask low"),
        SKYRL + "token_mask_is_threshold_high": Key("float", None, nullable=True, above=0.0, doc="token mask high"),
        "trainer.algorithm.use_tis": Key("bool", False, doc="deprecated: tis_ratio_type=token"),
        "trainer.algorithm.policy_loss_type": Key("str", "regular", doc="rollout_is: a bypass IcePop weight"),
        "trainer.algorithm.eps_clip_low": Key("float", 0.2, above=0.0, doc="rollout_is: the band's 1 - ε_low"),
        "trainer.algorithm.eps_clip_high": Key("float", 0.2, above=0.0, doc="rollout_is: the band's 1 + ε_high"),
        "trainer.algorithm.tis_imp_ratio_cap": Key("float", -1.0, above=-math.inf, doc="deprecated: its cap"),
    },
    "slime": {
        "--use-tis": Key("bool", False, doc="weight the loss by clamp(ρ, low, high)"),
        "--tis-clip": Key("float", 2.0, above=0.0, doc="its upper clamp"),
        "--tis-clip-low": Key("float", 0.0, above=-math.inf, doc="its lower clamp"),
        "--custom-tis-function-path": Key("str", None, nullable=True, doc="a custom IS function"),
        "--use-opsm": Key("bool", False, doc="off-policy sequence masking"),
        "--opsm-delta": Key("float", 1e-4, above=-math.inf, doc="its δ"),
    },
    "openrlhf": {
        "--algo.advantage.is_correction_level": Key("str", "off", choices=("off", "token", "seq"), doc="level"),
        "--algo.advantage.is_correction_mode": Key("str", "mask", choices=("mask", "clip"), doc="mask or clamp"),
        "--algo.advantage.is_correction_gating": Key(
            "str", "ratio", choices=("ratio", "binary_kl", "tv"), doc="the gated statistic"
        ),
        "--actor.policy_loss_type": Key("str", "ppo", choices=("ppo", "gspo"), doc="gspo applies no IS weight"),
    },
    "areal": {
        "actor.use_decoupled_loss": Key("bool", False, doc="π_prox anchor and behaviour weight"),
        "actor.m2_threshold": Key("float", None, nullable=True, above=0.0, doc="M2PO second-moment threshold"),
        AREAL_RS + "level": Key("str", "token", choices=("token", "sequence"), doc="filter granularity"),
        AREAL_RS + "action": Key("str", "mask", choices=("mask", "clamp"), doc="zero or clamp the weight"),
        AREAL_RS + "metric": Key("str", "ratio", choices=("ratio", "kl_k1", "kl_k2", "kl_k3"), doc="statistic"),
        AREAL_RS + "agg": Key("str", "mean", choices=("sum", "mean", "max"), doc="sequence aggregation"),
        AREAL_RS + "upper": Key("float", 5.0, above=-math.inf, doc="upper bound"),
        AREAL_RS + "lower": Key("float", None, nullable=True, above=-math.inf, doc="lower bound"),
    },
}
"""The keys each engine's correction is read from, with the engine's defaults (checked in tests/engines)."""


def read_correction(engine: str, settings: Mapping) -> Correction | None:
    """The rollout correction `settings` of `engine` apply (None: none); a ValueError names what divclip does not
    model or a value the engine refuses."""
    if engine not in CORRECTION_KEYS:
        raise ValueError(f"engine must be one of {list(CORRECTION_KEYS)}, got {engine!r}")
    if not isinstance(settings, Mapping):
        raise ValueError(f"settings must be a mapping of the engine's keys to values, got {type(settings).__name__}")
    g, _ = typed_values(_scalars(engine, settings), CORRECTION_KEYS[engine])
    return _READERS[engine](g, settings)


def write_correction(correction: Correction | None, engine: str) -> tuple[dict, list[str]]:
    """(settings, cannot): `correction` in `engine`'s keys, and one sentence per part the engine cannot say (those
    parts are left out of the settings). None writes the engine's 'off'."""
    if engine not in CORRECTION_KEYS:
        raise ValueError(f"engine must be one of {list(CORRECTION_KEYS)}, got {engine!r}")
    c = Correction() if correction is None else parse_correction(correction)
    if engine == "areal":
        return _write_areal(c)
    if engine == "openrlhf" and c.filter is not None and _openrlhf_gate(c.filter) is not None:
        return _write_openrlhf(c)
    c, cannot = _without_areal_parts(c, engine)
    out, more = _WRITERS[engine](c)
    return out, cannot + more


def _without_areal_parts(c: Correction, engine: str) -> tuple[Correction, list[str]]:
    """`c` with AReaL's filter as the token weight it is (ratio mask/clamp) or left out, and M2PO left out; the
    sentences naming what was left out."""
    import dataclasses

    cannot = []
    f, weight = c.filter, {}
    if f is not None:
        if f.level == "token" and f.metric == "ratio":  # w = ρ masked or clamped to [lower, upper]: an is= weight
            mode = "mask" if f.action == "mask" else "truncate"
            weight = dict(is_level="token", is_mode=mode, is_cap=f.upper, is_floor=f.lower, clamp_log_ratio=False)
        else:
            geometric = f.metric == "ratio" and f.seq_weight == "geometric"
            what = "the geometric mean of the sequence" if geometric else f"ρ, gated by {f.metric}"
            owner = "AReaL" if f.areal else "OpenRLHF"
            if engine == "openrlhf" and not f.areal:  # an OpenRLHF-kind filter its flags cannot say
                cannot.append(
                    f"OpenRLHF's is_correction gate is a mask on the token's statistic or its sequence mean, with a "
                    f"lower bound <= 0 for binary_kl / tv: filter {f} is not expressible"
                )
            else:
                cannot.append(
                    f"{engine} has no {owner} filter {f} (a weight of {what}, {f.action}ed on the {f.level} statistic)"
                )
    if c.m2po is not None:
        cannot.append(f"{engine} has no M2PO second-moment mask (m2po={c.m2po!r}, AReaL's m2_threshold)")
    return dataclasses.replace(c, filter=None, m2po=None, **weight), cannot


def _scalars(engine, settings):
    """verl's thresholds may be numbers or strings: typed here as strings, read by the reader."""
    out = dict(settings)
    if engine == "verl":
        for k in ("rollout_is_threshold", "rollout_rs_threshold"):
            v = out.get(VERL + k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[VERL + k] = repr(float(v))
    return out


# --------------------------------------------------------------------------------------------------- verl
def _verl_band(text, key) -> tuple[float | None, float]:
    try:
        if "_" in text:
            lo, hi = text.split("_", 1)
            return float(lo), float(hi)
        return None, float(text)
    except ValueError:
        raise ConfigError(f"{key} must be a number or 'lower_upper', got {text!r}") from None


def _read_verl(g, settings):
    level, bypass = g[VERL + "rollout_is"], g[VERL + "bypass_mode"]
    fields: dict = {"batch_normalize": g[VERL + "rollout_is_batch_normalize"], "bypass": bypass}
    threshold = g[VERL + "rollout_is_threshold"]
    if level is not None and threshold is not None:  # verl computes weights only when both are set
        text = threshold.strip() if isinstance(threshold, str) else repr(float(threshold))  # the default 2.0
        floor, cap = _verl_band(text, VERL + "rollout_is_threshold")
        fields.update(is_level=level, is_cap=cap, is_floor=floor, is_mode="truncate" if floor is None else "mask")
    rejections = _verl_rejections(g[VERL + "rollout_rs"], g[VERL + "rollout_rs_threshold"])
    try:
        c = Correction(**fields, rejections=rejections)
    except ValueError as exc:
        raise ConfigError(f"{VERL}*: {exc}") from None
    return c if c.active or bypass else None


def _verl_rejections(options, thresholds) -> tuple[Rejection, ...]:
    if options is None:
        return ()
    names = list(dict.fromkeys(o.strip() for o in options.split(",") if o.strip()))  # verl drops duplicates
    bad = [o for o in names if o not in RS_OPTIONS]
    if not names or bad:
        raise ConfigError(f"{VERL}rollout_rs must list options of {list(RS_OPTIONS)}, got {options!r}")
    if thresholds is None:
        raise ConfigError(f"{VERL}rollout_rs_threshold must be set when rollout_rs is ({options!r}); verl raises")
    specs = [t.strip() for t in thresholds.split(",") if t.strip()]
    if len(specs) not in (1, len(names)):
        raise ConfigError(f"{VERL}rollout_rs_threshold needs 1 or {len(names)} entries for {names}, got {thresholds!r}")
    specs = specs * len(names) if len(specs) == 1 else specs
    out = []
    for name, spec in zip(names, specs, strict=True):
        lo, hi = _verl_band(spec, VERL + "rollout_rs_threshold")
        if name.endswith("k1") and lo is None:
            lo = 1.0 / hi if hi > 0 else hi  # verl: a bare k1 number C means 1/C_C
        try:
            out.append(Rejection(name, hi, lo))
        except ValueError as exc:
            raise ConfigError(f"{VERL}rollout_rs_threshold for {name}: {exc}") from None
    return tuple(out)


def _write_verl(c: Correction):
    out: dict = {VERL + "rollout_is": None, VERL + "rollout_rs": None, VERL + "bypass_mode": c.bypass}
    out[VERL + "rollout_is_batch_normalize"] = c.batch_normalize
    cannot = []
    if c.is_level is not None:
        if c.is_mode == "truncate" and c.is_floor is None:
            out[VERL + "rollout_is"], out[VERL + "rollout_is_threshold"] = c.is_level, c.is_cap
        elif c.is_mode == "mask" and c.is_floor is not None and c.is_floor > 0 and c.is_cap is not None:
            out[VERL + "rollout_is"] = c.is_level
            out[VERL + "rollout_is_threshold"] = f"{c.is_floor!r}_{c.is_cap!r}"
        else:
            what = f"{c.is_mode} to [{c.is_floor}, {c.is_cap}]"
            cannot.append(f"verl has no importance weight {what} (TIS: a cap alone; IcePop: a band 0 < c <= C)")
    rules = [r for r in c.rejections if r.option in RS_OPTIONS]
    if rules:
        out[VERL + "rollout_rs"] = ",".join(r.option for r in rules)
        out[VERL + "rollout_rs_threshold"] = ",".join(r.threshold for r in rules)
    for r in c.rejections:
        if r.option not in RS_OPTIONS:
            cannot.append(
                f"verl has no rejection option {r.option} (rs={r.option}:{r.threshold}, SkyRL's outlier mask)"
            )
    if c.opsm is not None:
        cannot.append(f"verl has no off-policy sequence mask (opsm={c.opsm!r})")
    if not c.clamp_log_ratio and c.active:
        cannot.append("verl clamps log ρ to ±20 (noclamp): the weights differ only where |log ρ| > 20")
    return out, cannot


# ---------------------------------------------------------------------------------------------------- TRL
def _read_trl(g, settings):
    fields: dict = {"clamp_log_ratio": False, "opsm": g["off_policy_mask_threshold"]}
    if g["use_vllm"] and g["vllm_importance_sampling_correction"]:
        level, kind = g["vllm_importance_sampling_mode"].split("_")
        cap = g["vllm_importance_sampling_clip_max"]
        if g["vllm_importance_sampling_cap"] is not None:  # TRL copies the deprecated name over clip_max
            cap = g["vllm_importance_sampling_cap"]
        fields.update(is_level=level, is_mode=kind, is_cap=cap, is_floor=g["vllm_importance_sampling_clip_min"])
    try:
        c = Correction(**fields)
    except ValueError as exc:
        raise ConfigError(f"TRL vllm_importance_sampling_*: {exc}") from None
    return c if c.active else None


def _write_trl(c: Correction):
    out: dict = {"vllm_importance_sampling_correction": c.is_level is not None}
    cannot = []
    if c.is_level is not None:
        out["vllm_importance_sampling_mode"] = f"{c.is_level}_{c.is_mode}"
        out["vllm_importance_sampling_clip_max"] = c.is_cap
        out["vllm_importance_sampling_clip_min"] = c.is_floor
    if c.opsm is not None:
        out["off_policy_mask_threshold"] = c.opsm
    if c.rejections:
        cannot.append("TRL has no rejection rules: " + ", ".join(f"rs={r.option}:{r.threshold}" for r in c.rejections))
    if c.batch_normalize:
        cannot.append("TRL does not normalise the importance weights (norm)")
    if c.bypass:
        cannot.append("TRL has no bypass mode: its π_old is recomputed whenever vLLM generates")
    if c.clamp_log_ratio and c.is_level is not None:
        cannot.append("TRL does not clamp log ρ to ±20: the weights differ only where |log ρ| > 20")
    return out, cannot


# -------------------------------------------------------------------------------------------------- SkyRL
OPEN_SIDE = math.exp(21.0)
"""An unset side of SkyRL's outlier band: ρ = e^{±21} lies beyond e^{±20}, where SkyRL (safe_exp_delta) and
divclip's rules clamp log ρ, so no token ever crosses it: the side is open, exactly."""


def _inverse_band(name, lo, hi) -> Rejection:
    """A band [lo, hi] on ρ (or Π ρ, or exp(mean log ρ)) as verl's k1 rule, which bounds the inverse."""
    return Rejection(name, 1.0 / lo, 1.0 / hi)


def _read_skyrl(g, settings):
    k = SKYRL
    if g["trainer.algorithm.policy_loss_type"] == "rollout_is":
        return _skyrl_rollout_is(g, settings)
    if g["trainer.algorithm.policy_loss_type"] in ("importance_sampling", "cross_entropy"):
        return None  # these losses call no apply_off_policy_correction (SkyRL's read warns if it is set)
    level = g[k + "tis_ratio_type"] or ("token" if g["trainer.algorithm.use_tis"] else None)
    fields: dict = {}
    if level is not None:
        cap = g[k + f"{level}_tis_ratio_clip_high"]
        if g["trainer.algorithm.use_tis"] and g["trainer.algorithm.tis_imp_ratio_cap"] > 0:
            cap = g["trainer.algorithm.tis_imp_ratio_cap"]
        fields.update(is_level=level, is_cap=cap, exp_dtype="float32")  # safe_exp_delta: float32 whatever the input
    rules = []
    lo, hi = g[k + "token_mask_is_threshold_low"], g[k + "token_mask_is_threshold_high"]
    if (lo is None) != (hi is None):
        raise ConfigError(f"{k}token_mask_is_threshold_low and _high: SkyRL applies the token mask only with both")
    if lo is not None:
        if level == "sequence":
            raise ConfigError(
                f"{k}token_mask_is_threshold_* with tis_ratio_type=sequence: SkyRL sums the sequence ratio over "
                "the tokens the mask kept; divclip's sequence weight sums over every valid token"
            )
        rules.append(_inverse_band("token_k1", lo, hi))
    low, high = g[k + "outlier_token_is_threshold_low"], g[k + "outlier_token_is_threshold_high"]
    if low is not None or high is not None:  # compute_outlier_token_mask: drop a sequence for one ρ out of band
        if (low is not None and low <= 0) or (high is not None and high <= 0) or (low or 0) > (high or math.inf):
            raise ConfigError(
                f"{k}outlier_token_is_threshold_low/high must be > 0 with low <= high (a band on ρ), got "
                f"low={low!r}, high={high!r}"
            )
        rules.append(_inverse_band(SEQ_ANY_K1, low or 1.0 / OPEN_SIDE, high or OPEN_SIDE))
    metric = g[k + "sequence_mask_metric"]
    if metric is not None:
        band = "geo_mask" if metric == "geometric" else "product_mask"
        name = "seq_mean_k1" if metric == "geometric" else "seq_sum_k1"
        rules.append(_inverse_band(name, g[k + band + "_low"], g[k + band + "_high"]))
    try:
        c = Correction(**fields, rejections=tuple(rules))
    except ValueError as exc:
        raise ConfigError(f"{k}*: {exc}") from None
    return c if c.active else None


def _skyrl_rollout_is(g, settings):
    """SkyRL's rollout_is loss (ppo_utils.rollout_is_policy_loss): −sg(f(r))·A·log π with r = π_θ/π_rollout and
    f(r) = r on (1 − eps_clip_low, 1 + eps_clip_high), else 0: the bypass correction is=token:mask=LO_HI/bypass
    under the REINFORCE form gpg (SkyRL's band is open, divclip's closed: they differ only on a bound)."""
    others = {key: v for key, v in settings.items() if key.startswith(SKYRL) and v is not None}
    without = _read_skyrl({**g, "trainer.algorithm.policy_loss_type": "regular"}, settings)
    if without is not None or g["trainer.algorithm.use_tis"]:
        raise ConfigError(
            f"trainer.algorithm.policy_loss_type rollout_is with off_policy_correction ({sorted(others)}): SkyRL "
            "weights by π_θ/π_rollout and by π_old/π_rollout at once; a divclip correction holds one of the two"
        )
    low, high = 1.0 - g["trainer.algorithm.eps_clip_low"], 1.0 + g["trainer.algorithm.eps_clip_high"]
    return Correction("token", "mask", high, low if low > 0 else None, bypass=True, exp_dtype="float32")


def _write_skyrl(c: Correction):
    k = SKYRL
    out: dict = {k + "tis_ratio_type": None, k + "sequence_mask_metric": None}
    cannot = []
    if c.is_level is not None:
        if c.is_mode == "truncate" and c.is_floor is None and c.is_cap is not None:
            out[k + "tis_ratio_type"] = c.is_level
            out[k + f"{c.is_level}_tis_ratio_clip_high"] = c.is_cap
        else:
            cannot.append(f"SkyRL's TIS is a cap alone: {c.is_mode} to [{c.is_floor}, {c.is_cap}] is not expressible")
    sequence_rules = [r for r in c.rejections if r.level == "sequence" and r.option != SEQ_ANY_K1]
    for r in c.rejections:
        if r.option == SEQ_ANY_K1:
            low, high = 1 / r.upper, 1 / r.lower
            out[k + "outlier_token_is_threshold_low"] = None if low <= math.exp(-20.0) else low
            out[k + "outlier_token_is_threshold_high"] = None if high >= math.exp(20.0) else high
        elif r.option == "token_k1":
            out[k + "token_mask_is_threshold_low"], out[k + "token_mask_is_threshold_high"] = 1 / r.upper, 1 / r.lower
        elif r.option in ("seq_mean_k1", "seq_sum_k1") and r is sequence_rules[0]:
            band = "geo_mask" if r.option == "seq_mean_k1" else "product_mask"
            out[k + "sequence_mask_metric"] = "geometric" if r.option == "seq_mean_k1" else "product"
            out[k + band + "_low"], out[k + band + "_high"] = 1 / r.upper, 1 / r.lower
        else:
            cannot.append(f"SkyRL has no rule rs={r.option}:{r.threshold} (one of token_k1, seq_mean_k1, seq_sum_k1)")
    for flag, what in ((c.batch_normalize, "norm"), (c.opsm is not None, "opsm"), (c.bypass, "bypass")):
        if flag:
            cannot.append(f"SkyRL's off_policy_correction has no {what}")
    if not c.clamp_log_ratio and c.active:
        cannot.append("SkyRL clamps log ρ to ±20 (noclamp): the weights differ only where |log ρ| > 20")
    return out, cannot


# -------------------------------------------------------------------------------------------------- slime
def _read_slime(g, settings):
    if g["--custom-tis-function-path"]:
        raise ConfigError(
            f"--custom-tis-function-path={g['--custom-tis-function-path']!r}: a custom IS function is code divclip "
            "does not run; slime's own icepop_function is the correction 'is=token:mask=LOW_HIGH/noclamp'"
        )
    if g["--use-opsm"]:
        raise ConfigError(
            "--use-opsm: slime's OPSM compares π_old with π_θ (compute_opsm_mask), not the rollout's log-probs; "
            "divclip's opsm= is TRL's (π_rollout vs π_θ)"
        )
    if not g["--use-tis"]:
        return None
    low, high = g["--tis-clip-low"], g["--tis-clip"]
    try:
        return Correction(is_level="token", is_cap=high, is_floor=low, clamp_log_ratio=False)
    except ValueError as exc:
        raise ConfigError(f"--tis-clip-low/--tis-clip: {exc}") from None


def _write_slime(c: Correction):
    out: dict = {"--use-tis": c.is_level is not None}
    cannot = []
    if c.is_level is not None:
        if c.is_level == "token" and c.is_mode == "truncate" and c.is_cap is not None:
            out["--tis-clip"], out["--tis-clip-low"] = c.is_cap, 0.0 if c.is_floor is None else c.is_floor
        else:
            out["--use-tis"] = False
            cannot.append(
                f"slime's --use-tis truncates token weights: {c.is_level} {c.is_mode} is not expressible "
                "(icepop_function is a --custom-tis-function-path)"
            )
    if c.rejections:
        cannot.append("slime has no rejection rules: " + ", ".join(f"rs={r.option}" for r in c.rejections))
    for flag, what in ((c.batch_normalize, "norm"), (c.opsm is not None, "opsm (TRL's)"), (c.bypass, "bypass")):
        if flag:
            cannot.append(f"slime has no {what}")
    if c.clamp_log_ratio and c.is_level is not None:
        cannot.append("slime does not clamp log ρ to ±20: the weights differ only where |log ρ| > 20")
    return out, cannot


# --------------------------------------------------------------------------------------- OpenRLHF, AReaL
OPENRLHF = "--algo.advantage.is_correction_"


def _read_openrlhf(g, settings):
    level, mode, gating = (g[OPENRLHF + k] for k in ("level", "mode", "gating"))
    if level == "off":
        return None
    if g["--actor.policy_loss_type"] == "gspo":  # no weight under gspo: its ratio is anchored at π_rollout
        return None  # (EngineRead.ratio_anchor = 'rollout', divclip.engines.openrlhf)
    low, high = _floats(settings, OPENRLHF + "threshold", "+", {})  # one value: (0, HIGH)
    check_is_flags(level, mode, gating, low, high)
    try:
        if level == "token" and gating == "ratio":  # PolicyLoss: clip clamps ρ to [low, high]; mask keeps ρ
            low = None if low == 0 else low  # inside it, else weight 0 (no log clamp); clamp(min=0) is nothing
            return Correction("token", "truncate" if mode == "clip" else "mask", high, low, clamp_log_ratio=False)
        # the gate on a statistic per token or per sequence mean; a unit out of band gets weight 0, every
        # survivor keeps its own ρ, every token stays in the denominator (module docstring)
        metric = {"ratio": "ratio", "binary_kl": "binary_kl", "tv": "binary_tv"}[gating]
        sequence = level == "seq"
        lower = None if metric == "ratio" and low == 0 else low  # exp(mean log ρ) >= 0: no lower bound
        return Correction(
            filter=Filter(
                level="sequence" if sequence else "token",
                metric=metric,
                action="mask",
                upper=high,
                lower=lower,
                seq_weight="token" if sequence and metric == "ratio" else "geometric",
            )
        )
    except ValueError as exc:
        raise ConfigError(f"{OPENRLHF}threshold: {exc}") from None


def _openrlhf_gate(f: Filter) -> dict | None:
    """OpenRLHF's is_correction flags that are the filter `f`, or None where OpenRLHF has no such gate."""
    gating = {"binary_kl": "binary_kl", "binary_tv": "tv"}.get(f.metric)
    if f.action != "mask" or (f.level == "sequence" and f.agg != "mean"):
        return None
    if gating is not None and (f.lower is None or f.lower <= 0):
        band = [0.0 if f.lower is None else f.lower, f.upper]
    elif f.metric == "ratio" and f.level == "sequence" and f.seq_weight == "token":
        band = [0.0 if f.lower is None else f.lower, f.upper]
        gating = "ratio"
    else:
        return None
    level = "seq" if f.level == "sequence" else "token"
    return {
        OPENRLHF + "level": level,
        OPENRLHF + "mode": "mask",
        OPENRLHF + "gating": gating,
        OPENRLHF + "threshold": band,
    }


def _write_openrlhf(c: Correction):
    out: dict = {OPENRLHF + "level": "off"}
    cannot = []
    gate = None if c.filter is None else _openrlhf_gate(c.filter)
    if gate is not None:
        out.update(gate)
        if c.m2po is not None:
            cannot.append(f"OpenRLHF has no M2PO second-moment mask (m2po={c.m2po!r}, AReaL's m2_threshold)")
    if c.is_level is not None:
        if c.is_level == "token" and c.is_cap is not None:
            out[OPENRLHF + "level"], out[OPENRLHF + "gating"] = "token", "ratio"
            out[OPENRLHF + "mode"] = "clip" if c.is_mode == "truncate" else "mask"
            out[OPENRLHF + "threshold"] = [0.0 if c.is_floor is None else c.is_floor, c.is_cap]
        else:
            cannot.append(f"OpenRLHF's ratio gate is per token with a cap: is={c.is_level} is not expressible")
    if c.rejections:
        cannot.append("OpenRLHF has no rejection rules: " + ", ".join(f"rs={r.option}" for r in c.rejections))
    for flag, what in ((c.batch_normalize, "norm"), (c.opsm is not None, "opsm"), (c.bypass, "bypass")):
        if flag:
            cannot.append(f"OpenRLHF's is_correction has no {what}")
    if c.clamp_log_ratio and c.is_level is not None:
        cannot.append("OpenRLHF does not clamp log ρ to ±20: the weights differ only where |log ρ| > 20")
    return out, cannot


def _read_areal(g, settings):
    rs = AREAL_RS.rstrip(".")
    # default None (off); `rejection_sampling: null` is off, any of its keys (or a mapping) turns it on
    on = any(k.startswith(AREAL_RS) for k in settings) or (rs in settings and settings[rs] is not None)
    if not g["actor.use_decoupled_loss"]:
        return None  # AReaL ignores rejection_sampling without the decoupled loss; M2PO then compares π_old to itself
    fields: dict = {"m2po": g["actor.m2_threshold"]}
    if on:
        level = g[AREAL_RS + "level"]
        agg = g[AREAL_RS + "agg"] if level == "sequence" else "mean"  # AReaL ignores agg at token level (a warning)
        lower = g[AREAL_RS + "lower"]
        if g[AREAL_RS + "action"] == "clamp" and lower == 0.0:
            lower = None  # AReaL's clamp sets lower = 0 itself: the same weight
        try:
            fields["filter"] = Filter(
                level=level,
                metric=g[AREAL_RS + "metric"],
                action=g[AREAL_RS + "action"],
                upper=g[AREAL_RS + "upper"],
                lower=lower,
                agg=agg,
            )
        except ValueError as exc:
            raise ConfigError(f"{AREAL_RS}*: {exc}") from None
    try:
        c = Correction(**fields)
    except ValueError as exc:
        raise ConfigError(f"actor.m2_threshold: {exc}") from None
    return c if c.active else None


def _write_areal(c: Correction):
    """AReaL writes a filter, M2PO, and a token is= weight as the ratio filter it is."""
    out: dict = {}
    cannot = []
    f = c.filter
    if f is not None and not f.areal:
        cannot.append(
            f"AReaL's rejection_sampling has no filter {f} (OpenRLHF's gate: "
            + ("each token keeps its own ρ" if f.seq_weight == "token" else f"metric {f.metric}")
            + "; AReaL's metrics are ratio, kl_k1, kl_k2, kl_k3)"
        )
        f = None
    if f is None and c.is_level is not None:
        band_ok = c.is_cap is not None and c.is_cap > 1 and (c.is_floor is None or c.is_floor > 0)
        if c.is_level == "token" and band_ok:
            action = "mask" if c.is_mode == "mask" else "clamp"
            f = Filter(level="token", metric="ratio", action=action, upper=c.is_cap, lower=c.is_floor)
            if c.clamp_log_ratio:
                cannot.append("AReaL does not clamp log ρ to ±20: the weights differ only where |log ρ| > 20")
        else:
            cannot.append(
                f"AReaL's behaviour weight is ρ per token or the sequence's geometric mean, bounded by a cap > 1 "
                f"(and a floor > 0): is={c.is_level} {c.is_mode} to [{c.is_floor}, {c.is_cap}] is not expressible"
            )
    if f is not None:
        out[AREAL_RS + "level"], out[AREAL_RS + "action"], out[AREAL_RS + "metric"] = f.level, f.action, f.metric
        out[AREAL_RS + "upper"], out[AREAL_RS + "lower"] = f.upper, f.lower
        if f.level == "sequence":
            out[AREAL_RS + "agg"] = f.agg
    else:
        out[AREAL_RS.rstrip(".")] = None
    out["actor.m2_threshold"] = c.m2po
    if f is not None or c.m2po is not None:  # AReaL applies either only with the decoupled loss
        out["actor.use_decoupled_loss"] = True
    if c.rejections:
        cannot.append(
            "AReaL's rejection_sampling is one rule that zeroes the weight (the token stays in the denominator); "
            "verl's rejections drop tokens: " + ", ".join(f"rs={r.option}:{r.threshold}" for r in c.rejections)
        )
    for flag, what in ((c.batch_normalize, "norm"), (c.opsm is not None, "opsm"), (c.bypass, "bypass")):
        if flag:
            cannot.append(f"AReaL's rejection_sampling has no {what}")
    return out, cannot


_READERS = {
    "verl": _read_verl,
    "trl": _read_trl,
    "skyrl": _read_skyrl,
    "slime": _read_slime,
    "openrlhf": _read_openrlhf,
    "areal": _read_areal,
}
_WRITERS = {
    "verl": _write_verl,
    "trl": _write_trl,
    "skyrl": _write_skyrl,
    "slime": _write_slime,
    "openrlhf": _write_openrlhf,
    "areal": _write_areal,
}
