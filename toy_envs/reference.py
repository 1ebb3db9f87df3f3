"""A straightforward single-seed GRPO loop: the plain program the arena vectorises, kept as its reference.

One run, one seed, written the way one would without batching over seeds: a logit table as the parameter,
`torch.optim.Adam`, a `torch.Generator` for prompts, sampling uniforms and reward noise, the environment's
own sampler, rewards and exact statistics every step, and `divclip.theory.losses.policy_loss` (with its metrics) for
μ PPO epochs against the stored old log-probs. It is slower than the arena per seed-step (the arena also
trims the per-step bookkeeping) and does not share its counter-based random numbers, so the two agree in
distribution, not draw for draw: tests/toy_envs/test_toy_reference.py checks that they learn the same
thing, and benchmarks/bench_arena.py times the arena against a loop of these runs.
"""

from __future__ import annotations

import numpy as np
import torch

from divclip.theory.advantages import group_advantages
from divclip.theory.losses import policy_loss
from divclip.theory.spec import is_adaptive, parse_method, spec_label
from divclip.toy_envs.base import PASS_AT_K, ToyEnv, pass_at_k
from divclip.toy_envs.validation import check_int, check_real

REFERENCE_METRICS = (
    "reward_mean",
    "expected_reward",
    *(f"pass@{k}" for k in PASS_AT_K),
    "entropy",
    "kl_exact",
    "clipfrac",
    "grad_norm",
)


def reference_run(
    env: ToyEnv,
    spec,
    seed: int,
    steps: int,
    group_size: int,
    prompts_per_step: int,
    ppo_epochs: int,
    lr: float,
    loss_agg_mode: str = "token-mean",
    adv_norm: str = "std",
) -> dict[str, np.ndarray]:
    """Train one tabular policy on `env` with `spec` (a ClipSpec or preset name); metrics (steps,) per name.

    Step t's policy metrics describe the policy that drew its rollouts, its update metrics the update that
    followed, as in `ArenaResult`.
    """
    if not isinstance(env, ToyEnv):
        raise ValueError(f"env must be a ToyEnv (e.g. toy_envs.make_env('bandit')), got {env!r}")
    spec = parse_method(spec) if isinstance(spec, str) else spec
    if is_adaptive(spec):
        raise ValueError(
            f"spec {spec_label(spec)!r} adapts δ: the reference loop runs fixed specs (the arena, "
            "run_arena, runs adaptive ones)"
        )
    seed = check_int("seed", seed, minimum=0)
    steps = check_int("steps", steps, minimum=1)
    group_size = check_int("group_size", group_size, minimum=2)
    prompts_per_step = check_int("prompts_per_step", prompts_per_step, minimum=1)
    ppo_epochs = check_int("ppo_epochs", ppo_epochs, minimum=1)
    lr = check_real("lr", lr, minimum=0.0, open_interval=True)
    g = torch.Generator().manual_seed(seed)
    logits = env.init_logits().clone().requires_grad_(True)
    opt = torch.optim.Adam([logits], lr=lr)
    n, length = prompts_per_step * group_size, env.horizon
    mask = torch.ones(n, length, dtype=torch.float64)
    rows = {k: [] for k in REFERENCE_METRICS}
    for _ in range(steps):
        with torch.no_grad():
            logp_old = torch.log_softmax(logits, -1).unsqueeze(0)  # (1, *table): the arena's batch of one
            prompts = torch.randint(0, env.num_prompts, (1, prompts_per_step), generator=g)
            prompts = prompts.repeat_interleave(group_size, dim=1)  # (1, n), groups contiguous
            tokens = env.sample(logp_old, prompts, torch.rand(1, n, length, generator=g, dtype=torch.float64))
            rewards = env.rewards(prompts, tokens, torch.rand(1, n, 2, generator=g, dtype=torch.float64))[0]
            old_lp = env.token_log_probs(logp_old, prompts, tokens)[0]  # (n, T)
            adv = group_advantages(rewards, group_size, norm=adv_norm).unsqueeze(-1).expand(n, length)
        clipfrac, grad_norm = [], []
        for _ in range(ppo_epochs):
            lp = env.token_log_probs(torch.log_softmax(logits, -1).unsqueeze(0), prompts, tokens)[0]
            loss, info = policy_loss(lp, old_lp, adv, mask, spec, loss_agg_mode=loss_agg_mode)
            opt.zero_grad()
            loss.backward()
            grad_norm.append(float(logits.grad.norm()))
            clipfrac.append(info["clipfrac"])
            opt.step()
        with torch.no_grad():
            logp_new = torch.log_softmax(logits, -1).unsqueeze(0)
            st = env.exact_stats(logp_old, logp_new)
            rows["reward_mean"].append(float(rewards.mean()))
            rows["expected_reward"].append(float(st["expected_reward"][0]))
            for k, v in zip(PASS_AT_K, pass_at_k(st["correct_prob"], PASS_AT_K)):
                rows[f"pass@{k}"].append(float(v[0]))
            rows["entropy"].append(float(st["entropy"][0]))
            rows["kl_exact"].append(float(st["kl"][0]))
            rows["clipfrac"].append(float(np.mean(clipfrac)))
            rows["grad_norm"].append(float(np.mean(grad_norm)))
    return {k: np.asarray(v) for k, v in rows.items()}
