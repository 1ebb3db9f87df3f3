"""The GSPO scale warning states its condition, and with a rollout file gives that batch's own figure (issue 26
item 7: it said the sequence ratio moves "about 1000× less"; on a real batch it was 12×)."""

import io

import numpy as np

from divclip.sanity.report import build_report
from divclip.sanity.rollouts import sequence_spread

GSPO_WITH_TOKEN_EPS = [
    "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
    "actor_rollout_ref.actor.clip_ratio_low=0.2",
    "actor_rollout_ref.actor.clip_ratio_high=0.28",
]


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_sequence_spread_is_token_std_over_sequence_mean_std():
    rng = np.random.default_rng(0)
    lr = rng.standard_normal((64, 100)) * 0.1
    inside = np.ones_like(lr, dtype=bool)
    got = sequence_spread(lr, inside)
    assert got["ratio"] == lr.std() / lr.mean(axis=1).std()
    assert 7 < got["ratio"] < 13  # independent tokens: about √100 = 10
    shared = np.repeat(rng.standard_normal((64, 1)) * 0.1, 100, axis=1)  # every token of a row moves together
    assert abs(sequence_spread(shared, inside)["ratio"] - 1) < 1e-9


def _warning(report):
    found = [w["message"] for w in report["warnings"] if w["code"] == "sequence_ratio_token_eps"]
    assert len(found) == 2  # ε_low and ε_high, both token-level widths
    return found[0]


def test_without_rollouts_the_warning_states_the_condition_not_a_fixed_factor():
    message = _warning(build_report(overrides=GSPO_WITH_TOKEN_EPS))
    assert "1000×" not in message
    assert "by √|o| if token log-ratios were independent" in message
    assert "`divclip check --rollouts` with log_prob measures it on your batch" in message


def test_with_rollouts_the_warning_gives_the_batchs_own_figure():
    rng = np.random.default_rng(1)
    old = -rng.random((8, 50)).astype(np.float32) - 0.1
    new = old + (0.05 * rng.standard_normal((8, 50))).astype(np.float32)
    data = _npz(
        old_log_prob=old,
        log_prob=new,
        advantages=np.ones((8, 50), np.float32),
        response_mask=np.ones((8, 50), np.float32),
    )
    report = build_report(overrides=GSPO_WITH_TOKEN_EPS, rollouts=data, rollouts_name="b.npz")
    expected = sequence_spread((new.astype(np.float64) - old.astype(np.float64)), np.ones((8, 50), bool))["ratio"]
    assert f"on 'b.npz' the sequence log-ratio's std is {expected:.3g}× smaller than the token log-ratios'" in _warning(
        report
    )
