"""Load slime's policy loss from its source at the commit divclip pins (`divclip.engines.slime.COMMIT`).

slime is not on the package index: its source is a git snapshot (`SLIME_GIT`, default the mirror this project's
sessions fetch, /work/.mirror/THUDM+slime/repo; `DIVCLIP_SLIME_GIT` names another git directory). `load()` reads
`slime/utils/ppo_utils.py`, `slime/backends/megatron_utils/cp_utils.py` and `.../loss.py` (and the small
`slime/utils` modules they import) with `git show COMMIT:path` and executes that text as modules: slime's own
code at that commit, unchanged, never a copy kept here. What stands in for the rest of a training run:
* `megatron.core.mpu`: one process, no tensor/context/data parallelism (world sizes 1, groups None);
* `torch.compile` on `compute_policy_loss`, `compute_cispo_loss` and `compute_approx_kl`: the functions run as
  written (`_torchdynamo_orig_callable`), not JIT-compiled on this CPU (the same arithmetic, eager);
* `get_log_probs_and_entropy` (the model's forward from logits) is given per test: `SlimeLoss.run` hands it the
  test's log-probs, so autograd runs from them through slime's `loss_function`.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import types
from argparse import Namespace
from pathlib import Path

import torch

from divclip.engines import slime as slime_engine

SLIME_GIT = Path(os.environ.get("DIVCLIP_SLIME_GIT", "/work/.mirror/THUDM+slime/repo"))
FILES = (  # each after the ones it imports
    "slime/utils/http_utils.py",
    "slime/utils/misc.py",
    "slime/utils/types.py",
    "slime/utils/distributed_utils.py",
    "slime/utils/ppo_utils.py",
    "slime/backends/megatron_utils/cp_utils.py",
    "slime/backends/megatron_utils/loss.py",
)
PACKAGES = ("slime", "slime.utils", "slime.backends", "slime.backends.megatron_utils")
COMPILED = ("compute_policy_loss", "compute_cispo_loss", "compute_approx_kl")


def available() -> str | None:
    """None when the pinned commit can be read, else why not (the tests skip with it)."""
    if not SLIME_GIT.exists():
        return f"slime's source is not here ({SLIME_GIT}; set DIVCLIP_SLIME_GIT to a clone of THUDM/slime)"
    done = subprocess.run(
        ["git", f"--git-dir={SLIME_GIT}", "cat-file", "-t", slime_engine.COMMIT], capture_output=True, text=True
    )
    if done.returncode != 0 or done.stdout.strip() != "commit":
        return f"{SLIME_GIT} has no commit {slime_engine.COMMIT}"
    return None


def source(path: str) -> str:
    """The text of `path` at the pinned commit."""
    return subprocess.run(
        ["git", f"--git-dir={SLIME_GIT}", "show", f"{slime_engine.COMMIT}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _mpu() -> types.ModuleType:
    mpu = types.ModuleType("megatron.core.mpu")
    for name in ("context_parallel", "data_parallel", "tensor_model_parallel"):
        setattr(mpu, f"get_{name}_world_size", lambda **_: 1)
        setattr(mpu, f"get_{name}_group", lambda **_: None)
        setattr(mpu, f"get_{name}_rank", lambda **_: 0)
    return mpu


@functools.lru_cache(maxsize=1)
def load() -> dict[str, types.ModuleType]:
    """{'ppo_utils', 'cp_utils', 'loss'}: slime's modules at the pinned commit. sys.modules holds the `slime.*` and
    `megatron.*` names only while they execute (slime's absolute imports resolve through it), then as before."""
    saved = {n: m for n, m in sys.modules.items() if n.split(".")[0] in ("slime", "megatron")}
    megatron, core, mpu = types.ModuleType("megatron"), types.ModuleType("megatron.core"), _mpu()
    megatron.__path__, core.__path__, core.mpu = [], [], mpu
    sys.modules.update({"megatron": megatron, "megatron.core": core, "megatron.core.mpu": mpu})
    out = {}
    try:
        for name in PACKAGES:
            pkg = types.ModuleType(name)
            pkg.__path__ = []
            sys.modules[name] = pkg
        for path in FILES:
            name = path[: -len(".py")].replace("/", ".")
            module = types.ModuleType(name)
            module.__file__ = f"slime@{slime_engine.COMMIT[:8]}:{path}"
            module.__package__ = name.rpartition(".")[0]
            sys.modules[name] = module
            exec(compile(source(path), module.__file__, "exec"), module.__dict__)  # noqa: S102 - slime's source
            if path.endswith("ppo_utils.py"):
                for fn in COMPILED:  # before loss.py binds them by `from ... import`
                    setattr(module, fn, getattr(module, fn)._torchdynamo_orig_callable)
            out[name.rpartition(".")[2]] = module
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] in ("slime", "megatron")]:
            del sys.modules[name]
        sys.modules.update(saved)
    return out


def slime_args(settings: dict) -> Namespace:
    """slime's `args` for `settings` ({flag: value}, typed as slime's parser types them): every flag divclip
    reads at its slime default
    (divclip.engines.slime.KEYS, checked against slime's arguments.py by tests/engines/test_slime.py) unless set,
    `--eps-clip-high` None -> `--eps-clip` (slime's arguments.py: `if args.eps_clip_high is None`), and the
    options the loss reads that divclip does not (their slime defaults)."""
    values = {flag: key.default for flag, key in slime_engine.KEYS.items()}
    kinds = {"float": float, "int": int, "bool": bool, "str": str}  # argparse's type= (store_true: bool)
    values.update({flag: kinds[slime_engine.KEYS[flag].kind](v) for flag, v in settings.items()})
    args = Namespace(**{flag[2:].replace("-", "_"): v for flag, v in values.items()})
    if args.eps_clip_high is None:
        args.eps_clip_high = args.eps_clip
    args.calculate_per_token_loss = bool(args.calculate_per_token_loss)
    for name, default in (
        ("use_opsm", False),
        ("opsm_delta", 1e-4),
        ("get_mismatch_metrics", False),
        ("recompute_loss_function", False),
        ("allgather_cp", False),
        ("log_probs_chunk_size", -1),
    ):
        if not hasattr(args, name):
            setattr(args, name, default)
    return args


def run(settings: dict, log_prob, old_log_prob, advantages, mask, rollout_log_prob=None):
    """slime's loss for one micro-batch: each row of the (B, T) tensors is one sample of response length T whose
    loss mask is that row of `mask` (a padded or removed token is a 0 there). Returns (loss, metrics), loss being
    what the optimizer sees: `loss_function`'s loss divided by its normaliser (Megatron divides the per-token
    loss by the step's num_tokens; the per-sample loss is already divided by the step's sample count)."""
    mods = load()
    loss_mod = mods["loss"]
    args = slime_args(settings)
    rows, width = log_prob.shape
    per_row = list(log_prob.unbind(0))
    batch = {
        "advantages": list(advantages.unbind(0)),
        "log_probs": list(old_log_prob.unbind(0)),
        "response_lengths": [width] * rows,
        "total_lengths": [width + 1] * rows,
        "loss_masks": [m.to(torch.int) for m in mask.unbind(0)],
        "rollout_mask_sums": mask.to(torch.int).sum(-1).to(torch.float32),
        "unconcat_tokens": [None] * rows,
    }
    if rollout_log_prob is not None:
        batch["rollout_log_probs"] = list(rollout_log_prob.unbind(0))

    def forward(logits, **_):  # the model's log-probs: the test's own tensor, so autograd reaches it
        return None, {"log_probs": per_row, "entropy": [torch.zeros_like(r) for r in per_row]}

    saved = loss_mod.get_log_probs_and_entropy, loss_mod.get_rollout_top_p_logprob_kwargs
    loss_mod.get_log_probs_and_entropy, loss_mod.get_rollout_top_p_logprob_kwargs = forward, lambda *a: {}
    try:
        loss, normaliser, log = loss_mod.loss_function(
            args, batch, num_microbatches=1, step_global_batch_size=rows, logits=torch.zeros(1, 1, 1)
        )
    finally:
        loss_mod.get_log_probs_and_entropy, loss_mod.get_rollout_top_p_logprob_kwargs = saved
    return loss / normaliser, dict(zip(log["keys"], log["values"][1:].tolist()))
