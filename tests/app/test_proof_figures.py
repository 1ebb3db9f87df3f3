"""The proof page's figures, its sign-of-A step and its questions: every number drawn is theory's, checked against
closed forms (KL3's Lambert-W series, χ²'s 1 ∓ √δ, 4δ/3) and against theory's own loss."""

from __future__ import annotations

import math

import numpy as np
import pytest

from divclip import theory
from divclip.app import figures, proof_figures, sign_of_a
from divclip.app.illustration import symbolic_roots
from divclip.app.proof_text import SIGN_TITLE, check_kind, sign_step, step_question
from divclip.app.state import BoolParam
from divclip.theory.symbolic import derivation


@pytest.fixture(autouse=True)
def validate_figures(monkeypatch):
    monkeypatch.setattr(figures, "VALIDATE", True)


def traces(fig, kind):
    return [t for t in fig.data if isinstance(t.meta, dict) and t.meta.get("kind") == kind]


@pytest.mark.parametrize("delta", [1e-6, 0.0231435513142, 0.3])
def test_roots_figure_marks_theorys_roots(delta):
    (roots,) = traces(proof_figures.roots_figure("chi2", delta), "roots")
    assert list(roots.x) == pytest.approx([1 - math.sqrt(delta), 1 + math.sqrt(delta)], rel=1e-12)
    assert list(roots.y) == [delta, delta]
    fig = proof_figures.roots_figure("kl3", delta, regions=True)
    assert list(traces(fig, "roots")[0].x) == list(theory.kl3_bounds(delta))
    assert len([s for s in fig.layout.shapes if s.type == "rect"]) == 2  # both clipped sides shaded


def test_lambert_figure_crossings_are_on_the_line():
    delta = 0.05
    fig = proof_figures.lambert_figure(delta)
    (roots,) = traces(fig, "roots")
    for r in roots.x:  # r e^{-r} = e^{-(1+δ)} at both roots
        assert r * math.exp(-r) == pytest.approx(math.exp(-1 - delta), rel=1e-12)


def test_series_figure_series_is_the_published_kl3_series():
    delta = 0.01
    fig = proof_figures.series_figure(symbolic_roots("kl3"), delta)
    by_name = {t.name: t for t in fig.data}
    deltas = np.asarray(by_name["u_δ series to O(s⁵)"].x)
    s = np.sqrt(2 * deltas)
    published = 1 + s + s**2 / 3 + s**3 / 36 - s**4 / 270  # docs/theory.md §2
    assert np.asarray(by_name["u_δ series to O(s⁵)"].y) == pytest.approx(published, rel=1e-12)
    assert np.asarray(by_name["l_δ exact"].y) == pytest.approx(theory.kl3_bounds(deltas)[0], rel=1e-15)
    (marks,) = traces(fig, "exact_at_delta")
    assert [marks.meta["lo"], marks.meta["hi"]] == list(theory.kl3_bounds(delta))


@pytest.mark.parametrize(("name", "tighter"), [("kl3", "lower"), ("kl3_reverse", "lower"), ("chi2", "neither")])
def test_mirror_figure_says_which_side_is_tighter(name, tighter):
    delta = 0.04
    fig = proof_figures.mirror_figure(name, delta)
    (widths,) = traces(fig, "widths")
    lo, hi = theory.get_measure(name).bounds(delta)
    assert list(widths.x) == pytest.approx([1 - lo, hi - 1], rel=1e-12)
    assert (
        tighter in fig.layout.title.subtitle.text
        if tighter != "neither"
        else "symmetric" in fig.layout.title.subtitle.text
    )


def test_asymmetry_figure_leading_term_is_four_thirds_delta():
    delta = 0.0231435513142
    leading = [s for s in derivation("kl3") if s.title.startswith("Asymmetry")][0].statement.rhs.removeO()
    fig = proof_figures.asymmetry_figure("kl3", delta, leading)
    lead = [t for t in fig.data if (t.name or "").startswith("leading term")][0]
    assert np.asarray(lead.y) == pytest.approx(4 * np.asarray(lead.x) / 3, rel=1e-14)
    exact = [t for t in fig.data if (t.name or "").startswith("ε_high")][0]
    assert exact.y[0] / lead.y[0] == pytest.approx(1.0, abs=1e-2)  # the leading term at the smallest δ
    (gap,) = traces(fig, "gap")
    lo, hi = theory.equivalent_ratio_clip("kl3", delta)
    assert gap.meta["gap"] == hi - lo and fig.layout.yaxis.type == "log"


def test_sign_curves_are_theorys_loss_by_the_sign_of_a():
    delta = 0.0231435513142
    c = sign_of_a.sign_curves("kl3", delta)
    lo, hi = theory.kl3_bounds(delta)
    r = c.r
    for key in ("measure", "ratio"):
        # A > 0: surrogate min(r, u); gradient ∂ℓ/∂log π = −r below u, 0 above (docs/theory.md §1.1)
        assert c.surrogate[key, 1.0] == pytest.approx(np.minimum(r, hi), rel=1e-12)
        assert c.gradient[key, 1.0] == pytest.approx(np.where(r > hi, 0.0, -r), abs=1e-15)
        # A < 0: surrogate −max(r, l); gradient r above l, 0 below
        assert c.surrogate[key, -1.0] == pytest.approx(-np.maximum(r, lo), rel=1e-12)
        assert c.gradient[key, -1.0] == pytest.approx(np.where(r < lo, 0.0, r), abs=1e-15)
    assert np.array_equal(c.gradient["measure", -1.0], c.gradient["ratio", -1.0])
    above_c = r > c.c
    assert above_c.any() and np.all(c.gradient["dual", -1.0][above_c] == 0)
    assert c.surrogate["dual", -1.0][above_c] == pytest.approx(-c.c)
    fig = proof_figures.sign_figure(c)
    assert {t.meta["spec"] for t in fig.data} == {"measure", "ratio", "dual"}


def test_equivalence_check_passes_and_can_fail(monkeypatch):
    result = sign_of_a.equivalence_check("hellinger", 0.04)
    assert result.passed and check_kind(result) == "numeric" and "max |Δ loss| = 0" in result.detail
    real = sign_of_a.specs

    def off_by_a_bit(name, delta):  # the ratio clip at a slightly different interval: the check must see it
        measure, ratio = real(name, delta)
        return measure, theory.ClipSpec("ratio", eps_low=ratio.eps_low * 1.05, eps_high=ratio.eps_high)

    monkeypatch.setattr(sign_of_a, "specs", off_by_a_bit)
    assert not sign_of_a.equivalence_check("hellinger", 0.04).passed


def test_sign_step_is_a_checked_lecture_step():
    step = sign_step("kl3", 0.05)
    assert step.title == SIGN_TITLE and step.run_check().passed
    assert "0.7162" in step.explanation and "1.3504" in step.explanation  # theory's bounds at δ = 0.05 (§2 table)


def test_every_step_has_a_question_and_the_roots_answer_follows_theory():
    for name in ("kl3", "chi2", "log_ratio"):
        for title in [s.title for s in derivation(name)] + [SIGN_TITLE, "numbers"]:
            ask, answer = step_question(title, name, 0.02)
            assert ask.endswith("?") and answer.startswith("**")
        asked = [step_question(t, name, 0.02)[0] for t in [s.title for s in derivation(name)] + [SIGN_TITLE]]
        assert len(set(asked)) == len(asked), asked  # issue 34: steps 4 and 7 asked the same question
    _, answer = step_question("Asymmetry ε_high − ε_low", "kl3", 0.02)
    lo, hi = theory.kl3_bounds(0.02)
    lo2, hi2 = theory.kl3_bounds(0.022)
    assert answer.startswith("**u_δ**") and (hi2 - hi) > (lo - lo2)
    _, chi2 = step_question("Asymmetry ε_high − ε_low", "chi2", 0.02)
    assert "1 times as far" in chi2  # χ² is symmetric: both bounds move by √δ
    _, roots = step_question("Roots of D(r) = δ", "kl3", 0.02)
    assert f"{lo:.6f}" in roots and f"{hi:.6f}" in roots and roots.startswith("**Both to 1**")


@pytest.mark.parametrize(("name", "curvature"), [("kl3", 1.0), ("chi2", 2.0), ("k2", 1.0), ("hellinger", 0.5)])
def test_convexity_figure_draws_the_quadratic_with_the_exact_second_derivative(name, curvature):
    # D″(1) by hand: kl3 r − 1 − log r → 1/r²; chi2 (r − 1)² → 2; k2 (log r)²/2 → 1; hellinger (√r − 1)² → 1/2
    fig = proof_figures.convexity_figure(name, 0.02)
    (meta,) = [t.meta for t in fig.data if t.meta and t.meta.get("kind") == "convexity"]
    assert meta["curvature"] == pytest.approx(curvature, rel=1e-12)
    quad = fig.data[1]
    assert np.allclose(quad.y, curvature * (np.asarray(quad.x) - 1) ** 2 / 2)


def test_branches_figure_puts_theory_roots_on_the_two_branches_of_w():
    from scipy.special import lambertw

    fig = proof_figures.branches_figure(0.05)
    lo, hi = theory.kl3_bounds(0.05)
    (meta,) = [t.meta for t in fig.data if t.meta and t.meta.get("kind") == "branches"]
    x = -math.exp(-1.05)
    assert meta["x"] == pytest.approx(x) and [meta["lo"], meta["hi"]] == [lo, hi]
    assert -lambertw(x, 0).real == pytest.approx(lo, rel=1e-12) and -lambertw(x, -1).real == pytest.approx(
        hi, rel=1e-12
    )
    assert np.all(np.asarray(fig.data[0].y) <= 1 + 1e-12) and np.all(np.asarray(fig.data[1].y) >= 1 - 1e-12)


@pytest.mark.parametrize(
    ("raw", "value", "warned"), [("1", True, False), ("on", True, False), ("0", False, False), ("maybe", False, True)]
)
def test_bool_param(raw, value, warned):
    got, warning = BoolParam("presenter", "presenter mode").parse(raw)
    assert got is value and (warning is not None) is warned
