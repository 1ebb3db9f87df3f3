"""Toy problems where every quantity is known, to watch clipping methods diverge in seconds.

    from toy_envs import run_arena
    res = run_arena("sparse", "grpo,dapo,atr", seeds=16, steps=200)
    res.band("expected_reward")            # across-seed mean and 95 % band per method

Environments (`ENVS`, `make_env`): `Bandit`, `SparseCategorical`, `TokenSequence`, batched over seeds.
`run_arena` / `iter_arena` train methods × seeds with `theory.losses.policy_loss`; `toy_envs.report` turns a
result into the CSV / HTML / markdown claims report of `divclip toy`; `toy_envs.reference.reference_run` is
the same training as a plain single-seed loop (the arena's test and benchmark reference).

Names are imported lazily so that `import toy_envs.cli` (the CLI parser) does not import torch.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "ToyEnv": "toy_envs.base",
    "pass_at_k": "toy_envs.base",
    "PASS_AT_K": "toy_envs.base",
    "Bandit": "toy_envs.categorical",
    "SparseCategorical": "toy_envs.categorical",
    "TokenSequence": "toy_envs.sequence",
    "ENVS": "toy_envs.registry",
    "make_env": "toy_envs.registry",
    "run_arena": "toy_envs.arena",
    "iter_arena": "toy_envs.arena",
    "ArenaResult": "toy_envs.result",
    "METRICS": "toy_envs.result",
    "resolve_methods": "toy_envs.methods",
    "method_spec": "toy_envs.methods",
    "summarize": "toy_envs.report",
    "claims": "toy_envs.report",
    "claims_markdown": "toy_envs.report",
    "metric_figure": "toy_envs.report",
    "report_figure": "toy_envs.report",
    "report_html": "toy_envs.report",
    "write_report": "toy_envs.report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'toy_envs' has no attribute {name!r}")
