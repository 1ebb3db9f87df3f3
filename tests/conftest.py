"""Suite-wide settings: the Hypothesis profile, and how pytest-xdist shares the machine.

The suite runs in parallel (`-n auto` in pyproject's addopts: one worker per CPU, at most MAX_WORKERS); pass
`-n 0` to run in one process (e.g. for a debugger). Each worker's torch gets its share of the cores (torch's
own default is every core per process, which oversubscribes the machine when two workers train at once).
"""

import os

MAX_WORKERS = 4  # each worker may start a Streamlit server and a chromium; more would only add memory


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def pytest_xdist_auto_num_workers(config):
    return max(1, min(_cpus(), MAX_WORKERS))


_workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
if _workers:  # set before any test module imports torch; subprocesses the tests start inherit it
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, str(max(1, _cpus() // int(_workers))))

# Hypothesis profile for CI: deterministic, moderate example counts, no deadline (shared 2-core machines).
from hypothesis import settings  # noqa: E402

settings.register_profile("divclip", max_examples=60, deadline=None, derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "divclip"))
