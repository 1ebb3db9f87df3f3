"""The Sanity check page and its figures: a real config and batch render without exception, with the report's
numbers; the figure functions are pure and inspectable without a browser."""

import plotly.graph_objects as go
import pytest
from sanity_helpers import FIXTURES, npz_bytes, random_batch, sanity_page

from divclip.sanity import figures
from divclip.sanity.report import report_from_uploads
from divclip.theory import MEASURES

CONFIG = ("verl_grpo_onpolicy.sh", (FIXTURES / "verl_grpo_onpolicy.sh").read_bytes())
ROLLOUTS = ("batch.npz", npz_bytes(**random_batch(seed=11)))


@pytest.fixture(scope="module")
def report():
    return report_from_uploads(config=CONFIG, rollouts=ROLLOUTS)


@pytest.mark.slow  # the fast loop renders this page in tests/app/test_sanity_ui.py
def test_page_without_uploads_asks_for_them():
    at = sanity_page(60).run()
    assert not at.exception and not at.error
    assert "Upload" in at.info[0].value


@pytest.mark.slow
def test_page_renders_the_report_of_uploaded_files(report):
    at = sanity_page(120).run()
    at.file_uploader(key="sanity_config").set_value((*CONFIG, "text/x-sh"))
    at.file_uploader(key="sanity_rollouts").set_value((*ROLLOUTS, "application/octet-stream"))
    at.run()
    assert not at.exception and not at.error
    shown = " ".join(w.value for w in at.warning)
    for w in report["warnings"]:
        assert w["code"] in shown and w["source"] in shown
    assert len(at.get("plotly_chart")) == 4  # budget intervals, histogram, sweep, breakdown
    assert at.selectbox(key="sanity_bucket_measure").value == "kl3"


@pytest.mark.slow
def test_page_overrides_box_and_options_reach_the_report():
    at = sanity_page(120).run()
    at.text_area(key="sanity_overrides").input(
        "actor_rollout_ref.actor.clip_ratio_low=0.2 actor_rollout_ref.actor.clip_ratio_high=0.28\n"
        "data.train_batch_size=512 actor_rollout_ref.actor.ppo_mini_batch_size=64 "
        "actor_rollout_ref.actor.clip_ratio_c=3"
    )
    at.selectbox(key="sanity_measure").select("kl3")
    at.run()
    assert not at.exception and not at.error
    assert [w.value.split("**")[1] for w in at.warning] == ["asymmetric_contradicts_measure"]


def test_histogram_figure_has_the_counts_and_bounds(report):
    ro = report["rollouts"]
    fig = figures.log_ratio_histogram_figure(ro)
    assert isinstance(fig, go.Figure)
    assert list(fig.data[0].y) == ro["histogram"]["counts"]
    xs = sorted(x for t in fig.data[1:] for x in set(t.x) - {None})  # each measure's two bounds as one line trace
    expected = sorted(x for m in ("ratio", "kl3") for x in ro["histogram"]["log_bounds"][m])
    assert xs == pytest.approx(expected)
    assert [t.name.split(":")[0] for t in fig.data[1:]] == ["ratio", "kl3"]


def test_sweep_figure_has_one_line_per_measure(report):
    ro = report["rollouts"]
    fig = figures.delta_sweep_figure(ro)
    lines = [t for t in fig.data if t.mode == "lines"]
    assert [t.name for t in lines] == list(MEASURES)
    assert list(lines[0].y) == ro["sweep"]["measures"]["ratio"]["clipfrac"]
    assert fig.layout.xaxis.type == "log"


def test_bucket_figure_shows_low_and_high_fractions(report):
    ro = report["rollouts"]
    fig = figures.bucket_figure(ro, "kl3")
    kl3 = next(m for m in ro["measures"] if m["measure"] == "kl3")
    assert list(fig.data[0].y) == [b["frac_low"] for b in kl3["buckets"] if b["sign"] == "A<0"]
    assert list(fig.data[1].y) == [b["frac_high"] for b in kl3["buckets"] if b["sign"] == "A>0"]


def test_budget_figure_draws_the_kl3_interval(report):
    fig = figures.budget_intervals_figure(report["budget"])
    kl3 = next(t for t in fig.data if t.name == "kl3")
    assert list(kl3.x) == pytest.approx([0.8, 1.23084], abs=1e-5)
