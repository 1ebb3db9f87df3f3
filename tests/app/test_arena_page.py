"""The toy-arena page through AppTest, and its background runner: the page shows what `run_arena` computes.

AppTest does not fire the fragment's timer, so a test waits for the run's thread (`ArenaRun.wait`) and then
reruns the script, as the timer would. The page file runs on its own (no router).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from apptest_helpers import PAGES_DIR, rendered, slow_after, start_page
from streamlit.testing.v1 import AppTest

from divclip.app.arena_runner import TARGET_CHUNKS, ArenaRun, ArenaSettings, chunk_steps
from divclip.toy_envs import ENVS, METRICS, run_arena
from divclip.toy_envs.report import summarize

PAGE = PAGES_DIR / "toy_arena.py"
TINY = ArenaSettings(
    "bandit", ("grpo", "dapo", "atr"), seeds=2, steps=5, group_size=16, prompts_per_step=1, ppo_epochs=4, lr=0.05
)


def reference(settings: ArenaSettings):
    return run_arena(**settings.kwargs())


def same_curves(a, b) -> bool:
    return (
        a.methods == b.methods
        and a.seeds == b.seeds
        and all(np.array_equal(a.metrics[k], b.metrics[k], equal_nan=True) for k in METRICS)
    )


# ------------------------------------------------------------------------------------------ runner
def test_chunks_keep_short_runs_step_by_step():
    assert chunk_steps(1) == chunk_steps(TARGET_CHUNKS) == 1
    assert chunk_steps(TARGET_CHUNKS + 1) == 2
    assert chunk_steps(5000) == 25


@pytest.mark.slow
def test_runner_reproduces_run_arena_and_its_csv(tmp_path):
    run = ArenaRun.start(TINY, every=2)
    assert run.wait(60) and run.error is None
    ref = reference(TINY)
    assert same_curves(run.result, ref) and run.result.finished
    assert run.chunks == 3  # steps 2, 4 and the last
    ref.to_csv(tmp_path / "ref.csv")
    assert run.csv() == (tmp_path / "ref.csv").read_text()


@pytest.mark.slow
def test_runner_stops_early():
    settings = ArenaSettings("bandit", ("grpo",), 2, 5000, 16, 1, 4, 0.05)
    run = ArenaRun.start(settings, every=1)
    deadline = time.monotonic() + 60
    while run.steps_done < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    run.stop()
    assert run.wait(60)
    done = run.result.steps_done
    assert run.result.stopped and 3 <= done < settings.steps
    # what ran before Stop is the same run, step for step
    assert same_curves(run.result, run_arena(**{**settings.kwargs(), "steps": done}))


def test_runner_validates_in_the_callers_thread():
    with pytest.raises(ValueError, match="unknown method 'foo'"):
        ArenaRun(ArenaSettings("bandit", ("foo",), 2, 5, 16, 1, 4, 0.05))
    with pytest.raises(ValueError, match="group_size must be an integer in"):
        ArenaRun(ArenaSettings("bandit", ("grpo",), 2, 5, 1, 1, 4, 0.05))


# -------------------------------------------------------------------------------------------- page
def start(query: dict | None = None) -> AppTest:
    return start_page(PAGE, query)


def run_to_end(at: AppTest) -> ArenaRun:
    at.button(key="arena.start").click().run()
    rendered(at)
    run = at.session_state["arena.run"]
    assert run.wait(120)
    at.run()  # what the fragment's next poll does
    rendered(at)
    return run


def summary(at: AppTest) -> list[dict]:
    frames = [d.value for d in at.dataframe if "final E[R]" in d.value.columns]
    assert len(frames) == 1
    return frames[0].to_dict("records")


def text(elements) -> str:
    return " ".join(e.value for e in elements).replace("\\", "")


def test_page_renders_with_small_defaults():
    at = rendered(start())
    assert at.title[0].value == "Toy arena"
    assert "Press **Run**" in text(at.info)
    # issue 34: the default is the sparse exploration problem, where the methods part within a minute (the bandit
    # converges by step 50 for every method)
    assert at.selectbox(key="arena.env").value == "sparse"
    assert at.multiselect(key="arena.methods").value == ["grpo", "dapo", "atr"]
    assert (at.number_input(key="arena.seeds").value, at.number_input(key="arena.steps").value) == (16, 300)
    defaults = ENVS["sparse"].arena
    assert all(at.number_input(key=f"arena.{k}").value == defaults[k] for k in ("group_size", "lr", "ppo_epochs"))
    assert at.button(key="arena.stop").disabled


@pytest.mark.slow
def test_tiny_run_shows_run_arenas_numbers():
    at = rendered(start({"env": "bandit"}))
    at.number_input(key="arena.seeds").set_value(2.0)
    at.number_input(key="arena.steps").set_value(5.0)
    run = run_to_end(at)
    ref = reference(TINY)
    assert run.settings == TINY
    assert same_curves(run.result, ref)  # same seeds, same curves
    assert "Finished: 5 steps" in text(at.success)
    want = summarize(ref)
    rows = summary(at)
    assert [r["method"] for r in rows] == ["grpo", "dapo", "atr"]
    assert [r["final E[R]"] for r in rows] == [s.final_mean for s in want]
    assert [r["pass@8"] for r in rows] == [s.pass_at_k[8][0] for s in want]
    fig = at.get("plotly_chart")[0].proto.spec
    assert '"grpo"' in fig and len(at.get("plotly_chart")) == 1
    assert [b.label for b in at.get("download_button")] == ["Metrics as CSV"]


@pytest.mark.slow
def test_finished_run_stays_after_reruns():
    at = rendered(start({"env": "bandit", "seeds": "2", "steps": "5"}))
    run_to_end(at)
    at.number_input(key="arena.steps").set_value(50.0).run()  # a settings change is a full rerun
    at.selectbox(key="arena.pass_k").set_value(16).run()
    rendered(at)
    assert "Finished: 5 steps" in text(at.success)
    assert "the settings have changed since" in text(at.caption)
    assert [r["final E[R]"] for r in summary(at)] == [s.final_mean for s in summarize(reference(TINY))]
    assert "pass@16" in at.get("plotly_chart")[0].proto.spec


@pytest.mark.slow
def test_stop_ends_the_run_and_keeps_its_curves():
    at = rendered(start({"env": "sparse", "methods": "grpo", "seeds": "2", "steps": "5000"}))
    at.button(key="arena.start").click().run()
    rendered(at)
    assert not at.button(key="arena.stop").disabled  # Stop is live while the run trains
    at.button(key="arena.stop").click().run()
    run = at.session_state["arena.run"]
    assert run.wait(120)
    at.run()
    rendered(at)
    assert run.result.stopped and run.result.steps_done < 5000
    assert f"Stopped at step {run.result.steps_done} of 5000" in text(at.warning)
    assert at.button(key="arena.stop").disabled


@pytest.mark.slow
def test_environment_brings_its_defaults():
    at = rendered(start())
    at.selectbox(key="arena.env").set_value("bandit").run()
    rendered(at)
    defaults = ENVS["bandit"].arena
    for name in ("group_size", "prompts_per_step", "ppo_epochs", "lr"):
        assert at.number_input(key=f"arena.{name}").value == defaults[name]
    assert at.number_input(key="arena.steps").value == 300  # the user's choice stays


@pytest.mark.parametrize(
    "extra, message",
    slow_after(
        1,
        [
            ("foo", "unknown method 'foo'"),
            ("atrr", "did you mean 'atr'?"),
            ("grpo", "method labels must be non-empty, unique"),
            ("binary_kl", "needs a budget"),
        ],
    ),
)
def test_bad_methods_are_messages(extra, message):
    at = rendered(start({"seeds": "2", "steps": "5"}))
    at.text_input(key="arena.extra").input(extra).run()
    at.button(key="arena.start").click().run()
    rendered(at)
    assert message in text(at.error)
    assert "arena.run" not in at.session_state


@pytest.mark.slow
def test_no_method_is_a_message():
    at = rendered(start())
    at.multiselect(key="arena.methods").set_value([]).run()
    at.button(key="arena.start").click().run()
    assert "methods must name at least one method" in text(rendered(at).error)


@pytest.mark.slow
def test_link_to_an_environment_brings_its_defaults_unless_given():
    at = rendered(start({"env": "sparse", "lr": "0.3"}))
    defaults = ENVS["sparse"].arena
    assert at.number_input(key="arena.lr").value == 0.3
    for name in ("group_size", "prompts_per_step", "ppo_epochs"):
        assert at.number_input(key=f"arena.{name}").value == defaults[name]


@pytest.mark.slow
def test_a_run_nobody_watches_stops_itself():
    run = ArenaRun.start(ArenaSettings("bandit", ("grpo",), 2, 5000, 16, 1, 4, 0.05), abandon_s=0.3)
    assert run.wait(60)
    assert run.result.stopped and run.abandoned and not run.stopping
    watched = ArenaRun.start(TINY, abandon_s=0.3)
    watched.stop()
    assert watched.wait(60) and not watched.abandoned  # Stop is not abandonment
