"""Every clip objective in one frame: the gradient weight w(q, r, A), the keep interval, and the named methods.

For a token with old probability q = π_old(a), ratio r = π_θ(a)/q and advantage A, a token-level method's
per-token loss ℓ has

    ∂ℓ/∂log π = −A·w(q, r, A)

so w is what the method does to the token's policy gradient: 0 where the gradient is clipped away, r for an
unclipped PPO token (the importance weight), r times the gate's slope for SAPO, 1 for GPG (docs/theory.md §8).
`gradient_weight` dispatches to the loss form's `Form.weight` (`divclip.theory.forms`, one module per form), so
a form is in the frame once declared.
tests/theory/test_atlas.py checks w against autograd through `policy_loss` for every token-level form.

Sequence-level and batch-selective forms: GSPO (form 'clip' at level='sequence') reads r as the sequence's
length-normalised ratio s; every token of the sequence gets w(q, s, A). A form whose weight is not a function
of (q, r, A) alone (`Form.token_level` False and no weight) makes `gradient_weight` raise a ValueError that
says why (`Form.weight_note`).

`METHODS` (the one catalogue, `divclip.theory.methods`) names methods: an engine's loss mode or a paper's method
as a method string plus the loss aggregation it uses (verl `vanilla` is 'grpo/dual=3' with token-mean; TRL `dapo`
is 'grpo' with token-mean).
`catalogue()` is the atlas: every named method and every declared form, with family, sources, parameters and
intervals (`divclip atlas`, the app's Atlas page, the method table in README.md and docs/theory.md §8).

Torch-free: the forms' numpy weights and intervals, the method-string parser (`divclip.theory.spec`, which
imports nothing of the atlas) and the nearest-budget search, all numpy.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from divclip.theory.forms import FORMS, Form, get_form
from divclip.theory.forms._numpy import SEQ_LOG_RATIO_MAX, clip_bounds, upper_delta
from divclip.theory.measures import MEASURES
from divclip.theory.methods import METHODS, Method, declare_method
from divclip.theory.nearest_budget import nearest_budget
from divclip.theory.spec import (
    PRESETS,
    AdaptiveSpec,
    as_spec,
    did_you_mean,
    method_string,
    parse_method,
    spec_label,
)

__all__ = [
    "METHODS",
    "Q_GRID",
    "Method",
    "arithmetic",
    "catalogue",
    "declare_method",
    "find_method",
    "gradient_weight",
    "interval",
    "verl_arithmetic",
]

Q_GRID = (0.001, 0.01, 0.1, 0.5, 0.9, 0.99)
"""The old probabilities at which the atlas lists every method's interval."""


# ------------------------------------------------------------------------------------------ the frame
def _form_of(spec) -> Form:
    return get_form(spec.form)


def _as_spec(spec):
    """A ClipSpec from a ClipSpec, a method string or an atlas name ('dcpo', 'verl:vanilla'); δ0 if adaptive."""
    if isinstance(spec, str) and (spec.strip() in _METHODS or spec.strip() in FORMS):
        spec = find_method(spec).method  # an atlas name that is not itself a method string
    spec = as_spec(spec)
    return spec.fixed() if isinstance(spec, AdaptiveSpec) else spec  # one step's budget: δ0


def _array(name: str, x, lo: float, hi: float, lo_open: bool) -> np.ndarray:
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or an array of numbers, got {x!r}") from None
    bad = ~np.isfinite(a) | (a > hi) | ((a <= lo) if lo_open else (a < lo))
    if bad.any():
        allowed = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        first = float(a[bad].ravel()[0])
        raise ValueError(f"{name} must lie in {allowed} (finite), got {first!r} among {a.size} values")
    return a


def _inputs(q, r, adv) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple]:
    q = _array("q (the old probability)", q, 0.0, 1.0, lo_open=True)
    r = _array("r (the ratio)", r, 0.0, np.inf, lo_open=False)
    adv = _array("adv (the advantage)", adv, -np.inf, np.inf, lo_open=False)
    try:
        shape = np.broadcast(q, r, adv).shape
    except ValueError:
        raise ValueError(
            f"q, r and adv must broadcast together, got shapes {q.shape}, {r.shape} and {adv.shape}"
        ) from None
    return q, r, adv, shape


def gradient_weight(spec, q, r, adv) -> np.ndarray:
    """w with ∂ℓ/∂log π = −A·w for the per-token loss ℓ of `spec` (a ClipSpec, a method string or an atlas
    name such as 'dcpo' or 'verl:vanilla').

    q (old probability, in (0, 1]), r (ratio, >= 0) and adv (advantage) are numbers or numpy arrays that
    broadcast; the result is a float64 array of their broadcast shape. See the module doc for what w is, and
    docs/theory.md §8 for every form's formula. A ValueError names a bad argument, or says why the spec's form
    has no per-token weight (sequence-level and batch-selective forms)."""
    spec = _as_spec(spec)
    form = _form_of(spec)
    if form.weight is None:
        why = form.weight_note or "its weight is not a function of (q, r, A) alone"
        raise ValueError(f"form {form.name!r} ({form.family}) has no per-token gradient weight w(q, r, A): {why}")
    q, r, adv, shape = _inputs(q, r, adv)
    w = np.asarray(form.weight(spec, q, r, adv), dtype=np.float64)
    return np.broadcast_to(w, shape).copy()


def interval(spec, q, sign: int):
    """(lo, hi) float64 arrays shaped like q: the ratio range where `spec`'s form keeps the gradient for A of
    `sign` (+1 or -1), or None where the form has no interval (`Form.interval`, docs/theory.md §8)."""
    spec = _as_spec(spec)
    form = _form_of(spec)
    if sign not in (1, -1) or isinstance(sign, bool):
        raise ValueError(f"sign must be +1 (A > 0) or -1 (A < 0), got {sign!r}")
    q = _array("q (the old probability)", q, 0.0, 1.0, lo_open=True)
    if form.interval is None:
        return None
    lo, hi = form.interval(spec, q, sign)
    return (
        np.broadcast_to(np.asarray(lo, dtype=np.float64), q.shape).copy(),
        np.broadcast_to(np.asarray(hi, dtype=np.float64), q.shape).copy(),
    )


# ------------------------------------------------------------------- an engine's arithmetic against verl's
EXAMPLE_LOG_R = 25.0
"""The log-ratio at which `arithmetic` shows what verl's clamp (|log r| <= 20) does: beyond it, inside float64."""
EXAMPLE_Q = 1e-12
"""The old probability of that example token: q·e^25 ≈ 0.072, so π_θ = q·r is a probability."""
_ENGINE_PARAMS = ("clamp_log_ratio", "seq_grad_mean", "surrogate", "exp_dtype")
"""Form parameters an engine's read sets where its arithmetic is not verl's (dropped, they take the form's defaults,
verl's); the gated form's `delta_high` is verl's too (verl's upper clip width beside its lower one under dppo_*)."""


def _clamps(spec) -> bool:
    return bool(spec.param("clamp_log_ratio", True))


def verl_arithmetic(spec):
    """The spec with verl's arithmetic where an engine's read departs from it (docs/engines.md): log r clamped
    (±20 at token level, log s <= 10 for GSPO) with the gradient zeroed beyond, GSPO's gradient sg(s)·π/sg(π)
    (`seq_grad_mean` 0). The budget (a gated form's two δs too), form and every other option stay."""
    spec = _as_spec(spec)
    if getattr(spec, "parts", None) is not None:
        return spec
    params = tuple((k, v) for k, v in spec.params if k not in _ENGINE_PARAMS)
    return dataclasses.replace(spec, params=params)


def _w(spec, q, r, adv) -> float:
    return float(gradient_weight(spec, q, r, adv))


def arithmetic(spec) -> list[dict]:
    """The engine arithmetic `spec` carries ('/noclamp', `seq_grad_mean`, `delta_high`, `surrogate`, `exp_dtype`,
    `gate`) and what it changes in w(q, r, A) or the gradient against verl's: one JSON-ready dict per option,
    {option, where, text, verl, example}; [] for a spec with none of them.

    `example` holds the numbers that show it, from the form's own weight (`gradient_weight`) on the spec and on
    `verl_arithmetic(spec)`: for '/noclamp' the token q = 1e-12, log r = +25 (and −25) under each sign of A; for
    `seq_grad_mean` one row of two kept tokens with A = (1, −1) at s = 1; for `delta_high` (verl's own too) the
    upper bounds at δ_high and at the one δ on `Q_GRID`; for `surrogate` = ratio the '/noclamp' token; `gate` = 1
    and `exp_dtype` = float32 change no w beyond rounding (`gate`'s decisions are verl's)."""
    spec = _as_spec(spec)
    if getattr(spec, "parts", None) is not None:
        return []
    form, out = _form_of(spec), []
    verl = verl_arithmetic(spec)
    if not _clamps(spec):
        seq = spec.level == "sequence"
        bound = f"log s > {SEQ_LOG_RATIO_MAX:g}" if seq else "|log r| > 20"
        example = {"q": EXAMPLE_Q, "log_r": [EXAMPLE_LOG_R, -EXAMPLE_LOG_R]}
        if form.weight is not None:
            for sign, key in ((1.0, "A>0"), (-1.0, "A<0")):
                example[key] = [_w(spec, EXAMPLE_Q, np.exp(x), sign) for x in example["log_r"]]
                example[f"verl {key}"] = [_w(verl, EXAMPLE_Q, np.exp(x), sign) for x in example["log_r"]]
        if form.name == "gated":
            verl_does = "verl's gated form takes its IS weight at e^{±20} (the clamp does not zero its gradient)"
            here = "w = min(r, c) of the raw r"
        else:
            verl_does = f"verl clamps log {'s' if seq else 'r'} and zeroes the gradient there (w = 0)"
            here = f"w = {'s' if seq else 'r'} wherever the clip keeps the token"
        out.append(
            {
                "option": "noclamp",
                "where": bound,
                "text": f"log {'s' if seq else 'r'} not clamped (AReaL, slime, OpenRLHF GSPO): at {bound} {here}",
                "verl": verl_does,
                "example": example,
            }
        )
    if spec.level == "sequence" and spec.form == "clip" and spec.param("seq_grad_mean"):
        # one row, tokens A = (1, −1), both kept at s = 1: each token's ∂ℓ_t/∂log π_t
        adv = np.array([1.0, -1.0])
        s = 1.0
        own = -adv * s  # verl: sg(s)·π_t/sg(π_t), each token its own −A·s
        mean = np.full(2, float(np.mean(-adv * s)))  # through the mean: the row's mean of the kept −A·s
        out.append(
            {
                "option": "seq_grad_mean=1",
                "where": "rows whose tokens carry different A (GAE, token-level rewards)",
                "text": "GSPO's gradient through the sequence mean (OpenRLHF, slime): each token gets −s·(its row's "
                "mean of A·[kept]), not its own −A·s; with one A per row the two are equal",
                "verl": "sg(s)·π_θ/sg(π_θ): each token its own −A·s",
                "example": {"A": adv.tolist(), "s": s, "gradient": mean.tolist(), "verl gradient": own.tolist()},
            }
        )
    if form.name == "gated" and upper_delta(spec) != spec.delta:
        q = np.asarray(Q_GRID)
        hi = clip_bounds(spec, q)[1]
        one = dataclasses.replace(spec, params=tuple((k, v) for k, v in spec.params if k != "delta_high"))
        hi_one = clip_bounds(one, q)[1]
        out.append(
            {
                "option": f"delta_high={upper_delta(spec):g}",
                "where": "A > 0 tokens with r > 1",
                "text": f"two widths of one {spec.measure_name}: A > 0 gated at D <= δ_high = {upper_delta(spec):g}, "
                f"A < 0 at D <= δ = {spec.delta:g} (SkyRL delta_low/delta_high, verl's two dppo widths)",
                "verl": f"verl's dppo_* with two widths alike; a single δ = {spec.delta:g} "
                "would bound the upper side by it too",
                "example": {"q": list(Q_GRID), "hi": hi.tolist(), "hi at δ": hi_one.tolist()},
            }
        )
    if form.name == "gated" and spec.param("surrogate") == "ratio":
        example = {"q": EXAMPLE_Q, "log_r": [EXAMPLE_LOG_R, -EXAMPLE_LOG_R]}
        for sign, key in ((1.0, "A>0"), (-1.0, "A<0")):
            example[key] = [_w(spec, EXAMPLE_Q, np.exp(x), sign) for x in example["log_r"]]
            example[f"verl {key}"] = [_w(verl, EXAMPLE_Q, np.exp(x), sign) for x in example["log_r"]]
        clamped = _clamps(spec)
        out.append(
            {
                "option": "surrogate=ratio",
                "where": "the loss value everywhere; w where |log r| > 20" if clamped else "the loss value",
                "text": "the kept token's loss is −A·r with r differentiable (SkyRL's dppo): the gradient −A·r·∇log π "
                "of −A·sg(r)·log π, another value"
                + ("; through the ±20 clamp of log r its gradient is 0 beyond it (w = 0)" if clamped else ""),
                "verl": "−A·sg(r)·log π (verl's dppo): w = r at e^±20 where |log r| > 20",
                "example": example,
            }
        )
    if spec.param("exp_dtype", "input") == "float32":
        out.append(
            {
                "option": "exp_dtype=float32",
                "where": "every token, at float32 rounding (about 6e-8 relative) with float64 inputs",
                "text": "r = exp(log r) in float32 whatever the input dtype, and the gradient through it rounded as "
                "autograd through that exp rounds it (SkyRL's safe_exp_delta): w moves by float32 rounding only",
                "verl": "exp in the input's dtype",
                "example": {},
            }
        )
    if form.name == "gated" and spec.param("gate") == "verl":
        out.append(
            {
                "option": "gate=verl",
                "where": "tokens within rounding of the bound, A = 0 tokens",
                "text": "decided with verl 0.9.1's dppo arithmetic (binary KL's +1e-8, the side by prob <= old_prob, "
                "A = 0 on the negative side): verl's decisions bit for bit; w and the intervals move by under "
                "1e-8/(1 − q) in D",
                "verl": "this is verl's own arithmetic (divclip's methods decide on the exact D)",
                "example": {},
            }
        )
    return out


# ------------------------------------------------------------------------------------- named methods
# The named methods are the one catalogue, `divclip.theory.methods.METHODS` (re-exported here); `_METHODS` is its
# read-only view, for this module's lookups.
_METHODS = METHODS


def find_method(name: str) -> Method:
    """The named method, a declared form's example, or an ad-hoc row for a method string."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a method must be a name or a method string, got {name!r}")
    name = name.strip()
    if name in _METHODS:
        return _METHODS[name]
    if name in FORMS and FORMS[name].example:
        form = FORMS[name]
        return Method(name, form.example, form.sources or ("divclip",))
    try:
        spec = parse_method(name)
    except ValueError as exc:
        why = str(exc).split("; allowed:")[0]  # the grammar's long list of choices: `divclip atlas` has them
        head = name.split("/")[0].split(":")[0].split("&")[0].split("@")[0]
        hint = did_you_mean(head, [*_METHODS, *FORMS, *PRESETS, *MEASURES]) if "neither a preset" in why else ""
        raise ValueError(
            f"method {name!r} is neither a named method nor a loss form (`divclip atlas` lists "
            f"them), nor a method string: {why}{hint}"
        ) from None
    return Method(name, name, _form_of(spec).sources or ("divclip",))


def catalogue_names() -> list[str]:
    """Every row of the atlas: the named methods, then each declared form that no named method uses (at its
    `Form.example`; a form without one is left out, and tests/theory/test_atlas.py names it)."""
    names = list(_METHODS)
    used = {parse_method(m.method).form for m in _METHODS.values()}
    names += [name for name, form in FORMS.items() if name not in used and name not in _METHODS and form.example]
    return names


MAX_METHODS = 100
"""Most methods one atlas call takes (the whole catalogue is a few dozen; each row fits a nearest budget)."""


def catalogue(names=None, with_nearest: bool = True) -> list[dict]:
    """One JSON-ready row per method (`atlas_row`): every catalogue method, or `names` (names or strings)."""
    if names is None:
        names = catalogue_names()
    elif isinstance(names, str):
        if names.count(",") >= MAX_METHODS:  # counted before splitting: a list of 3000 is refused at once
            raise ValueError(f"methods must name at most {MAX_METHODS} methods, got {names.count(',') + 1}")
        names = [n.strip() for n in names.split(",") if n.strip()]
    if not names:
        raise ValueError("methods must name at least one method, e.g. 'grpo,dapo'")
    if len(names) > MAX_METHODS:
        raise ValueError(f"methods must name at most {MAX_METHODS} methods, got {len(names)}")
    return [atlas_row(find_method(n), with_nearest) for n in names]


def _parameters(spec, form: Form) -> list[dict]:
    """The spec's budget fields and its form's declared parameters, each with its value, default and doc: a
    parameter that is off by default (dual_clip_c, tis_cap) only when set, a flag only when it differs from its
    default (clamp_log_ratio under '/noclamp')."""
    out = []
    if form.uses_budget:
        if spec.measure_name == "ratio" and getattr(spec, "parts", None) is None:
            out += [
                {"name": "eps_low", "value": spec.eps_low, "default": None, "doc": "lower clip width"},
                {"name": "eps_high", "value": spec.eps_high, "default": None, "doc": "upper clip width"},
            ]
        elif getattr(spec, "parts", None) is None:
            doc = f"budget of D = {spec.measure_name}"
            out.append({"name": "delta", "value": spec.delta, "default": None, "doc": doc})
    at_level = form.extra.get("params_at_level", {})  # e.g. the clip form's seq_grad_mean: level 'sequence' only
    for p in form.params:
        value = spec.param(p.name)
        if (p.default is None or p.kind == "flag") and value == p.default:
            continue
        if at_level.get(p.name, spec.level) != spec.level:
            continue
        out.append({"name": p.name, "value": value, "default": p.default, "doc": p.doc})
    return out


_FIELDS = ("eps_low", "eps_high", "delta")


def method_parameters(method) -> list[dict]:
    """The parameters of a method (a name, a method string or a ClipSpec) that `set_parameter` can change:
    its budget fields and its form's own parameters, each with name, value, default and doc."""
    spec = _as_spec(method)
    return _parameters(spec, _form_of(spec))


def set_parameter(method, name: str, value: float) -> str:
    """The method string of `method` with one parameter (a budget field such as eps_high or delta, or one its form
    declares: dual_clip_c, tis_cap, tau_pos, clip_cov_ratio, ...) set to `value`; a ValueError says what is
    allowed."""
    spec = _as_spec(method)
    allowed = [p["name"] for p in _parameters(spec, _form_of(spec))]
    if name not in allowed:
        raise ValueError(f"method {method_string(spec)!r} has no parameter {name!r}; its parameters: {allowed}")
    if name in _FIELDS:
        new = dataclasses.replace(spec, **{name: value})
    else:
        new = dataclasses.replace(spec, params={**dict(spec.params), name: value})
    return method_string(new)


def _intervals(spec) -> dict | None:
    q = np.asarray(Q_GRID)
    pos, neg = interval(spec, q, 1), interval(spec, q, -1)
    if pos is None:
        return None
    pair = lambda lo, hi: [[float(a), float(b)] for a, b in zip(lo, hi)]  # noqa: E731
    return {"q": list(Q_GRID), "A>0": pair(*pos), "A<0": pair(*neg)}


_SEQUENCE_NOTE = (
    "sequence level: r is the sequence's length-normalised ratio s = exp(mean log r_t), and every "
    "token of the sequence gets w(q, s, A)"
)


def atlas_row(method: Method, with_nearest: bool = True) -> dict:
    """The atlas entry of one method: name, method string, label, form, family, summary, sources, loss
    aggregation, parameters (value and default), intervals on `Q_GRID` by the sign of A (None where the form
    has none), the weight's meaning, and the divergence budget it equals or comes nearest to."""
    spec = parse_method(method.method)
    form = _form_of(spec)
    row = {
        "name": method.name,
        "method": method_string(spec),
        "label": spec_label(spec),
        "form": form.name,
        "family": "sequence-level" if spec.level == "sequence" else form.family,
        "summary": form.summary,
        "sources": list(method.sources),
        "agg": method.agg,
        "note": method.note,
        "parameters": _parameters(spec, form),
        "token_level": form.weight is not None,
        "weight_note": _SEQUENCE_NOTE if spec.level == "sequence" else form.weight_note,
        "intervals": _intervals(spec),
        "arithmetic": arithmetic(spec),
    }
    if with_nearest:
        row["nearest"] = nearest_budget(row["intervals"])
    return row
