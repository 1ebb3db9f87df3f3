"""`divclip check` reads divclip's own verl modes (atr_kl3, divclip_*) and the TRL plug-in's fields, reports the
clip as `config.ratio_bounds`, and warns about ignored keys, verl's default 0.2 as a budget, ratio-scale budgets
and clips that cannot bind. Bounds are checked against theory's root finders and closed forms, independently of
divclip.engines.advice."""

import json
import math

import mpmath
import pytest

from divclip.cli import main
from divclip.sanity import build_report
from divclip.theory.measures import MEASURES, get_measure

A = "actor_rollout_ref.actor."
ATR_HI = 1.230842209784259  # the KL3 root above 1 of δ = KL3(0.8), checked against mpmath below


def report(*overrides):
    return build_report(overrides=list(overrides))


def codes(r):
    return [w["code"] for w in r["warnings"]]


def test_atr_kl3_upper_bound_is_the_lambert_w_root():
    delta = -0.2 - math.log(0.8)
    u = -mpmath.lambertw(-mpmath.exp(-1 - mpmath.mpf(delta)), -1)  # r - 1 - log r = δ above 1: r = -W_{-1}(-e^{-1-δ})
    assert float(u) == pytest.approx(ATR_HI, rel=1e-15)


def test_atr_kl3_reports_its_bounds_and_no_warning_of_its_own():
    r = report(f"{A}policy_loss.loss_mode=atr_kl3")
    c = r["config"]
    assert c["ratio_bounds"][0] == 0.8 and c["ratio_bounds"][1] == pytest.approx(ATR_HI, rel=1e-14)
    assert c["clip_measure"] == "kl3" and c["delta_low"] == pytest.approx(-0.2 - math.log(0.8), rel=1e-13)
    assert not {"ignored_key", "divergence_budget_verl_default", "clip_cannot_bind"} & set(codes(r))


def test_atr_kl3_with_clip_ratio_high_set_warns_that_it_is_ignored():
    r = report(f"{A}policy_loss.loss_mode=atr_kl3", f"{A}clip_ratio_high=0.28")
    w = [w for w in r["warnings"] if w["code"] == "ignored_key"]
    assert len(w) == 1 and w[0]["key"] == f"{A}clip_ratio_high" and "0.28" in w[0]["message"]
    assert w[0]["source"] and r["config"]["ratio_bounds"][1] == pytest.approx(ATR_HI, rel=1e-14)
    # the same upper width written explicitly is not "ignored"
    r = report(f"{A}policy_loss.loss_mode=atr_kl3", f"{A}clip_ratio_high={ATR_HI - 1!r}")
    assert "ignored_key" not in codes(r)


@pytest.mark.parametrize("measure", list(MEASURES))
def test_every_divclip_mode_is_accepted_with_its_bounds(measure):
    m = get_measure(measure)
    r = report(f"{A}policy_loss.loss_mode=divclip_{measure}", f"{A}clip_ratio_low=0.03", f"{A}clip_ratio_high=0.05")
    c = r["config"]
    assert c["loss_mode"] == f"divclip_{measure}" and c["clip_measure"] == measure
    if m.p_dependent:
        assert [row["p"] for row in c["ratio_bounds"]] == [0.01, 0.1, 0.5, 0.9]
        for row in c["ratio_bounds"]:
            assert m.value(row["lo"], row["p"]) == pytest.approx(0.03, rel=1e-8) or row["lo"] == 0
            assert m.value(row["hi"], row["p"]) == pytest.approx(0.05, rel=1e-8) or math.isinf(row["hi"])
    elif measure == "ratio":
        assert c["ratio_bounds"] == [0.97, 1.05]
    else:
        lo, hi = c["ratio_bounds"]
        assert lo < 1 < hi
        assert m.value(lo) == pytest.approx(0.03, rel=1e-9) and m.value(hi) == pytest.approx(0.05, rel=1e-9)


def test_divclip_delta_from_the_command_prefix_wins_and_clip_ratio_is_ignored():
    r = report("DIVCLIP_DELTA=0.0231", f"{A}policy_loss.loss_mode=divclip_kl3", f"{A}clip_ratio_low=0.2")
    assert r["config"]["delta_low"] == r["config"]["delta_high"] == 0.0231
    w = [w for w in r["warnings"] if w["code"] == "ignored_key"]
    assert [x["key"] for x in w] == [f"{A}clip_ratio_low"] and "DIVCLIP_DELTA=0.0231" in w[0]["message"]
    r = report("DIVCLIP_DELTA=0.02,0.03", f"{A}policy_loss.loss_mode=divclip_kl3")
    assert (r["config"]["delta_low"], r["config"]["delta_high"]) == (0.02, 0.03)


@pytest.mark.parametrize("measure", [m for m in MEASURES if m != "ratio"])
def test_verl_default_budget_is_flagged_for_every_divergence(measure):
    r = report(f"{A}policy_loss.loss_mode=divclip_{measure}")  # clip_ratio_low/high: verl's 0.2
    w = [w for w in r["warnings"] if w["code"] == "divergence_budget_verl_default"]
    assert len(w) == 1 and "refuses it at run time unless DIVCLIP_DELTA is set" in w[0]["message"]


def test_ratio_scale_budget_and_clip_that_cannot_bind():
    r = report(f"{A}policy_loss.loss_mode=divclip_k2", f"{A}clip_ratio_low=0.12", f"{A}clip_ratio_high=0.12")
    assert "divergence_budget_ratio_scale" in codes(r)
    r = report(f"{A}policy_loss.loss_mode=divclip_log_ratio", f"{A}clip_ratio_low=0.12", f"{A}clip_ratio_high=0.12")
    assert "divergence_budget_ratio_scale" not in codes(r)  # log r is ratio-scale: 0.12 is a width there
    r = report("DIVCLIP_DELTA=5", f"{A}policy_loss.loss_mode=divclip_chi2")
    assert "clip_cannot_bind" in codes(r) and r["config"]["ratio_bounds"][0] == 0


def test_trl_plugin_fields():
    r = build_report(
        config=json.dumps({"clip_measure": "kl3", "epsilon": 0.2, "epsilon_high": 0.28}).encode(),
        config_name="args.json",
    )
    c = r["config"]
    assert c["framework"] == "trl" and c["clip_measure"] == "kl3"
    assert c["ratio_bounds"][0] == pytest.approx(0.8, abs=1e-12) and c["ratio_bounds"][1] == pytest.approx(ATR_HI)
    ignored = [w for w in r["warnings"] if w["code"] == "ignored_key"]
    assert [w["key"] for w in ignored] == ["epsilon_high"]
    r = build_report(config=json.dumps({"epsilon": 0.2, "epsilon_high": 0.28}).encode(), config_name="a.json")
    assert r["config"]["clip_measure"] is None and r["config"]["ratio_bounds"] == [0.8, 1.28]  # stock clip
    r = build_report(config=json.dumps({"clip_measure": "binary_tv", "clip_delta": 0.2}).encode(), config_name="a.json")
    assert r["config"]["form"] == "divclip" and len(r["config"]["ratio_bounds"]) == 4
    assert "divergence_budget_verl_default" in codes(r)
    with pytest.raises(ValueError, match="clip_measure must be one of"):
        build_report(config=b'{"clip_measure": "js"}', config_name="a.json")
    with pytest.raises(ValueError, match="depends on p"):
        build_report(config=b'{"clip_measure": "binary_kl"}', config_name="a.json")


@pytest.mark.parametrize("bad", ["DIVCLIP_DELTA=abc", "DIVCLIP_DELTA=-1", "DIVCLIP_DELTA=0.1,0.2,0.3"])
def test_bad_divclip_delta_exits_2_with_one_line(capsys, bad):
    code = main(["check", bad, f"{A}policy_loss.loss_mode=divclip_kl3"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "DIVCLIP_DELTA must be a budget" in err


def test_text_report_shows_ratio_bounds(capsys):
    assert main(["check", f"{A}policy_loss.loss_mode=atr_kl3"]) == 0
    assert "ratio bounds: [0.8, 1.23084221]" in capsys.readouterr().out
