"""The Atlas page through AppTest: it renders from a URL, its widgets move the numbers to `divclip.theory`'s
and write the state back into the URL."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from divclip.theory import interval

MAIN = Path(__file__).resolve().parents[2] / "app" / "main.py"
TIMEOUT = 120


def start(query: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(MAIN), default_timeout=TIMEOUT)
    at.query_params.update(query or {})
    at.switch_page("views/atlas.py")
    return rendered(at.run())


def rendered(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def rows(at: AppTest) -> list[dict]:
    return at.table[0].value.to_dict("records")


def query(at: AppTest) -> dict:
    return {k: (v[-1] if isinstance(v, list) else v) for k, v in dict(at.query_params).items()}


def plain(markdown: str) -> str:
    return re.sub(r"\\(.)", r"\1", markdown)


def test_renders_from_the_url_and_answers_the_question():
    at = start({"methods": "dapo,dppo_tv", "q": "0.01"})
    assert at.title[0].value == "Atlas"
    dapo, tv = rows(at)
    hi = float(interval("dppo_tv", 0.01, 1)[1])
    assert dapo["A > 0 keeps r in (q = 0.01)"] == "[0, 1.28]" and tv["A > 0 keeps r in (q = 0.01)"] == f"[0, {hi:.5g}]"
    assert len(at.get("plotly_chart")) == 2  # the cross-section and the heatmaps
    assert query(at) == {"methods": "dapo,dppo_tv", "q": "0.01", "rmax": "10", "colour": "w"}


def test_bad_url_values_warn_and_fall_back():
    at = start({"methods": "grpo,bogus,sapo,dapo,atr,gspo", "q": "7", "colour": "nope"})
    text = " ".join(plain(w.value) for w in at.warning)
    assert "method 'bogus' is neither a named method" in text and "at most 4 methods" in text
    assert "outside the allowed range" in text and "colour='nope'" in text
    assert [r["method"] for r in rows(at)] == ["grpo", "sapo", "dapo", "atr"]
    assert query(at)["q"] == "1" and query(at)["colour"] == "w"


def test_widgets_move_the_numbers_and_the_url():
    at = start({"methods": "grpo", "q": "0.5"})
    at.number_input(key="atlas.q").set_value(0.1)
    at = rendered(at.run())
    assert query(at)["q"] == "0.1" and "A > 0 keeps r in (q = 0.1)" in rows(at)[0]
    at.number_input(key="atlas.param.0.grpo.eps_high").set_value(0.28)
    at = rendered(at.run())
    assert query(at)["methods"] == "dapo"  # the method string of the preset it became
    assert rows(at)[0]["A > 0 keeps r in (q = 0.1)"] == "[0, 1.28]"
    at.multiselect(key="atlas.methods").select("dppo_kl")
    at = rendered(at.run())
    assert query(at)["methods"] == "dapo,dppo_kl" and len(rows(at)) == 2
    at.radio(key="atlas.colour").set_value("w / r")
    at = rendered(at.run())
    assert query(at)["colour"] == "w / r"


def test_a_bad_parameter_is_refused_with_a_message():
    at = start({"methods": "dapo"})
    at.number_input(key="atlas.param.0.dapo.eps_high").set_value(0.0)  # eps_low = 0 is a clip (floor at 1)
    at = rendered(at.run())
    assert "eps_high must be a finite number > 0" in " ".join(plain(e.value) for e in at.error)
    assert query(at)["methods"] == "dapo"


@pytest.mark.slow
def test_a_sequence_level_method_is_drawn_and_sapo_has_no_interval():
    at = start({"methods": "gspo,sapo", "q": "0.5"})
    gspo, sapo = rows(at)
    assert gspo["family"] == "sequence-level" and sapo["A > 0 keeps r in (q = 0.5)"] == "none (no hard clip)"
    assert not at.warning
