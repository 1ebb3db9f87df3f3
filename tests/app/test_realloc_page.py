"""The mass-reallocation page through Streamlit's AppTest: what it shows is what theory.reallocation computes.

The page file is run on its own (no router), so these tests do not depend on app/main.py's page list.
"""

from __future__ import annotations

import numpy as np
import pytest
from apptest_helpers import PAGES_DIR, rendered, start_page
from streamlit.testing.v1 import AppTest

from divclip.theory import compare_measures, constrained_optimum
from divclip.theory.reallocation import DEFAULT_COMPARE_SPECS
from divclip.theory.spec import parse_method as method_spec

PAGE = PAGES_DIR / "reallocation.py"


def start(query: dict | None = None) -> AppTest:
    return start_page(PAGE, query)


def errors(at: AppTest) -> str:
    return " ".join(e.value for e in at.error).replace("\\", "")  # show_messages escapes markdown


def table_with(at: AppTest, column: str) -> list[dict]:
    """The records of the st.dataframe that has `column` (AppTest does not expose a dataframe's key)."""
    frames = [d.value for d in at.dataframe if column in d.value.columns]
    assert len(frames) == 1, [list(d.value.columns) for d in at.dataframe]
    return frames[0].to_dict("records")


def optimum_rows(at: AppTest) -> list[dict]:
    return table_with(at, "π_new (LP)")


def comparison_rows(at: AppTest) -> list[dict]:
    return table_with(at, "dyn_gain_high_pos")


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_default_view_is_docs_first_example():
    at = rendered(start())
    assert at.title[0].value == "Mass reallocation"
    assert at.selectbox(key="realloc.focus").value == "atr"
    comp = compare_measures([0.6, 0.3, 0.1], [1, -1, 0.5], list(DEFAULT_COMPARE_SPECS), lr=0.5, epochs=8)
    atr = comp.rows[list(DEFAULT_COMPARE_SPECS).index("atr")]
    shown = metrics(at)
    assert shown["one-step gain Σ Δπ·A"] == f"{atr.optimum.gain:.4f}" == "0.1300"
    assert shown["ΔH after 8 epoch(s)"] == f"{atr.dyn_entropy_change:+.4f}" == "-0.1721"  # docs: −0.172
    rows = comparison_rows(at)
    assert [r["label"] for r in rows] == list(DEFAULT_COMPARE_SPECS)
    for got, want in zip(rows, comp.table()):
        for column in (
            "hi_max",
            "max_gain_positive",
            "lp_gain_high_pos",
            "dyn_gain_high_pos",
            "dyn_entropy_change",
            "dyn_kl",
            "dyn_clipped_tokens",
        ):
            assert got[column] == want[column], (want["label"], column)
    assert len(at.get("plotly_chart")) == 6
    assert "not exploration" in at.markdown[0].value


def test_changing_probs_moves_the_optimum_to_theorys():
    at = rendered(start())
    at.text_input(key="realloc.probs").input("0.2, 0.5, 0.3").run()
    at.text_input(key="realloc.adv").input("1,-1,0").run()
    rendered(at)
    assert errors(at) == ""
    opt = constrained_optimum([0.2, 0.5, 0.3], [1, -1, 0], "atr")
    rows = optimum_rows(at)
    assert [r["π_new (LP)"] for r in rows] == opt.probs_new.tolist()
    assert [r["Δ (LP)"] for r in rows] == opt.delta.tolist()
    assert [r["LP at"] for r in rows] == [
        "hi" if u else "lo" if lo else "inside" for u, lo in zip(opt.at_upper, opt.at_lower)
    ]
    assert metrics(at)["one-step ΔH"] == f"{opt.entropy_change:+.4f}"
    assert at.query_params["probs"] == "0.2, 0.5, 0.3"  # the view is in the URL


@pytest.mark.slow
def test_focus_lr_and_epochs_follow_theory():
    at = rendered(start({"probs": "0.1,0.7,0.2", "adv": "1,-1,-1"}))
    at.selectbox(key="realloc.focus").set_value("dppo_kl").run()
    at.number_input(key="realloc.lr").set_value(0.2).run()
    at.number_input(key="realloc.epochs").set_value(20.0).run()
    rendered(at)
    comp = compare_measures([0.1, 0.7, 0.2], [1, -1, -1], list(DEFAULT_COMPARE_SPECS), lr=0.2, epochs=20)
    row = comp.rows[list(DEFAULT_COMPARE_SPECS).index("dppo_kl")]
    shown = metrics(at)
    assert shown["ΔH after 20 epoch(s)"] == f"{row.dyn_entropy_change:+.4f}"
    assert shown["KL(old‖new) after 20 epoch(s)"] == f"{row.dyn_kl:.4f}"
    assert [r["π after PG"] for r in optimum_rows(at)] == row.drift.probs[-1].tolist()


@pytest.mark.slow
def test_rare_correct_action_example_gives_docs_numbers():
    at = rendered(start())
    at.button(key="realloc.example.Rare correct action").click().run()
    rendered(at)
    rows = {r["label"]: r for r in comparison_rows(at)}
    # docs/reallocation.md: +0.1289 under GRPO, DAPO and KL3 alike; binary KL / TV give more
    assert {round(rows[s]["dyn_gain_low_pos"], 4) for s in ("grpo", "dapo", "atr")} == {0.1289}
    assert rows["dppo_kl"]["dyn_gain_low_pos"] > rows["atr"]["dyn_gain_low_pos"]


@pytest.mark.slow
def test_spec_choice_and_other_specs():
    at = rendered(start())
    at.multiselect(key="realloc.specs").set_value(["grpo", "gspo"]).run()
    at.text_input(key="realloc.extra").input("kl3:0.05, ratio:0.1:0.3").run()
    rendered(at)
    specs = {
        "grpo": "grpo",
        "gspo": "gspo",
        "kl3:0.05": method_spec("kl3:0.05"),
        "ratio:0.1:0.3": method_spec("ratio:0.1:0.3"),
    }
    comp = compare_measures([0.6, 0.3, 0.1], [1, -1, 0.5], specs, lr=0.5, epochs=8)
    rows = comparison_rows(at)
    assert [r["label"] for r in rows] == list(specs)
    assert [r["hi_max"] for r in rows] == [t["hi_max"] for t in comp.table()]
    assert at.selectbox(key="realloc.focus").value == "grpo"  # atr is gone: the first spec


@pytest.mark.slow
def test_other_specs_draw_an_intersection():
    at = rendered(start())
    at.multiselect(key="realloc.specs").set_value(["atr"]).run()
    at.text_input(key="realloc.extra").input("kl3:0.023144&binary_tv:0.2").run()
    rendered(at)
    specs = {"atr": "atr", "kl3:0.023144&binary_tv:0.2": method_spec("kl3:0.023144&binary_tv:0.2")}
    comp = compare_measures([0.6, 0.3, 0.1], [1, -1, 0.5], specs, lr=0.5, epochs=8)
    rows = comparison_rows(at)
    assert [r["label"] for r in rows] == list(specs)
    assert [(r["lo_min"], r["hi_max"]) for r in rows] == [(t["lo_min"], t["hi_max"]) for t in comp.table()]
    assert len(at.get("plotly_chart")) == 6


@pytest.mark.slow  # the fast loop types into this page in test_changing_probs_moves_the_optimum_to_theorys
@pytest.mark.parametrize(
    "field, text, message",
    [
        ("probs", "0.5,0.5,0.1", "probs must sum to 1"),
        ("probs", "0.6,abc,0.1", "π_old must be numbers separated by commas"),
        ("probs", "0.6,0,0.4", "probs[1] = 0.0"),
        ("adv", "1,-1", "adv has 2 entries but probs has 3"),
        ("adv", "1,nan,2", "adv[1] = nan"),
        ("extra", "sapo", "no clip interval"),
        ("extra", "foo", "unknown method 'foo'"),
        ("extra", "grpo", "'grpo' is already chosen"),
        ("extra", "kl3@clipfrac=0.1", "adapts δ during training"),
    ],
)
def test_bad_inputs_are_messages(field, text, message):
    at = rendered(start())
    at.text_input(key=f"realloc.{field}").input(text).run()
    rendered(at)
    assert message in errors(at)
    assert not at.get("plotly_chart")


@pytest.mark.slow
def test_no_spec_chosen_is_a_message():
    at = rendered(start())
    at.multiselect(key="realloc.specs").set_value([]).run()
    assert "choose at least one clip spec" in errors(rendered(at))


@pytest.mark.slow
def test_bad_url_parameters_warn_and_still_render():
    at = rendered(start({"epochs": "9999", "specs": "grpo,nope"}))
    warnings = " ".join(w.value for w in at.warning).replace("\\", "")
    assert "epochs=9999 is outside" in warnings and "'nope'" in warnings
    assert at.number_input(key="realloc.epochs").value == 200.0
    assert [r["label"] for r in comparison_rows(at)] == ["grpo"]
    assert np.isfinite([r["dyn_kl"] for r in comparison_rows(at)]).all()


@pytest.mark.slow
def test_probabilities_off_by_a_factor_can_be_rescaled():
    at = rendered(start())
    at.text_input(key="realloc.probs").input("1,1,1").run()
    assert "probs must sum to 1" in errors(rendered(at))
    at.button(key="realloc.rescale").click().run()
    rendered(at)
    assert errors(at) == ""
    assert at.text_input(key="realloc.probs").value == "0.3333333333,0.3333333333,0.3333333333"
    opt = constrained_optimum([1 / 3] * 3, [1, -1, 0.5], "atr")
    assert [r["π_new (LP)"] for r in optimum_rows(at)] == pytest.approx(opt.probs_new.tolist(), abs=1e-9)
