"""Load: while N visitors each train a toy arena, how long does a further visitor's clip explorer take to load?

    python benchmarks/bench_arena_load.py                      # N = 0 (reference), 1, 6 and 12 sessions
    python benchmarks/bench_arena_load.py --sessions 6         # one case
    DIVCLIP_ARENA_WORKERS=2 python benchmarks/bench_arena_load.py --sessions 6   # a larger worker pool

Goal (issue 15): with 6 concurrent arena runs (sparse, 3 methods × 16 seeds × 300 steps) a further visitor's
clip explorer reaches Streamlit's notRunning state with an idle status widget in < 15 s on the 2-core machine,
and every run finishes.

Each case starts its own `streamlit run app/main.py` on a free port and drives it with headless Debian chromium
through Playwright, one browser context (its own Streamlit session) per visitor. The N arena visitors open
`toy_arena?env=sparse&seeds=16&steps=300` one after another and press Run (a run is queued in the server's
worker pool, `divclip.app.arena_runner`); after the last press and a 3 s pause the further visitor opens the
clip explorer (the app's root). "explorer notRunning" is the time from `page.goto` until the app reports
`data-test-script-state="notRunning"` with no "Running..." in the status widget; "explorer drawn" until every
plotly chart on it has drawn too (the browser's own drawing, on the same 2 cores). Then the benchmark waits for
every arena page to show "Finished:" and reports when the last one did, counted from the first Run press.
The N = 0 row is the reference: the same explorer load with nothing training. The load average before each
case is printed, because the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

from bench_arena_redraw import free_port, start_server  # one way to serve the app for both benchmarks

REPO = Path(__file__).resolve().parents[1]
MAIN = REPO / "app" / "main.py"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
GOAL_S = 15.0
ARENA = {"env": "sparse", "seeds": 16, "steps": 300}
STATE = """() => {
    const app = document.querySelector('[data-testid="stApp"]');
    const status = document.querySelector('[data-testid="stStatusWidget"]');
    const charts = [...document.querySelectorAll('[data-testid="stPlotlyChart"]')];
    return {
        idle: !!app && app.getAttribute('data-test-script-state') === 'notRunning'
              && !(status && /Running/i.test(status.innerText))
              && document.querySelectorAll('[data-testid="stElementContainer"]').length > 0,
        drawn: charts.length > 0 && charts.every(c => c.querySelector('.main-svg')),
    };
}"""


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def explorer_load(browser, url: str, timeout: float) -> tuple[float, float]:
    """Seconds from goto to notRunning + idle status, and to every chart drawn (nan if not within timeout)."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    t0 = time.monotonic()
    page.goto(url, timeout=timeout * 1000)
    idle = drawn = float("nan")
    while time.monotonic() - t0 < timeout:
        snap = page.evaluate(STATE)
        now = time.monotonic() - t0
        if snap["idle"] and idle != idle:
            idle = now
        if snap["idle"] and snap["drawn"]:
            drawn = now
            break
        page.wait_for_timeout(100)
    ctx.close()
    return idle, drawn


def case(browser, url: str, sessions: int, timeout: float) -> dict:
    pages = []
    t_first = None
    for _ in range(sessions):
        ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = ctx.new_page()
        page.set_default_timeout(timeout * 1000)
        page.goto(f"{url}/toy_arena?{urlencode(ARENA)}")
        button = page.get_by_role("button", name="Run")
        button.wait_for()
        page.wait_for_function(
            "() => document.querySelector('[data-testid=\"stApp\"]')"
            ".getAttribute('data-test-script-state') === 'notRunning'"
        )
        button.click()
        page.locator('[data-testid="stProgress"]').first.wait_for()  # queued or training
        t_first = time.monotonic() if t_first is None else t_first
        pages.append((ctx, page))
    if sessions:
        time.sleep(3.0)
    idle, drawn = explorer_load(browser, url, timeout)
    finished, stopped, last = 0, 0, float("nan")
    deadline = time.monotonic() + timeout * max(1, sessions)
    for ctx, page in pages:
        left = max(1.0, deadline - time.monotonic())
        try:
            page.get_by_text("Finished:").or_(page.get_by_text("Stopped")).first.wait_for(timeout=left * 1000)
            if page.get_by_text("Finished:").count():
                finished += 1
            else:
                stopped += 1
            last = time.monotonic() - t_first
        except Exception:  # noqa: BLE001 - a run that did not end in time is reported, not raised
            pass
        ctx.close()
    return {"sessions": sessions, "idle": idle, "drawn": drawn, "finished": finished, "stopped": stopped, "last": last}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", default="0,1,6,12", help="comma-separated numbers of arena visitors")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per wait (per run for the runs)")
    args = ap.parse_args()
    counts = [int(s) for s in args.sessions.split(",")]
    from playwright.sync_api import sync_playwright

    from divclip.app.arena_runner import configured_workers

    workers = configured_workers()
    print(
        f"Clip explorer load while N visitors train a toy arena ({ARENA['env']}, 3 methods × {ARENA['seeds']} "
        f"seeds × {ARENA['steps']} steps each);"
    )
    print(
        f"{os.cpu_count()} CPUs, {workers} arena worker process(es); goal: explorer notRunning < {GOAL_S:g} s "
        "with 6 sessions, every run finishes\n"
    )
    print(
        "| arena sessions | load avg before | explorer notRunning (s) | explorer drawn (s) | runs finished "
        "| last run finished after (s) | notRunning < goal |"
    )
    print("|---|---|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory(prefix="divclip-bench-") as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        for n in counts:  # one row per case as soon as it is done
            load = os.getloadavg()[0]
            port = free_port()
            with open(Path(tmp) / f"server-{n}.log", "w") as log:
                proc = start_server(MAIN, port, log)
                try:
                    print(row(case(browser, f"http://127.0.0.1:{port}", n, args.timeout) | {"load": load}), flush=True)
                finally:
                    stop_server(proc)
        browser.close()


def row(r: dict) -> str:
    ok = "yes" if r["idle"] < GOAL_S and r["finished"] == r["sessions"] else "NO"
    runs = f"{r['finished']} of {r['sessions']}" + (f" ({r['stopped']} stopped)" if r["stopped"] else "")
    last = f"{r['last']:.1f}" if r["sessions"] else "—"
    return f"| {r['sessions']} | {r['load']:.1f} | {r['idle']:.1f} | {r['drawn']:.1f} | {runs} | {last} | {ok} |"


if __name__ == "__main__":
    main()
