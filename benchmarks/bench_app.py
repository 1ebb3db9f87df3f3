"""Clip explorer: server-side rerun time after a δ slider move (goal: median < 150 ms); the proof page's and the
token explainer's first load in headless chromium (goal: < 5 s on a quiet machine).

    python benchmarks/bench_app.py [--reruns 30] [--no-arena] [--first-load-only]

First load: a fresh `streamlit run app/main.py` per page (nothing cached: SymPy derives, the figures draw), then
chromium opens the page's URL and the clock stops when the script has finished and every plotly chart has drawn;
the same URL is then opened again in a new tab (the server's caches warm). The load average is printed with it.

It then runs benchmarks/bench_arena_redraw.py (a real server and headless chromium): how often the Toy arena
page redraws while a run trains (goal: at least every 0.5 s). `--no-arena` skips that part.

Each rerun is `at.slider("explorer.delta").set_value(δ).run()` in Streamlit's AppTest, started from
app/main.py (navigation included), with a fresh δ every time so nothing is served from a cache. AppTest
runs the script in-process and also parses the result into its element tree, so these times are an upper
bound on the server's own work. For reference, the same run also times a one-slider script (Streamlit's
own rerun overhead) and the pure figure functions plus their JSON encoding (what plotly costs per rerun).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import plotly.io as pio
from streamlit.testing.v1 import AppTest

from divclip.app.figures import divergence_curves, interval_chart, surrogate_figure
from divclip.app.intervals import clip_intervals

MAIN = Path(__file__).resolve().parents[1] / "app" / "main.py"
GOAL_MS = 150.0
FIRST_LOAD_GOAL_S = 5.0
FIRST_LOADS = {
    "the proof (KL3, step 1)": "proof?measure=kl3",
    "the proof, presenter mode, step 1": "proof?measure=kl3&presenter=1",
    "token explainer": "token_explainer",
}
SETTLED = """() => {
    const app = document.querySelector('[data-testid="stApp"]');
    const charts = [...document.querySelectorAll('[data-testid="stPlotlyChart"]')];
    return app && app.getAttribute('data-test-script-state') === 'notRunning' && !!document.querySelector('h1')
        && !document.querySelector('[data-stale="true"], [data-testid^="stSkeleton"]')
        && charts.every(c => c.querySelector('.main-svg'));
}"""
ALL = "ratio,log_ratio,k2,kl3,kl3_reverse,binary_kl,binary_tv,chi2,hellinger"
SCENARIOS = {
    "ATR-GRPO default (kl3, ratio)": {},
    "DPPO-KL (binary_kl, binary_tv, kl3), p = 0.01": {"measures": "binary_kl,binary_tv,kl3", "p": "0.01"},
    "all 9 measures": {"measures": ALL},
}
ONE_SLIDER = """
import streamlit as st
x = st.slider("x", 0.001, 0.5, 0.02, step=0.0001, key="x")
st.write(x)
"""


def deltas(n: int) -> list[float]:
    """Distinct slider positions on the slider's grid (0.0001 steps), as a drag would produce."""
    return [round(v, 4) for v in np.linspace(0.005, 0.3, n)]


def time_reruns(at: AppTest, key: str, n: int) -> list[float]:
    out = []
    for value in deltas(n):
        t0 = time.perf_counter()
        at.slider(key=key).set_value(value).run()
        out.append((time.perf_counter() - t0) * 1000)
        assert not at.exception, at.exception
    return out


def time_figures(query: dict, n: int) -> list[float]:
    measures = query.get("measures", "kl3,ratio").split(",")
    p = float(query.get("p", 0.1))
    out = []
    for delta in deltas(n):
        t0 = time.perf_counter()
        ivs, _ = clip_intervals(measures, delta, 0.2, 0.28, p)
        for fig in (
            divergence_curves(ivs, delta),
            divergence_curves(ivs, delta, log_space=True),
            interval_chart(ivs),
            surrogate_figure(ivs),
        ):
            pio.to_json(fig.to_dict(), validate=False)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def row(name: str, times: list[float], goal: bool) -> str:
    q = statistics.quantiles(times, n=10)
    verdict = ("yes" if statistics.median(times) < GOAL_MS else "NO") if goal else "—"
    return f"| {name} | {statistics.median(times):.1f} | {q[8]:.1f} | {min(times):.1f} | {len(times)} | {verdict} |"


def load_seconds(browser, url: str) -> float:
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    t0 = time.perf_counter()
    page.goto(url)
    page.wait_for_function(SETTLED, timeout=120_000, polling=50)
    elapsed = time.perf_counter() - t0
    page.close()
    return elapsed


def first_loads() -> None:
    """Each page's first load on a fresh server, and a second load once the server's caches are warm."""
    import os
    import tempfile

    from bench_arena_redraw import CHROMIUM, CHROMIUM_ARGS, free_port, start_server
    from playwright.sync_api import sync_playwright

    rows = []
    with tempfile.TemporaryDirectory(prefix="divclip-bench-") as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        for name, path in FIRST_LOADS.items():
            port = free_port()
            with open(Path(tmp) / "server.log", "w") as log:
                proc = start_server(MAIN, port, log)
                try:
                    first = load_seconds(browser, f"http://127.0.0.1:{port}/{path}")
                    again = load_seconds(browser, f"http://127.0.0.1:{port}/{path}")
                finally:
                    proc.terminate()
                    proc.wait(timeout=10)
            rows.append(f"| {name} | {first:.2f} | {again:.2f} | {'yes' if first < FIRST_LOAD_GOAL_S else 'NO'} |")
        browser.close()
    load = os.getloadavg()
    print(
        f"First load in headless chromium, fresh server per page (goal < {FIRST_LOAD_GOAL_S:g} s on a quiet "
        f"machine); {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}"
    )
    print("| page | first load s | second load s | under goal |")
    print("|---|---|---|---|")
    print("\n".join(rows))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reruns", type=int, default=30)
    ap.add_argument("--no-arena", action="store_true", help="skip the arena redraw part (needs chromium)")
    ap.add_argument("--first-load-only", action="store_true", help="only the pages' first-load times")
    args = ap.parse_args()
    if args.first_load_only:
        first_loads()
        return
    rows = []
    for name, query in SCENARIOS.items():
        at = AppTest.from_file(str(MAIN), default_timeout=60)
        at.query_params.update(query)
        at.run()  # first run: imports and caches warm up, not timed
        time_reruns(at, "explorer.delta", 3)  # warm-up reruns
        rows.append(row(f"clip explorer rerun, {name}", time_reruns(at, "explorer.delta", args.reruns), True))
        rows.append(row(f"  of which figures + JSON, {name}", time_figures(query, args.reruns), False))
    ref = AppTest.from_string(ONE_SLIDER, default_timeout=60).run()
    time_reruns(ref, "x", 3)
    rows.append(
        row("reference: one-slider script rerun (Streamlit overhead)", time_reruns(ref, "x", args.reruns), False)
    )
    print(f"Clip explorer: server-side rerun after a δ slider move (AppTest), goal median < {GOAL_MS:.0f} ms")
    print("| what | median ms | p90 ms | min ms | reruns | under goal |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    first_loads()
    if not args.no_arena:
        print()
        subprocess.run([sys.executable, str(Path(__file__).with_name("bench_arena_redraw.py"))], check=True)


if __name__ == "__main__":
    main()
