"""Shared helpers for the `divclip check` tests (imported by them): fixture paths, byte writers for every rollout
format, a realistic random batch."""

import io
import json
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).parent / "fixtures"
PAGE = Path(__file__).resolve().parents[2] / "app" / "views" / "sanity_check.py"
MAIN = Path(__file__).resolve().parents[2] / "app" / "main.py"


def sanity_page(timeout: float = 120):
    """An AppTest of the sanity page through app/main.py's router, not yet run: its links to other pages (the
    token explainer, the proof) need st.navigation, which a page file run alone does not have."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(MAIN), default_timeout=timeout)
    at.switch_page("views/sanity_check.py")
    return at


def npz_bytes(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def safetensors_bytes(**arrays) -> bytes:
    import torch
    from safetensors.torch import save

    return save({k: torch.as_tensor(v) for k, v in arrays.items()})


def parquet_bytes(columns: dict) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf)
    return buf.getvalue()


def jsonl_bytes(rows: list) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def random_batch(seed=0, b=24, t=40, dtype=np.float32, log_prob=True, sigma=0.15):
    """A realistic batch: confident and rare tokens, GRPO-style per-sequence advantages (some exactly 0),
    ragged lengths, log-probs <= 0."""
    rng = np.random.default_rng(seed)
    p = np.clip(rng.beta(0.6, 0.15, size=(b, t)), 1e-5, 1 - 1e-6)
    old = np.log(p)
    adv = np.repeat(rng.choice([-1.2, -0.4, 0.0, 0.5, 1.1], size=b)[:, None], t, axis=1)
    mask = (np.arange(t)[None, :] < rng.integers(3, t + 1, size=b)[:, None]).astype(dtype)
    out = {"old_log_prob": old.astype(dtype), "advantages": adv.astype(dtype), "response_mask": mask}
    if log_prob:
        out["log_prob"] = np.minimum(old + sigma * rng.standard_normal((b, t)), -1e-7).astype(dtype)
    return out
