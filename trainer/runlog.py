"""Per-step metrics to metrics.jsonl (one object a line, appended and flushed each step) and metrics.csv
(rewritten atomically each step with the union of all keys as columns), plus a progress bar."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from pathlib import Path

from divclip.trainer.checkpoint import write_text_atomic


def _clean(value):
    """JSON-safe: NaN/inf become None (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def jsonl_text(history: list[dict]) -> str:
    """metrics.jsonl's text for `history` (one JSON object a line)."""
    return "".join(json.dumps({k: _clean(v) for k, v in row.items()}) + "\n" for row in history)


class MetricsLog:
    """The metrics history of a run, mirrored to `output_dir` when one is given."""

    def __init__(self, output_dir=None, history: list[dict] | None = None):
        self.history: list[dict] = list(history or [])
        self.dir = None if output_dir is None else Path(output_dir)
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            # A resumed run starts from its checkpoint's rows (the trainer first moves different old files aside).
            write_text_atomic(self.dir / "metrics.jsonl", jsonl_text(self.history))
            self._write_csv()

    def log(self, row: dict):
        row = {k: _clean(v) for k, v in row.items()}
        self.history.append(row)
        if self.dir is None:
            return
        with open(self.dir / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        self._write_csv()

    def _write_csv(self):
        columns = list(dict.fromkeys(k for row in self.history for k in row))
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(self.history)
        write_text_atomic(self.dir / "metrics.csv", buf.getvalue())


class Progress:
    """A tqdm bar over RL steps on stderr (silent when disabled)."""

    def __init__(self, total: int, initial: int, enabled: bool, desc: str = "rl"):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, unit="step", file=sys.stderr, dynamic_ncols=True)

    def update(self, row: dict):
        if self.bar is None:
            return
        shown = {
            "reward": row.get("reward/mean"),
            "clip": row.get("clip/clipfrac"),
            "acc": row.get("eval/accuracy"),
            "loss": row.get("sft/loss"),
        }
        self.bar.set_postfix({k: f"{v:.3f}" for k, v in shown.items() if v is not None}, refresh=False)
        self.bar.update(1)

    def close(self):
        if self.bar is not None:
            self.bar.close()
