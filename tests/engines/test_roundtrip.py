"""Round trips through every engine: each format `divclip export` writes is read back by `divclip check` (the
engine detected, the format sniffed from the text alone), and for every method an engine can express,
`from_engine(to_engine(spec))` has the same ratio bounds, loss form and level; translating A -> B -> A is the
identity on what both express; an engine that cannot express a method raises a ValueError naming what is missing.

The engines come from `divclip.engines.available_engines()`, so a new engine module is tested here as soon as
it exists; an engine's refusals are listed in CANNOT (engine -> {method: words the error must contain}).
"""

from __future__ import annotations

import dataclasses

import pytest

from divclip import engines
from divclip.cli import main
from divclip.engines.advice import REFERENCE_P
from divclip.sanity import build_report
from divclip.theory.spec import PRESETS, parse_method

METHODS = [
    *sorted(PRESETS),
    "ratio:0.1:0.3",
    "kl3:0.01",
    "k2:0.02",
    "chi2:0.05/dual=2.5",
    "binary_kl:0.05",
    "binary_tv:0.2",
    "ratio:0.2:0.28/cispo",
    "dapo/dual=3",
    "dapo/dual=1.2",  # a dual clip below 1 + ε_high (issue 36: TRL's delta would cap A > 0 tokens too)
    "ratio:0.2:2.5/dual=3",  # verl's default c = 3 under clip_ratio_high = 2.5
    "ratio:0.2:0.28/seq/dual=1.2",
    "kl3:0.023144&binary_tv:0.2",
    "kl3@clipfrac=0.1",
]
CANNOT = {
    "trl": {
        "dppo_kl": "TRL has no 'gated' loss form",
        "dppo_tv": "TRL has no 'gated' loss form",
        "ratio:0.2:0.28/seq/dual=1.2": r"TRL's delta caps the ratio of every token .* below 1 \+ ε_high = 1.28",
    },
    # OpenRLHF, AReaL and slime clip the ratio only and load no plug-in (docs/engines.md)
    **{
        engine: {
            "dppo_kl": "has no 'gated' loss form",
            "dppo_tv": "has no 'gated' loss form",
            "binary_kl:0.05": "clips each token by its own p",
            "binary_tv:0.2": "clips each token by its own p",
            "kl3:0.023144&binary_tv:0.2": "clips each token by its own p",
            "kl3@clipfrac=0.1": "adapts δ during training",
            **({} if engine == "areal" else {"sapo": "has no 'sapo' loss form"}),
            **({} if engine == "slime" else {"ratio:0.2:0.28/cispo": "has no 'cispo(_cap)?' loss form"}),
        }
        for engine in ("openrlhf", "areal", "slime")
    },
}
CASES = [(e, m) for e in engines.available_engines() for m in METHODS]


def bounds(spec):
    """What must survive a round trip: loss form, level, and the clip interval (per p where it depends on p)."""
    from divclip.theory.spec import AllOf, is_adaptive

    key = (spec.form, spec.level, type(spec).__name__, spec.param("dual_clip_c", None))
    if spec.form == "sapo":  # verl's sapo fixes its aggregation (sapo_seq_mean=1): that travels as loss_agg_mode
        spec = dataclasses.replace(spec, params={})
    if isinstance(spec, AllOf) or is_adaptive(spec) or spec.form == "sapo":
        return key, dataclasses.replace(
            spec, params={**dict(spec.params), "clamp_log_ratio": True}
        )  # TRL never clamps log r: not a clip bound
    if spec.eps_low is None and spec.delta is None:
        return key, dict(spec.params)
    if spec.p_dependent:
        m = spec.measure_name
        from divclip.theory.measures import get_measure

        return key, [get_measure(m).bounds(spec.delta, p) for p in REFERENCE_P]
    return key, spec.ratio_bounds()


def same(a, b):
    (ka, va), (kb, vb) = bounds(a), bounds(b)
    assert ka == kb
    if isinstance(va, (tuple, list)) and va and isinstance(va[0], (float, tuple)):
        flat = lambda v: [float(x) for item in v for x in (item if isinstance(item, tuple) else (item,))]  # noqa: E731
        assert flat(va) == pytest.approx(flat(vb), rel=1e-12)  # pytest >= 9.1 refuses nested sequences
    else:
        assert va == vb


def written(engine, method):
    """(spec, EngineWrite), or (spec, None) where the engine cannot express the method exactly: it refuses
    (CANNOT), or writes the nearest it can with each difference named."""
    spec = parse_method(method)
    refused = CANNOT.get(engine, {}).get(method)
    if refused is not None:
        with pytest.raises(ValueError, match=refused):
            engines.write(spec, engine)
        return spec, None
    out = engines.write(spec, engine)
    inexact = [d for d in out.differences if not d.exact]
    for d in inexact:
        assert d.what and d.nearest and str(d) in out.text()  # named, in the text too
    return spec, None if inexact else out


@pytest.mark.parametrize("engine, method", CASES)
def test_from_engine_of_to_engine_keeps_bounds_form_and_level(engine, method):
    spec, out = written(engine, method)
    if out is None:
        return
    same(engines.from_engine(engine, out.flat()), spec)


@pytest.mark.parametrize("engine, method", CASES)
def test_every_format_reads_back_through_divclip_check(engine, method):
    spec, out = written(engine, method)
    if out is None:
        return
    want = engines.read(engine, out.flat())
    for fmt in engines.get_engine(engine).FORMATS:
        text = out.text(fmt)
        report = build_report(text.encode(), config_name="stdin")  # no suffix: the format is sniffed
        c = report["config"]
        assert (c["framework"], c["method"], c["loss_agg_mode"]) == (engine, *_method_and_agg(want)), fmt
        assert c["unknown_keys"] == [] and not [w for w in report["warnings"] if w["code"] == "unknown_key"]
        same(parse_method(c["method"]), spec)


def _method_and_agg(read):
    from divclip.theory.spec import method_string

    return method_string(read.spec), read.loss_agg_mode


@pytest.mark.parametrize("engine, method", CASES)
def test_the_recipe_travels_with_the_clip(engine, method):
    spec, out = written(engine, method)
    if out is None:
        return
    recipe = engines.base.recipe_for(spec)
    got = engines.read(engine, out.flat()).loss_agg_mode
    if recipe is not None:
        assert got == recipe.loss_agg_mode
    assert engines.read(engine, engines.write(spec, engine, loss_agg_mode=got).flat()).loss_agg_mode == got


PAIRS = [(a, b) for a in engines.available_engines() for b in engines.available_engines() if a != b]


@pytest.mark.parametrize("src, dst", PAIRS)
@pytest.mark.parametrize("method", METHODS)
def test_translate_there_and_back_is_the_identity_on_what_both_express(src, dst, method):
    spec = parse_method(method)
    if method in CANNOT.get(src, {}):
        return
    settings = engines.to_engine(spec, src)
    kept = engines.read(src, settings).spec.param("dual_clip_c", None) == spec.param("dual_clip_c", None)
    if method in CANNOT.get(dst, {}) and kept:  # (verl's gspo has no dual clip: what TRL refuses is gone there)
        with pytest.raises(ValueError, match=CANNOT[dst][method]):
            engines.translate(settings, src, dst)
        return
    there, diffs = engines.translate(settings, src, dst)
    back, _ = engines.translate(there, dst, src)
    first, last = engines.read(src, settings), engines.read(src, back)
    if any(not d.exact for d in diffs):  # a named difference: what both express survives, the rest is named
        assert all(d.what and d.nearest for d in diffs)
        return
    same(last.spec, first.spec)
    assert last.loss_agg_mode == first.loss_agg_mode


def test_export_dapo_for_trl_pipes_into_check(capsys):
    """The issue's failure: the default Python output was not readable by `divclip check`."""
    assert main(["export", "--method", "dapo", "--engine", "trl"]) == 0
    text = capsys.readouterr().out
    report = build_report(text.encode(), config_name="/dev/stdin")
    assert report["config"]["kind"] == "python" and report["config"]["method"] == "ratio:0.2:0.28/noclamp"
    assert report["config"]["loss_agg_mode"] == "token-mean"
