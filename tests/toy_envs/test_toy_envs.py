"""Exact statistics of the toy environments against brute-force enumeration and Monte Carlo estimates."""

import itertools
import math

import numpy as np
import pytest
import torch
from scipy import stats

from divclip.toy_envs import ENVS, Bandit, SparseCategorical, TokenSequence, make_env, pass_at_k
from divclip.toy_envs.base import PASS_AT_K, sample_categorical, sample_from_cdf

ENV_CASES = {
    "bandit": lambda: Bandit(arms=6),
    "bandit_gauss": lambda: Bandit(arms=5, reward="gaussian", noise_std=0.7, env_seed=3),
    "sparse": lambda: SparseCategorical(prompts=5, answers=7, correct_per_prompt=2, init_correct_prob=0.1),
    "sum_mod": lambda: TokenSequence(length=4, vocab=3, modulus=4, target=1),
    "pattern": lambda: TokenSequence(length=3, vocab=3, task="pattern", pattern=[2, 0, 1]),
}


def random_table(env, runs=2, scale=1.0, seed=0):
    """A non-uniform normalised policy table per run, (R, *table shape)."""
    g = torch.Generator().manual_seed(seed)
    shape = env.init_logits().shape
    return torch.log_softmax(scale * torch.randn(runs, *shape, generator=g, dtype=torch.float64), -1)


def draw(env, logp, n, seed=1):
    """n responses per run to uniformly drawn prompts: prompts (R, n), tokens (R, n, T), rewards (R, n)."""
    g = torch.Generator().manual_seed(seed)
    R = logp.shape[0]
    prompts = torch.randint(0, env.num_prompts, (R, n), generator=g)
    tokens = env.sample(logp, prompts, torch.rand(R, n, env.horizon, generator=g, dtype=torch.float64))
    rewards = env.rewards(prompts, tokens, torch.rand(R, n, 2, generator=g, dtype=torch.float64))
    return prompts, tokens, rewards


def within(mc: torch.Tensor, se: torch.Tensor, exact: torch.Tensor, k: float = 4.0):
    assert bool((se > 0).all()), "Monte Carlo estimate has no spread: the check would be vacuous"
    z = ((mc - exact).abs() / se).max().item()
    assert z < k, f"Monte Carlo {mc.tolist()} vs exact {exact.tolist()}: {z:.2f} standard errors apart"


# ----------------------------------------------------------------------------------- Monte Carlo
@pytest.mark.parametrize("case", sorted(ENV_CASES))
def test_expected_reward_matches_monte_carlo(case):
    env = ENV_CASES[case]()
    logp = random_table(env)
    _, _, rewards = draw(env, logp, 20_000)
    mc, se = rewards.mean(1), rewards.std(1) / math.sqrt(rewards.shape[1])
    within(mc, se, env.expected_reward(logp))


@pytest.mark.parametrize("case", sorted(ENV_CASES))
@pytest.mark.parametrize("k", PASS_AT_K)
def test_pass_at_k_matches_monte_carlo(case, k):
    env = ENV_CASES[case]()
    logp = random_table(env, scale=2.0)
    trials = 4000
    g = torch.Generator().manual_seed(k)
    R = logp.shape[0]
    prompts = torch.randint(0, env.num_prompts, (R, trials), generator=g).repeat_interleave(k, dim=1)
    tokens = env.sample(logp, prompts, torch.rand(R, trials * k, env.horizon, generator=g, dtype=torch.float64))
    hit = env.is_correct(prompts, tokens).view(R, trials, k).any(-1).to(torch.float64)
    p = hit.mean(1)
    exact = pass_at_k(env.correct_prob(logp), k)
    se = torch.sqrt(exact * (1 - exact) / trials)  # binomial SE at the exact value
    within(p, se, exact)


@pytest.mark.parametrize("case", sorted(ENV_CASES))
def test_entropy_and_kl_match_monte_carlo(case):
    env = ENV_CASES[case]()
    old, new = random_table(env, seed=0), random_table(env, seed=5)
    prompts, tokens, _ = draw(env, old, 20_000)
    lp_old = env.token_log_probs(old, prompts, tokens)  # (R, n, T)
    lp_new = env.token_log_probs(new, prompts, tokens)
    h = -lp_old.mean(-1)  # per-token entropy sample
    within(h.mean(1), h.std(1) / math.sqrt(h.shape[1]), env.entropy(old))
    kl = (lp_old - lp_new).sum(-1)  # per-response log-ratio, E_old = KL(old ‖ new)
    within(kl.mean(1), kl.std(1) / math.sqrt(kl.shape[1]), env.kl(old, new))


# ------------------------------------------------------------------------------- exact references
@pytest.mark.parametrize("case", ["sum_mod", "pattern"])
def test_sequence_statistics_equal_enumeration_of_all_sequences(case):
    env = ENV_CASES[case]()
    old, new = random_table(env, seed=2), random_table(env, seed=3)
    L, V = env.length, env.vocab
    seqs = torch.tensor(list(itertools.product(range(V), repeat=L)))  # (V^L, L)
    tokens = seqs.unsqueeze(0).expand(2, -1, -1)
    prompts = torch.zeros(tokens.shape[:2], dtype=torch.int64)
    lp_old = env.token_log_probs(old, prompts, tokens).sum(-1)  # log π(x) per sequence
    lp_new = env.token_log_probs(new, prompts, tokens).sum(-1)
    prob = lp_old.exp()
    assert torch.allclose(prob.sum(1), torch.ones(2, dtype=torch.float64), atol=1e-12)
    # reference reward written independently of the automaton
    total = seqs.sum(1)
    if env.task == "sum_mod":
        reward = (total % env.modulus == env.target).to(torch.float64)
    else:
        reward = (seqs == env.pattern).all(1).to(torch.float64)
    assert torch.equal(env.rewards(prompts, tokens, None), reward.expand(2, -1))
    torch.testing.assert_close(env.expected_reward(old), (prob * reward).sum(1), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(env.entropy(old), -(prob * lp_old).sum(1) / L, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(env.kl(old, new), (prob * (lp_old - lp_new)).sum(1), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("case", sorted(ENV_CASES))
def test_exact_stats_equal_the_separate_statistics(case):
    """The arena's one-pass `exact_stats` (shared exp, one forward pass) equals the functions checked above."""
    env = ENV_CASES[case]()
    old, new = random_table(env, runs=3, seed=2), random_table(env, runs=3, seed=3)
    st = env.exact_stats(old, new)
    for key, ref in [
        ("correct_prob", env.correct_prob(old)),
        ("expected_reward", env.expected_reward(old)),
        ("entropy", env.entropy(old)),
        ("kl", env.kl(old, new)),
    ]:
        assert st[key].shape == ref.shape, key
        torch.testing.assert_close(st[key], ref, rtol=1e-13, atol=1e-15, msg=key)


def test_categorical_statistics_equal_scipy():
    env = ENV_CASES["sparse"]()
    old, new = random_table(env, seed=2), random_table(env, seed=3)
    p, q = old.exp().numpy(), new.exp().numpy()
    ent = np.mean([[stats.entropy(p[r, i]) for i in range(env.num_prompts)] for r in range(2)], axis=1)
    kl = np.mean([[stats.entropy(p[r, i], q[r, i]) for i in range(env.num_prompts)] for r in range(2)], axis=1)
    np.testing.assert_allclose(env.entropy(old).numpy(), ent, rtol=1e-12)
    np.testing.assert_allclose(env.kl(old, new).numpy(), kl, rtol=1e-10)
    correct = env.correct.numpy()
    np.testing.assert_allclose(env.expected_reward(old).numpy(), (p * correct).sum(-1).mean(-1), rtol=1e-12)


def test_pass_at_k_closed_form_and_tiny_probabilities():
    q = torch.tensor([[0.0, 0.5, 1.0], [1e-12, 0.25, 0.75]], dtype=torch.float64)
    expected = torch.stack([(1 - (1 - q) ** k).mean(-1) for k in (1, 4)])
    torch.testing.assert_close(torch.stack([pass_at_k(q, 1), pass_at_k(q, 4)]), expected)
    assert pass_at_k(torch.tensor([[1e-15]], dtype=torch.float64), 16).item() == pytest.approx(16e-15, rel=1e-9)
    torch.testing.assert_close(pass_at_k(q, (1, 4)), expected)  # all k at once


def test_sample_categorical_frequencies():
    probs = torch.tensor([0.1, 0.0, 0.6, 0.3], dtype=torch.float64)
    u = torch.rand(200_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    idx = sample_categorical(probs.expand(200_000, 4), u)
    counts = torch.bincount(idx, minlength=4).numpy()
    assert counts[1] == 0
    assert stats.chisquare(counts[[0, 2, 3]], 200_000 * probs.numpy()[[0, 2, 3]]).pvalue > 1e-4


def test_sample_from_cdf_is_the_count_of_cdf_entries_below_u():
    """The inverse-CDF rule, written out: index = #{i : cdf_i < u}, capped at V - 1; ties and flat steps too."""
    g = torch.Generator().manual_seed(1)
    probs = torch.rand(50, 6, 7, generator=g, dtype=torch.float64) * (torch.rand(50, 6, 7, generator=g) > 0.3)
    probs[..., 0] += 1e-3
    cdf = (probs / probs.sum(-1, keepdim=True)).cumsum(-1)
    u = torch.rand(50, 6, generator=g, dtype=torch.float64)
    u[0] = cdf[0, :, 3]  # exactly on a step: not counted as below
    u[1] = 1.0 + 1e-9  # beyond a CDF that rounds below 1: the last index
    expect = (u.unsqueeze(-1) > cdf).sum(-1).clamp(max=6)
    assert torch.equal(sample_from_cdf(cdf, u), expect)
    assert torch.equal(sample_categorical(probs / probs.sum(-1, keepdim=True), u), expect)


# ------------------------------------------------------------------------------------ construction
def test_bandit_arms_are_the_documented_means_and_best_arm_is_correct():
    env = Bandit(arms=16, env_seed=4)
    assert sorted(env.arm_means.tolist()) == pytest.approx(np.linspace(0.1, 0.9, 16).tolist())
    assert env.best_reward() == pytest.approx(0.9)
    assert env.correct[0, int(env.arm_means.argmax())] == 1 and env.correct.sum() == 1
    assert not torch.equal(env.arm_means, Bandit(arms=16, env_seed=5).arm_means)


def test_sparse_correct_answers_start_at_the_requested_probability():
    env = SparseCategorical(prompts=8, answers=20, correct_per_prompt=3, init_correct_prob=0.004)
    logp = torch.log_softmax(env.init_logits(), -1)[None]
    torch.testing.assert_close(env.correct_prob(logp), torch.full((1, 8), 0.004, dtype=torch.float64))
    assert (env.correct.sum(-1) == 3).all()
    assert env.expected_reward(logp).item() == pytest.approx(0.004)


def test_registry_defaults_build_every_env():
    for name, info in ENVS.items():
        env = make_env(name)
        assert isinstance(env, info.cls) and env.name == name
        assert {"steps", "group_size", "prompts_per_step", "ppo_epochs", "lr"} <= set(info.arena)
        assert isinstance(make_env(name, **env.config()).config(), dict)  # config() rebuilds the env


@pytest.mark.parametrize(
    "build, arg",
    [
        (lambda: make_env("maze"), "env"),
        (lambda: make_env("bandit", colour=1), "colour"),
        (lambda: Bandit(arms=1), "arms"),
        (lambda: Bandit(reward="poisson"), "reward"),
        (lambda: Bandit(arms=3, means=[0.1, 2.0, 0.3]), "means"),
        (lambda: SparseCategorical(init_correct_prob=1.0), "init_correct_prob"),
        (lambda: SparseCategorical(answers=4, correct_per_prompt=4), "correct_per_prompt"),
        (lambda: TokenSequence(task="palindrome"), "task"),
        (lambda: TokenSequence(length=3, vocab=3, task="pattern", pattern=[0, 5, 1]), "pattern"),
        (lambda: TokenSequence(modulus=4, target=4), "target"),
    ],
)
def test_bad_env_arguments_name_the_argument(build, arg):
    with pytest.raises(ValueError, match=arg):
        build()
