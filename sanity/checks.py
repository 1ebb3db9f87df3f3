"""Warnings about a clip setting: each has a stable `code`, a `message` with the numbers, and a `source`.

Every check is one small function registered with `@check`; `check_settings` runs them all. A warning means
"this setting will not do what its name suggests" (a clip that cannot bind, a width on the wrong scale, a
default the user probably did not know about); a config that avoids all of them gets none.

The checks here are engine-neutral: they read the method and batch structure of `EngineRead` and name a setting
only through the read's roles (`EngineRead.roles`: role -> the engine's own key). What one engine's settings
alone get wrong is that engine's (`divclip.engines.<name>.pitfalls`, in `EngineRead.advice`), reported by
`_engine_advice` with its own source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from divclip.engines import available_engines, get_engine, unknown_key_origin
from divclip.engines.advice import DPPO_DELTA_RANGE, DPPO_VALIDATED, PUBLISHED_RANGES
from divclip.engines.base import EngineRead
from divclip.sanity.budget import implied_eps_high
from divclip.sanity.settings import unresolved_read_keys
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
    "outside_published_range": PUBLISHED_RANGES,
    "asymmetric_contradicts_measure": "docs/theory.md §2–§3: a divergence budget fixes both sides of the interval; "
    "every p-independent measure's upper width is at least its lower width (KL3: ε_high − ε_low ≈ 4δ/3)",
    "rollouts_on_policy": "docs/theory.md §5; verl issues #791 and #1477",
}
for _engine in available_engines():  # the warnings one engine's settings raise, each with one fixed source
    SOURCES.update(getattr(get_engine(_engine), "CHECK_SOURCES", {}))

SOURCES["override_without_equals"] = (
    "hydra's override grammar is key=value (hydra.cc, 'Override grammar'); a "
    "word without '=' is no setting, so divclip (and the engine) never read it"
)
SOURCES["setting_not_read"] = (
    "divclip reads configs without running them (docs/sanity_check.md): a value that needs code to compute, or text "
    "the shell would not pass to the command, is named here rather than replaced by the engine's default"
)
SOURCES["several_launches"] = (
    "bash runs every command of a script in order (docs/sanity_check.md): a script that starts two runs trains "
    "twice, each with its own settings"
)
MAX_UNKNOWN_SHOWN = 50  # unknown keys reported one by one; more are counted in one warning

# "Far outside" published values: a factor of about 2 beyond PPO's 0.1–0.3 for token widths, 3 around GSPO.
TOKEN_EPS_RANGE = (0.05, 0.6)
SEQUENCE_EPS_RANGE = (1e-4, 1.2e-3)
SEQUENCE_SCALE_BELOW = 2e-3  # a token ε this small looks like GSPO's sequence ε
TOKEN_SCALE_ABOVE = 1e-2  # a sequence ε this large looks like a token ε
MEASURE_TOLERANCE = 0.05  # relative gap between the config's ε_high and the one the intended measure implies

CHECKS: list[Callable[[EngineRead, str | None], list[Finding]]] = []


def check(fn):
    CHECKS.append(fn)
    return fn


def finding(code: str, message: str, key: str | None = None) -> Finding:
    return Finding(code, message, SOURCES[code], key)


def check_settings(s: EngineRead, intended_measure: str | None = None) -> list[Finding]:
    """All warnings for `s`; `intended_measure` is the divergence the user means their clip to express."""
    if intended_measure is not None:
        get_measure(intended_measure)  # a ValueError lists the names
    out: list[Finding] = []
    for fn in CHECKS:
        out.extend(fn(s, intended_measure))
    return out


def _k(s: EngineRead, role: str) -> str | None:
    """The engine's key for a role (divclip.engines: EngineRead.roles), e.g. verl's lower clip width for eps_low."""
    return s.role(role)


# ---------------------------------------------------------------------------------------------- checks
@check
def _on_policy(s, _):
    if not s.on_policy or s.form == "other":
        return []
    if any(a.code == "on_policy_clip_inert" for a in s.advice):  # the engine's read said it, with its key and source
        return []
    what = "no clip bound" if s.form != "sapo" else "the soft gate"
    fix = s.on_policy_fix or "more than one update per rollout batch"
    return [
        finding(
            "on_policy_clip_inert",
            f"the update is on-policy ({s.on_policy_reason}): the ratio π_θ/π_old is identically 1 when the loss is "
            f"evaluated, so {what} has any effect and clip fractions will read 0. Use several mini-batches or "
            f"epochs ({fix}) if the clip is meant to matter.",
            _k(s, "epochs"),
        )
    ]


SPREAD_HINT = "`divclip check --rollouts` with log_prob measures it on your batch"


@check
def _scale(s, _):
    if s.measure != "ratio" or s.cap is not None:  # an absolute cap on the IS weight has no widths to judge
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
            out.append(
                finding(
                    "sequence_ratio_token_eps",
                    f"ε_{side} = {eps:g} on a sequence-level ratio (GSPO: (π_θ(o)/π_old(o))^(1/|o|)) is a token-level "
                    f"width. The sequence ratio is the geometric mean of |o| token ratios, so it moves less than they "
                    f"do: by √|o| if token log-ratios were independent (45× at |o| = 2048), less where they are "
                    f"correlated ({SPREAD_HINT}); a token-level width on it rarely binds. GSPO uses 3e-4 / 4e-4.",
                    key,
                )
            )
        elif level == "token" and eps <= SEQUENCE_SCALE_BELOW:
            out.append(
                finding(
                    "token_ratio_sequence_eps",
                    f"ε_{side} = {eps:g} on token-level ratios looks like GSPO's sequence-level width: almost every "
                    f"token that moves will be clipped. Token-level runs use 0.1–0.3 (DAPO 0.2 / 0.28).",
                    key,
                )
            )
        else:
            lo, hi = SEQUENCE_EPS_RANGE if level == "sequence" else TOKEN_EPS_RANGE
            if not lo <= eps <= hi:
                published = "3e-4 / 4e-4 (GSPO)" if level == "sequence" else "0.1–0.3 (PPO), 0.2 / 0.28 (DAPO)"
                out.append(
                    finding(
                        "outside_published_range",
                        f"ε_{side} = {eps:g} on {level}-level ratios is far outside published runs ({published}; "
                        f"divclip warns outside [{lo:g}, {hi:g}]).",
                        key,
                    )
                )
    if eps_low is not None and eps_low >= 1.0:
        out.append(
            finding(
                "outside_published_range",
                f"ε_low = {eps_low:g} >= 1 puts the lower clip bound 1 - ε_low at or below 0: a ratio cannot go "
                "there, so the lower side never binds.",
                keys["low"],
            )
        )
    return out


@check
def _dppo_budget(s, _):
    if s.form != "gated":
        return []
    out = []
    lo, hi = DPPO_DELTA_RANGE[s.measure]
    for side, d in (("low", s.budget_low), ("high", s.budget_high)):
        key = _k(s, f"eps_{side}")
        if not lo <= d <= hi:
            out.append(
                finding(
                    "outside_published_range",
                    f"{s.loss_mode} δ_{side} = {d:g}{f' ({key} is the {s.measure} budget)' if key else ''} is far "
                    f"outside the validated {DPPO_VALIDATED[s.measure]:g} (divclip warns outside [{lo:g}, {hi:g}]).",
                    key,
                )
            )
    return out


@check
def _asymmetry(s, intended):
    out = []
    if s.measure == "ratio" and s.budget_low is not None and s.budget_high is not None:
        lo_key = _k(s, "eps_low")
        if s.budget_high < s.budget_low:
            out.append(
                finding(
                    "asymmetric_contradicts_measure",
                    f"ε_high = {s.budget_high:g} < ε_low = {s.budget_low:g}: no p-independent divergence (log-ratio, "
                    "k2, KL3, reverse KL3, χ², Hellinger) gives a tighter upper side; only binary KL does, for "
                    "confident tokens (p > 0.5). DAPO's clip-higher and KL3 both loosen the upper side.",
                    lo_key,
                )
            )
        if intended and intended != "ratio" and not get_measure(intended).p_dependent and s.budget_low < 1:
            want = implied_eps_high(intended, s.budget_low)
            if want is not None and abs(s.budget_high - want) > MEASURE_TOLERANCE * want:
                out.append(
                    finding(
                        "asymmetric_contradicts_measure",
                        f"for {intended}, ε_low = {s.budget_low:g} fixes the budget, and that budget's upper width is "
                        f"ε_high = {want:.4g}; the config's ε_high = {s.budget_high:g} is "
                        f"{'looser' if s.budget_high > want else 'tighter'}, so the clip is not a {intended} budget. "
                        f"Set ε_high to {want:.4g} to clip by {intended}.",
                        _k(s, "eps_high"),
                    )
                )
    # A gated (DPPO) read with δ_low != δ_high is no contradiction: it is two budgets of one measure, the A > 0 side
    # gated at δ_high and the A < 0 side at δ_low, as SkyRL's dppo and verl's dppo_* compute it, and the spec carries
    # it (the gated form's `delta_high`; `divclip atlas` shows the two widths).
    return out


@check
def _engine_advice(s, _):
    """The engine's own pitfalls and what divclip's plug-ins log at run time (EngineRead.advice), as findings."""
    return [Finding(a.code, a.message, a.source, a.key) for a in s.advice]


# ------------------------------------------------------------------------------------------ input checks
def input_findings(raw, s: EngineRead) -> list[Finding]:
    """Keys the engine does not know (with the nearest known key) and config keys written without '=': each a
    warning, never silent (the engine itself would refuse the first, and ignore or choke on the second)."""
    module = get_engine(s.engine)
    source = getattr(module, "KNOWN_KEYS_FROM", module.DEFAULTS_FROM)
    out = []
    for key, near in s.unknown_keys[:MAX_UNKNOWN_SHOWN]:
        origin = unknown_key_origin(s.engine, key, s.entry)  # another version's key, or an example's own: still refused
        hint = f"; {origin}" if origin else f"; did you mean {near!r}?" if near else ""
        out.append(
            Finding(
                "unknown_key",
                f"{key!r} is not a {s.engine} setting: divclip did not read it, and {s.engine} would refuse it{hint}",
                source,
                key,
            )
        )
    if len(s.unknown_keys) > MAX_UNKNOWN_SHOWN:
        out.append(
            Finding(
                "unknown_key",
                f"{len(s.unknown_keys) - MAX_UNKNOWN_SHOWN} more keys are not {s.engine} settings (not listed)",
                source,
                None,
            )
        )
    for line, text in getattr(raw, "unread", [])[:MAX_UNKNOWN_SHOWN]:
        where = f"line {line}: " if line is not None else ""
        out.append(finding("setting_not_read", f"{where}{text}"))
    out += _unresolved_findings(raw, s)
    for line, text in raw.stray_tokens[:MAX_UNKNOWN_SHOWN]:
        where = f"line {line}: " if line is not None else ""
        word, _, value = text.partition(" ")
        fix = f"{word}={value}" if value else f"{word}=VALUE"
        out.append(
            finding(
                "override_without_equals",
                f"{where}{text!r} has no '=': it is not an override, so nothing was set (did you mean {fix}?)",
                word,
            )
        )
    return out


def _unresolved_findings(raw, s: EngineRead) -> list[Finding]:
    """A setting the engine reads whose value only running the script knows: named with where the value comes
    from, and the engine's default divclip went on with."""
    out = []
    for key, (line, value, refs) in list(unresolved_read_keys(raw, s.engine).items())[:MAX_UNKNOWN_SHOWN]:
        origins = "; ".join(f"{ref} is {origin}" if not origin.startswith("$") else origin for ref, origin in refs)
        default = s.keys.get(key, {}).get("value")
        used = f"{s.engine}'s default {default!r}" if key in s.keys else f"{s.engine}'s default"
        out.append(
            finding(
                "setting_not_read",
                f"line {line}: {key}={value} is not known without running the script ({origins}): divclip goes on "
                f"with {used} (set the value in the script, or pass it as an override, to check what the run uses)",
                key,
            )
        )
    return out
