"""Toy arena page: how often the browser shows new curves while a run trains (goal: every 0.5 s or better).

    python benchmarks/bench_arena_redraw.py            # three cases, about a minute on 2 busy cores
    python benchmarks/bench_arena_redraw.py --quick    # one short case

Measured end to end in a real session: `streamlit run` on a free port (a temporary router holding only
app/views/toy_arena.py, so the benchmark does not depend on app/main.py's page list) and headless Debian
chromium through Playwright. The page is opened with its settings in the URL, Run is clicked, and a
MutationObserver in the page records the time of every change of the progress text, "Training: step s of
S · t s", until the run finishes. The text carries the elapsed time, so every fragment rerun that reaches the
screen changes it: the intervals between changes are the redraw intervals the user sees. Changes of the step
count s are the intervals at which new data (a new `iter_arena` chunk) reached the screen. Timestamps are the
browser's own (`performance.now()`), so Playwright's polling does not enter them.

Reported per case: how long the run was shown running, number of redraws, median / 90th percentile / max
interval between redraws, median interval between data updates, the page's chunk size (steps per
`iter_arena` yield), and how much of the run the browser's main thread spent in long tasks (> 50 ms, a
PerformanceObserver "longtask" entry: mostly plotly drawing). The frontend asks for a fragment rerun every
POLL_S = 0.4 s (app/views/toy_arena.py) by a timer, and a timer cannot fire while the main thread is busy,
so on a loaded machine the browser's drawing time, not the server, sets the interval (the server's fragment
run takes ~0.1 s). "median ≤ goal" is a strict median <= 0.5 s. Intervals depend on the machine's load;
the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

from divclip.app.arena_runner import chunk_steps

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "app" / "views" / "toy_arena.py"
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
GOAL_S = 0.5
ROUTER = """import streamlit as st
st.set_page_config(page_title="divclip", layout="wide")
st.navigation([st.Page({page!r}, title="Toy arena", default=True)]).run()
"""
CASES = [  # name, URL settings
    (
        "bandit, 3 methods × 8 seeds × 1500 steps",
        {"env": "bandit", "methods": "grpo,dapo,atr", "seeds": 8, "steps": 1500},
    ),
    (
        "sparse, 3 methods × 8 seeds × 300 steps",
        {
            "env": "sparse",
            "methods": "grpo,dapo,atr",
            "seeds": 8,
            "steps": 300,
            "group_size": 8,
            "prompts_per_step": 4,
            "ppo_epochs": 4,
            "lr": 0.1,
        },
    ),
    (
        "sequence, 3 methods × 8 seeds × 300 steps",
        {
            "env": "sequence",
            "methods": "grpo,dapo,atr",
            "seeds": 8,
            "steps": 300,
            "group_size": 8,
            "prompts_per_step": 2,
            "ppo_epochs": 4,
            "lr": 0.05,
        },
    ),
]
QUICK = [
    ("bandit, 3 methods × 8 seeds × 400 steps", {"env": "bandit", "methods": "grpo,dapo,atr", "seeds": 8, "steps": 400})
]
OBSERVE = """() => {
    window.__redraws = [];
    window.__busy = [];  // the browser's long tasks (> 50 ms on the main thread): mostly plotly drawing
    new PerformanceObserver(list => list.getEntries().forEach(e => window.__busy.push([e.startTime, e.duration])))
        .observe({entryTypes: ["longtask"]});
    const read = () => {
        const bar = document.querySelector('[data-testid="stProgress"]');
        const text = bar ? bar.innerText.trim() : null;
        const log = window.__redraws;
        if (text && (log.length === 0 || log[log.length - 1][1] !== text)) log.push([performance.now(), text]);
    };
    new MutationObserver(read).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(router: Path, port: int, log) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(router),
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2):
                return proc
        except OSError:
            time.sleep(0.3)
    proc.terminate()
    raise RuntimeError("streamlit did not start within 120 s")


def measure(page, url: str, settings: dict, timeout: float = 300.0) -> dict:
    page.goto(f"{url}/?{urlencode(settings)}")  # the only page is the default one, at the root
    run = page.get_by_role("button", name="Run")
    run.wait_for()
    page.wait_for_function(
        "() => document.querySelector('[data-testid=\"stApp\"]')"
        ".getAttribute('data-test-script-state') === 'notRunning'"
    )
    page.evaluate(OBSERVE)
    run.click()
    page.get_by_text("Finished:").wait_for(timeout=timeout * 1000)
    log = page.evaluate("() => window.__redraws")  # [[ms, text], ...]
    busy = page.evaluate("() => window.__busy")  # [[start ms, duration ms], ...]
    times = [t / 1000 for t, _ in log]
    steps = [int(text.split("step ")[1].split(" ")[0]) for _, text in log]
    redraws = [b - a for a, b in zip(times, times[1:])]
    data_times = [t for i, t in enumerate(times) if i == 0 or steps[i] != steps[i - 1]]
    updates = [b - a for a, b in zip(data_times, data_times[1:])]
    span = times[-1] - times[0] if times else 0.0
    in_run = sum(d for t, d in busy if times and times[0] <= t / 1000 <= times[-1]) / 1000
    return {
        "span": span,
        "redraws": len(times),
        "intervals": redraws,
        "updates": updates,
        "chunk": chunk_steps(int(settings["steps"])),
        "busy": in_run / span if span > 0 else float("nan"),
    }


def row(name: str, m: dict) -> str:
    iv, up = m["intervals"], m["updates"]
    if len(iv) < 2:
        return f"| {name} | {m['span']:.1f} | {m['redraws']} | — | — | — | — | {m['chunk']} | — | too short to tell |"
    p90 = statistics.quantiles(iv, n=10)[8]
    verdict = "yes" if statistics.median(iv) <= GOAL_S else "NO"
    return (
        f"| {name} | {m['span']:.1f} | {m['redraws']} | {statistics.median(iv):.2f} | {p90:.2f} | {max(iv):.2f} "
        f"| {statistics.median(up) if up else float('nan'):.2f} | {m['chunk']} | {m['busy']:.0%} | {verdict} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one short case")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    cases = QUICK if args.quick else CASES
    with tempfile.TemporaryDirectory(prefix="divclip-bench-") as tmp:
        router = Path(tmp) / "router.py"
        router.write_text(ROUTER.format(page=str(PAGE)))
        port = free_port()
        with open(Path(tmp) / "server.log", "w") as log:
            proc = start_server(router, port, log)
            try:
                with sync_playwright() as pw:
                    browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
                    page = browser.new_page(viewport={"width": 1500, "height": 1000})
                    page.set_default_timeout(120_000)
                    results = [(name, measure(page, f"http://127.0.0.1:{port}", s)) for name, s in cases]
                    browser.close()
            finally:
                proc.terminate()
                proc.wait(timeout=10)
    load = os.getloadavg()
    print(f"Toy arena page, redraws seen in headless chromium while a run trains (goal: every {GOAL_S:g} s);")
    print(f"{os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}\n")
    print(
        "| case | s shown running | redraws | median interval (s) | p90 (s) | max (s) | median data update (s) "
        "| steps per chunk | browser busy | median ≤ goal |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, m in results:
        print(row(name, m))


if __name__ == "__main__":
    main()
