"""Hostile inputs to the engines API (issue 36): a clear ValueError naming the key, never an OverflowError,
TypeError or AttributeError from inside a reader; a setting the chosen loss ignores is a warning; no export
writes a setting whose meaning in the target differs from the method's."""

from __future__ import annotations

import pytest

from divclip import engines
from divclip.engines import ENGINES
from divclip.sanity.errors import ConfigError
from divclip.theory.spec import parse_method

BIG = int("9" * 400)  # beyond float64: float(BIG) raises OverflowError

# One float key of each engine, in the engine's own spelling.
FLOAT_KEY = {
    "verl": "actor_rollout_ref.actor.clip_ratio_high",
    "trl": "epsilon",
    "openrlhf": "--actor.eps_clip",
    "areal": "actor.eps_clip",
    "skyrl": "trainer.algorithm.eps_clip_high",
    "slime": "--eps-clip",
}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_400_digit_integer_in_a_float_key_is_named(engine):
    key = FLOAT_KEY[engine]
    assert engines.get_engine(engine).detect({key: 0.2}) > 0  # the key is the engine's own
    with pytest.raises(ConfigError, match=rf"{key} must be a finite number.*got an integer of 400 digits"):
        engines.read(engine, {key: BIG})


def test_a_400_digit_integer_through_translate_is_named():
    with pytest.raises(ConfigError, match="clip_ratio_high must be a finite number.*integer of 400 digits"):
        engines.translate({FLOAT_KEY["verl"]: BIG}, "verl", "trl")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("key", [1, (1, 2), None, b"epsilon"])
def test_a_non_string_key_is_named(engine, key):
    settings = {key: 2, FLOAT_KEY[engine]: 0.2}
    with pytest.raises(ConfigError, match=r"settings keys must be strings .*got "):
        engines.read(engine, settings)
    with pytest.raises(ConfigError, match=r"settings keys must be strings"):
        engines.get_engine(engine).read(settings)  # the module's own read, as `divclip check` calls it


# ------------------------------------------------------------------------------ hydra interpolation chains
def _chain_yaml(links: int) -> bytes:
    lines = ["actor:", f"  eps_clip: ${{x.k{links - 1}}}", "x:", "  k0: 0.3"]
    lines += [f"  k{i}: ${{x.k{i - 1}}}" for i in range(1, links)]
    return ("\n".join(lines) + "\n").encode()


class _CountingPattern:
    """hydra._REF with a count of its matches: the work the resolver does, without a clock."""

    def __init__(self, pattern):
        self.pattern, self.calls = pattern, 0

    def match(self, text):
        self.calls += 1
        return self.pattern.match(text)


def test_a_5000_link_interpolation_chain_resolves_in_linear_work(monkeypatch):
    """Issue 36: a 150 kB YAML chaining 5000 `${...}` hung (each key walked the chain afresh)."""
    from divclip.engines import hydra
    from divclip.engines.config import read_config

    links = 5000
    raw = read_config(_chain_yaml(links), name="chain.yaml")
    counter = _CountingPattern(hydra._REF)
    monkeypatch.setattr(hydra, "_REF", counter)
    found = engines.read("areal", raw.values)
    assert found.budget_low == 0.3 and found.keys["actor.eps_clip"] == {"value": 0.3, "origin": "set"}
    assert counter.calls <= 2 * len(raw.values)  # each key's value looked at once or twice, not once per link


def test_interpolation_chains_and_cycles():
    from divclip.engines.hydra import resolve_interpolations

    got = resolve_interpolations({"a": "${b}", "b": "${c}", "c": 0.2, "d": "${oc.env:X}", "e": "${nowhere}"})
    assert got == {"a": 0.2, "b": 0.2, "c": 0.2, "d": "${oc.env:X}", "e": "${nowhere}"}
    with pytest.raises(ConfigError, match=r"^a interpolates itself through a -> b -> a$"):
        resolve_interpolations({"a": "${b}", "b": "${a}"})
    with pytest.raises(ConfigError, match=r"^s interpolates itself through s -> s$"):
        resolve_interpolations({"s": "${s}"})
    ring = {f"k{i}": f"${{k{(i + 1) % 20}}}" for i in range(20)}
    with pytest.raises(
        ConfigError, match=r"^k0 interpolates itself through k0 -> k1 -> k2 -> \.\.\. -> k17 -> k18 -> k19 -> k0$"
    ):
        resolve_interpolations(ring)


# -------------------------------------------------------------------------- no setting with other semantics
@pytest.mark.parametrize("method, c, hi", [("dapo/dual=1.2", 1.2, 1.28), ("ratio:0.2:2.5/dual=3", 3.0, 3.5)])
def test_trl_never_gets_a_delta_below_the_upper_clip(method, c, hi):
    """Issue 36: c < 1 + ε_high was written as TRL's `delta`, which caps every token (A > 0 too)."""
    out = engines.write(method, "trl")
    assert "delta" not in out.settings and out.config_class == "DivClipGRPOConfig"
    assert parse_method(out.settings["clip_method"]) == parse_method(method)
    assert f"a dual clip c = {c:g} below 1 + ε_high = {hi:g}" in out.text()
    assert engines.from_engine("trl", out.flat()) == parse_method(method)  # reads back to the same method


def test_verls_default_dual_clip_under_a_wide_upper_clip_translates_to_trl_exactly():
    settings = {"actor_rollout_ref.actor.clip_ratio_high": 2.5}  # clip_ratio_c stays verl's default 3
    there, diffs = engines.translate(settings, "verl", "trl")
    assert "delta" not in there and parse_method(there["clip_method"]) == parse_method("ratio:0.2:2.5/dual=3")
    structure = tuple(what for _, what in engines.STRUCTURE)  # TRL's default group size and updates are named
    assert [d for d in diffs if not d.what.startswith(structure)] == []
    assert engines.from_engine("trl", there) == engines.from_engine("verl", settings)


def test_verls_gspo_names_the_dual_clip_it_drops():
    out = engines.write("ratio:0.2:0.28/seq/dual=1.2", "verl")
    assert [str(d) for d in out.differences] == [
        "the dual clip c = 1.2: verl's gspo has none (compute_policy_loss_gspo reads no clip_ratio_c): written "
        "without it"
    ]


# ------------------------------------------------------------------------- keys the chosen loss ignores
IGNORED = [
    ("verl", {"actor_rollout_ref.actor.policy_loss.loss_mode": "sapo"}, "actor_rollout_ref.actor.clip_ratio_high", 0.3),
    ("verl", {"actor_rollout_ref.actor.policy_loss.loss_mode": "sapo"}, "actor_rollout_ref.actor.clip_ratio", 0.3),
    ("verl", {"actor_rollout_ref.actor.policy_loss.loss_mode": "gspo"}, "actor_rollout_ref.actor.clip_ratio_c", 5.0),
    ("trl", {"loss_type": "sapo"}, "epsilon", 0.3),
    ("trl", {"loss_type": "sapo"}, "epsilon_high", 0.3),
    ("trl", {"loss_type": "cispo"}, "delta", 4.0),
    ("areal", {"actor.use_sapo_loss": True}, "actor.eps_clip", 0.3),
    ("areal", {"actor.use_sapo_loss": True}, "actor.eps_clip_higher", 0.3),
    ("skyrl", {"trainer.algorithm.policy_loss_type": "sapo"}, "trainer.algorithm.eps_clip_low", 0.3),
    ("skyrl", {"trainer.algorithm.policy_loss_type": "sapo"}, "trainer.algorithm.clip_ratio_c", 5.0),
    ("slime", {"--advantage-estimator": "cispo"}, "--eps-clip-c", 3.0),
]


@pytest.mark.parametrize("engine, loss, key, value", IGNORED, ids=[f"{e}-{k}" for e, _, k, _ in IGNORED])
def test_a_key_the_chosen_loss_ignores_is_a_warning_naming_it(engine, loss, key, value):
    """Issue 36: clip widths under SAPO, TRL delta under cispo, ... were taken in silence."""
    ignored = [a for a in engines.read(engine, {**loss, key: value}).advice if a.code == "ignored_key"]
    mode = engines.read(engine, loss).loss_mode
    assert [(a.key, a.message) for a in ignored] == [
        (key, f"{key} = {value!r} is ignored: the {engine} loss {mode!r} does not read it")
    ]
    assert ignored[0].source.startswith(engine if engine != "trl" else "TRL")
    assert not [a for a in engines.read(engine, loss).advice if a.code == "ignored_key"]  # unset: no warning


def test_the_warning_reaches_divclip_check():
    from divclip.sanity import build_report

    report = build_report(b"loss_type: cispo\nepsilon_high: 4.0\ndelta: 4.0\n", config_name="c.yaml")
    assert [w["key"] for w in report["warnings"] if w["code"] == "ignored_key"] == ["delta"]
