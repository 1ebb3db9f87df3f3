"""Counter-based random numbers: uniform, independent across seeds, and independent of batch composition."""

import numpy as np
import pytest
import torch
from scipy import stats

from divclip.toy_envs import rng


def test_uniforms_are_uniform_and_open_interval():
    u = rng.uniform(rng.seed_keys(torch.arange(4)), step=7, n=50_000)
    assert u.shape == (4, 50_000) and u.dtype == torch.float64
    assert bool((u > 0).all() and (u < 1).all())
    for row in u.numpy():
        assert stats.kstest(row, "uniform").pvalue > 1e-4


def test_seeds_steps_and_streams_give_uncorrelated_numbers():
    keys = rng.seed_keys(torch.tensor([0, 1]))
    a = rng.uniform(keys, 1, 20_000).numpy()
    b = rng.uniform(keys, 2, 20_000).numpy()
    c = rng.uniform(keys, 1, 20_000, stream=1).numpy()
    pairs = [(a[0], a[1]), (a[0], b[0]), (a[0], c[0]), (a[0][:-1], a[0][1:])]
    for x, y in pairs:
        assert abs(np.corrcoef(x, y)[0, 1]) < 4 / np.sqrt(len(x))  # 4 standard errors of a null correlation


def test_a_seed_draws_the_same_numbers_alone_or_in_a_batch():
    alone = rng.uniform(rng.seed_keys(torch.tensor([3])), 5, 100)
    batch = rng.uniform(rng.seed_keys(torch.tensor([9, 3, 0, 2**40 + 3])), 5, 100)
    assert torch.equal(alone[0], batch[1])
    assert not torch.equal(batch[1], batch[3])  # the high 32 bits of a seed count


def one_step_reference(keys, step, n, stream):
    """The per-step recipe of the module docstring, written out with Python ints for the step's salt."""
    mask, golden = 0xFFFFFFFF, 0x9E3779B9
    salt = rng._mix32((rng._mix32(step & mask) ^ (step >> 32) ^ (stream * golden)) & mask)
    k = (keys ^ salt).unsqueeze(1)
    ctr = (torch.arange(n, dtype=torch.int64) * golden) & mask
    return (rng._mix32(rng._mix32(k ^ ctr) ^ k).to(torch.float64) + 0.5) * 2.0**-32


def test_a_block_of_steps_draws_what_the_steps_draw_one_by_one():
    keys = rng.seed_keys(torch.tensor([0, 3, 2**40 + 3]))
    block = rng.uniform_steps(keys, 2**32 - 2, 5, 37, stream=2)  # crosses the 32-bit step boundary
    assert block.shape == (3, 5, 37)
    for i in range(5):
        ref = one_step_reference(keys, 2**32 - 2 + i, 37, stream=2)
        assert torch.equal(block[:, i], ref) and torch.equal(rng.uniform(keys, 2**32 - 2 + i, 37, stream=2), ref)
    assert not torch.equal(block[:, 0], block[:, 1])
    for bad, arg in (({"count": 0}, "count"), ({"n": -1}, "n must"), ({"count": 2.0}, "count")):
        with pytest.raises(ValueError, match=arg):
            rng.uniform_steps(keys, **{"first_step": 1, "count": 3, "n": 4, **bad})


def test_mix_agrees_on_python_ints_and_tensors():
    xs = [0, 1, 12345, 2**32 - 1]
    assert rng._mix32(torch.tensor(xs)).tolist() == [rng._mix32(x) for x in xs]
    assert len({rng._mix32(x) for x in range(10_000)}) == 10_000  # a bijection has no collisions


def test_box_muller_normals():
    keys = rng.seed_keys(torch.tensor([0]))
    z = rng.normal_from_uniform(rng.uniform(keys, 0, 40_000, 1), rng.uniform(keys, 0, 40_000, 2))[0].numpy()
    assert stats.kstest(z, "norm").pvalue > 1e-4
