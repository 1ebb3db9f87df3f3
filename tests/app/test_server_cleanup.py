"""An interrupted test run leaves no streamlit server behind (issue 26 item 8: after Ctrl-C two stayed orphaned).

A child interpreter starts a server through the test fixtures' own `serve_app`, reports its pid and is then
killed with SIGKILL (the worst case: no fixture teardown runs at all). The server must go with it."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

CHILD = f"""
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("app_conftest", {str(HERE / "conftest.py")!r})
conftest = importlib.util.module_from_spec(spec)
spec.loader.exec_module(conftest)
with conftest.serve_app("streamlit-server-cleanup.log") as url:
    import glob
    kids = [int(pid) for path in glob.glob("/proc/self/task/*/children") for pid in open(path).read().split()]
    servers = [pid for pid in kids if b"streamlit" in open(f"/proc/{{pid}}/cmdline", "rb").read()]
    print(servers[0], flush=True)
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return "\\nState:\\tZ" not in fh.read()  # a zombie has exited
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_a_killed_test_process_takes_its_server_with_it():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        assert line.strip().isdigit(), f"the child did not start a server (got {line!r})"
        server = int(line)
        assert _alive(server)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(server) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(server), f"streamlit server {server} outlived the process that started it"
    finally:
        child.kill()
