"""The Study page through AppTest: it renders the committed results file, its tables carry the file's numbers,
and a missing or broken file is one clear error, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from apptest_helpers import PAGES_DIR, rendered, start_page

from divclip.app import study_figures
from divclip.app.study_figures import (
    RESULTS,
    claim_lines,
    comparison_rows,
    curves_figure,
    difference_figure,
    load_results,
    method_rows,
)

PAGE = PAGES_DIR / "study.py"


def test_committed_results_are_a_study_summary():
    data = load_results(RESULTS)
    for task in data["tasks"].values():
        assert task["baseline"] in task["methods"] and task["seeds"]
        assert len(task["seeds"]) == task["methods"][task["baseline"]]["n_seeds"]
        assert set(task["comparisons"]) >= {"final_accuracy", "auc", "steps_to_90"}


def test_figure_draws_each_method_with_its_band():
    task = next(iter(load_results(RESULTS)["tasks"].values()))
    fig = curves_figure(task)
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    bands = [t for t in fig.data if t.fill == "toself"]
    assert len(lines) == len(bands) == len(task["methods"])
    for line, row in zip(lines, task["methods"].values()):
        assert list(line.y) == row["curve"]["mean"] and list(line.x) == row["curve"]["steps"]


def test_page_tables_show_the_files_numbers():
    at = rendered(start_page(PAGE))
    assert at.title[0].value.startswith("Study")
    task = next(iter(load_results(RESULTS)["tasks"].values()))
    methods, comparisons = at.dataframe[0].value, at.dataframe[1].value
    assert methods["final accuracy"].tolist() == [r["final accuracy"] for r in method_rows(task)]
    assert method_rows(task)[0]["final accuracy"] == round(
        task["methods"][task["baseline"]]["final_accuracy"]["mean"], 4
    )
    assert comparisons["verdict"].tolist() == [r["verdict"] for r in comparison_rows(task)]
    assert len(at.get("plotly_chart")) == 2  # the curves and the paired differences


def test_difference_figure_is_each_seeds_paired_difference():
    task = next(iter(load_results(RESULTS)["tasks"].values()))
    base, other = task["baseline"], next(m for m in task["methods"] if m != task["baseline"])
    fig = difference_figure(task, methods=[other])
    seeds = [t for t in fig.data if t.mode == "lines"]
    (mean,) = [t for t in fig.data if t.mode == "lines+markers"]
    assert len(seeds) == len(task["seeds"])
    b, o = task["methods"][base]["curve"]["per_seed"], task["methods"][other]["curve"]["per_seed"]
    assert list(seeds[0].y) == pytest.approx([100 * (x - y) for x, y in zip(o[0], b[0])])
    # the last point of the mean line is the final-accuracy difference the statistics compare, in points
    final = next(c for c in task["comparisons"]["final_accuracy"] if c["method"] == other)["diff"]
    assert mean.y[-1] == pytest.approx(100 * final)


@pytest.mark.parametrize("content", [None, "not json", json.dumps({"tasks": {}}), json.dumps([1, 2])])
def test_a_missing_or_broken_file_is_one_error(content, tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    monkeypatch.setattr(study_figures, "RESULTS", Path(path))
    at = rendered(start_page(PAGE))
    assert len(at.error) == 1 and at.error[0].value.startswith("study results")  # shown as Markdown, escaped
    with pytest.raises(ValueError, match="study results"):
        load_results(path)


def test_figures_draw_the_chosen_methods_beside_the_baseline():
    task = next(iter(load_results(RESULTS)["tasks"].values()))
    base = task["baseline"]
    other = [m for m in task["methods"] if m != base][-1]
    lines = [t.name for t in curves_figure(task, methods=[other]).data if t.mode == "lines+markers"]
    labels = [task["methods"][m]["label"] for m in (base, other)]
    assert [name.split(" (n = ")[0] for name in lines] == labels
    means = [t for t in difference_figure(task, methods=[other]).data if t.mode == "lines+markers"]
    assert len(means) == 1 and means[0].name.startswith(task["methods"][other]["label"] + " − ")
    with pytest.raises(ValueError, match=r"methods must be methods of the task .* got \['nope'\]"):
        curves_figure(task, methods=["nope"])


def test_the_page_draws_atr_beside_the_baseline_by_default():
    at = rendered(start_page(PAGE))
    (chooser,) = at.multiselect
    assert chooser.value == ["atr"]
    assert len(at.get("plotly_chart")) == 2
    task = next(iter(load_results(RESULTS)["tasks"].values()))
    claims = [line for line in at.markdown if "paper:" in line.value]
    assert len(claims) == 1 and claims[0].value == "\n".join(f"* {x}" for x in claim_lines(task, methods=["atr"]))
    assert all(x.startswith("**ATR-GRPO**") for x in claim_lines(task, methods=["atr"]))
