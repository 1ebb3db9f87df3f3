"""The vectorised arena trains like the plain single-seed loop it replaces (toy_envs.reference).

The two use different random numbers (the arena's counter-based streams, the loop's torch.Generator), so
they are compared in distribution: per-seed window means of each metric, across seeds, within 4 standard
errors of their difference. A wrong seed scaling, a gradient from the wrong tokens or a skipped epoch moves
early-training means by many standard errors.
"""

import numpy as np
import pytest
import torch

from divclip.toy_envs import make_env, run_arena
from divclip.toy_envs.reference import REFERENCE_METRICS, reference_run

CASES = {
    "bandit": ({"arms": 8}, dict(group_size=8, prompts_per_step=1, ppo_epochs=4, lr=0.05)),
    "sequence": (
        {"length": 4, "vocab": 4, "modulus": 5},
        dict(group_size=8, prompts_per_step=2, ppo_epochs=4, lr=0.05),
    ),
}
SEEDS, STEPS = 12, 60
WINDOWS = (slice(0, 10), slice(STEPS - 15, STEPS))


@pytest.fixture
def one_torch_thread():
    """The loop runs thousands of tiny ops: a second intra-op thread only spins (12x the CPU time on a busy
    machine; the arena itself runs on one thread by default). Restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
@pytest.mark.parametrize("env_name", sorted(CASES))
def test_arena_and_reference_loop_learn_the_same(env_name, one_torch_thread):
    env_kwargs, settings = CASES[env_name]
    env = make_env(env_name, **env_kwargs)
    ref = [reference_run(env, "atr", seed, STEPS, **settings) for seed in range(SEEDS)]
    res = run_arena(env_name, "atr", seeds=SEEDS, steps=STEPS, env_kwargs=env_kwargs, **settings)
    assert set(REFERENCE_METRICS) <= set(res.metrics)
    moved = 0
    for metric in ("expected_reward", "entropy", "kl_exact", "clipfrac", "grad_norm"):
        loop = np.array([r[metric] for r in ref])  # (seeds, steps)
        ours = res.metrics[metric][0]
        assert loop.shape == ours.shape == (SEEDS, STEPS)
        for window in WINDOWS:
            a, b = loop[:, window].mean(1), ours[:, window].mean(1)
            se = np.sqrt(a.var(ddof=1) / SEEDS + b.var(ddof=1) / SEEDS)
            assert se > 0, f"{metric}: no spread across seeds, the comparison would be vacuous"
            z = (a.mean() - b.mean()) / se
            assert abs(z) < 4, (
                f"{metric} steps {window.start}-{window.stop}: loop {a.mean():.4g}, arena "
                f"{b.mean():.4g} ({z:.1f} standard errors)"
            )
        moved += ours[:, WINDOWS[1]].mean() != ours[:, WINDOWS[0]].mean()
    er = res.metrics["expected_reward"][0]
    assert er[:, -5:].mean() > er[:, :5].mean() + 0.1  # both learned: the comparison is not of two idle runs
    assert moved == 5


@pytest.mark.parametrize(
    "kwargs, arg",
    [
        ({"env": "bandit"}, "env"),
        ({"spec": "ppo9"}, "ppo9"),
        ({"seed": -1}, "seed"),
        ({"steps": 0}, "steps"),
        ({"group_size": 1}, "group_size"),
        ({"prompts_per_step": 0}, "prompts_per_step"),
        ({"ppo_epochs": 1.5}, "ppo_epochs"),
        ({"lr": 0.0}, "lr"),
    ],
)
def test_bad_input_names_the_argument(kwargs, arg):
    args = (
        dict(
            env=make_env("bandit", arms=4),
            spec="grpo",
            seed=0,
            steps=2,
            group_size=4,
            prompts_per_step=1,
            ppo_epochs=2,
            lr=0.1,
        )
        | kwargs
    )
    with pytest.raises(ValueError, match=arg):
        reference_run(**args)
