"""Every page through Streamlit's AppTest (no browser): it renders, and widgets move the numbers to theory's.

The app is started from app/main.py, so navigation (st.navigation) is part of every test; other pages are
reached with `AppTest.switch_page`.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs

import pytest
from apptest_helpers import slow_after
from streamlit.testing.v1 import AppTest

from divclip import theory
from divclip.app.export import interval_spec, method_export
from divclip.app.intervals import clip_intervals, format_bound
from divclip.app.presets import ATR_DELTA, EXPLORER_SPEC, PRESETS
from divclip.app.state import encode_query
from divclip.theory.symbolic import derivable_measures

MAIN = Path(__file__).resolve().parents[2] / "app" / "main.py"
TIMEOUT = 120  # first SymPy derivation on a shared 2-core machine


def start(page: str | None = None, query: dict | None = None) -> AppTest:
    """app/main.py with `query`, on `page` (through the router) or on its default page. The first run lands on
    the page directly: rendering the clip explorer first, as a browser visit would not, only cost time; the
    trips between pages are tested below (test_url_state_survives_..., test_link_from_explorer_...)."""
    at = AppTest.from_file(str(MAIN), default_timeout=TIMEOUT)
    at.query_params.update(query or {})
    if page is not None:
        at.switch_page(page)
    return at.run()


def rendered(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def table(at: AppTest, index: int = 0) -> dict[str, dict]:
    df = at.table[index].value
    return {row["measure"]: row for row in df.to_dict("records")} if "measure" in df else df.to_dict("records")


def plain(markdown: str) -> str:
    """An alert's text as the reader sees it (the app escapes markdown in messages)."""
    return re.sub(r"\\(.)", r"\1", markdown)


def warnings(at: AppTest) -> str:
    return " ".join(plain(w.value) for w in at.warning)


def errors(at: AppTest) -> str:
    return " ".join(plain(e.value) for e in at.error)


def page_links(at: AppTest) -> dict[str, dict]:
    """Each st.page_link: its label -> (target page, query parameters)."""
    out = {}
    for link in at.get("page_link"):
        out[link.proto.label] = {
            "page": link.proto.page,
            "query": {k: v[-1] for k, v in parse_qs(link.proto.query_string).items()},
        }
    return out


# ------------------------------------------------------------------------------- clip explorer
def test_explorer_default_is_atr_grpo():
    at = rendered(start())
    assert at.title[0].value == "Clip explorer"
    rows = table(at)
    lo, hi = theory.kl3_bounds(ATR_DELTA)
    assert (rows["kl3"]["l"], rows["kl3"]["u"]) == (format_bound(lo), format_bound(hi)) == ("0.800000", "1.230842")
    # ATR-GRPO's ratio row is KL3's own clip written as ε: the same interval, named a plain ratio clip
    assert (rows["ratio"]["l"], rows["ratio"]["u"]) == ("0.800000", "1.230842")
    assert rows["ratio"]["method"] == "ratio clip" and rows["ratio"]["D(r[, p])"] == "1 − 0.2 ≤ r ≤ 1 + 0.230842"
    assert at.query_params == encode_query(EXPLORER_SPEC, PRESETS["ATR-GRPO"].values)
    assert len(at.get("plotly_chart")) == 4


@pytest.mark.parametrize("delta", slow_after(1, [0.01, 0.05, 0.1, 0.4321]))
def test_moving_delta_moves_every_bound_to_theorys(delta):
    at = rendered(start(query={"measures": "kl3,k2,binary_kl,hellinger", "p": "0.3"}))
    at.number_input(key="explorer.delta").set_value(delta).run()
    rendered(at)
    rows = table(at)
    lo, hi = theory.kl3_bounds(delta)
    assert (rows["kl3"]["l"], rows["kl3"]["u"]) == (format_bound(lo), format_bound(hi))
    for name in ("k2", "hellinger", "binary_kl"):
        m = theory.get_measure(name)
        blo, bhi = m.bounds(delta, 0.3 if m.p_dependent else None)
        assert (rows[name]["l"], rows[name]["u"]) == (format_bound(blo), format_bound(bhi))
        e_low, e_high = theory.equivalent_ratio_clip(name, delta, 0.3 if m.p_dependent else None)
        assert (rows[name]["ε_low"], rows[name]["ε_high"]) == (format_bound(e_low), format_bound(e_high))
    assert float(at.query_params["delta"]) == delta
    assert any(f"[{format_bound(lo)},\\ {format_bound(hi)}]" in l.value for l in at.latex)


@pytest.mark.slow
def test_eps_and_p_inputs():
    at = rendered(start(query={"measures": "ratio,binary_tv"}))
    at.number_input(key="explorer.eps_low").set_value(0.1)
    at.number_input(key="explorer.eps_high").set_value(0.35)
    at.number_input(key="explorer.p").set_value(0.5).run()
    rows = table(rendered(at))
    assert (rows["ratio"]["l"], rows["ratio"]["u"]) == ("0.900000", "1.350000")
    assert rows["ratio"]["method"] == "ratio clip"  # neither GRPO's, DAPO's nor GSPO's ε
    lo, hi = theory.get_measure("binary_tv").bounds(float(at.query_params["delta"]), p=0.5)
    assert (rows["binary_tv"]["l"], rows["binary_tv"]["u"]) == (format_bound(lo), format_bound(hi))


@pytest.mark.slow
def test_exports_one_chosen_method_as_divclip_export_prints_it():
    at = rendered(start(query={"delta": "0.05", "measures": "kl3,ratio,binary_kl", "p": "0.01", "eps_high": "0.28"}))
    ivs, _ = clip_intervals(["kl3", "ratio", "binary_kl"], 0.05, 0.2, 0.28, 0.01)
    box = at.selectbox(key="explorer.export_method")
    assert len(box.options) == 3
    for index, iv in enumerate(ivs):
        box.set_value(box.options[index]).run()
        spec = interval_spec(iv)
        codes = [c.value.strip() for c in at.code]  # st.code drops the final newline
        assert method_export(spec, "verl").text("overrides").strip() in codes  # one method, the CLI's text
        if iv.name == "binary_kl":  # DPPO's mask: TRL has none, and the page says so instead of a block
            assert any("TRL has no 'gated' loss form" in i.value for i in at.info)
        else:
            assert method_export(spec, "trl").text("overrides").strip() in codes
        box = at.selectbox(key="explorer.export_method")
    at.radio(key="explorer.export_format").set_value("yaml").run()
    assert method_export(interval_spec(ivs[-1]), "verl").text("yaml").strip() in [c.value.strip() for c in at.code]
    assert {b.label for b in at.get("download_button")} >= {"Table as CSV", "verl settings"}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_and_reset(name):
    at = rendered(start(query={"delta": "0.3", "measures": "chi2", "eps_high": "0.5"}))
    at.button(key=f"explorer.preset.{name}").click().run()
    preset = PRESETS[name].values
    assert at.query_params == encode_query(EXPLORER_SPEC, preset)
    rows = table(rendered(at))
    assert list(rows) == list(preset["measures"])
    assert any(f"Preset: **{name}**" in c.value for c in at.caption)
    for key in ("delta", "eps_low", "eps_high", "p"):  # the typed box shows the preset's exact value
        assert at.number_input(key=f"explorer.{key}").value == preset[key]
    at.number_input(key="explorer.delta").set_value(0.2).run()
    at.button(key="explorer.reset").click().run()
    assert at.query_params == encode_query(EXPLORER_SPEC, PRESETS["ATR-GRPO"].values)


@pytest.mark.slow
def test_match_delta_to_eps_low():
    at = rendered(start(query={"eps_low": "0.1", "delta": "0.3"}))
    at.button(key="explorer.match").click().run()
    assert float(at.query_params["delta"]) == pytest.approx(theory.delta_for_eps("kl3", eps_low=0.1), rel=1e-11)
    assert table(rendered(at))["kl3"]["l"] == "0.900000" and not at.warning
    at.number_input(key="explorer.eps_low").set_value(0.9).run()
    at.button(key="explorer.match").click().run()  # needs δ = 1.40 > the allowed 0.5
    assert at.query_params["delta"] == "0.5" and "outside δ's range" in warnings(rendered(at))


@pytest.mark.slow
def test_match_delta_to_eps_high():
    at = rendered(start(query={"eps_high": "0.28", "delta": "0.3", "measures": "kl3,ratio"}))
    at.button(key="explorer.match_high").click().run()
    delta = float(at.query_params["delta"])
    assert delta == pytest.approx(theory.delta_for_eps("kl3", eps_high=0.28), rel=1e-11)
    assert table(rendered(at))["kl3"]["u"] == "1.280000"
    assert at.number_input(key="explorer.delta").value == pytest.approx(delta, rel=1e-11)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("eps_low", "eps_high", "method"),
    [
        ("0.235", "0.275", "ratio clip"),
        ("3e-4", "4e-4", "GSPO"),
        ("0.2", "0.28", "DAPO"),
        ("0.2", "0.2", "GRPO"),
        ("0.0001", "0.9", "ratio clip"),
    ],
)
def test_url_values_are_the_typed_values(eps_low, eps_high, method):
    """Values a 0.01-step slider cannot hold (0.235, GSPO's 3e-4) reach the boxes, the table and the URL."""
    at = rendered(start(query={"eps_low": eps_low, "eps_high": eps_high, "measures": "ratio"}))
    assert at.number_input(key="explorer.eps_low").value == float(eps_low)
    assert at.number_input(key="explorer.eps_high").value == float(eps_high)
    row = table(at)["ratio"]
    assert (row["l"], row["u"]) == (format_bound(1 - float(eps_low)), format_bound(1 + float(eps_high)))
    assert row["method"] == method
    assert float(at.query_params["eps_low"]) == float(eps_low) and not at.warning


@pytest.mark.slow
def test_log_slider_and_box_agree():
    at = rendered(start(query={"delta": "4.5e-8", "measures": "kl3"}))
    slider = at.select_slider(key="explorer.delta.slider")
    assert at.number_input(key="explorer.delta").value == 4.5e-8 and slider.value == 4.5e-8  # the exact value
    assert 5e-8 in slider.options or "5e-08" in slider.options  # among the log-scale stops
    slider.set_value(0.05).run()
    assert at.number_input(key="explorer.delta").value == 0.05 and at.query_params["delta"] == "0.05"
    lo, hi = theory.kl3_bounds(0.05)
    assert (table(rendered(at))["kl3"]["l"], table(at)["kl3"]["u"]) == (format_bound(lo), format_bound(hi))
    at.number_input(key="explorer.delta").set_value(0.0031).run()
    assert at.select_slider(key="explorer.delta.slider").value == 0.0031
    at.slider(key="explorer.p.slider").set_value(0.25).run()
    assert at.number_input(key="explorer.p").value == 0.25 and at.query_params["p"] == "0.25"


@pytest.mark.slow
def test_explorer_links_carry_the_values():
    at = rendered(
        start(query={"delta": "0.05", "eps_low": "0.235", "eps_high": "0.275", "measures": "kl3,ratio,binary_kl"})
    )
    links = page_links(at)
    proof = [v for k, v in links.items() if k.startswith("The proof for KL3")]
    assert proof and proof[0]["page"].endswith("proof") and proof[0]["query"] == {"measure": "kl3", "delta": "0.05"}
    assert not [k for k in links if "binary" in k]  # binary KL has no SymPy derivation to link to
    sanity = [v for k, v in links.items() if k.startswith("Sanity-check")]
    assert sanity and sanity[0]["query"] == {"eps_low": "0.235", "eps_high": "0.275"}


@pytest.mark.parametrize(
    ("query", "message"),
    slow_after(
        1,
        [
            ({"delta": "abc"}, "delta='abc' is not a number"),
            ({"delta": "-1"}, "delta=-1 is outside the allowed range"),
            ({"measures": "foo"}, "'foo'"),
            ({"measures": "kl3,foo"}, "'foo' ignored"),
            ({"p": "1.5"}, "p=1.5 is outside"),
            ({"eps_low": "nan"}, "not a finite number"),
            ({"zoom": "2"}, "Unknown URL parameter 'zoom'"),
        ],
    ),
)
def test_bad_url_parameters_warn_and_still_render(query, message):
    at = rendered(start(query=query))
    assert message in warnings(at)
    assert "kl3" in table(at)  # the view still renders, from the fallback values
    at.number_input(key="explorer.delta").set_value(0.04).run()  # the warning goes once the user moves on
    assert message not in warnings(rendered(at))


@pytest.mark.slow
def test_url_state_survives_a_trip_to_another_page():
    """The custom-measure page keeps a δ of its own in the URL (its default here); coming back restores 0.07."""
    at = rendered(start(query={"delta": "0.07", "measures": "k2"}))
    at.query_params.clear()
    at.switch_page("views/custom_measure.py").run()
    assert at.title[0].value == "Custom measure" and float(at.query_params["delta"]) == pytest.approx(ATR_DELTA)
    at.query_params.clear()
    at.switch_page("views/clip_explorer.py").run()
    assert list(table(rendered(at))) == ["k2"] and at.query_params["delta"] == "0.07"


# ------------------------------------------------------------------------------------ the proof
def step_titles(at: AppTest) -> list[str]:
    return [h.value for h in at.markdown if h.value.startswith("#### ")]


def passed_checks(at: AppTest) -> list[str]:
    return [s.value for s in at.success if s.value.startswith("**Check passed**")]


def outside_maths(markdown: str) -> str:
    """The text of a markdown string with its $…$ maths, `code` and markdown escapes (\\.) removed."""
    return re.sub(r"\\[^A-Za-z]", "", re.sub(r"\$[^$]*\$|`[^`]*`", "", markdown))


def test_proof_every_step_checked_and_numbers_follow_delta():
    at = rendered(start("views/proof.py", {"measure": "chi2", "delta": "0.04", "view": "all"}))
    assert at.title[0].value == "The proof"
    titles, passed = step_titles(at), passed_checks(at)
    assert len(titles) >= 5 and len(passed) == len(titles)
    assert not [e.value for e in at.error]
    lo, hi = theory.get_measure("chi2").bounds(0.04)
    rows = table(at)
    assert rows[1]["l_δ"] == f"{lo:.15g}" and rows[1]["u_δ"] == f"{hi:.15g}"
    assert float(rows[0]["l_δ"]) == pytest.approx(0.8, abs=1e-18) and float(rows[0]["u_δ"]) == 1.2  # 1 ∓ √δ
    at.number_input(key="proof.delta").set_value(0.09).run()
    rows = table(rendered(at))
    assert rows[1]["u_δ"] == f"{theory.get_measure('chi2').bounds(0.09)[1]:.15g}"
    assert at.query_params == {"measure": "chi2", "delta": "0.09", "step": "1", "view": "all", "presenter": "0"}


@pytest.mark.slow
def test_proof_lecture_steps_with_next_and_previous():
    at = rendered(start("views/proof.py", {"measure": "kl3"}))
    assert at.query_params["view"] == "lecture" and at.query_params["step"] == "1"
    assert step_titles(at) == ["#### 1\\. Definition and non-negativity"] and not at.table  # numbers come last
    assert at.button(key="proof.prev").disabled
    seen = []
    for step in range(2, 11):
        at.button(key="proof.next").click().run()
        rendered(at)
        assert at.query_params["step"] == str(step)
        seen += step_titles(at)
    # steps 2..8 of the derivation, 9 the sign of A, then the numbers
    assert len(seen) == 8 and seen[-2].startswith("#### 8\\. Gradient rule") and "sign of $A$" in seen[-1]
    assert at.button(key="proof.next").disabled and at.table  # step 10: the numbers, after the lecture
    lo, hi = theory.kl3_bounds(ATR_DELTA)
    assert table(at)[1]["l_δ"] == f"{lo:.15g}" and table(at)[1]["u_δ"] == f"{hi:.15g}"
    at.button(key="proof.prev").click().run()
    assert at.query_params["step"] == "9" and step_titles(rendered(at))[0].startswith("#### 9\\.")


@pytest.mark.slow
def test_proof_step_from_the_url_and_out_of_range():
    """A step from the URL, the next one (k2's numeric-only check, labelled so), and steps out of range."""
    at = rendered(start("views/proof.py", {"measure": "k2", "step": "3"}))
    assert step_titles(at)[0].startswith("#### 3\\. Roots of")
    # the next step, k2's bracketing l < 1 < u, is settled only by 40-digit numbers at random δ: the page must
    # say numeric
    at.button(key="proof.next").click().run()
    assert step_titles(rendered(at))[0].startswith("#### 4\\. Bracketing")
    (check,) = passed_checks(at)
    assert check.startswith("**Check passed** (numeric)") and "evidence, not a proof" in check
    assert ":blue-badge" not in check
    at = rendered(start("views/proof.py", {"measure": "k2", "step": "99"}))
    # k2 has 7 derivation steps, the sign of A is 8: step 9 is the numbers, and the warning says so
    assert "step=99 is outside the allowed range [1, 9] for lecture step; using 9." in warnings(at)
    assert at.query_params["step"] == "9" and at.table
    at = rendered(start("views/proof.py", {"step": "two"}))
    assert "step='two' is not a whole number" in warnings(at) and at.query_params["step"] == "1"


@pytest.mark.slow  # the fast loop has chi2's page (test_proof_every_step_...) and its prose (test_proof_text.py)
@pytest.mark.parametrize("name", derivable_measures())
def test_proof_of_every_derivable_measure_renders_checked_prose(name):
    """Every derivable measure's whole proof: each step's check passed and names its kind, the prose keeps its
    maths inside $…$, and the numbers are theory's bounds (one page run for all three)."""
    at = rendered(start("views/proof.py", {"measure": name, "view": "all"}))
    assert not errors(at)
    lo, hi = theory.get_measure(name).bounds(ATR_DELTA)
    assert table(at)[1]["l_δ"] == f"{lo:.15g}" and table(at)[1]["u_δ"] == f"{hi:.15g}"
    prose = [m.value for m in at.markdown]
    for text in prose:
        bare = outside_maths(text)
        assert not re.search(r"[\\^]|_\{|W_", bare), text  # every formula sits inside $…$
    checks = passed_checks(at)
    assert len(checks) == len(step_titles(at)) >= 5
    for check in checks:
        kind = re.match(r"\*\*Check passed\*\* \((symbolic|numeric|symbolic \+ numeric)\)", check)
        assert kind, check
        assert "SymPy assumptions said False" not in check and "simplify(" not in check
        badges = set(re.findall(r":(blue|orange)-badge\[(\w+)\]", check))
        expected = {
            "symbolic": {("blue", "symbolic")},
            "numeric": {("orange", "numeric")},
            "symbolic + numeric": {("blue", "symbolic"), ("orange", "numeric")},
        }[kind.group(1)]
        assert badges == expected, check


@pytest.mark.slow
def test_proof_thirty_digit_row_is_the_closed_form_to_thirty_digits():
    mpmath = pytest.importorskip("mpmath")
    at = rendered(start("views/proof.py", {"measure": "kl3", "delta": "0.05", "step": "10"}))
    row = table(at)[0]
    assert "30 digits" in row["quantity"]
    with mpmath.workdps(60):
        x = -mpmath.exp(-1 - mpmath.mpf("0.05"))
        exact = (-mpmath.lambertw(x, 0).real, -mpmath.lambertw(x, -1).real)
        for shown, value in zip((row["l_δ"], row["u_δ"]), exact):
            assert len(shown.replace(".", "").lstrip("0")) == 30, shown  # 30 significant digits shown
            assert abs(mpmath.mpf(shown) - value) < mpmath.mpf("1e-29") * abs(value)


@pytest.mark.slow
def test_proof_markdown_download_has_every_step():
    at = rendered(start("views/proof.py", {"measure": "hellinger", "delta": "0.04"}))
    (button,) = [b for b in at.get("download_button") if b.proto.label == "All steps as Markdown"]
    text = at.session_state  # the file's text is not exposed by AppTest; rebuild it as the page does
    from divclip.app.illustration import illustration_rows, symbolic_roots
    from divclip.app.proof_text import lecture_markdown, sign_step
    from divclip.theory.symbolic import derivation

    steps = [*derivation("hellinger"), sign_step("hellinger", 0.04)]  # the derivation, then the sign of A
    results = [s.run_check() for s in steps]
    text = lecture_markdown(
        "hellinger", "Hellinger", steps, results, 0.04, illustration_rows(symbolic_roots("hellinger"), 0.04), "l"
    )
    assert button.proto.label and text.count("\n## ") == len(steps) + 1
    assert text.count("**Check passed (") == len(steps) and "$$" in text
    lo, hi = theory.get_measure("hellinger").bounds(0.04)
    assert f"{lo:.15g}" in text and f"{hi:.15g}" in text


@pytest.mark.slow
def test_proof_links_carry_measure_and_delta():
    at = rendered(start("views/proof.py", {"measure": "k2", "delta": "0.05", "step": "9"}))
    links = page_links(at)
    e_low, e_high = theory.equivalent_ratio_clip("k2", 0.05)
    explorer = [v for k, v in links.items() if "clip explorer" in k][0]
    assert explorer["query"]["measures"] == "k2,ratio" and explorer["query"]["delta"] == "0.05"
    assert float(explorer["query"]["eps_high"]) == pytest.approx(e_high, rel=1e-11)
    sanity = [v for k, v in links.items() if k.startswith("Sanity-check")][0]
    assert sanity["query"]["measure"] == "k2" and float(sanity["query"]["eps_low"]) == pytest.approx(e_low, rel=1e-11)


@pytest.mark.slow
def test_link_from_explorer_reaches_a_proof_visited_before():
    """A page_link into a page this session already saw must apply the link's values, not the old ones."""
    at = rendered(start("views/proof.py", {"measure": "chi2"}))
    at.query_params.clear()
    at.switch_page("views/clip_explorer.py").run()
    at.query_params.clear()
    at.query_params.update({"measure": "k2", "delta": "0.07"})
    at.switch_page("views/proof.py").run()
    assert at.selectbox(key="proof.measure").value == "k2" and at.query_params["delta"] == "0.07"
    assert not rendered(at).warning


@pytest.mark.slow
def test_proof_kl3_and_a_second_measure():
    at = rendered(start("views/proof.py", {"view": "all"}))
    assert at.selectbox(key="proof.measure").value == "kl3"
    assert "kl3" in at.selectbox(key="proof.measure").options[0]
    assert any("LambertW" in l.value or "W_{-1}" in l.value or "W\\left" in l.value for l in at.latex)
    n_kl3 = len(passed_checks(at))
    at.selectbox(key="proof.measure").set_value("k2").run()
    rendered(at)
    assert at.query_params["measure"] == "k2"
    lo, hi = theory.get_measure("k2").bounds(ATR_DELTA)
    assert table(at)[1]["l_δ"] == f"{lo:.15g}"
    assert n_kl3 == 9 and len(passed_checks(at)) == 8  # the derivation's steps and the sign of A


@pytest.mark.slow
def test_proof_bad_measure_in_url():
    at = rendered(start("views/proof.py", {"measure": "binary_kl", "delta": "abc"}))
    assert "measure='binary_kl' is not one of" in warnings(at) and "delta='abc'" in warnings(at)
    assert at.selectbox(key="proof.measure").value == "kl3"


# ------------------------------------------------------------------------------- custom measure
def test_custom_measure_next_to_kl3():
    at = rendered(start("views/custom_measure.py", {"formula": "(sqrt(r) - 1)**2", "delta": "0.04"}))
    assert at.title[0].value == "Custom measure"
    values = [m.value for m in at.metric]
    lo, hi = theory.kl3_bounds(0.04)
    assert values == ["0.640000", "1.440000", format_bound(lo), format_bound(hi)]
    at.text_input(key="custom.formula").input("r*log(r) - r + 1").run()
    m = theory.measure_from_formula("r*log(r) - r + 1")
    assert [x.value for x in rendered(at).metric][:2] == [format_bound(b) for b in m.bounds(0.04)]
    assert at.query_params["formula"] == "r*log(r) - r + 1"
    at.number_input(key="custom.delta").set_value(0.09).run()
    shown = [x.value for x in rendered(at).metric]
    assert shown == [format_bound(b) for b in (*m.bounds(0.09), *theory.kl3_bounds(0.09))]


@pytest.mark.slow
def test_custom_measure_uses_p():
    at = rendered(start("views/custom_measure.py", {"formula": "p*(r - 1)**2", "delta": "0.02", "p": "0.5"}))
    lo, hi = theory.measure_from_formula("p*(r - 1)**2").bounds(0.02, p=0.5)
    assert [m.value for m in at.metric][:2] == [format_bound(lo), format_bound(hi)]


@pytest.mark.parametrize(
    ("formula", "message"),
    slow_after(
        1,
        [  # a syntax error stays in the fast loop
            ("r**", "not a valid expression"),
            ("__import__('os')", "not allowed"),
            ("r + 1", "must satisfy D(1) = 0"),
            ("log(r)", "wrong slope"),  # theory/formula.py: "has the wrong slope on the whole of (0.0001, 1)"
            ("r - 1", "must"),
            ("", "must not be empty"),
            ("exp(exp(exp(r)))", "formula"),
        ],
    ),
)
def test_bad_formulas_are_messages(formula, message):
    at = rendered(start("views/custom_measure.py", {"formula": "r*log(r) - r + 1"}))
    at.text_input(key="custom.formula").input(formula).run()
    shown = errors(rendered(at))
    assert message in shown, shown
    assert not at.metric


@pytest.mark.slow
def test_custom_reset_and_examples():
    at = rendered(start("views/custom_measure.py", {"formula": "r**", "delta": "0.3"}))
    at.button(key="custom.example.Hellinger").click().run()
    assert at.query_params["formula"] == "(sqrt(r) - 1)**2" and not rendered(at).error
    at.button(key="custom.reset").click().run()
    assert at.query_params["formula"] == "r*log(r) - r + 1" and at.query_params["delta"] != "0.3"


@pytest.mark.slow
def test_custom_delta_out_of_range_for_the_formula():
    at = rendered(start("views/custom_measure.py", {"formula": "(r - 1)**2 / (1 + (r - 1)**2)", "delta": "0.5"}))
    assert "delta must be below" in errors(at)
    assert [m.value for m in at.metric][:2] == [format_bound(b) for b in theory.kl3_bounds(0.5)]


def test_proof_page_warms_the_sign_step_off_the_lecture_path():
    """issue 34: Next into the sign-of-A step took 4.8 s, torch's first import and loss; the page starts that work
    in a background thread when it first loads, and the thread runs theory's loss without an error."""
    at = rendered(start("views/proof.py", {"measure": "kl3"}))
    warm = at.session_state["proof.warm"]
    warm.join(120)
    assert warm.name == "divclip-warm-sign-step" and not warm.is_alive() and warm.error is None
    assert rendered(start("views/proof.py", {"measure": "kl3"})).session_state["proof.warm"] is warm  # once
