"""A toy-arena run on a background thread, so the page keeps redrawing (and can stop it) while it trains.

The page keeps one `ArenaRun` in `st.session_state`; a fragment polls it every half second and draws
`run.result`, the latest `ArenaResult` that `toy_envs.iter_arena` yielded. The thread never touches Streamlit:
it only replaces `result` (one reference assignment, atomic under the GIL) and sets `done` last. Stop is a
`threading.Event` that `iter_arena` checks before every step. A run whose page nobody has drawn for
`abandon_s` seconds (the tab was closed) stops by itself, so a long run cannot keep a shared server's CPUs
busy for nobody; the page calls `seen()` on every redraw.
"""

from __future__ import annotations

import math
import os
import tempfile
import threading
import time
from dataclasses import asdict, dataclass

from divclip.toy_envs import iter_arena

TARGET_CHUNKS = 200  # yields per run: each one copies all steps so far, so the total copying stays linear
ABANDON_S = 120.0  # seconds without a redraw after which a run stops itself


@dataclass(frozen=True)
class ArenaSettings:
    """What `iter_arena` is called with (the page's widgets)."""

    env: str
    methods: tuple  # labels (preset names, 'measure:δ', …) in order
    seeds: int
    steps: int
    group_size: int
    prompts_per_step: int
    ppo_epochs: int
    lr: float

    def kwargs(self) -> dict:
        out = asdict(self)
        out["methods"] = list(self.methods)
        return out


def chunk_steps(steps: int) -> int:
    """Steps between two yields: every step for short runs, about TARGET_CHUNKS yields for long ones."""
    return max(1, math.ceil(steps / TARGET_CHUNKS))


class ArenaRun:
    """One run of `iter_arena` on a daemon thread: `result` grows while it trains; `stop()` ends it early."""

    def __init__(self, settings: ArenaSettings, every: int | None = None, abandon_s: float = ABANDON_S):
        self.settings = settings
        self.every = chunk_steps(settings.steps) if every is None else every
        self.result = None  # latest ArenaResult
        self.error: str | None = None
        self.chunks = 0  # yields seen
        self.chunk_times: list[float] = []  # time.monotonic() of each yield (benchmarks/bench_arena_redraw.py)
        self.started = self.last_seen = time.monotonic()
        self.ended: float | None = None
        self.abandon_s = abandon_s
        self._stop = threading.Event()
        self._done = threading.Event()
        self._csv: str | None = None
        # Called here, in the caller's thread: iter_arena validates every argument before it returns, so a
        # bad setting raises ValueError to the page instead of dying on the thread.
        self._iterator = iter_arena(**settings.kwargs(), every=self.every, stop=self._should_stop)
        self._thread = threading.Thread(target=self._work, name="divclip-arena", daemon=True)

    @classmethod
    def start(cls, settings: ArenaSettings, every: int | None = None, abandon_s: float = ABANDON_S) -> ArenaRun:
        run = cls(settings, every, abandon_s)
        run._thread.start()
        return run

    def _work(self) -> None:
        try:
            for result in self._iterator:
                self.result = result
                self.chunks += 1
                self.chunk_times.append(time.monotonic())
        except Exception as exc:  # noqa: BLE001 - shown on the page; the thread must not die silently
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.ended = time.monotonic()
            self._done.set()

    def _should_stop(self) -> bool:
        return self._stop.is_set() or time.monotonic() - self.last_seen > self.abandon_s

    # -- state ------------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def steps_done(self) -> int:
        return 0 if self.result is None else self.result.steps_done

    @property
    def elapsed(self) -> float:
        return (self.ended if self.ended is not None else time.monotonic()) - self.started

    @property
    def abandoned(self) -> bool:
        """Stopped because nobody drew the page for abandon_s seconds (not by Stop)."""
        return self.result is not None and self.result.stopped and not self._stop.is_set()

    def seen(self) -> None:
        """The page drew this run: it is still wanted."""
        self.last_seen = time.monotonic()

    def stop(self) -> None:
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the thread has finished (True) or `timeout` seconds passed (False)."""
        return self._done.wait(timeout)

    def csv(self) -> str:
        """The result so far as `ArenaResult.to_csv` writes it (one row per method, seed, step); kept once done."""
        if self._csv is not None:
            return self._csv
        result, done = self.result, self.done
        if result is None:
            return ""
        fd, path = tempfile.mkstemp(suffix=".csv", prefix="divclip-arena-")
        os.close(fd)
        try:
            result.to_csv(path)
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        finally:
            os.unlink(path)
        if done:
            self._csv = text
        return text
