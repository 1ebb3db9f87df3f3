"""Rollout files under verl's and TRL's own tensor names; what a file lacks is said with the keys it has; a check
without a config says what it assumed (issue 26 item 8)."""

import io
import json

import numpy as np
import pytest

from divclip.sanity.errors import RolloutFileError
from divclip.sanity.loaders import load_rollouts
from divclip.sanity.report import build_report


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


LP = np.array([[-0.5, -1.0, -2.0], [-0.1, -0.2, -0.3]], np.float32)
MASK = np.array([[1, 1, 0], [1, 1, 1]], np.int64)
ADV = np.array([1.0, -1.0], np.float32)


def test_verl_names_are_read():
    data = _npz(old_log_probs=LP, log_probs=LP + 0.1, advantages=np.repeat(ADV[:, None], 3, 1), response_mask=MASK)
    r = load_rollouts(data, name="verl_batch.npz")
    assert np.allclose(r.old_log_prob[MASK > 0], LP[MASK > 0]) and r.log_prob is not None
    assert r.response_mask.tolist() == MASK.tolist()


def test_trl_names_are_read_with_per_sequence_advantages():
    data = _npz(old_per_token_logps=LP, per_token_logps=LP, advantages=ADV, completion_mask=MASK)
    r = load_rollouts(data, name="trl_batch.npz")
    assert r.advantages[:, 0].tolist() == [1.0, -1.0] and r.shape == (2, 3)
    assert "advantages are one number per sequence" in " ".join(r.notes)


def test_trl_names_in_jsonl():
    lines = [
        json.dumps({"old_per_token_logps": [-0.5, -1.0], "advantages": 1.0, "completion_mask": [1, 1]}),
        json.dumps({"old_per_token_logps": [-0.2], "advantages": -1.0, "completion_mask": [1]}),
    ]
    r = load_rollouts("\n".join(lines).encode(), name="trl.jsonl")
    assert r.shape == (2, 2) and r.n_tokens == 3


def test_missing_fields_list_the_keys_the_file_really_has():
    data = _npz(logits=LP, sequence_ids=MASK, rewards=ADV)
    with pytest.raises(RolloutFileError) as info:
        load_rollouts(data, name="other.npz")
    message = str(info.value)
    assert "it has [logits, rewards, sequence_ids]" in message  # not "it has []"
    assert "old_log_prob (or old_log_probs / old_per_token_logps)" in message


def test_one_field_under_two_names_is_refused():
    with pytest.raises(
        RolloutFileError,
        match=r"'both.npz' has old_log_prob twice, as \['old_log_prob', "
        r"'old_log_probs'\]",
    ):
        load_rollouts(_npz(old_log_prob=LP, old_log_probs=LP, advantages=ADV, response_mask=MASK), name="both.npz")


def test_without_a_config_the_assumed_defaults_are_said():
    data = _npz(old_log_prob=LP, log_prob=LP + 0.05, advantages=np.repeat(ADV[:, None], 3, 1), response_mask=MASK)
    report = build_report(rollouts=data, rollouts_name="r.npz")
    assert report["budget"]["source"] == "assumed: no config"
    assert any(
        n.startswith("no config given: assumed verl's and TRL's default ratio clip ε_low = ε_high = 0.2")
        for n in report["notes"]
    )
