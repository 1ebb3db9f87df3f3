"""Toy-arena runs in a bounded pool of worker processes shared by every session of the server.

A run used to train on a thread inside the Streamlit server, where it held the GIL and starved every other
page (issue 15: with 6 runs training, a 7th visitor's clip explorer took 93 s to load on 2 cores). Now:

- `ArenaRun.start` validates the settings in the caller (iter_arena raises ValueError naming the argument
  before it trains) and queues the run in the module-level `ArenaPool` (`get_pool()`), one per server.
- The pool keeps at most `size` worker processes (`DIVCLIP_ARENA_WORKERS`, default `default_workers()`: 1 on
  a 2-core machine). Each is `python -m divclip.app.arena_runner`, started on first need (not forked from
  the server: Streamlit replaces `__main__` with the page script, which multiprocessing's spawn would
  re-run), lowered to nice `NICE`, and kept for later runs. A run waits in a FIFO queue until a worker is free;
  the page shows its place in the queue.
- The worker runs `divclip.toy_envs.iter_arena` and sends every yield's new steps (one block of metric
  columns) back over a pipe; a dispatcher thread in the server copies them into the run's buffers, so
  `run.result` grows as before and the live curves keep working. The server process only copies arrays.
- Stop sends a cancel message; the worker's `stop` check sees it before the next step. A run whose session
  has closed (the tab was closed: Streamlit's runtime no longer lists the session for `GONE_S` seconds) or
  whose page has not polled it for `abandon_s` seconds (the visitor left the page) is cancelled the same
  way, queued or running, so it frees its worker. The page calls `seen()` on every redraw.
- A worker that dies fails its run with a readable error and is replaced on the next run. Workers exit
  when the server does (their command pipe closes).
"""

from __future__ import annotations

import collections
import math
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection, wait

import numpy as np

from divclip.toy_envs import ArenaResult, iter_arena

TARGET_CHUNKS = 200  # yields per run: each one sends only the new steps, so the total traffic stays linear
ABANDON_S = 30.0  # seconds without a redraw after which a run is cancelled (the page polls every 0.4-1 s)
GONE_S = 5.0  # seconds a run's Streamlit session may be disconnected (a reconnect) before the run is cancelled
WORKERS_ENV = "DIVCLIP_ARENA_WORKERS"
MAX_WORKERS = 64
NICE = 10  # worker processes yield the CPU to the server's page scripts
_TICK_S = 0.25  # the dispatcher's housekeeping interval (cancellations, dead workers)


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


def default_workers(cpus: int | None = None) -> int:
    """One worker per core but one, kept for the server's page scripts: 1 on 2 cores, at most 4."""
    cpus = (os.cpu_count() or 1) if cpus is None else cpus
    return max(1, min(4, cpus - 1))


def configured_workers(environ=None) -> int:
    """The pool size: `DIVCLIP_ARENA_WORKERS` if set (an integer 1..MAX_WORKERS), else `default_workers()`."""
    raw = (os.environ if environ is None else environ).get(WORKERS_ENV, "").strip()
    if not raw:
        return default_workers()
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_WORKERS:
        raise ValueError(f"{WORKERS_ENV} must be an integer from 1 to {MAX_WORKERS}, got {raw!r}")
    return n


def _session_id() -> str | None:
    """The calling Streamlit session's id (None outside a script run)."""
    try:
        from streamlit.runtime.scriptrunner import get_script_run_ctx
    except ImportError:  # pragma: no cover - streamlit is a dependency of the app
        return None
    ctx = get_script_run_ctx(suppress_warning=True)
    return None if ctx is None else ctx.session_id


def _session_active(session_id: str) -> bool | None:
    """Whether the server still has this session connected; None when there is no server (AppTest, scripts)."""
    try:
        from streamlit.runtime import Runtime
    except ImportError:  # pragma: no cover
        return None
    if not Runtime.exists():
        return None
    return Runtime.instance().is_active_session(session_id)


class ArenaRun:
    """One queued or running `iter_arena` call: `result` grows while it trains; `stop()` ends it early.

    state: "queued" (waiting for a worker), "running" (a worker has it) or "done" (finished, stopped,
    cancelled or failed: see `result.stopped`, `error`, `abandoned`).
    """

    def __init__(
        self,
        settings: ArenaSettings,
        every: int | None = None,
        abandon_s: float = ABANDON_S,
        session_id: str | None = None,
    ):
        self.settings = settings
        self.every = chunk_steps(settings.steps) if every is None else every
        if not (isinstance(abandon_s, (int, float)) and abandon_s > 0):
            raise ValueError(f"abandon_s must be a positive number of seconds, got {abandon_s!r}")
        # iter_arena validates every argument before it returns (training starts only when iterated), so a
        # bad setting raises ValueError here, to the page, not in a worker.
        iter_arena(**settings.kwargs(), every=self.every).close()
        self.session_id = session_id
        self.abandon_s = float(abandon_s)
        self.result = None  # latest ArenaResult
        self.error: str | None = None
        self.cancel_reason: str | None = None  # why the pool cancelled it (tab closed, page left)
        self.state = "queued"
        self.chunks = 0  # blocks received
        self.chunk_times: list[float] = []  # time.monotonic() of each block (benchmarks/bench_arena_redraw.py)
        self.submitted = self.last_seen = time.monotonic()
        self.started: float | None = None  # when a worker took it
        self.ended: float | None = None
        self._stop = threading.Event()
        self._done = threading.Event()
        self._csv: str | None = None
        self._head: dict | None = None
        self._buf: np.ndarray | None = None  # (metrics, methods, seeds, total steps), filled as blocks arrive
        self._names: tuple = ()
        self._pool: ArenaPool | None = None
        self._gone_since: float | None = None  # when the pool first saw its session disconnected

    @classmethod
    def start(
        cls,
        settings: ArenaSettings,
        every: int | None = None,
        abandon_s: float = ABANDON_S,
        pool: ArenaPool | None = None,
    ) -> ArenaRun:
        """Validate and queue a run in `pool` (default: the server's `get_pool()`)."""
        run = cls(settings, every, abandon_s, session_id=_session_id())
        (get_pool() if pool is None else pool).submit(run)
        return run

    # -- filled in by the pool's dispatcher thread -------------------------------------------------
    def _on_head(self, head: dict, names: tuple) -> None:
        methods, seeds, total = len(head["methods"]), len(head["seeds"]), head["total_steps"]
        self._head, self._names = head, names
        self._buf = np.full((len(names), methods, seeds, total), np.nan)

    def _on_block(self, start: int, block: np.ndarray, stopped: bool) -> None:
        end = start + block.shape[-1]
        self._buf[..., start:end] = block
        metrics = {}
        for i, name in enumerate(self._names):
            view = self._buf[i, ..., :end]
            view.flags.writeable = False  # a view: later blocks write further columns only
            metrics[name] = view
        self.result = ArenaResult(**self._head, metrics=metrics, stopped=stopped)
        self.chunks += 1
        self.chunk_times.append(time.monotonic())

    def _finish(self, error: str | None = None) -> None:
        if error is not None and self.error is None:
            self.error = error
        self.state = "done"
        self.ended = time.monotonic()
        self._done.set()

    # -- state ------------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def queued(self) -> bool:
        return self.state == "queued"

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def steps_done(self) -> int:
        return 0 if self.result is None else self.result.steps_done

    @property
    def elapsed(self) -> float:
        """Seconds since a worker took the run (0 while queued)."""
        if self.started is None:
            return 0.0
        return (self.ended if self.ended is not None else time.monotonic()) - self.started

    @property
    def waited(self) -> float:
        """Seconds the run waited in the queue (so far, while queued)."""
        end = self.started if self.started is not None else (self.ended or time.monotonic())
        return end - self.submitted

    @property
    def abandoned(self) -> bool:
        """Cancelled by the pool because nobody was looking (tab closed, page left), not by Stop."""
        return self.cancel_reason is not None and not self._stop.is_set()

    def seen(self) -> None:
        """The page drew this run: it is still wanted."""
        self.last_seen = time.monotonic()

    def stop(self) -> None:
        self._stop.set()
        if self._pool is not None:
            self._pool.cancel(self)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run has ended (True) or `timeout` seconds passed (False)."""
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


class _Worker:
    """One worker process and the two pipes to it (commands in, results out)."""

    def __init__(self, nice: int):
        cmd_r, cmd_w = os.pipe()
        out_r, out_w = os.pipe()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "divclip.app.arena_runner", str(cmd_r), str(out_w), str(nice)],
                pass_fds=(cmd_r, out_w),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        finally:
            os.close(cmd_r)
            os.close(out_w)
        self.cmd = Connection(cmd_w, readable=False)
        self.out = Connection(out_r, writable=False)
        self.run: ArenaRun | None = None
        self.job = 0

    def send(self, msg) -> bool:
        try:
            self.cmd.send(msg)
            return True
        except OSError:
            return False

    def close(self) -> None:
        for conn in (self.cmd, self.out):
            try:
                conn.close()
            except OSError:
                pass


class ArenaPool:
    """A FIFO queue of runs and at most `size` worker processes, shared by all sessions of a server."""

    def __init__(self, size: int | None = None, nice: int = NICE):
        self.size = configured_workers() if size is None else size
        if not (isinstance(self.size, int) and 1 <= self.size <= MAX_WORKERS):
            raise ValueError(f"size must be an integer from 1 to {MAX_WORKERS}, got {self.size!r}")
        self.nice = nice
        self._lock = threading.Lock()
        self._queue: collections.deque[ArenaRun] = collections.deque()
        self._workers: list[_Worker] = []
        self._jobs = 0
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._thread: threading.Thread | None = None
        self._closed = False

    # -- what sessions call --------------------------------------------------------------------------
    def submit(self, run: ArenaRun) -> None:
        if self._closed:
            raise RuntimeError("the arena pool is closed")
        run._pool = self
        with self._lock:
            self._queue.append(run)
            if self._thread is None:
                self._thread = threading.Thread(target=self._dispatch, name="divclip-arena-pool", daemon=True)
                self._thread.start()
        self._wake()

    def cancel(self, run: ArenaRun, reason: str | None = None) -> None:
        """End `run`: out of the queue if it waits, a cancel message to its worker if it trains."""
        with self._lock:
            if run.done:
                return
            if reason is not None and run.cancel_reason is None:
                run.cancel_reason = reason
            if run in self._queue:
                self._queue.remove(run)
                run._finish()
                return
            for w in self._workers:
                if w.run is run:
                    w.send(("cancel", w.job))
        self._wake()

    def position(self, run: ArenaRun) -> int | None:
        """1-based place of a queued run in the queue (None when it is not waiting)."""
        with self._lock:
            try:
                return self._queue.index(run) + 1
            except ValueError:
                return None

    def counts(self) -> tuple[int, int]:
        """(runs training, runs waiting)."""
        with self._lock:
            return sum(w.run is not None for w in self._workers), len(self._queue)

    def close(self) -> None:
        """Cancel everything and stop the workers (tests and benchmarks; a server's pool lives as long as it)."""
        self._closed = True
        with self._lock:
            queued, self._queue = list(self._queue), collections.deque()
            workers = list(self._workers)
        for run in queued:
            run._finish()
        for w in workers:
            w.send(None)
        self._wake()
        for w in workers:
            try:
                w.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()

    # -- the dispatcher thread -------------------------------------------------------------------------
    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def _dispatch(self) -> None:
        while True:
            with self._lock:
                workers = list(self._workers)
            if self._closed and not workers:
                return
            ready = wait([w.out for w in workers] + [self._wake_r], timeout=_TICK_S)
            if self._wake_r in ready:
                try:
                    os.read(self._wake_r, 4096)
                except BlockingIOError:
                    pass
            for w in workers:
                if w.out in ready:
                    self._drain(w)
            self._housekeeping()
            if self._closed:
                with self._lock:
                    for w in self._workers:
                        if w.run is not None:
                            w.run._finish("the arena pool was closed")
                        w.close()
                    self._workers = []
                return

    def _drain(self, w: _Worker) -> None:
        try:
            while w.out.poll():
                self._handle(w, w.out.recv())
        except (EOFError, OSError, pickle.UnpicklingError):
            self._lost(w)

    def _handle(self, w: _Worker, msg) -> None:
        kind, job = msg[0], msg[1]
        run = w.run
        if run is None or job != w.job:
            return  # a late message of a run already given up
        if kind == "head":
            run._on_head(msg[2], msg[3])
        elif kind == "block":
            run._on_block(msg[2], msg[3], msg[4])
        elif kind == "end":
            with self._lock:
                w.run = None
            run._finish(msg[2])

    def _lost(self, w: _Worker) -> None:
        """The worker's pipe closed: it died (killed, out of memory). Its run fails; it is not reused."""
        try:
            status = w.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            w.proc.kill()
            status = w.proc.wait()
        with self._lock:
            if w in self._workers:
                self._workers.remove(w)
            run, w.run = w.run, None
        w.close()
        if run is not None:
            run._finish(f"the worker process training this run exited (status {status})")

    def _housekeeping(self) -> None:
        now = time.monotonic()
        with self._lock:
            runs = list(self._queue) + [w.run for w in self._workers if w.run is not None]
        for run in runs:
            reason = self._unwanted(run, now)
            if reason is not None:
                self.cancel(run, reason)
        with self._lock:
            for w in [w for w in self._workers if w.proc.poll() is not None and w.run is None]:
                self._workers.remove(w)  # died idle
                w.close()
            while self._queue and not self._closed:
                idle = next((w for w in self._workers if w.run is None), None)
                if idle is None and len(self._workers) < self.size:
                    try:
                        idle = _Worker(self.nice)
                    except OSError as exc:
                        run = self._queue.popleft()
                        run._finish(f"could not start a worker process: {exc}")
                        continue
                    self._workers.append(idle)
                if idle is None:
                    break
                run = self._queue.popleft()
                self._jobs += 1
                idle.job, idle.run = self._jobs, run
                run.state, run.started = "running", time.monotonic()
                kwargs = run.settings.kwargs() | {"every": run.every}
                if not idle.send(("run", idle.job, kwargs)):
                    idle.run = None
                    run._finish("could not reach the worker process")
                elif run._stop.is_set():
                    idle.send(("cancel", idle.job))

    def _unwanted(self, run: ArenaRun, now: float) -> str | None:
        if run._stop.is_set():
            return None
        if now - run.last_seen > run.abandon_s:
            return f"nobody had looked at the page for {run.abandon_s:g} s"
        if run.session_id is not None:
            active = _session_active(run.session_id)
            if active is False:
                gone = run._gone_since
                if gone is None:
                    run._gone_since = now
                elif now - gone > GONE_S:
                    return "its browser tab was closed"
            else:
                run._gone_since = None
        return None


_POOL: ArenaPool | None = None
_POOL_LOCK = threading.Lock()


def get_pool() -> ArenaPool:
    """The server's pool, created on first use with `configured_workers()` workers."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ArenaPool()
        return _POOL


# ------------------------------------------------------------------------------------------ worker process
def _worker_main(cmd_fd: int, out_fd: int, nice: int) -> None:
    """Run jobs from the server until its command pipe closes: ("run", job, kwargs) trains one run,
    ("cancel", job) stops it before its next step, None ends the worker."""
    from divclip.toy_envs.result import METRICS

    try:
        os.nice(nice)
    except OSError:
        pass
    cmd, out = Connection(cmd_fd, writable=False), Connection(out_fd, readable=False)
    jobs: collections.deque = collections.deque()
    have_job = threading.Condition()
    cancelled: set[int] = set()
    alive = [True]

    def listen() -> None:  # commands arrive while a run trains: a thread reads them
        while True:
            try:
                msg = cmd.recv()
            except (EOFError, OSError):
                msg = None
            with have_job:
                if msg is None:
                    alive[0] = False
                elif msg[0] == "cancel":
                    cancelled.add(msg[1])
                else:
                    jobs.append(msg)
                have_job.notify()
            if msg is None:
                return

    threading.Thread(target=listen, daemon=True).start()
    while True:
        with have_job:
            while alive[0] and not jobs:
                have_job.wait()
            if not alive[0]:
                return
            _, job, kwargs = jobs.popleft()
        error, sent, head_sent = None, 0, False
        try:
            results = iter_arena(**kwargs, stop=lambda job=job: job in cancelled or not alive[0])
            for result in results:
                if not head_sent:
                    head = {
                        k: getattr(result, k)
                        for k in (
                            "env",
                            "env_config",
                            "methods",
                            "specs",
                            "seeds",
                            "config",
                            "total_steps",
                            "loss_info",
                            "best_reward",
                        )
                    }
                    out.send(("head", job, head, METRICS))
                    head_sent = True
                done = result.steps_done
                block = np.stack([result.metrics[k][..., sent:done] for k in METRICS])
                out.send(("block", job, sent, block, result.stopped))
                sent = done
        except (BrokenPipeError, ConnectionResetError):
            return
        except Exception as exc:  # noqa: BLE001 - reported to the page; the worker must live on
            error = f"{type(exc).__name__}: {exc}"
        try:
            out.send(("end", job, error))
        except OSError:
            return
        cancelled.discard(job)


if __name__ == "__main__":
    _worker_main(*(int(a) for a in sys.argv[1:4]))
