"""Nothing beside the clip that changes the loss is silent (issue 31 item 3): an entropy bonus, a KL term in the
loss or in the reward, TRL's top-entropy filter are named in each engine's read (and so in `divclip check`) when
on, by default or as set; off, they are not mentioned. The keys and defaults are the engines' own
(tests/engines/test_engine_defaults.py and each engine's keys test check KEYS against the installed code)."""

import pytest

from divclip import engines

A = "actor_rollout_ref.actor."
SK = "trainer.algorithm."

ON = [
    ("verl", {A + "entropy_coeff": 0.001}, f"{A}entropy_coeff = 0.001: an entropy bonus"),
    ("verl", {A + "use_kl_loss": True, A + "kl_loss_type": "k3"}, "kl_loss_coef = 0.001, kl_loss_type = k3"),
    ("verl", {"algorithm.use_kl_in_reward": True}, "a KL penalty subtracted from the reward"),
    ("trl", {"beta": 0.04}, "beta = 0.04, use_bias_correction_kl = True: a KL-to-reference term"),
    ("trl", {"beta": 0.04, "use_bias_correction_kl": False}, "added per token (not part"),
    ("trl", {"top_entropy_quantile": 0.2}, "top_entropy_quantile = 0.2: only the tokens in the top quantile"),
    ("trl", {"entropy_coef": 0.01}, "entropy_coef = 0.01, use_adaptive_entropy = False: an entropy bonus"),
    ("trl", {"use_adaptive_entropy": True}, "(adapted each step)"),
    ("openrlhf", {}, "--algo.kl.init_coef 0.01 (--algo.kl.use_loss off), --algo.kl.estimator k1: a KL penalty"),
    (
        "openrlhf",
        {"--algo.kl.use_loss": True, "--algo.kl.estimator": "k3"},
        "--algo.kl.use_loss, --algo.kl.estimator k3",
    ),
    ("openrlhf", {"--actor.entropy_coef": "0.001"}, "--actor.entropy_coef 0.001: an entropy bonus"),
    ("areal", {"ref.path": "/ckpt/ref"}, "actor.kl_ctl = 0.1 with a ref model, kl_estimator = k1"),
    ("skyrl", {}, f"{SK}use_kl_loss = true, kl_loss_coef = 0.001, kl_estimator_type = k3"),
    ("skyrl", {SK + "use_entropy_loss": True}, "entropy_loss_coef = 0.01: an entropy bonus"),
    ("skyrl", {SK + "use_kl_loss": False, SK + "use_kl_in_reward": True}, "use_kl_in_reward = true"),
    (
        "slime",
        {"--use-kl-loss": True, "--kl-loss-coef": "0.01"},
        "--use-kl-loss, --kl-loss-coef 0.01, --kl-loss-type k1",
    ),
    ("slime", {"--kl-coef": "0.05"}, "--kl-coef 0.05: a KL penalty to the reference added to the token rewards"),
    ("slime", {"--entropy-coef": "0.001"}, "--entropy-coef 0.001: an entropy bonus"),
]

OFF = [
    ("verl", {}),
    ("verl", {A + "entropy_coeff": 0}),
    ("trl", {}),
    ("trl", {"top_entropy_quantile": 1.0, "beta": 0.0}),
    ("openrlhf", {"--algo.kl.init_coef": "0"}),
    ("areal", {}),  # kl_ctl = 0.1 by default, but no ref model: AReaL creates none and adds no penalty
    ("areal", {"ref.path": "/ckpt/ref", "actor.kl_ctl": 0.0}),
    ("skyrl", {SK + "use_kl_loss": False}),
    ("slime", {"--use-kl-loss": True}),  # slime's --kl-loss-coef defaults to 0: the term is zero
]


def _terms(read) -> list[str]:
    return [n for n in read.notes if n.startswith("beside the clip: ")]


@pytest.mark.parametrize("engine,settings,needle", ON, ids=[f"{e}-{i}" for i, (e, _, _) in enumerate(ON)])
def test_a_term_beside_the_clip_is_named(engine, settings, needle):
    terms = _terms(engines.read(engine, settings))
    assert any(needle in t for t in terms), terms
    assert all(t.endswith("(not part of divclip's clip analysis)") for t in terms)


@pytest.mark.parametrize("engine,settings", OFF, ids=[f"{e}-{i}" for i, (e, _) in enumerate(OFF)])
def test_no_term_no_note(engine, settings):
    assert _terms(engines.read(engine, settings)) == []


def test_check_prints_the_terms_in_its_notes(tmp_path):
    from divclip.sanity import build_report
    from divclip.sanity.text import format_report

    config = tmp_path / "run.txt"
    config.write_text(f"{A}entropy_coeff=0.001\n{A}use_kl_loss=true\n")
    text = format_report(build_report(config))
    notes = text[text.index("Notes:") :]
    assert "beside the clip: actor_rollout_ref.actor.entropy_coeff = 0.001" in notes
    assert "beside the clip: actor_rollout_ref.actor.use_kl_loss = true" in notes
