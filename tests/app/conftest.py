"""Fixtures for the app tests: AppTest runners, and for browser tests a live server plus headless chromium.

Browser tests drive Debian's /usr/bin/chromium through Playwright (never a downloaded browser) against
`streamlit run app/main.py` on a free port, and save screenshots under test-artifacts/ (gitignored). Under
pytest-xdist each worker process starts its own servers; their log files carry the worker's name
(`worker_file`), and every screenshot name is written by one test only.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAIN = REPO / "app" / "main.py"
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
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
SERVER_START_TIMEOUT = 90.0  # seconds; the 2-core CI machine is shared


def worker_file(name: str) -> str:
    """name with this pytest-xdist worker's id before the suffix ("streamlit-server-gw1.log"), so two worker
    processes never write the same file under test-artifacts/; name itself outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker:
        return name
    stem, dot, suffix = name.rpartition(".")
    return f"{stem}-{worker}{dot}{suffix}" if dot else f"{name}-{worker}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with status {proc.returncode} before serving {url}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                if resp.status == 200 and resp.read().strip() == b"ok":
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"streamlit did not serve {url} within {timeout:.0f} s")


def _die_with_parent(parent_pid: int):
    """preexec_fn for a test server: Linux delivers SIGTERM to it when the process that started it dies, so an
    interrupted pytest (Ctrl-C, a killed xdist worker) leaves no streamlit server behind (two stayed orphaned)."""

    def setup():
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return setup


@contextlib.contextmanager
def serve_app(log_name: str = "streamlit-server.log", env: dict | None = None):
    """`streamlit run app/main.py` on a free port; yields its base URL and stops the server on exit.

    env: extra environment variables for the server (e.g. DIVCLIP_ARENA_WORKERS). The server's output goes to
    test-artifacts/log_name, with the xdist worker's id in the name under pytest-xdist."""
    port = _free_port()
    log = ARTIFACTS / worker_file(log_name)
    ARTIFACTS.mkdir(exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(MAIN),
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent(os.getpid())
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, SERVER_START_TIMEOUT)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def app_url():
    """Base URL of `streamlit run app/main.py` on a free port, for the whole session."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: the browser tests need Debian's chromium (make browser)")
    with serve_app() as url:
        yield url


@pytest.fixture
def one_worker_app_url():
    """Base URL of a server of its own, started for one test, whose toy-arena pool has exactly one worker process
    (the queue test). No page request has reached it yet: the test's first page is also the cold-server deep
    link check (test_browser.assert_router_page)."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: the browser tests need Debian's chromium (make browser)")
    with serve_app("streamlit-server-one-worker.log", env={"DIVCLIP_ARENA_WORKERS": "1"}) as url:
        yield url


@pytest.fixture(scope="session")
def browser(app_url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1500, "height": 1000}, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
