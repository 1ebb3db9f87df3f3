"""One measure = one object: its code formula is its definition, and one registration reaches every surface."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import mpmath
import numpy as np
import pytest
import sympy as sp
import torch

from divclip import theory
from divclip.theory import MEASURES, ClipSpec, measure_from_formula, parse_method, register_measure
from divclip.theory.formula import parse_formula
from divclip.theory.registry import unregister_measure

R_GRID = np.concatenate([np.geomspace(1e-4, 1e4, 801), 1.0 + np.linspace(-1e-3, 1e-3, 41)])
P_GRID = (1e-6, 0.01, 0.3, 0.5, 0.9, 0.999)


@pytest.mark.parametrize("name", sorted(MEASURES))
def test_code_formula_is_the_numeric_value_everywhere(name):
    """`Measure.code` (what the symbolic side derives from) equals `_value` at many r and p."""
    m = MEASURES[name]
    fn, expr, uses_p = parse_formula(m.code)
    assert uses_p == m.p_dependent
    compared = 0
    for p in P_GRID if m.p_dependent else (None,):
        with np.errstate(all="ignore"):
            want = m._value(R_GRID, p, np)
            got = np.broadcast_to(fn(R_GRID, p), R_GRID.shape)
        finite = np.isfinite(want)
        assert np.array_equal(finite, np.isfinite(got)), (name, p)  # same domain (binary KL: r·p < 1)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-9, atol=1e-15, err_msg=f"{name} p={p}")
        compared += int(finite.sum())
    assert compared >= 400


@pytest.mark.parametrize("name", sorted(MEASURES))
def test_sympy_expression_of_the_code_is_exact_and_matches_the_value(name):
    """The SymPy form is built from the code with exact rationals (no floats), and agrees with `_value` when
    evaluated at 30 digits (an independent evaluation path: mpmath, not numpy)."""
    m = MEASURES[name]
    _, expr, _ = parse_formula(m.code)
    expr = expr.doit()
    assert not expr.atoms(sp.Float), expr
    r_sym, p_sym = sp.Symbol("r", positive=True), sp.Symbol("p", positive=True)
    for r in (0.05, 0.8, 0.999, 1.001, 1.3, 2.5):
        for p in (0.2, 0.35) if m.p_dependent else (None,):
            if p is not None and r * p >= 1:
                continue
            subs = {r_sym: sp.Rational(str(r))} | ({p_sym: sp.Rational(str(p))} if p is not None else {})
            exact = mpmath.mpf(str(sp.N(expr.subs(subs), 30)))
            assert float(exact) == pytest.approx(float(m._value(np.float64(r), p, np)), rel=1e-12, abs=1e-300)


def test_builtin_symbolic_forms_are_the_published_ones():
    from divclip.theory.symbolic import R, measure_expression

    published = {
        "kl3": R - 1 - sp.log(R),
        "kl3_reverse": 1 / R - 1 + sp.log(R),
        "k2": sp.log(R) ** 2 / 2,
        "log_ratio": sp.Abs(sp.log(R)),
        "chi2": (R - 1) ** 2,
        "hellinger": (sp.sqrt(R) - 1) ** 2,
        "ratio": sp.Abs(R - 1),
    }
    for name, expr in published.items():
        assert sp.simplify(measure_expression(name) - expr) == 0, name


def test_every_measure_carries_its_presentation():
    colours = [m.colour for m in MEASURES.values()]
    assert len(set(colours)) == len(colours)
    for m in MEASURES.values():
        assert m.label and m.method and m.text and m.colour.startswith("#") and len(m.colour) == 7, m.name


# ------------------------------------------------------------------------------- one registration, every surface
@pytest.fixture
def tv():
    """Total variation |r − 1|/2, registered in one place and removed afterwards."""
    stored = register_measure(measure_from_formula("abs(r - 1) / 2", name="tv"), label="TV |r−1|/2")
    yield stored
    unregister_measure("tv")


def test_total_variation_reaches_the_loss_at_its_closed_form_bounds(tv):
    delta = 0.07
    spec = ClipSpec("tv", delta=delta)
    lo, hi = spec.ratio_bounds()
    assert lo == pytest.approx(1 - 2 * delta, rel=1e-12) and hi == pytest.approx(1 + 2 * delta, rel=1e-12)
    assert parse_method("tv:0.07") == spec and theory.spec_label(spec) == "tv δ=0.07"
    # The loss, against the closed-form clip max(-A·r, -A·clip(r, 1-2δ, 1+2δ)) in float64.
    g = torch.Generator().manual_seed(0)
    old = torch.log(torch.rand(64, 16, generator=g, dtype=torch.float64) * 0.9 + 0.05)
    lp = old + 0.3 * torch.randn(64, 16, generator=g, dtype=torch.float64)
    adv = torch.randn(64, 1, generator=g, dtype=torch.float64).expand(64, 16).contiguous()
    mask = torch.ones_like(adv)
    terms = theory.policy_terms(lp, old, adv, mask, spec)
    r = torch.exp(lp - old)
    ref = torch.maximum(-adv * r, -adv * r.clamp(1 - 2 * delta, 1 + 2 * delta))
    torch.testing.assert_close(terms.loss, ref, rtol=1e-12, atol=1e-14)
    low, high = (adv < 0) & (r < 1 - 2 * delta), (adv > 0) & (r > 1 + 2 * delta)
    assert torch.equal(terms.clipped_low > 0, low) and torch.equal(terms.clipped_high > 0, high)
    assert int(low.sum()) > 20 and int(high.sum()) > 20
    loss, metrics = theory.policy_loss(lp, old, adv, mask, "tv:0.07")
    assert metrics["clipfrac_low"] == pytest.approx(float(low.double().mean()))


def test_total_variation_reaches_the_derivation(tv):
    from divclip.theory import symbolic

    assert "tv" in symbolic.derivable_measures()
    delta = symbolic.DELTA
    lower, upper = symbolic.clip_roots(symbolic.measure_expression("tv"))
    assert sp.simplify(lower - (1 - 2 * delta)) == 0 and sp.simplify(upper - (1 + 2 * delta)) == 0
    steps = symbolic.derivation("tv")
    assert len(steps) >= 5 and all(symbolic.check_step(s).passed for s in steps)


def test_total_variation_reaches_the_cli_listing_and_the_app(tv, capsys):
    from divclip.app.methods import METHOD_COLOURS, colour_for, label_for, method_for
    from divclip.cli import main

    assert main(["measures", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["tv"]["formula"] == "abs(r - 1) / 2" and rows["tv"]["p_dependent"] == "no"
    assert rows["tv"]["interval_at_0.02"] == "[0.9600, 1.0400]"
    assert label_for("tv") == "TV |r−1|/2" and method_for("tv") == "TV |r−1|/2"
    assert colour_for("tv") == tv.colour and METHOD_COLOURS["TV |r−1|/2"] == tv.colour
    assert list(METHOD_COLOURS.values()).count(tv.colour) == 1  # a colour no other method has


def test_total_variation_reaches_the_verl_modes(tv):
    pytest.importorskip("verl")
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla, get_policy_loss_fn
    from verl.workers.config.actor import ActorConfig, PolicyLossConfig

    import divclip.trainer.integrations.verl as plugin

    fn = get_policy_loss_fn("divclip_tv")  # registered after the plug-in was imported: the hook added it
    assert "divclip_tv" in plugin.LOSS_MODES
    cfg = ActorConfig(
        strategy="fsdp",
        rollout_n=4,
        ppo_micro_batch_size_per_gpu=4,
        clip_ratio_low=0.05,
        clip_ratio_high=0.05,
        clip_ratio_c=math.inf,
        policy_loss=PolicyLossConfig(loss_mode="divclip_tv"),
    )
    g = torch.Generator().manual_seed(1)
    old = torch.log(torch.rand(8, 12, generator=g, dtype=torch.float64) * 0.9 + 0.05)
    lp = (old + 0.3 * torch.randn(8, 12, generator=g, dtype=torch.float64)).requires_grad_(True)
    adv = torch.randn(8, 1, generator=g, dtype=torch.float64).expand(8, 12).contiguous()
    mask = torch.ones(8, 12, dtype=torch.bool)
    loss, metrics = fn(
        old_log_prob=old, log_prob=lp, advantages=adv, response_mask=mask, loss_agg_mode="token-mean", config=cfg
    )
    # verl's own `vanilla` at the closed-form interval [1 - 2δ, 1 + 2δ] = [0.9, 1.1] is the reference.
    ref_cfg = ActorConfig(
        strategy="fsdp",
        rollout_n=4,
        ppo_micro_batch_size_per_gpu=4,
        clip_ratio_low=0.1,
        clip_ratio_high=0.1,
        clip_ratio_c=math.inf,
        policy_loss=PolicyLossConfig(loss_mode="vanilla"),
    )
    ref, ref_metrics = compute_policy_loss_vanilla(
        old_log_prob=old,
        log_prob=lp.detach(),
        advantages=adv,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=ref_cfg,
    )
    torch.testing.assert_close(loss.detach(), ref, rtol=1e-9, atol=1e-12)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(float(ref_metrics["actor/pg_clipfrac"]), rel=1e-6)
    assert metrics["actor/pg_clipfrac"] > 0


def test_unregistering_removes_the_verl_mode():
    pytest.importorskip("verl")
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    import divclip.trainer.integrations.verl as plugin

    register_measure(measure_from_formula("abs(r - 1) / 3", name="tv3"))
    assert "divclip_tv3" in POLICY_LOSS_REGISTRY
    unregister_measure("tv3")
    assert "divclip_tv3" not in POLICY_LOSS_REGISTRY and "divclip_tv3" not in plugin.LOSS_MODES
    assert "tv3" not in MEASURES


@pytest.mark.slow
def test_a_measure_registered_before_the_plugin_import_gets_a_verl_mode():
    pytest.importorskip("verl")
    code = (
        "from divclip.theory import measure_from_formula, register_measure\n"
        "register_measure(measure_from_formula('abs(r - 1) / 2', name='tv'))\n"
        "import divclip.trainer.integrations.verl as plugin\n"
        "from verl.trainer.ppo.core_algos import get_policy_loss_fn\n"
        "assert get_policy_loss_fn('divclip_tv') is not None and 'divclip_tv' in plugin.LOSS_MODES\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: "abs(r - 1)", "measure must be a divclip.theory.Measure"),
        (lambda: measure_from_formula("abs(r - 1) / 2"), r"measure name must be letters, digits and '_'"),
        (lambda: measure_from_formula("abs(r - 1) / 2", name="kl3"), "'kl3' is already a registered measure"),
        (lambda: measure_from_formula("abs(r - 1) / 2", name="grpo"), "'grpo' is already a preset"),
    ],
)
def test_bad_registrations_are_refused(make, message):
    before = dict(MEASURES)
    with pytest.raises(ValueError, match=message):
        register_measure(make())
    assert MEASURES == before


def test_builtins_cannot_be_unregistered():
    with pytest.raises(ValueError, match="'kl3' is built in"):
        unregister_measure("kl3")
    with pytest.raises(ValueError, match="'nope' is not registered"):
        unregister_measure("nope")
