"""Warnings about a clip setting: each has a stable `code`, a `message` with the numbers, and a `source`.

Every check is one small function registered with `@check`; `check_settings` runs them all. A warning means
"this setting will not do what its name suggests" (a clip that cannot bind, a width on the wrong scale, a
default the user probably did not know about); a config that avoids all of them gets none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from divclip.sanity.budget import implied_eps_high
from divclip.sanity.settings import VERL_VERSION, ClipSettings
from divclip.theory import get_measure


@dataclass(frozen=True)
class Finding:
    """One warning: `code` is stable across versions, `message` names the setting and value, `source` says why."""

    code: str
    message: str
    source: str
    key: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


SOURCES = {
    "on_policy_clip_inert": "docs/theory.md §5; verl issues #791 and #1477 (github.com/volcengine/verl); TRL 1.16 "
    "grpo_trainer.py uses the current log-probs, detached, as the old ones when generation is aligned with "
    "gradient accumulation",
    "sequence_ratio_token_eps": "GSPO (Zheng et al. 2025, arXiv 2507.18071): ε_low = 3e-4, ε_high = 4e-4 on the "
    "length-normalised sequence ratio, about 700× below token-level widths (0.2 / 0.28); docs/theory.md §5",
    "token_ratio_sequence_eps": "PPO (arXiv 1707.06347) ε 0.1–0.3 and DAPO (arXiv 2503.14476) 0.2/0.28 on token "
    "ratios; GSPO's 3e-4/4e-4 (arXiv 2507.18071) is for sequence ratios; docs/theory.md §5",
    "verl_dual_clip_always_on": f"verl {VERL_VERSION} core_algos.compute_policy_loss_vanilla (dual-clip PPO, Ye et "
    "al. 2019, arXiv 1912.09729; clip_ratio_c defaults to 3.0 in actor.yaml); docs/theory.md §3, §5",
    "outside_published_range": "PPO (arXiv 1707.06347): ε 0.1–0.3; DAPO (arXiv 2503.14476): 0.2/0.28; GSPO "
    "(arXiv 2507.18071): 3e-4/4e-4; dual-clip PPO (arXiv 1912.09729): c = 3; DPPO (arXiv 2602.04879) as "
    "validated in SkyRL's port: δ = 0.05 (binary KL), 0.2 (binary TV)",
    "asymmetric_contradicts_measure": "docs/theory.md §2–§3: a divergence budget fixes both sides of the interval; "
    "every p-independent measure's upper width is at least its lower width (KL3: ε_high − ε_low ≈ 4δ/3)",
    "clip_ratio_shadowed": f"verl {VERL_VERSION} actor/actor.yaml sets clip_ratio_low/high to 0.2 (not null), and "
    "core_algos falls back to clip_ratio only where they are null",
    "trl_cispo_cap_is_absolute": "TRL 1.16 grpo_config.py (epsilon_high help: for cispo it is ScaleRL's ε_max, "
    "recommended 5.0) and grpo_trainer.py: torch.clamp(coef_1, max=epsilon_high)",
    "dppo_tis_cap_small": f"verl {VERL_VERSION} core_algos.compute_policy_loss_dppo_kl/tv: clip_ratio_c truncates "
    "the IS weight, 'a large threshold is recommended' (DPPO arXiv 2602.04879 §5.4; in-code fallback 20)",
    "dppo_budget_from_ppo_default": f"verl {VERL_VERSION} core_algos.compute_policy_loss_dppo_kl: 'the clip_ratio "
    "is different from the standard PPO, it is the KL divergence threshold'",
    "trl_delta_below_upper_clip": "TRL 1.16 grpo_config.py (delta: 'Recommended to be greater than 1 + ε'; "
    "INTELLECT-2, arXiv 2505.07291)",
    "minibatch_larger_than_batch": f"verl {VERL_VERSION} ActorConfig.validate: train_batch_size must be >= "
    "ppo_mini_batch_size",
    "rollouts_on_policy": "docs/theory.md §5; verl issues #791 and #1477",
}

SOURCES["override_without_equals"] = ("hydra's override grammar is key=value (hydra.cc, 'Override grammar'); a "
                                      "word without '=' is no setting, so divclip (and the engine) never read it")
MAX_UNKNOWN_SHOWN = 50  # unknown keys reported one by one; more are counted in one warning

# "Far outside" published values: a factor of about 2 beyond PPO's 0.1–0.3 for token widths, 3 around GSPO.
TOKEN_EPS_RANGE = (0.05, 0.6)
SEQUENCE_EPS_RANGE = (1e-4, 1.2e-3)
SEQUENCE_SCALE_BELOW = 2e-3  # a token ε this small looks like GSPO's sequence ε
TOKEN_SCALE_ABOVE = 1e-2  # a sequence ε this large looks like a token ε
DPPO_DELTA_RANGE = {"binary_kl": (0.0125, 0.2), "binary_tv": (0.05, 0.8)}
DPPO_VALIDATED = {"binary_kl": 0.05, "binary_tv": 0.2}
DUAL_CLIP_MIN = 1.5
TIS_CAP_MIN = 10.0
CISPO_CAP_MIN = 1.5
MEASURE_TOLERANCE = 0.05  # relative gap between the config's ε_high and the one the intended measure implies

CHECKS: list[Callable[[ClipSettings, str | None], list[Finding]]] = []


def check(fn):
    CHECKS.append(fn)
    return fn


def finding(code: str, message: str, key: str | None = None) -> Finding:
    return Finding(code, message, SOURCES[code], key)


def check_settings(s: ClipSettings, intended_measure: str | None = None) -> list[Finding]:
    """All warnings for `s`; `intended_measure` is the divergence the user means their clip to express."""
    if intended_measure is not None:
        get_measure(intended_measure)  # a ValueError lists the names
    out: list[Finding] = []
    for fn in CHECKS:
        out.extend(fn(s, intended_measure))
    return out


def _k(s: ClipSettings, role: str) -> str | None:
    """The engine's key for a role (divclip.engines: EngineRead.roles), e.g. verl's clip_ratio_low for eps_low."""
    return s.role(role)


# ---------------------------------------------------------------------------------------------- checks
@check
def _on_policy(s, _):
    if not s.on_policy or s.form == "other":
        return []
    what = "no clip bound" if s.form != "sapo" else "the soft gate"
    fix = s.on_policy_fix or "more than one update per rollout batch"
    return [finding(
        "on_policy_clip_inert",
        f"the update is on-policy ({s.on_policy_reason}): the ratio π_θ/π_old is identically 1 when the loss is "
        f"evaluated, so {what} has any effect and clip fractions will read 0. Use several mini-batches or "
        f"epochs ({fix}) if the clip is meant to matter.",
        _k(s, "epochs"),
    )]


SPREAD_HINT = "`divclip check --rollouts` with log_prob measures it on your batch"


@check
def _scale(s, _):
    if s.measure != "ratio" or s.form == "cispo" and s.framework == "trl":
        return []
    keys = {"low": _k(s, "eps_low"), "high": _k(s, "eps_high")}
    return scale_findings(s.budget_low, s.budget_high, s.level, keys)


def scale_findings(eps_low, eps_high, level: str, keys: dict) -> list[Finding]:
    """Ratio-clip widths on the wrong scale for `level` (or a lower bound at or below 0); `keys` names the
    setting of each side ({'low': …, 'high': …}): a config key, or a command-line flag such as --eps-low."""
    out = []
    for side, eps in (("low", eps_low), ("high", eps_high)):
        if eps is None:
            continue
        key = keys[side]
        if level == "sequence" and eps >= TOKEN_SCALE_ABOVE:
            out.append(finding(
                "sequence_ratio_token_eps",
                f"ε_{side} = {eps:g} on a sequence-level ratio (GSPO: (π_θ(o)/π_old(o))^(1/|o|)) is a token-level "
                f"width. The sequence ratio is the geometric mean of |o| token ratios, so it moves less than they "
                f"do: by √|o| if token log-ratios were independent (45× at |o| = 2048), less where they are "
                f"correlated ({SPREAD_HINT}); a token-level width on it rarely binds. GSPO uses 3e-4 / 4e-4.", key))
        elif level == "token" and eps <= SEQUENCE_SCALE_BELOW:
            out.append(finding(
                "token_ratio_sequence_eps",
                f"ε_{side} = {eps:g} on token-level ratios looks like GSPO's sequence-level width: almost every "
                f"token that moves will be clipped. Token-level runs use 0.1–0.3 (DAPO 0.2 / 0.28).", key))
        else:
            lo, hi = SEQUENCE_EPS_RANGE if level == "sequence" else TOKEN_EPS_RANGE
            if not lo <= eps <= hi:
                published = "3e-4 / 4e-4 (GSPO)" if level == "sequence" else "0.1–0.3 (PPO), 0.2 / 0.28 (DAPO)"
                out.append(finding(
                    "outside_published_range",
                    f"ε_{side} = {eps:g} on {level}-level ratios is far outside published runs ({published}; "
                    f"divclip warns outside [{lo:g}, {hi:g}]).", key))
    if eps_low is not None and eps_low >= 1.0:
        out.append(finding(
            "outside_published_range",
            f"ε_low = {eps_low:g} >= 1 puts the lower clip bound 1 - ε_low at or below 0: a ratio cannot go "
            "there, so the lower side never binds.", keys["low"]))
    return out


@check
def _dppo_budget(s, _):
    if s.form != "gated":
        return []
    out = []
    lo, hi = DPPO_DELTA_RANGE[s.measure]
    for side, d in (("low", s.budget_low), ("high", s.budget_high)):
        if not lo <= d <= hi:
            out.append(finding(
                "outside_published_range",
                f"{s.loss_mode} δ_{side} = {d:g} (verl reads clip_ratio_{side} as the {s.measure} budget) is far "
                f"outside the validated {DPPO_VALIDATED[s.measure]:g} (divclip warns outside [{lo:g}, {hi:g}]).",
                _k(s, f"eps_{side}")))
    explicit = any(s.explicit(_k(s, role)) for role in ("eps", "eps_low", "eps_high") if _k(s, role))
    if not explicit and s.budget_low != DPPO_VALIDATED[s.measure]:
        out.append(finding(
            "dppo_budget_from_ppo_default",
            f"{s.loss_mode} takes its {s.measure} budget δ from clip_ratio_low/high, which you did not set: it is "
            f"PPO's width default {s.budget_low:g}, not a divergence chosen for {s.measure} (validated: "
            f"{DPPO_VALIDATED[s.measure]:g}).", _k(s, "eps_low")))
    if s.tis_cap is not None and s.tis_cap < TIS_CAP_MIN:
        out.append(finding(
            "dppo_tis_cap_small",
            f"{s.loss_mode} truncates the importance weight at clip_ratio_c = {s.tis_cap:g} "
            f"({'your setting' if s.explicit(_k(s, 'tis_cap')) else 'the actor.yaml default'}); "
            "the DPPO authors recommend a large threshold (verl's in-code fallback is 20).",
            _k(s, "tis_cap")))
    return out


@check
def _dual_clip(s, _):
    out = []
    if s.framework == "verl" and s.loss_mode == "vanilla":
        key = _k(s, "dual_clip")
        if not s.explicit(key):
            out.append(finding(
                "verl_dual_clip_always_on",
                f"verl's vanilla loss always applies dual-clip PPO: for A < 0 the loss is capped at -A·c with "
                f"c = clip_ratio_c = {s.dual_clip_c:g} (default), so tokens with r > {s.dual_clip_c:g} stop "
                "pushing down. It cannot be switched off (set a large clip_ratio_c to make it inert), and "
                "verl's pg_clipfrac_lower reports this dual-clip fraction, not the lower-bound clip fraction.",
                key))
        if s.dual_clip_c is not None and s.dual_clip_c < DUAL_CLIP_MIN:
            out.append(finding(
                "outside_published_range",
                f"clip_ratio_c = {s.dual_clip_c:g} is far below the dual-clip PPO value 3: every token with A < 0 "
                f"whose ratio exceeds {s.dual_clip_c:g} loses its gradient.", key))
    if s.framework == "trl" and s.dual_clip_c is not None and s.budget_high is not None:
        if s.dual_clip_c <= 1.0 + s.budget_high:
            out.append(finding(
                "trl_delta_below_upper_clip",
                f"delta = {s.dual_clip_c:g} caps the ratio at or below the upper clip bound 1 + ε_high = "
                f"{1 + s.budget_high:g}; TRL recommends delta > 1 + ε (INTELLECT-2 used 4).", _k(s, "dual_clip")))
    return out


@check
def _shadowed(s, _):
    if s.framework != "verl":
        return []
    key = _k(s, "eps")
    ratio = s.keys[key]["value"]
    side_key = {side: _k(s, f"eps_{side}") for side in ("low", "high")}
    sides = [side for side in ("low", "high")
             if not s.explicit(side_key[side]) and s.keys[side_key[side]]["value"] not in (None, ratio)]
    if not s.explicit(key) or not sides:
        return []
    used = ", ".join(f"clip_ratio_{side} = {s.keys[side_key[side]]['value']:g}" for side in sides)
    return [finding(
        "clip_ratio_shadowed",
        f"clip_ratio = {ratio:g} is set but has no effect on the {'/'.join(sides)} side: verl's actor.yaml "
        f"defaults {used}, and the loss falls back to clip_ratio only where those are null. Set "
        "clip_ratio_low/clip_ratio_high instead.", key)]


@check
def _cispo_cap(s, _):
    if s.framework != "trl" or s.form != "cispo" or s.cap >= CISPO_CAP_MIN:
        return []
    cap = _k(s, "cap")
    set_it = cap if s.explicit(cap) else f"{cap} (unset, so {_k(s, 'eps_low')})"
    return [finding(
        "trl_cispo_cap_is_absolute",
        f"TRL's cispo clamps the importance weight at {set_it} = {s.cap:g} itself, not at 1 + ε: every weight "
        f"is capped at {s.cap:g}{' < 1, so even unchanged tokens are down-weighted' if s.cap < 1 else ''}. "
        f"ScaleRL recommends {cap} = 5.0.", cap)]


@check
def _asymmetry(s, intended):
    out = []
    if s.measure == "ratio" and s.budget_low is not None and s.budget_high is not None:
        lo_key = _k(s, "eps_low")
        if s.budget_high < s.budget_low:
            out.append(finding(
                "asymmetric_contradicts_measure",
                f"ε_high = {s.budget_high:g} < ε_low = {s.budget_low:g}: no p-independent divergence (log-ratio, "
                "k2, KL3, reverse KL3, χ², Hellinger) gives a tighter upper side; only binary KL does, for "
                "confident tokens (p > 0.5). DAPO's clip-higher and KL3 both loosen the upper side.", lo_key))
        if intended and intended != "ratio" and not get_measure(intended).p_dependent and s.budget_low < 1:
            want = implied_eps_high(intended, s.budget_low)
            if want is not None and abs(s.budget_high - want) > MEASURE_TOLERANCE * want:
                out.append(finding(
                    "asymmetric_contradicts_measure",
                    f"for {intended}, ε_low = {s.budget_low:g} fixes the budget, and that budget's upper width is "
                    f"ε_high = {want:.4g}; the config's ε_high = {s.budget_high:g} is "
                    f"{'looser' if s.budget_high > want else 'tighter'}, so the clip is not a {intended} budget. "
                    f"Set ε_high to {want:.4g} to clip by {intended}.", _k(s, "eps_high")))
    if s.form == "gated" and s.budget_low != s.budget_high:
        out.append(finding(
            "asymmetric_contradicts_measure",
            f"{s.loss_mode} uses δ_low = {s.budget_low:g} and δ_high = {s.budget_high:g}: a {s.measure} budget is "
            "one δ whose interval is already asymmetric per token; two δs are two different measures.",
            _k(s, "eps_high")))
    return out


@check
def _minibatch(s, _):
    if s.framework != "verl":
        return []
    train = s.keys[_k(s, "train_batch")]["value"]
    mini = s.keys[_k(s, "mini_batch")]["value"]
    if mini <= train:
        return []
    return [finding(
        "minibatch_larger_than_batch",
        f"ppo_mini_batch_size = {mini} > data.train_batch_size = {train}: verl refuses to start (without "
        "use_dynamic_bsz); divclip counts one mini-batch.", _k(s, "mini_batch"))]


@check
def _divclip_plugins(s, _):
    """What divclip's verl modes / TRL plug-in log at run time (divclip.sanity.advice), as findings."""
    return [Finding(a.code, a.message, a.source, a.key) for a in s.advice]


# ------------------------------------------------------------------------------------------ input checks
def input_findings(raw, s: ClipSettings) -> list[Finding]:
    """Keys the engine does not know (with the nearest known key) and config keys written without '=': each a
    warning, never silent (the engine itself would refuse the first, and ignore or choke on the second)."""
    from divclip.engines import get_engine

    module = get_engine(s.engine)
    source = getattr(module, "KNOWN_KEYS_FROM", module.DEFAULTS_FROM)
    out = []
    for key, near in s.unknown_keys[:MAX_UNKNOWN_SHOWN]:
        hint = f"; did you mean {near!r}?" if near else ""
        out.append(Finding("unknown_key", f"{key!r} is not a {s.engine} setting: divclip did not read it, and "
                           f"{s.engine} would refuse it{hint}", source, key))
    if len(s.unknown_keys) > MAX_UNKNOWN_SHOWN:
        out.append(Finding("unknown_key", f"{len(s.unknown_keys) - MAX_UNKNOWN_SHOWN} more keys are not {s.engine} "
                           "settings (not listed)", source, None))
    for line, text in raw.stray_tokens[:MAX_UNKNOWN_SHOWN]:
        where = f"line {line}: " if line is not None else ""
        word, _, value = text.partition(" ")
        fix = f"{word}={value}" if value else f"{word}=VALUE"
        out.append(finding("override_without_equals", f"{where}{text!r} has no '=': it is not an override, so "
                           f"nothing was set (did you mean {fix}?)", word))
    return out
