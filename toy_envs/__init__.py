"""Toy problems where every quantity is known, to watch clipping methods diverge in seconds.

    from divclip.toy_envs import run_arena
    res = run_arena("sparse", "grpo,dapo,atr", seeds=16, steps=200)
    res.band("expected_reward")            # across-seed mean and 95 % band per method

Environments (`ENVS`, `make_env`): `Bandit`, `SparseCategorical`, `TokenSequence`, batched over seeds.
`run_arena` / `iter_arena` train methods × seeds with `divclip.theory.losses.policy_loss`; `report` turns a
result into the CSV / HTML / markdown claims report of `divclip toy`; `reference.reference_run` is
the same training as a plain single-seed loop (the arena's test and benchmark reference).

Names are imported lazily so that `import divclip.cli.toy` (the CLI parser) does not import torch.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "ToyEnv": "divclip.toy_envs.base",
    "pass_at_k": "divclip.toy_envs.base",
    "PASS_AT_K": "divclip.toy_envs.base",
    "Bandit": "divclip.toy_envs.categorical",
    "SparseCategorical": "divclip.toy_envs.categorical",
    "TokenSequence": "divclip.toy_envs.sequence",
    "ENVS": "divclip.toy_envs.registry",
    "make_env": "divclip.toy_envs.registry",
    "run_arena": "divclip.toy_envs.arena",
    "iter_arena": "divclip.toy_envs.arena",
    "ArenaResult": "divclip.toy_envs.result",
    "METRICS": "divclip.toy_envs.result",
    "summarize": "divclip.toy_envs.report",
    "claims": "divclip.toy_envs.report",
    "claims_markdown": "divclip.toy_envs.report",
    "metric_figure": "divclip.toy_envs.report",
    "report_figure": "divclip.toy_envs.report",
    "report_html": "divclip.toy_envs.report",
    "write_report": "divclip.toy_envs.report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'toy_envs' has no attribute {name!r}")
