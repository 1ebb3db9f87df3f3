"""Ready-to-paste trainer settings for ONE method (verl 0.9.1, TRL 1.16): what `divclip export` prints and the
explorer offers, character for character.

A block is complete and paste-safe: every key the clip reads appears once, `loss_mode` is always explicit
(`vanilla` too), and divclip's own verl modes come with the plug-in hook (VERL_USE_EXTERNAL_MODULES) and, for
`divclip_*`, DIVCLIP_DELTA; pasted after another method's block it leaves nothing of that method in force.
ATR-GRPO (KL3) runs as verl's `atr_kl3`; other divergences as `divclip_<measure>`; binary KL/TV masks as verl's
`dppo_kl`/`dppo_tv`. In TRL a divergence is `DivClipGRPOConfig(clip_measure=..., clip_delta=...)`; GSPO and SAPO
are TRL's own GRPOConfig; TRL has no DPPO mask (a ValueError says so). `divclip check` reads every verl block
(command line or YAML) and the TRL YAML back (docs/theory.md §1-§3 for the bounds).
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from divclip.app.intervals import ClipInterval
from divclip.app.methods import method_for
from divclip.sanity import advice

VERL_PREFIX = "actor_rollout_ref.actor."
_VERL_DPPO = {"binary_kl": "dppo_kl", "binary_tv": "dppo_tv"}
DPPO_TIS_CAP = 20.0  # verl's in-code fallback for dppo_*'s IS truncation, as divclip's dppo presets


def interval_spec(iv: ClipInterval):
    """The method an explorer interval stands for: the ratio clip at (ε_low, ε_high), DPPO's mask for binary KL/TV
    (the method the page names), else the PPO clip by that measure at δ (p only places the drawing)."""
    from divclip.theory.spec import ClipSpec

    if iv.delta is None:  # the widths come back as 1 - lo, hi - 1 (0.19999999999999996): 15 digits are the slider's
        return ClipSpec("ratio", eps_low=float(f"{iv.eps_low:.15g}"), eps_high=float(f"{iv.eps_high:.15g}"))
    if iv.name in _VERL_DPPO:
        return ClipSpec(iv.name, delta=iv.delta, mode="gated", tis_cap=DPPO_TIS_CAP)
    return ClipSpec(iv.name, delta=iv.delta)


# ------------------------------------------------------------------------- one method, complete and paste-safe
ENGINES = ("verl", "trl")
FORMATS = ("overrides", "yaml", "python")
_TRL_ON_POLICY = ("TRL's default num_iterations=1 makes every update on-policy, where no clip has any effect: "
                  "set num_iterations > 1")


@dataclass(frozen=True)
class MethodExport:
    """One method's settings for one engine: environment variables, keys in order, and comment lines."""

    engine: str
    label: str
    env: dict  # verl: {VAR: value} the command needs in front (the plug-in hook, DIVCLIP_DELTA)
    settings: dict  # verl: {dotted.key: value}; TRL: {GRPOConfig field: value}
    comments: tuple  # what the reader must know, one line each
    config_class: str = ""  # TRL: "DivClipGRPOConfig" or "GRPOConfig"

    def text(self, fmt: str = "overrides") -> str:
        """The block as `fmt`: verl 'overrides' (a command line), 'yaml', 'python'; TRL 'python', 'yaml'
        ('overrides' is TRL's command line: --key value)."""
        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {list(FORMATS)}, got {fmt!r}")
        head = [f"# {self.label}", *(f"# {c}" for c in self.comments)]
        if self.engine == "verl":
            return "\n".join(head + _verl_body(self, fmt)) + "\n"
        return "\n".join(head + _trl_body(self, fmt)) + "\n"


def method_export(spec, engine: str, label: str | None = None) -> MethodExport:
    """`spec` (a ClipSpec) as complete verl or TRL settings; a ValueError says what the engine cannot express."""
    from divclip.theory.spec import ClipSpec

    if not isinstance(spec, ClipSpec):
        raise ValueError(f"spec must be a ClipSpec, got {type(spec).__name__}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {list(ENGINES)}, got {engine!r}")
    if label is None:
        from divclip.theory.spec import method_string

        label = f"{method_string(spec)} — {describe(spec)}"
    return _verl_export(spec, label) if engine == "verl" else _trl_export(spec, label)


def _combined(spec) -> bool:
    from divclip.theory.spec import AllOf, is_adaptive

    return isinstance(spec, AllOf) or is_adaptive(spec)


def describe(spec) -> str:
    """'ATR-GRPO: kl3 δ = 0.0231436, r in [0.8, 1.230842]' — the method, its budget and its clip."""
    from divclip.theory.spec import AllOf, is_adaptive

    if isinstance(spec, AllOf):
        return "intersection, per token [max lo, min hi] of: " + "; ".join(describe(p) for p in spec.parts)
    if is_adaptive(spec):
        return (f"adaptive δ holding {spec.signal} at {spec.target:g} (gain {spec.gain:g}, δ in "
                f"[{spec.delta_min:.4g}, {spec.delta_max:.4g}]), from {describe(spec.fixed())}")
    name = spec.measure if isinstance(spec.measure, str) else spec.measure.name
    if spec.mode == "sapo":
        return f"SAPO: soft gate, τ+ = {spec.tau_pos:g}, τ- = {spec.tau_neg:g}"
    if name == "ratio":
        what = "GSPO" if spec.level == "sequence" else method_for("ratio", spec.eps_low, spec.eps_high)
        return f"{what}: ratio clip [{1 - spec.eps_low:.7g}, {1 + spec.eps_high:.7g}] ({spec.level} level)"
    bounds = advice.ratio_bounds(name, spec.delta, spec.delta)
    where = (f"r in [{bounds[0]:.7g}, {bounds[1]:.7g}]" if not isinstance(bounds[0], dict) else
             "r in " + ", ".join(f"[{b['lo']:.4g}, {b['hi']:.4g}] at p = {b['p']:g}" for b in bounds))
    form = {"gated": "DPPO mask", "clip": "PPO clip"}.get(spec.mode, spec.mode)
    return f"{method_for(name)}: {form} by {name}, δ = {spec.delta:.6g}, {where}"


def _num(x) -> float:
    return float(x)


def _verl_export(spec, label: str) -> MethodExport:
    if _combined(spec):  # intersections and adaptive δ: the divclip_method mode reads the whole method string
        from divclip.theory.spec import method_string
        from divclip.trainer.integrations.verl_names import METHOD_ENV, METHOD_MODE

        env = {advice.PLUGIN_ENV: advice.PLUGIN_MODULE, METHOD_ENV: method_string(spec)}
        notes = (f"{METHOD_MODE} reads the whole method from {METHOD_ENV}; verl's clip_ratio* keys are ignored",)
        if getattr(spec, "signal", None) == "entropy":
            raise ValueError("verl does not hand the policy loss the entropy: adapt to clipfrac or kl3 for verl")
        return MethodExport("verl", label, env, {VERL_PREFIX + "policy_loss.loss_mode": METHOD_MODE}, notes)
    name = spec.measure if isinstance(spec.measure, str) else spec.measure.name
    env: dict = {}
    keys: dict = {}
    notes: list = []
    c = _num(spec.dual_clip_c) if spec.dual_clip_c is not None else math.inf
    if spec.mode == "sapo":
        keys = {"policy_loss.loss_mode": "sapo", "tau_pos": _num(spec.tau_pos), "tau_neg": _num(spec.tau_neg)}
        notes.append("verl 0.9.1's sapo aggregates seq-mean-token-mean whatever loss_agg_mode says")
    elif spec.mode == "gated":
        if name not in _VERL_DPPO:
            raise ValueError(f"verl has DPPO masks for binary_kl and binary_tv only, got measure {name!r}")
        d = _num(spec.delta)
        keys = {"policy_loss.loss_mode": _VERL_DPPO[name], "clip_ratio_low": d, "clip_ratio_high": d,
                "clip_ratio_c": _num(spec.tis_cap) if spec.tis_cap is not None else math.inf}
        notes.append("dppo_*: clip_ratio_low/high are the δ of the mask, clip_ratio_c truncates the IS weight")
    elif spec.mode != "clip":
        raise ValueError(f"verl export supports the clip, gated and sapo loss forms, got mode {spec.mode!r}")
    elif spec.level == "sequence":
        if name != "ratio":
            raise ValueError(f"verl has no sequence-level {name} clip (gspo clips the sequence ratio), got {name!r}")
        keys = {"policy_loss.loss_mode": "gspo", "clip_ratio_low": _num(spec.eps_low),
                "clip_ratio_high": _num(spec.eps_high)}
    elif name == "ratio":
        keys = {"policy_loss.loss_mode": "vanilla", "clip_ratio_low": _num(spec.eps_low),
                "clip_ratio_high": _num(spec.eps_high), "clip_ratio_c": c}
    elif name == "kl3":
        lo, hi = advice.measure_bounds("kl3", _num(spec.delta), _num(spec.delta))
        # the root finder's l_δ carries ~1e-16 of noise (0.8 comes back as 0.8000000000000000444): 15 digits give
        # ATR's ε_low = 0.2 exactly, and atr_kl3 recomputes δ = KL3(1 - ε_low) and u_δ from it
        eps_low = float(format(1.0 - lo, ".15g"))
        hi = advice.atr_kl3_bounds(eps_low)[1]
        env[advice.PLUGIN_ENV] = advice.PLUGIN_MODULE
        keys = {"policy_loss.loss_mode": advice.ATR_MODE, "clip_ratio_low": eps_low, "clip_ratio_high": hi - 1.0,
                "clip_ratio_c": c}
        notes.append("atr_kl3 takes ε_low = clip_ratio_low and sets δ = KL3(1 - ε_low); clip_ratio_high = u_δ - 1")
    else:
        d = _num(spec.delta)
        env[advice.PLUGIN_ENV] = advice.PLUGIN_MODULE
        env[advice.DELTA_ENV] = repr(d)
        keys = {"policy_loss.loss_mode": f"divclip_{name}", "clip_ratio_low": d, "clip_ratio_high": d,
                "clip_ratio_c": c}
        notes.append(f"divclip_{name} reads δ from {advice.DELTA_ENV}; clip_ratio_low/high carry the same δ")
    if keys.get("clip_ratio_c") == math.inf:
        notes.append("clip_ratio_c=inf: no dual clip / IS truncation (this method has none; verl's default is 3.0)")
    return MethodExport("verl", label, env, {VERL_PREFIX + k: v for k, v in keys.items()}, tuple(notes))


def _trl_export(spec, label: str) -> MethodExport:
    name = spec.measure if isinstance(spec.measure, str) else spec.measure.name
    notes = [_TRL_ON_POLICY]
    if _combined(spec):  # intersections and adaptive δ: DivClipGRPOConfig(clip_method=...)
        from divclip.theory.spec import method_string

        notes.append("clip_method replaces clip_measure/clip_delta/epsilon_high; TRL's epsilon is ignored")
        return MethodExport("trl", label, {}, {"clip_method": method_string(spec)}, tuple(notes),
                            "DivClipGRPOConfig")
    if spec.mode == "sapo":
        return MethodExport("trl", label, {}, {"loss_type": "sapo", "sapo_temperature_pos": _num(spec.tau_pos),
                                               "sapo_temperature_neg": _num(spec.tau_neg)}, tuple(notes),
                            "GRPOConfig")
    if spec.mode != "clip":
        raise ValueError(f"TRL has no {spec.mode!r} loss form (DPPO's mask is verl's dppo_kl/dppo_tv); for a PPO "
                         f"clip by {name} use the method '{name}:{spec.delta:g}'")
    delta = None if spec.dual_clip_c is None else _num(spec.dual_clip_c)
    if spec.level == "sequence":
        if name != "ratio":
            raise ValueError(f"TRL has no sequence-level {name} clip (importance_sampling_level='sequence' clips the "
                             f"sequence ratio), got {name!r}")
        return MethodExport("trl", label, {}, {"importance_sampling_level": "sequence", "epsilon": _num(spec.eps_low),
                                               "epsilon_high": _num(spec.eps_high), "delta": delta}, tuple(notes),
                            "GRPOConfig")
    if name == "ratio":
        settings = {"clip_measure": "ratio", "clip_delta": None, "epsilon": _num(spec.eps_low),
                    "epsilon_high": _num(spec.eps_high), "delta": delta}
    else:
        settings = {"clip_measure": name, "clip_delta": _num(spec.delta), "epsilon_high": None, "delta": delta}
        notes.append("a divergence measure sets both bounds from clip_delta: epsilon_high must stay None")
    return MethodExport("trl", label, {}, settings, tuple(notes), "DivClipGRPOConfig")


def _override_value(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, float):
        return "inf" if v == math.inf else repr(v)
    return str(v)


def _yaml_value(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, float):
        return ".inf" if v == math.inf else repr(v)
    return str(v)


def _py_value(v) -> str:
    if isinstance(v, float) and v == math.inf:
        return 'float("inf")'
    return repr(v)


def _verl_body(e: MethodExport, fmt: str) -> list[str]:
    if fmt == "overrides":
        lines = [f"{k}={shlex.quote(str(v))}" for k, v in e.env.items()] + ["python3 -m verl.trainer.main_ppo"]
        lines += [f"    {k}={_override_value(v)}" for k, v in e.settings.items()]
        return [line + " \\" for line in lines[:-1]] + lines[-1:]
    if fmt == "yaml":
        out = [f"# environment: {k}={v}" for k, v in e.env.items()]
        tree: dict = {}
        for key, v in e.settings.items():
            node = tree
            *parents, leaf = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = v

        def walk(node, depth):
            for k, v in node.items():
                if isinstance(v, dict):
                    out.append("  " * depth + f"{k}:")
                    walk(v, depth + 1)
                else:
                    out.append("  " * depth + f"{k}: {_yaml_value(v)}")

        walk(tree, 0)
        return out
    out = ["import os", ""] if e.env else []
    out += [f"os.environ[{k!r}] = {v!r}" for k, v in e.env.items()]
    out += ["overrides = ["] + [f"    {f'{k}={_override_value(v)}'!r}," for k, v in e.settings.items()] + ["]"]
    return out


def _trl_body(e: MethodExport, fmt: str) -> list[str]:
    if fmt == "python":
        module = ("divclip.trainer.integrations.trl" if e.config_class == "DivClipGRPOConfig" else "trl")
        trainer = e.config_class.replace("Config", "Trainer")
        out = [f"from {module} import {e.config_class}, {trainer}", "", "clip_settings = dict("]
        out += [f"    {k}={_py_value(v)}," for k, v in e.settings.items()]
        return out + [")", f"args = {e.config_class}(output_dir=..., **clip_settings)"]
    if fmt == "yaml":
        return [f"{k}: {_yaml_value(v)}" for k, v in e.settings.items()]
    unset = [k for k, v in e.settings.items() if v is None]
    out = [f"# command-line flags of a script that parses {e.config_class} with transformers' HfArgumentParser"]
    if unset:  # HfArgumentParser cannot take None: these must not be given at all
        out.append(f"# leave unset (None): {', '.join(unset)}")
    return out + [" ".join(f"--{k} {_override_value(v)}" for k, v in e.settings.items() if v is not None)]
