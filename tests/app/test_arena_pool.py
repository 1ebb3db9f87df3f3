"""The toy arena's worker pool (divclip.app.arena_runner): runs train in separate processes, wait in a FIFO
queue when every worker is busy, and end on Stop, when their tab closes or when nobody polls them; the page
shows the queue, a fixed step axis and the 90 % threshold's value."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from apptest_helpers import PAGES_DIR, rendered, start_page

from divclip.app import arena_runner
from divclip.app.arena_runner import (
    MAX_WORKERS,
    WORKERS_ENV,
    ArenaPool,
    ArenaRun,
    ArenaSettings,
    configured_workers,
    default_workers,
)
from divclip.toy_envs import METRICS, run_arena
from divclip.toy_envs.report import threshold_90

LONG = ArenaSettings("bandit", ("grpo",), 2, 5000, 16, 1, 4, 0.05)  # minutes: only ever stopped
TINY = ArenaSettings("bandit", ("grpo", "atr"), 2, 6, 16, 1, 4, 0.05)
PAGE = PAGES_DIR / "toy_arena.py"


@pytest.fixture(scope="module")
def pool():
    """One worker shared by the tests (starting a worker imports torch: seconds); each test leaves it idle.

    Closing it is a test of its own (no third worker start for it): a run training at close() ends, and so does
    the worker process. A failure here shows as an error in the teardown of the module's last test."""
    p = ArenaPool(size=1)
    yield p
    run = submit(p, LONG)
    assert until(lambda: run.steps_done > 0)
    procs = [w.proc for w in p._workers]
    p.close()
    assert run.done and procs and all(proc.poll() is not None for proc in procs)


def until(predicate, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def submit(pool: ArenaPool, settings: ArenaSettings, **kw) -> ArenaRun:
    run = ArenaRun(settings, **kw)
    pool.submit(run)
    return run


# ------------------------------------------------------------------------------------------ size
def test_pool_size_defaults_to_all_cores_but_one_at_most_four():
    assert [default_workers(n) for n in (1, 2, 3, 5, 64)] == [1, 1, 2, 4, 4]
    assert configured_workers({}) == default_workers()
    assert configured_workers({WORKERS_ENV: " 3 "}) == 3
    assert configured_workers({WORKERS_ENV: str(MAX_WORKERS)}) == MAX_WORKERS


@pytest.mark.parametrize("raw", ["0", "-1", "two", "1.5", str(MAX_WORKERS + 1)])
def test_bad_pool_size_is_refused_naming_the_variable(raw):
    with pytest.raises(ValueError, match=f"{WORKERS_ENV} must be an integer from 1 to {MAX_WORKERS}, got '{raw}'"):
        configured_workers({WORKERS_ENV: raw})
    with pytest.raises(ValueError, match="size must be an integer"):
        ArenaPool(size=0)


# ------------------------------------------------------------------------------------------ queue
@pytest.mark.slow
def test_runs_wait_in_order_and_stop_leaves_the_queue(pool):
    first = submit(pool, LONG)
    assert until(lambda: first.state == "running" and first.steps_done > 0)
    second, third = submit(pool, TINY), submit(pool, TINY)
    assert (second.state, third.state) == ("queued", "queued")
    assert (pool.position(second), pool.position(third), pool.position(first)) == (1, 2, None)
    assert pool.counts() == (1, 2)
    second.stop()  # out of the queue: never trained
    assert second.wait(5) and second.result is None and not second.abandoned and second.error is None
    assert pool.position(third) == 1
    first.stop()
    assert first.wait(60) and first.result.stopped and 0 < first.steps_done < LONG.steps
    assert third.wait(120) and third.error is None and third.result.finished
    ref = run_arena(**TINY.kwargs())
    for k in METRICS:  # the worker's curves, block by block, are run_arena's
        np.testing.assert_array_equal(third.result.metrics[k], ref.metrics[k])
    assert third.waited > 0 and third.started >= first.ended - 1e-9
    assert pool.counts() == (0, 0)


@pytest.mark.slow
def test_a_queued_run_nobody_polls_is_dropped(pool):
    first = submit(pool, LONG)
    waiting = submit(pool, TINY, abandon_s=0.5)
    assert waiting.wait(30) and waiting.result is None and waiting.abandoned
    assert waiting.cancel_reason == "nobody had looked at the page for 0.5 s"
    first.stop()
    assert first.wait(60)


@pytest.mark.slow
def test_a_closed_tab_frees_its_worker(pool, monkeypatch):
    closed = {"tab-a"}
    monkeypatch.setattr(arena_runner, "_session_active", lambda sid: sid not in closed)
    monkeypatch.setattr(arena_runner, "GONE_S", 0.3)
    first = submit(pool, LONG, session_id="tab-a")
    queued = submit(pool, TINY, session_id="tab-b")
    assert first.wait(60) and first.abandoned and first.cancel_reason == "its browser tab was closed"
    assert first.result is None or first.result.stopped
    assert queued.wait(120) and queued.result.finished and not queued.abandoned  # the freed worker took it


@pytest.mark.slow
def test_a_dead_worker_fails_its_run_and_is_replaced(pool):
    run = submit(pool, LONG)
    assert until(lambda: run.steps_done > 0)
    pool._workers[0].proc.kill()
    assert run.wait(30)
    assert "the worker process training this run exited (status -9)" in run.error
    after = submit(pool, TINY)
    assert after.wait(120) and after.error is None and after.result.finished


@pytest.mark.slow
def test_workers_run_at_lower_priority(pool):
    run = submit(pool, LONG)
    assert until(lambda: run.steps_done > 0)
    pid = pool._workers[0].proc.pid
    with open(f"/proc/{pid}/stat") as fh:
        nice = int(fh.read().rsplit(")", 1)[1].split()[16])
    assert nice >= arena_runner.NICE
    run.stop()
    assert run.wait(60)


# -------------------------------------------------------------------------------------------- page
@pytest.fixture
def page_pool(pool, monkeypatch):
    """The page's get_pool() is this one-worker pool."""
    monkeypatch.setattr(arena_runner, "_POOL", pool)
    return pool


@pytest.mark.slow
def test_page_shows_the_queue_and_stop_takes_a_run_out(page_pool):
    busy = submit(page_pool, LONG)
    assert until(lambda: busy.state == "running")
    at = rendered(start_page(PAGE, {"seeds": "2", "steps": "6"}))
    at.button(key="arena.start").click().run()
    rendered(at)
    progress = at.get("progress")
    assert len(progress) == 1 and progress[0].proto.value == 0
    assert progress[0].proto.text.startswith("Queued: position 1 of 1 · 1 of 1 worker(s) busy · waited ")
    assert not at.button(key="arena.stop").disabled
    at.button(key="arena.stop").click().run()
    run = at.session_state["arena.run"]
    assert run.wait(5)
    at.run()
    rendered(at)
    assert "Stopped before it started, after" in " ".join(w.value for w in at.warning)
    assert not at.get("plotly_chart")
    busy.stop()
    assert busy.wait(60)


@pytest.mark.slow
def test_page_prints_the_90_percent_threshold_and_fixes_the_step_axis(page_pool):
    at = rendered(start_page(PAGE, {"env": "bandit", "seeds": "2", "steps": "6", "methods": "grpo,atr"}))
    at.button(key="arena.start").click().run()
    run = at.session_state["arena.run"]
    assert run.wait(120) and run.error is None
    at.run()
    rendered(at)
    thr = threshold_90(run.result)
    ref = run_arena(**TINY.kwargs())
    assert thr == threshold_90(ref)
    captions = " ".join(c.value for c in at.caption)
    assert f"= **{thr:.4f}**" in captions and "Steps to 90 %" in captions
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    layout = spec["layout"]
    for axis in ("xaxis", "xaxis2", "xaxis3", "xaxis4"):
        assert layout[axis]["range"] == [0.0, 6.0] and layout[axis]["autorange"] is False
    assert [s["y0"] for s in layout["shapes"] if s["line"].get("dash") == "dash"] == [thr]
    assert any(a["text"] == f"90 % threshold {thr:.4f}" for a in layout["annotations"])


def test_a_bad_pool_size_is_a_message_on_the_page(monkeypatch):
    monkeypatch.setattr(arena_runner, "_POOL", None)
    monkeypatch.setenv(WORKERS_ENV, "lots")
    at = rendered(start_page(PAGE))
    assert [e.value.replace("\\", "") for e in at.error] == [
        f"The toy arena is not available on this server: {WORKERS_ENV} must be an integer from 1 to "
        f"{MAX_WORKERS}, got 'lots'."
    ]
    assert arena_runner._POOL is None
