"""`divclip check`: one function from the user's files to the whole report, shared by the CLI and the app.

`build_report` reads a config (verl YAML / hydra overrides, TRL GRPOConfig JSON/YAML) and/or a rollout file,
both given as a path or as bytes, and returns a JSON-ready dict:
  config    the clip settings found, each key with its value and origin ("set" or the framework default)
  budget    the setting as a divergence budget under every measure (KL3 δ for ε_low, the ε_high it implies…)
  warnings  [{code, message, source, key}]: the clip cannot bind, wrong scale, surprising defaults…
  rollouts  clip fractions per measure, by p bucket and advantage sign, log-ratio histogram, δ sweep
  notes     what was assumed (defaults, noise model, ignored tokens)
Every bad input raises a `SanityInputError` (a ValueError) whose message names the problem.
"""

from __future__ import annotations

import math

from divclip.engines import read_correction
from divclip.engines.base import EngineRead
from divclip.engines.config import read_config, split_overrides
from divclip.engines.correction import CORRECTION_KEYS
from divclip.engines.trl import field_name
from divclip.sanity.budget import divergence_intervals, equivalent_budgets
from divclip.sanity.checks import SPREAD_HINT, Finding, check_settings, finding, input_findings, scale_findings
from divclip.sanity.compare import compare_methods
from divclip.sanity.corrections import (
    DEFAULT_CORRECTIONS,
    DEFAULT_MAX_MASKED,
    SOURCES,
    analyse_corrections,
    parse_corrections,
)
from divclip.sanity.errors import SanityInputError
from divclip.sanity.launches import launch_notes, split_launches
from divclip.sanity.loaders import Limits, load_rollouts
from divclip.sanity.rollouts import RolloutOptions, analyse_rollouts
from divclip.sanity.settings import clip_settings, unresolved_read_keys
from divclip.theory import get_measure

SCHEMA = "divclip.check/1"
DEFAULT_EPS = 0.2  # GRPO's ε and verl's/TRL's default ratio width, used when nothing else says


def build_report(
    config=None,
    rollouts=None,
    *,
    config_name: str | None = None,
    rollouts_name: str | None = None,
    overrides=(),
    framework: str | None = None,
    intended_measure: str | None = None,
    eps_low: float | None = None,
    eps_high: float | None = None,
    deltas: dict | None = None,
    sigma: float | None = None,
    seed: int = 0,
    num_processes: int = 1,
    limits: Limits = Limits(),
    methods=None,
    corrections=None,
    max_masked: float | None = None,
) -> dict:
    """The full report; `config`/`rollouts` are paths or bytes (bytes need `*_name` for the suffix). `methods`
    ('dcpo,grpo' or a list of atlas names / method strings) adds the "compare" section (`sanity.compare`).
    `corrections` (comma-separated correction strings, `divclip.theory.correction`) and the config's own
    correction are checked on a rollout file with rollout_log_prob: the "corrections" section
    (`sanity.corrections`); `max_masked` is the fraction of dropped tokens above which it warns (default 0.5)."""
    try:
        return _build(
            config,
            rollouts,
            config_name,
            rollouts_name,
            overrides,
            framework,
            intended_measure,
            eps_low,
            eps_high,
            deltas or {},
            sigma,
            seed,
            num_processes,
            limits,
            methods,
            corrections,
            max_masked,
        )
    except SanityInputError:
        raise
    except ValueError as exc:  # a theory-level check (a measure name, a budget): same contract
        raise SanityInputError(str(exc)) from None
    except (MemoryError, RecursionError, OverflowError) as exc:  # an input past a limit no loader foresaw
        what = (
            " and ".join(
                f"{k} {_label(v, n)!r}"
                for k, v, n in (("config", config, config_name), ("rollouts", rollouts, rollouts_name))
                if v is not None
            )
            or "the overrides"
        )
        raise SanityInputError(
            f"cannot check {what}: it is too large or too deeply nested ({type(exc).__name__})"
        ) from None


def _label(source, name) -> str:
    return name if name is not None else str(source)


def report_from_uploads(config=None, rollouts=None, overrides_text: str = "", **options) -> dict:
    """The app's entry: `config`/`rollouts` are (file name, bytes) pairs or None, `overrides_text` free text
    of hydra overrides; `options` as for `build_report`. Raises SanityInputError for any bad input."""
    for what, upload in (("config", config), ("rollouts", rollouts)):
        if upload is not None and not (isinstance(upload, tuple) and len(upload) == 2):
            raise SanityInputError(f"{what} upload must be a (file name, bytes) pair, got {type(upload).__name__}")
    overrides = split_overrides(overrides_text, "the overrides box") if overrides_text.strip() else []
    return build_report(
        config=None if config is None else config[1],
        config_name=None if config is None else config[0],
        rollouts=None if rollouts is None else rollouts[1],
        rollouts_name=None if rollouts is None else rollouts[0],
        overrides=overrides,
        **options,
    )


def _build(
    config,
    rollouts,
    config_name,
    rollouts_name,
    overrides,
    framework,
    intended,
    eps_low,
    eps_high,
    deltas,
    sigma,
    seed,
    num_processes,
    limits,
    methods=None,
    corrections=None,
    max_masked=None,
) -> dict:
    if config is None and not overrides and rollouts is None:
        raise SanityInputError("nothing to check: give a config file, hydra overrides, or --rollouts FILE")
    if methods is not None and rollouts is None:
        raise SanityInputError("--methods compares methods on rollout tokens: give --rollouts FILE too")
    if (corrections is not None or max_masked is not None) and rollouts is None:
        raise SanityInputError("--corrections/--max-masked check a correction on rollout tokens: give --rollouts FILE")
    report = {"schema": SCHEMA, "config": None, "budget": None, "warnings": [], "rollouts": None, "notes": []}
    report["corrections"] = None
    report["launches"] = []
    settings, raw = None, None
    if config is not None or overrides:
        raw, launches = split_launches(read_config(config, config_name, overrides), framework, num_processes)
        settings = clip_settings(raw, framework, num_processes)
        report["launches"] = launches
        report["config"] = {
            "name": raw.name,
            "kind": raw.kind,
            "ignored_tokens": raw.ignored_tokens,
            "stray_tokens": [{"line": n, "text": t} for n, t in raw.stray_tokens],
            **settings.to_dict(),
        }
        report["warnings"] = [w.to_dict() for w in input_findings(raw, settings) + check_settings(settings, intended)]
        report["notes"] += settings.notes + raw.notes + launch_notes(launches) + _unresolved_notes(raw, settings)
        if len(raw.launches) == 1 and not launches:  # several are listed under Launches
            report["notes"].append(f"read from the launch at line {raw.launches[0].line}: {raw.launches[0].command}")
        if sum(row["read"] for row in launches) > 1 and not raw.first_launch:
            report["warnings"].append(
                finding(
                    "several_launches",
                    f"the script starts {sum(row['read'] for row in launches)} runs an engine reads (lines "
                    f"{', '.join(str(r['line']) for r in launches if r['read'])}): the summary is the last one; "
                    "each is under Launches (JSON: launches), check the others there",
                    "launches",
                ).to_dict()
            )
        _config_correction(report, settings, raw)
        if raw.ignored_tokens:
            report["notes"].append(f"ignored command words (not settings): {raw.ignored_tokens[:8]}")
    elif intended is not None:
        get_measure(intended)
    opts = _rollout_options(settings, eps_low, eps_high, deltas, sigma, seed, report["notes"])
    if eps_low is not None or eps_high is not None:  # widths given here, not in the config: same scale checks
        report["warnings"] += [
            w.to_dict()
            for w in scale_findings(eps_low, eps_high, opts.level, {"low": "--eps-low", "high": "--eps-high"})
        ]
    report["budget"] = _budget(settings, opts, eps_low is not None or eps_high is not None)
    if rollouts is not None:
        data = load_rollouts(rollouts, rollouts_name, limits)
        section = analyse_rollouts(data, opts)
        report["rollouts"] = section
        _measured_spread(report["warnings"], section)
        if methods is not None:
            report["compare"] = compare_methods(data, methods, opts)
        _check_corrections(report, data, settings, raw, corrections, max_masked)
        if section["on_policy"]:
            report["warnings"].append(
                finding(
                    "rollouts_on_policy",
                    f"log_prob equals old_log_prob at every masked token of {section['file']!r}: the ratio is 1, so no "
                    "clip binds on this batch (on-policy: one epoch, one mini-batch).",
                    "log_prob",
                ).to_dict()
            )
    return report


def _unresolved_notes(raw, settings) -> list[str]:
    """The values only running the script knows, in settings divclip does not read (kept as written)."""
    read = unresolved_read_keys(raw, settings.engine)
    rest = [f"{k}={v[1]}" for k, v in raw.unresolved.items() if k not in read and k in raw.values]
    if not rest:
        return []
    shown = ", ".join(rest[:6]) + (f" and {len(rest) - 6} more" if len(rest) > 6 else "")
    return [f"values only running the script knows, in settings that do not change the loss (kept as written): {shown}"]


def _check_corrections(report, data, settings, raw, corrections, max_masked) -> None:
    """The "corrections" section: the config's correction, --corrections, or the engines' defaults."""
    chosen = {}
    if settings is not None:
        try:
            found = read_correction(settings.engine, _field_names(settings.engine, raw.values))
        except ValueError as exc:
            report["warnings"].append(finding_correction(str(exc)))
        else:
            if found is not None:
                chosen[f"config ({settings.engine})"] = found
    chosen.update(parse_corrections(corrections))
    if data.rollout_log_prob is None:
        if chosen:
            report["notes"].append(
                f"the rollout file has no rollout_log_prob (verl rollout_log_probs, TRL sampling_per_token_logps): "
                f"the corrections {list(chosen)} are not checked"
            )
        return
    if not chosen:
        chosen = parse_corrections(",".join(DEFAULT_CORRECTIONS.values()))
        chosen = {label: chosen[text] for label, text in DEFAULT_CORRECTIONS.items()}
        report["notes"].append("no correction in the config or --corrections: the engines' usual ones are checked")
    spec = None if settings is None else settings.spec
    limit = DEFAULT_MAX_MASKED if max_masked is None else max_masked
    report["corrections"], warnings = analyse_corrections(data, chosen, spec=spec, max_masked=limit)
    report["warnings"] += warnings


def _config_correction(report, settings, raw) -> None:
    """The config's rollout correction as a string in report["config"]["correction"], and TRL's silent default."""
    values = _field_names(settings.engine, raw.values)
    given = [k for k in CORRECTION_KEYS.get(settings.engine, {}) if k in values]
    shown = ", ".join(f"{k} = {values[k]!r}" for k in given[:6])
    try:
        found = read_correction(settings.engine, values)
    except ValueError as exc:
        report["config"]["correction"] = None
        report["warnings"].append(finding_correction(str(exc)))
        if given:
            report["notes"].append(f"beside the clip: a rollout correction ({shown}), not modelled (the warning above)")
        return
    report["config"]["correction"] = None if found is None else str(found)
    if found is not None and given:
        report["notes"].append(
            f"beside the clip: the rollout correction {shown}, read as {found} (weights and masks from "
            "ρ = π_old/π_rollout; docs/theory.md §10)"
        )
    mode_key = "vllm_importance_sampling_mode"
    if settings.engine == "trl" and found is not None and found.is_level is not None and mode_key not in values:
        report["notes"].append(
            f"[correction_default_differs] TRL applies its vLLM importance-sampling correction by default, as "
            f"{found}: {mode_key} defaults to sequence_mask with clip_max 3.0 (GRPOConfig's field), although "
            "GRPOConfig's docstring calls token_truncate the default; a sequence whose Π ρ_t leaves [0, 3] gets "
            f"weight 0. Set the mode you mean (source: {SOURCES['correction_default_differs']})"
        )


def _field_names(engine: str, values: dict) -> dict:
    """TRL's settings by field name (`--use_vllm` on a command line is the field use_vllm), as its readers take them."""
    if engine != "trl":
        return values
    return {field_name(k) if isinstance(k, str) else k: v for k, v in values.items()}


def finding_correction(message: str) -> dict:
    return Finding("correction_not_modelled", message, SOURCES["correction_not_modelled"]).to_dict()


def _measured_spread(warnings: list, section: dict) -> None:
    """Put this batch's own figure into the sequence-level scale warning, where the file has log_prob."""
    spread = section["ratios"].get("sequence_spread")
    if not spread:
        return
    measured = (
        f"on {section['file']!r} the sequence log-ratio's std is {spread['ratio']:.3g}× smaller than the "
        f"token log-ratios' ({spread['sequence_std']:.3g} vs {spread['token_std']:.3g}, mean length "
        f"{spread['mean_length']:.0f})"
    )
    for w in warnings:
        if w.get("code") == "sequence_ratio_token_eps":
            w["message"] = w["message"].replace(SPREAD_HINT, measured)


def _rollout_options(s: EngineRead | None, eps_low, eps_high, deltas, sigma, seed, notes) -> RolloutOptions:
    low, high, dual, level = DEFAULT_EPS, DEFAULT_EPS, None, "token"
    deltas = dict(deltas)
    if s is not None:
        level = s.level
        if s.form == "clip" and s.measure == "ratio":
            low, high, dual = s.budget_low, s.budget_high, s.dual_clip_c
        elif s.form in ("gated", "divclip"):
            # The dppo budget is a δ: compare other measures at the ratio widths it allows for a p = 0.5 token.
            row = divergence_intervals(s.measure, s.budget_low, s.budget_high, (0.5,))[0]
            low, high = row["eps_low"], row["eps_high"]
            deltas.setdefault(s.measure, s.budget_low)
        elif s.form == "cispo" and s.budget_low is not None:
            low, high = s.budget_low, s.budget_high
        elif s.form == "cispo":
            high = s.budget_high if s.budget_high is not None else DEFAULT_EPS
            notes.append(f"TRL cispo caps the weight above only: rollout fractions use ε_low = {DEFAULT_EPS:g}")
        else:
            notes.append(f"{s.loss_mode} has no PPO-style clip: rollout fractions use ε = {DEFAULT_EPS:g} both sides")
        if s.form in ("gated", "cispo"):
            notes.append(
                f"{s.loss_mode}: rollout fractions are PPO-clip fractions (tokens whose gradient a bound "
                "zeroes) for every measure, so they compare like for like"
            )
    if eps_low is not None or eps_high is not None:
        low = eps_low if eps_low is not None else low
        high = eps_high if eps_high is not None else high
        notes.append(f"clip widths from the command line: ε_low = {low:g}, ε_high = {high:g}")
    elif s is None:
        notes.append(
            f"no config given: assumed verl's and TRL's default ratio clip ε_low = ε_high = {DEFAULT_EPS:g}, "
            "token level, no dual clip, several updates per batch (pass the run's config, or --eps-low and "
            "--eps-high, to check its own clip)"
        )
    return RolloutOptions(
        eps_low=low, eps_high=high, deltas=deltas, dual_clip_c=dual, level=level, sigma=sigma, seed=seed
    )


def _budget(s: EngineRead | None, opts: RolloutOptions, eps_given: bool) -> dict:
    out = {
        "level": opts.level,
        "eps_low": opts.eps_low,
        "eps_high": opts.eps_high,
        "kind": "ratio",
        "source": "command line" if eps_given else ("config" if s is not None else "assumed: no config"),
    }
    if s is not None and s.form in ("gated", "divclip") and not eps_given:
        out.update(
            kind="divergence",
            measure=s.measure,
            delta_low=s.budget_low,
            delta_high=s.budget_high,
            intervals=divergence_intervals(s.measure, s.budget_low, s.budget_high),
            reference="eps_low/eps_high are the widths this δ allows a p = 0.5 token",
        )
    elif s is not None and s.form == "cispo" and s.engine == "trl" and not eps_given:
        out.update(kind="cap", cap=s.cap, eps_low=None, eps_high=s.budget_high)
    elif s is not None and s.form in ("sapo", "other") and not eps_given:
        out.update(kind="none", eps_low=None, eps_high=None)
        out["equivalents"] = []
        return out
    out["equivalents"] = equivalent_budgets(out["eps_low"], out["eps_high"])
    kl3 = next(r for r in out["equivalents"] if r["measure"] == "kl3")
    out["kl3"] = {
        k: kl3[k] for k in ("delta_from_eps_low", "implied_eps_high", "delta_from_eps_high", "implied_eps_low")
    }
    if opts.level == "sequence":
        out["note"] = "at level 'sequence' these budgets bound the sequence ratio exp(mean log r), not token ratios"
    return out


def jsonable(x):
    """The report with non-finite floats as null, so that `json.dumps` writes strict JSON."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
