"""The arena: several clipping methods × many seeds trained side by side, as one tensor program.

Per step (a GRPO iteration, the trainer's loop in miniature):
  1. each run draws `prompts_per_step` prompts and `group_size` responses per prompt from π_old;
  2. verifiable rewards -> GRPO group advantages (`divclip.theory.advantages.group_advantages`), one per response,
     broadcast to its tokens;
  3. μ = `ppo_epochs` full-batch updates against the *stored* old log-probs, so from the second epoch on
     r ≠ 1 and the clip bounds bind (with one epoch r ≡ 1 and no method differs: verl #791);
     the loss and its gradient come from `divclip.theory.losses.policy_loss`, the trainer's own code.
All methods × seeds form R = M·S runs whose parameters are stacked along dim 0 and updated by one
elementwise Adam (`divclip.toy_envs.optim`), so runs stay independent. Each epoch makes one forward pass and one
`policy_loss` call per method covering all its seeds; nothing loops over seeds.

Clip fractions per seed are read off the gradient itself: a token with A ≠ 0 whose ∂loss/∂log π is exactly
zero was clipped (docs/theory.md §1's gradient rule, whatever the measure or form), on the low side if r < 1,
A < 0, the high side if r > 1, A > 0, and by the dual clip if r > 1, A < 0.

Intersections (`kl3:0.023144&binary_tv:0.2`) run like any spec. An adaptive method (`kl3@clipfrac=0.1`) keeps
one δ per seed in a `DeltaController`, calls `policy_loss` once per seed at that δ, and steps the controller
after each update from that seed's signal; the `delta` metric records the δ each step used.

Per-step bookkeeping is batched over steps where that changes no number: the random numbers of up to 16
steps are drawn at once (`rng.uniform_steps`), and the metrics of the steps between two yields are computed
in one pass over the stacked tables (`_StepRecords`). On small problems this bookkeeping otherwise costs as
much as the update itself (benchmarks/bench_arena.py). `divclip.toy_envs.reference` is the same training as a
plain single-seed loop.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from divclip.theory.adaptive import DeltaController
from divclip.theory.advantages import NORMS as ADV_NORMS
from divclip.theory.advantages import group_advantages
from divclip.theory.losses import LOSS_AGG_MODES, policy_loss
from divclip.theory.spec import AllOf, is_adaptive, parse_methods
from divclip.toy_envs import rng
from divclip.toy_envs.base import PASS_AT_K, ToyEnv, pass_at_k
from divclip.toy_envs.optim import Adam
from divclip.toy_envs.policies import POLICIES
from divclip.toy_envs.registry import ENVS, make_env
from divclip.toy_envs.result import METRICS, ArenaResult
from divclip.toy_envs.validation import check_choice, check_int, check_real

_BLOCK_DRAWS = 2**20
_PENDING_BYTES = 2**26  # flush pending steps' metrics before their tables take more than this
_ONE = torch.ones((), dtype=torch.float64)  # d(total)/d(total), so backward() does not build it every epoch


def run_arena(
    env,
    methods,
    seeds=8,
    steps=None,
    group_size=None,
    prompts_per_step=None,
    ppo_epochs=None,
    lr=None,
    *,
    callback: Callable[[ArenaResult], object] | None = None,
    **kwargs,
) -> ArenaResult:
    """Train every method on every seed and return all metrics; `callback(partial)` every `every` steps.

    Arguments are those of `iter_arena`; settings left as None take the environment's registry defaults.
    """
    result = None
    for result in iter_arena(env, methods, seeds, steps, group_size, prompts_per_step, ppo_epochs, lr, **kwargs):
        if callback is not None:
            callback(result)
    return result


# Upper bounds of the size arguments (far past any useful toy run); combined budgets keep the arena's arrays
# (15 metrics × runs × steps, and runs × batch × horizon per step) within a few hundred MB.
MAX_SEEDS = 4096
MAX_STEPS = 100_000
MAX_GROUP_SIZE = 4096
MAX_PROMPTS_PER_STEP = 4096
MAX_PPO_EPOCHS = 100
MAX_THREADS = 256
MAX_RUN_STEPS = 2**22
"""Largest (methods × seeds) × steps: the metrics history holds 15 float64 numbers per cell."""
MAX_BATCH_TOKENS = 2**22
"""Largest (methods × seeds) × prompts_per_step × group_size × horizon: the tokens of one step, all runs."""
MAX_BATCH_LOGITS = 2**25
"""Largest (methods × seeds) × prompts_per_step × group_size × horizon × actions: the per-sample probabilities
of one step, all runs (`--env-arg arms=65536 --group-size 4096` asked for 100 GB here before this bound)."""
MAX_POLICY_PARAMS = 2**24
"""Largest (methods × seeds) × policy table size (logits, with Adam's two moments beside them)."""


def iter_arena(
    env,
    methods,
    seeds=8,
    steps=None,
    group_size=None,
    prompts_per_step=None,
    ppo_epochs=None,
    lr=None,
    *,
    loss_agg_mode: str = "token-mean",
    adv_norm: str = "std",
    policy: str = "tabular",
    every: int = 10,
    stop: threading.Event | Callable[[], bool] | None = None,
    env_kwargs: dict | None = None,
    num_threads: int | None = 1,
    loss_metrics: bool = False,
) -> Iterator[ArenaResult]:
    """Yield an `ArenaResult` with all steps so far every `every` steps, and once at the end.

    env: a `ToyEnv` or a registry name ("bandit", "sparse", "sequence"; `env_kwargs` go to its constructor).
    methods: "grpo,dapo,atr", or a list of preset names, method strings ("kl3:0.05", "ratio:0.2:0.28"),
        `ClipSpec`s or (label, ClipSpec) pairs, or a {label: ClipSpec} dict (see `divclip.theory.spec`).
    seeds: a count n (seeds 0..n-1) or a list of distinct non-negative integers. A seed fixes its run's
        random stream alone (prompts, answers, reward noise, MLP init), shared by every method.
    steps, group_size (≥ 2), prompts_per_step, ppo_epochs (μ), lr: None takes the env's registry default.
    loss_agg_mode, adv_norm: passed to `policy_loss` / `group_advantages`.
    policy: "tabular" (one logit per answer / context) or "mlp" (see `divclip.toy_envs.policies`).
    stop: a threading.Event or a callable checked before every step; when set, the run ends early and the
        last yield has `stopped=True`.
    num_threads: torch's intra-op threads while the arena runs (restored between yields and at the end).
        The tensors are tiny, so 1 is fastest: with more, OpenMP spin-waits slow each op 10-50× on a busy
        machine. None leaves torch's setting alone.
    loss_metrics: also keep `policy_loss`'s own diagnostics (clipfrac, ppo_kl, kl3, ratio_mean, ...),
        averaged over seeds and epochs, in `ArenaResult.loss_info` (methods, steps). Off by default: on
        these tiny batches they cost nearly as much as the loss's forward pass, and the per-seed clip
        fractions in `metrics` are read off the gradient anyway (tests check the two agree).
    """
    if isinstance(env, str):
        name = env
        env = make_env(env, **(env_kwargs or {}))
        defaults = _registry_defaults(name)
    elif isinstance(env, ToyEnv):
        defaults = _registry_defaults(env.name)
    else:
        raise ValueError(f"env must be a ToyEnv or one of the registered names, got {env!r}")
    steps = check_int("steps", _default(steps, defaults, "steps"), minimum=1, maximum=MAX_STEPS)
    group_size = check_int(
        "group_size", _default(group_size, defaults, "group_size"), minimum=2, maximum=MAX_GROUP_SIZE
    )
    prompts_per_step = check_int(
        "prompts_per_step",
        _default(prompts_per_step, defaults, "prompts_per_step"),
        minimum=1,
        maximum=MAX_PROMPTS_PER_STEP,
    )
    ppo_epochs = check_int(
        "ppo_epochs", _default(ppo_epochs, defaults, "ppo_epochs"), minimum=1, maximum=MAX_PPO_EPOCHS
    )
    lr = check_real("lr", _default(lr, defaults, "lr"), minimum=0.0, open_interval=True)
    every = check_int("every", every, minimum=1)
    adv_norm = check_choice("adv_norm", adv_norm, ADV_NORMS)
    loss_agg_mode = check_choice("loss_agg_mode", loss_agg_mode, LOSS_AGG_MODES)
    policy_cls = POLICIES[check_choice("policy", policy, tuple(POLICIES))]
    seed_list = _check_seeds(seeds)
    specs = parse_methods(methods)
    should_stop = _stop_check(stop)
    if num_threads is not None:
        num_threads = check_int("num_threads", num_threads, minimum=1, maximum=MAX_THREADS)
    _check_budgets(env, len(specs) * len(seed_list), steps, prompts_per_step * group_size)
    if not isinstance(loss_metrics, bool):
        raise ValueError(f"loss_metrics must be True or False, got {loss_metrics!r}")
    config = {
        "group_size": group_size,
        "prompts_per_step": prompts_per_step,
        "ppo_epochs": ppo_epochs,
        "lr": lr,
        "loss_agg_mode": loss_agg_mode,
        "adv_norm": adv_norm,
        "policy": policy,
        "steps": steps,
    }
    # Validation above runs now; training runs lazily as the caller iterates.
    return _with_threads(
        _train(env, specs, seed_list, config, policy_cls, every, should_stop, loss_metrics), num_threads
    )


def _with_threads(gen: Iterator, n: int | None) -> Iterator:
    """Run `gen` with n torch threads, handing the caller back its own setting while it holds a yield."""
    if n is None:
        yield from gen
        return
    prev = torch.get_num_threads()
    try:
        while True:
            torch.set_num_threads(n)
            try:
                item = next(gen)
            except StopIteration:
                return
            finally:
                torch.set_num_threads(prev)
            yield item
    finally:
        gen.close()


def _train(
    env: ToyEnv,
    specs: dict,
    seed_list: list[int],
    config: dict,
    policy_cls,
    every: int,
    should_stop: Callable[[], bool],
    loss_metrics: bool,
) -> Iterator[ArenaResult]:
    steps, group_size, ppo_epochs = config["steps"], config["group_size"], config["ppo_epochs"]
    prompts_per_step, loss_agg_mode, adv_norm = config["prompts_per_step"], config["loss_agg_mode"], config["adv_norm"]
    labels = list(specs)
    M, S, N, T = len(labels), len(seed_list), prompts_per_step * group_size, env.horizon
    R = M * S
    keys = rng.seed_keys(torch.tensor(seed_list, dtype=torch.int64).repeat(M))  # run r = m·S + s: seeds[s]
    pol = policy_cls(env.init_logits(), R, keys)
    opt = Adam(pol.parameters(), config["lr"])
    mask = torch.ones(R * N, T, dtype=torch.float64)
    scales = [_seed_scale(specs[k], S, N, T, loss_agg_mode) for k in labels]
    # Adaptive δ ('kl3@clipfrac=0.1'): one controller per method holding one δ per seed; those methods call
    # policy_loss once per seed (each seed its own δ), so their per-seed loss needs no batch scale.
    ctrls = [DeltaController(specs[k], S) if is_adaptive(specs[k]) else None for k in labels]
    fixed_delta = torch.tensor([_fixed_delta(specs[k]) for k in labels], dtype=torch.float64).repeat_interleave(S)
    buf = torch.full((len(METRICS), R, steps), math.nan, dtype=torch.float64)
    info_sums: dict[str, np.ndarray] = {}

    by_metric = buf.numpy().reshape(len(METRICS), M, S, steps)  # a view: shares memory with buf

    def snapshot(done: int, stopped: bool) -> ArenaResult:
        # Read-only views of the steps done so far: those entries are final (later steps write further
        # columns), so a yield costs nothing however long the run, where copying was quadratic in steps.
        metrics = {k: _read_only(by_metric[i, ..., :done]) for i, k in enumerate(METRICS)}
        return ArenaResult(
            env.name,
            env.config(),
            labels,
            dict(specs),
            seed_list,
            metrics,
            config,
            steps,
            stopped,
            {k: v[:, :done] / ppo_epochs for k, v in info_sums.items()},
            env.best_reward(),
        )

    n_draws = prompts_per_step + N * T + 2 * N
    block = max(1, min(16, _BLOCK_DRAWS // (R * n_draws)))  # steps per rng call: ≤ 16, ≤ 2^20 numbers
    records = _StepRecords(env, buf, R, ppo_epochs * N * T)
    only_prompt = torch.zeros(R, N, dtype=torch.int64)
    table_new = None
    for step in range(1, steps + 1):
        if should_stop():
            yield snapshot(records.flush(), True)
            return
        # -- rollouts from π_old ----------------------------------------------------------------------
        with torch.no_grad():
            table_old = table_new if step > 1 else pol.log_probs()  # parameters unchanged since then
            if (step - 1) % block == 0:  # this step's draws come from a block of steps drawn at once
                draws = rng.uniform_steps(keys, step, min(block, steps - step + 1), n_draws)  # (R, block, n)
            u = draws[:, (step - 1) % block]  # all of this step's draws, = rng.uniform(keys, step, n_draws)
            u_prompt, u_token, u_reward = u.split([prompts_per_step, N * T, 2 * N], dim=1)
            if env.num_prompts == 1:  # the bandit: always prompt 0 (its uniform is drawn all the same)
                prompts = only_prompt
            else:
                prompts = (u_prompt * env.num_prompts).long().clamp_(max=env.num_prompts - 1)  # (R, prompts)
                prompts = prompts.unsqueeze(-1).expand(R, prompts_per_step, group_size).reshape(R, N)  # groups
            tokens = env.sample(table_old, prompts, u_token.view(R, N, T))  # (R, N, T)
            rewards = env.rewards(prompts, tokens, u_reward.view(R, N, 2))  # (R, N)
            index = env.token_index(prompts, tokens)  # (R, N·T)
            old_lp = env.gather_log_probs(table_old, index).view(R * N, T)
            adv = group_advantages(rewards.reshape(-1), group_size, norm=adv_norm)  # (R·N,)
            adv_tok = adv.unsqueeze(-1).expand(R * N, T).contiguous()  # policy_loss would copy it every epoch
            per_method = (
                [(old_lp, adv_tok, mask)]
                if M == 1
                else [tuple(x[m * S * N : (m + 1) * S * N] for x in (old_lp, adv_tok, mask)) for m in range(M)]
            )
        # -- μ epochs of the clipped surrogate -------------------------------------------------------
        tally = _ClipTally(R, adv_tok)
        delta_used = fixed_delta.clone()
        for m, ctrl in enumerate(ctrls):
            if ctrl is not None:
                delta_used[m * S : (m + 1) * S] = torch.from_numpy(ctrl.delta)
        clip_sums = [np.zeros(S) if ctrl is not None else None for ctrl in ctrls]
        grads = []  # each epoch's gradients (zero_grad drops them, it does not overwrite them)
        for epoch in range(ppo_epochs):
            opt.zero_grad()
            lp = env.gather_log_probs(pol.log_probs(), index).view(R * N, T)
            lp.retain_grad()
            total = None
            for m, (label, lp_m, (old_m, adv_m, mask_m)) in enumerate(
                zip(labels, lp.split(S * N) if M > 1 else (lp,), per_method)
            ):
                if ctrls[m] is not None:
                    loss, info = _adaptive_loss(
                        ctrls[m], lp_m, old_m, adv_m, mask_m, N, loss_agg_mode, clip_sums[m], loss_metrics
                    )
                    total = loss if total is None else total + loss
                    if loss_metrics:
                        _accumulate(info_sums, info, m, step - 1, M, steps)
                    continue
                loss, info = policy_loss(
                    lp_m, old_m, adv_m, mask_m, specs[label], loss_agg_mode=loss_agg_mode, metrics=loss_metrics
                )
                # Parameters are separate per seed, so aggregating over all seeds only rescales each seed's
                # gradient by a constant (token-mean over S seeds: 1/S); `scales[m]` (= S here) undoes it, and
                # every seed gets exactly the gradient it would get alone (tests/toy_envs/test_toy_arena.py).
                loss = loss * scales[m] if scales[m] != 1.0 else loss
                total = loss if total is None else total + loss
                if loss_metrics:
                    _accumulate(info_sums, info, m, step - 1, M, steps)
            total.backward(_ONE)
            with torch.no_grad():
                if epoch > 0:  # the first epoch has r ≡ 1: nothing can be clipped
                    tally.add(lp.grad, lp, old_lp)
                grads.append([p.grad for p in opt.params])
            opt.step()
        # -- what the update did -----------------------------------------------------------------------
        with torch.no_grad():
            table_new = pol.log_probs()
            log_r = (env.gather_log_probs(table_new, index) - old_lp.view(R, N * T)).view(R, N, T)
            records.add(table_old, table_new, rewards, log_r, tally, _grad_norms(grads, R).mean(0), delta_used)
            _update_controllers(ctrls, clip_sums, ppo_epochs, env, table_old, log_r, S)
        if step % every == 0 or step == steps:
            yield snapshot(records.flush(), False)
        elif records.nbytes > _PENDING_BYTES:
            records.flush()


# ------------------------------------------------------------------------------------------ helpers
class _StepRecords:
    """What each step leaves for its metrics, turned into buffer columns a block of steps at a time.

    Every statistic is computed row by row over the runs, so K steps stacked along the run axis give the
    numbers step by step would, bit for bit (the same ops on every row), in one set of ops instead of K:
    on small problems the per-step bookkeeping otherwise costs as much as the update.
    """

    def __init__(self, env: ToyEnv, buf: torch.Tensor, runs: int, token_epochs: int):
        self.env, self.buf, self.runs, self.token_epochs = env, buf, runs, token_epochs
        self.done = 0  # buffer columns written
        self._reset()

    def _reset(self):
        self.tables, self.rewards, self.log_r, self.tallies, self.grad_norm, self.delta = [], [], [], [], [], []
        self.nbytes = 0

    def add(self, table_old, table_new, rewards, log_r, tally: _ClipTally, grad_norm, delta) -> None:
        if not self.tables:
            self.tables.append(table_old)
        self.tables.append(table_new)  # π_new of a step is π_old of the next
        self.rewards.append(rewards)
        self.log_r.append(log_r)
        self.tallies.append(tally)
        self.grad_norm.append(grad_norm)
        self.delta.append(delta)
        self.nbytes += table_new.nbytes + 7 * log_r.nbytes  # log r and the tally's six token-sized tensors

    @torch.no_grad()
    def flush(self) -> int:
        """Write the pending steps' metrics to the buffer; returns the number of steps done."""
        K, R = len(self.rewards), self.runs
        if K == 0:
            return self.done
        tables = torch.stack(self.tables)  # (K + 1, R, *table)
        old, new = tables[:-1].flatten(0, 1), tables[1:].flatten(0, 1)  # (K·R, *table), views
        st = self.env.exact_stats(old, new)
        q = st["correct_prob"]  # (K·R, P)
        log_r = torch.stack(self.log_r)  # (K, R, N, T)
        row = {
            "reward_mean": torch.stack(self.rewards).mean(-1),
            "expected_reward": st["expected_reward"],
            "prob_correct": q.mean(-1),
            "entropy": st["entropy"],
            "kl_exact": st["kl"],
            "kl3": (torch.expm1(log_r) - log_r).sum(-1).mean(-1),  # unbiased for the per-response KL
            "grad_norm": torch.stack(self.grad_norm),
            "delta": torch.stack(self.delta),
        }
        for k, v in zip(PASS_AT_K, pass_at_k(q, PASS_AT_K)):
            row[f"pass@{k}"] = v
        counts = _ClipTally.stacked_counts(self.tallies) / self.token_epochs  # (4, K·R), mean over epochs
        row["clipfrac"], row["clipfrac_low"], row["clipfrac_high"], row["clipfrac_dual"] = counts.unbind()
        block = torch.stack([row[k].reshape(K, R) for k in METRICS])  # (metrics, K, R)
        self.buf[:, :, self.done : self.done + K] = block.transpose(1, 2)
        self.done += K
        next_old = self.tables[-1:]  # the next step's π_old
        self._reset()
        self.tables = next_old
        return self.done


def _read_only(a: np.ndarray) -> np.ndarray:
    a = a.view()
    a.flags.writeable = False
    return a


def _grad_norms(grads: list[list[torch.Tensor]], R: int) -> torch.Tensor:
    """(epochs, R): L2 norm of each run's gradient over all parameters, for each epoch's list of gradients."""
    flat = torch.stack(
        [
            torch.cat([g.reshape(R, -1) for g in epoch], 1) if len(epoch) > 1 else epoch[0].reshape(R, -1)
            for epoch in grads
        ]
    )  # (epochs, R, parameters per run)
    return torch.linalg.vector_norm(flat, dim=2)


class _ClipTally:
    """Per-run counts of clipped tokens over one step's epochs, read off the gradient itself.

    docs/theory.md §1's rule: a token with A ≠ 0 whose ∂loss/∂log π is exactly 0 was clipped, whatever the
    measure or form: by the lower bound if A < 0 and r < 1, the upper bound if A > 0 and r > 1, the dual
    clip if A < 0 and r > 1. (A > 0 with r < 1 has no bound in any form; it still counts in the total,
    e.g. when verl's ±20 log-ratio clamp stops a gradient.) Tokens with A = 0 have no gradient to clip.
    Tokens are rows of runs (run r owns a contiguous block of rows, as in the arena's batch); each epoch adds
    two flag tensors and the per-run sums are taken once per step.
    """

    def __init__(self, runs: int, adv: torch.Tensor):
        self.runs = runs
        self.zero = torch.zeros(adv.shape, dtype=torch.float64)  # epochs with ∂loss/∂log π = 0, per token
        self.zero_up = torch.zeros(adv.shape, dtype=torch.float64)  # ... of which with r > 1
        self.neg, self.pos = (adv < 0).to(torch.float64), (adv > 0).to(torch.float64)
        self._flat, self._up = torch.empty_like(self.zero), torch.empty_like(self.zero)  # 0/1 float scratch

    def add(self, grad: torch.Tensor, log_prob: torch.Tensor, old_log_prob: torch.Tensor) -> None:
        """One epoch: `grad` = ∂loss/∂log π; r > 1 where log_prob > old_log_prob. All shaped like A."""
        flat = torch.eq(grad, 0.0, out=self._flat)  # float flags: bool temporaries are slower on CPU
        self.zero += flat
        self.zero_up.addcmul_(flat, torch.gt(log_prob, old_log_prob, out=self._up))

    def counts(self) -> torch.Tensor:
        """(4, runs): clipped token-epochs in all, by the lower bound, the upper bound, the dual clip."""
        return self.stacked_counts([self])

    @staticmethod
    def stacked_counts(tallies: list[_ClipTally]) -> torch.Tensor:
        """(4, K·runs): `counts` of K tallies of the same shape, in one pass (step-major)."""
        zero, up, neg, pos = (torch.stack([getattr(t, k) for t in tallies]) for k in ("zero", "zero_up", "neg", "pos"))
        down = zero - up
        per_token = torch.stack([zero * (neg + pos), down * neg, up * pos, up * neg])  # (4, K, rows, T)
        return per_token.view(4, len(tallies) * tallies[0].runs, -1).sum(-1)


def _seed_scale(spec, S: int, N: int, T: int, mode: str) -> float:
    """The factor that turns one `policy_loss` call over S seeds into S independent per-seed losses.

    Every seed contributes the same number of rows and tokens, so a linear aggregation over the whole
    batch weighs each seed's own loss by one constant (1/S for the mean modes, 1 for token-sum);
    multiplying by the inverse restores each seed's gradient exactly as if it ran alone. Probed once at
    r = 1 with only seed 0's advantages non-zero, so it follows whatever `policy_loss` aggregates.
    """
    lp = torch.full((S * N, T), math.log(0.5), dtype=torch.float64)
    adv = torch.zeros(S * N, T, dtype=torch.float64)
    adv[:N] = 1.0
    mask = torch.ones(S * N, T, dtype=torch.float64)
    batched, _ = policy_loss(lp, lp, adv, mask, spec, loss_agg_mode=mode)
    alone, _ = policy_loss(lp[:N], lp[:N], adv[:N], mask[:N], spec, loss_agg_mode=mode)
    c = float(alone) / float(batched)
    if not math.isfinite(c) or c <= 0:
        raise ValueError(f"cannot batch seeds for loss_agg_mode={mode!r}: probe gave a scale of {c!r}")
    return float(round(c)) if abs(c - round(c)) < 1e-9 * max(1.0, c) else c


def _fixed_delta(spec) -> float:
    """The δ column of a fixed method: its budget, or NaN without a single δ (ratio, sapo, intersections)."""
    if isinstance(spec, AllOf) or spec.delta is None:
        return math.nan
    return float(spec.delta)


def _adaptive_loss(
    ctrl: DeltaController, lp, old, adv, mask, N: int, mode: str, clip_sum: np.ndarray, loss_metrics: bool
):
    """Sum over seeds of each seed's own loss at its own δ (rows s·N … (s+1)·N - 1 are seed s); adds each
    seed's clip fraction to `clip_sum`. Returns (loss, metrics averaged over seeds)."""
    total, infos = None, []
    want = ctrl.signal == "clipfrac" or loss_metrics
    for s in range(len(ctrl.delta)):
        rows = slice(s * N, (s + 1) * N)
        loss, info = policy_loss(
            lp[rows], old[rows], adv[rows], mask[rows], ctrl.spec_for(s), loss_agg_mode=mode, metrics=want
        )
        total = loss if total is None else total + loss
        if want:
            clip_sum[s] += info["clipfrac"]
            infos.append(info)
    mean_info = {k: sum(i[k] for i in infos) / len(infos) for k in infos[0]} if loss_metrics else {}
    return total, mean_info


def _update_controllers(ctrls, clip_sums, epochs: int, env: ToyEnv, table_old, log_r, S: int) -> None:
    """One controller step per adaptive method from this step's per-seed signal: clip fraction (mean over the
    epochs, as the `clipfrac` column), per-token k3 of the update, or the rollout policy's exact entropy."""
    for m, ctrl in enumerate(ctrls):
        if ctrl is None:
            continue
        runs = slice(m * S, (m + 1) * S)
        if ctrl.signal == "clipfrac":
            signal = clip_sums[m] / epochs
        elif ctrl.signal == "kl3":
            lr = log_r[runs]
            signal = (torch.expm1(lr) - lr).mean((1, 2)).numpy()
        else:
            signal = env.entropy(table_old[runs]).numpy()
        ctrl.update(signal)


def _accumulate(sums: dict, info: dict, m: int, t: int, M: int, steps: int) -> None:
    for k, v in info.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if k not in sums:
                sums[k] = np.zeros((M, steps))
            sums[k][m, t] += v


def _check_budgets(env: ToyEnv, runs: int, steps: int, batch: int) -> None:
    """ValueError before any allocation when the run's arrays would pass the budgets above."""
    logits = env.init_logits()
    table, actions = int(np.prod(logits.shape)), int(logits.shape[-1])
    for what, size, cap in (
        (f"(methods × seeds) × steps = {runs} × {steps}", runs * steps, MAX_RUN_STEPS),
        (
            f"(methods × seeds) × prompts_per_step × group_size × horizon = {runs} × {batch} × {env.horizon}",
            runs * batch * env.horizon,
            MAX_BATCH_TOKENS,
        ),
        (f"(methods × seeds) × policy logits = {runs} × {table}", runs * table, MAX_POLICY_PARAMS),
        (
            f"(methods × seeds) × prompts_per_step × group_size × horizon × actions = {runs} × {batch} × "
            f"{env.horizon} × {actions}",
            runs * batch * env.horizon * actions,
            MAX_BATCH_LOGITS,
        ),
    ):
        if size > cap:
            raise ValueError(
                f"this arena is too large: {what} = {size}, over the limit of {cap}; use fewer seeds, "
                "methods or steps, or a smaller batch or environment"
            )


def _check_seeds(seeds) -> list[int]:
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        n = check_int("seeds", int(seeds), minimum=1, maximum=MAX_SEEDS)
        return list(range(n))
    if isinstance(seeds, Sequence) and not isinstance(seeds, str) and len(seeds) > MAX_SEEDS:
        raise ValueError(f"seeds must hold at most {MAX_SEEDS} seeds, got {len(seeds)}")
    if isinstance(seeds, Sequence) and not isinstance(seeds, str) and len(seeds) > 0:
        out = [check_int("seeds[i]", s, minimum=0, maximum=2**62) for s in seeds]
        if len(set(out)) != len(out):
            raise ValueError(f"seeds must be distinct, got {list(seeds)!r}")
        return out
    raise ValueError(f"seeds must be a count >= 1 or a non-empty list of distinct integers >= 0, got {seeds!r}")


def _stop_check(stop) -> Callable[[], bool]:
    if stop is None:
        return lambda: False
    if hasattr(stop, "is_set"):
        return stop.is_set
    if callable(stop):
        return stop
    raise ValueError(f"stop must be a threading.Event, a callable returning bool, or None, got {stop!r}")


def _registry_defaults(name: str) -> dict:
    return ENVS[name].arena if name in ENVS else {}


def _default(value, defaults: dict, key: str):
    if value is not None:
        return value
    if key not in defaults:
        raise ValueError(f"{key} is required for an environment without registry defaults")
    return defaults[key]
