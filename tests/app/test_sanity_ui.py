"""The Sanity check page's UI (AppTest): shipped examples, a broken config next to valid rollouts, values from
links, rounded tables. The report's numbers themselves are tested in tests/sanity/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from divclip.sanity.report import report_from_uploads

REPO = Path(__file__).resolve().parents[2]
MAIN = REPO / "app" / "main.py"
EXAMPLES = REPO / "app" / "examples"
TIMEOUT = 120


def sanity_page(query: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(MAIN), default_timeout=TIMEOUT)
    at.query_params.update(query or {})
    at.switch_page("views/sanity_check.py").run()  # straight to the page, through the router
    assert not at.exception, [e.value for e in at.exception]
    return at


def subheaders(at: AppTest) -> list[str]:
    return [s.value for s in at.subheader]


@pytest.mark.slow
@pytest.mark.parametrize("config", ["verl_dapo.yaml", "trl_gspo.yaml"])
def test_shipped_examples_are_valid_inputs(config):
    rollouts = EXAMPLES / "rollouts_example.jsonl"
    report = report_from_uploads(
        config=(config, (EXAMPLES / config).read_bytes()), rollouts=(rollouts.name, rollouts.read_bytes())
    )
    assert report["warnings"] == []  # the examples show a healthy setting
    assert report["rollouts"]["n_tokens"] > 1000 and report["config"]["framework"] == config.split("_")[0]


def test_try_an_example_renders_the_whole_report():
    at = sanity_page()
    labels = {b.proto.label for b in at.get("download_button")}
    assert {"verl_dapo.yaml", "trl_gspo.yaml", "rollouts_example.jsonl"} <= labels
    at.button(key="sanity.example.verl DAPO config + rollouts").click().run()
    assert not at.exception and not at.error
    heads = subheaders(at)
    assert heads[0].startswith("Config: verl") and any(h.startswith("Rollouts: ") for h in heads)
    assert len(at.get("plotly_chart")) == 4
    at.button(key="sanity.example.clear").click().run()
    assert not at.get("plotly_chart") and "try an example" in at.info[-1].value


@pytest.mark.slow
def test_a_broken_config_does_not_hide_the_rollout_report():
    at = sanity_page()
    at.button(key="sanity.example.Rollouts only").click().run()
    n_tokens = [h for h in subheaders(at) if h.startswith("Rollouts: ")]
    at.file_uploader(key="sanity_config").set_value(("junk.yaml", b"a: [1, 2", "text/yaml"))
    at.run()
    assert not at.exception
    assert "junk.yaml' is not valid YAML" in at.error[0].value
    assert "for the rollouts alone" in " ".join(w.value for w in at.warning)
    assert [h for h in subheaders(at) if h.startswith("Rollouts: ")] == n_tokens and n_tokens
    assert len(at.get("plotly_chart")) >= 3  # histogram, sweep, breakdown


@pytest.mark.slow
def test_values_from_a_link_fill_the_options():
    at = sanity_page({"eps_low": "0.2", "eps_high": "0.230842", "measure": "kl3"})
    assert at.number_input(key="sanity_eps_low").value == 0.2
    assert at.number_input(key="sanity_eps_high").value == 0.230842
    assert at.selectbox(key="sanity_measure").value == "kl3"
    assert "From the link: eps_low = 0.2, eps_high = 0.230842, measure = kl3" in at.info[0].value
    at = sanity_page({"eps_low": "abc", "measure": "nope"})
    shown = " ".join(w.value for w in at.warning)
    assert "eps_low='abc'" in shown and "measure='nope'" in shown
    assert at.number_input(key="sanity_eps_low").value is None


@pytest.mark.slow
def test_tables_show_rounded_numbers():
    at = sanity_page({"eps_low": "0.0003", "eps_high": "0.0004"})
    at.button(key="sanity.example.TRL GSPO config + rollouts").click().run()
    assert not at.exception and not at.error
    for frame in at.dataframe:
        text = frame.value.to_csv()
        assert not re.search(r"\d\.?\d*(9999999|0000000)\d", text), text


@pytest.mark.slow
def test_histogram_labels_do_not_overlap():
    """The bounds are named in the legend, one entry per measure (issue 34: labels beside the lines overlapped the
    bars and each other); no text is drawn inside the plot."""
    from divclip.sanity import figures

    rollouts = EXAMPLES / "rollouts_example.jsonl"
    report = report_from_uploads(
        config=("verl_dapo.yaml", (EXAMPLES / "verl_dapo.yaml").read_bytes()),
        rollouts=(rollouts.name, rollouts.read_bytes()),
    )
    fig = figures.log_ratio_histogram_figure(report["rollouts"])
    assert not fig.layout.annotations and fig.layout.showlegend
    bounds = report["rollouts"]["histogram"]["log_bounds"]
    named = [t for t in fig.data if t.showlegend is not False]
    assert [t.name for t in named] == [
        f"{m}: lower at log r = {bounds[m][0]:.3f}, upper at log r = {bounds[m][1]:.3f}" for m in ("ratio", "kl3")
    ]
