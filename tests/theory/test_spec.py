"""The torch-free method spec: ClipSpec, presets, the one method-string format and the one label."""

from __future__ import annotations

import dataclasses
import itertools
import subprocess
import sys

import pytest

from divclip.theory import MEASURES, PRESETS, ClipSpec, method_string, parse_method, spec_label
from divclip.theory.conversions import delta_for_eps
from divclip.theory.spec import DEFAULT_EPS_LOW, LOSS_P_DEPENDENT, as_spec, parse_methods, preset


def test_importing_theory_and_the_spec_does_not_import_torch():
    code = (
        "import sys, divclip.theory, divclip.theory.spec, divclip.theory.reallocation\n"
        "from divclip.theory import ClipSpec, parse_method\n"
        "parse_method('atr'); parse_method('binary_kl:0.05/gated'); ClipSpec('kl3', delta=0.02).ratio_bounds()\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_clipspec_is_one_class_wherever_it_is_imported():
    from divclip.theory import losses, spec

    assert losses.ClipSpec is spec.ClipSpec is ClipSpec and losses.PRESETS is spec.PRESETS
    assert losses.preset is preset


def test_loss_p_dependent_measures_match_the_torch_solvers():
    from divclip.theory.forms._kernels import _TORCH_BOUNDS

    assert set(_TORCH_BOUNDS) == set(LOSS_P_DEPENDENT)


def test_presets_are_pairwise_distinct_and_named_by_their_string():
    for (a, sa), (b, sb) in itertools.combinations(PRESETS.items(), 2):
        assert sa != sb, f"presets {a} and {b} hold identical values"
    for name, spec in PRESETS.items():
        assert parse_method(name) is spec and method_string(spec) == name


@pytest.mark.parametrize(
    "text, expected",
    [
        ("kl3:0.023144", ClipSpec("kl3", delta=0.023144)),
        (" kl3:0.05 ", ClipSpec("kl3", delta=0.05)),
        ("ratio:0.2:0.28", ClipSpec("ratio", eps_low=0.2, eps_high=0.28)),
        ("ratio:0.1", ClipSpec("ratio", eps_low=0.1, eps_high=0.1)),
        ("ratio", ClipSpec("ratio", eps_low=0.2, eps_high=0.2)),
        ("binary_kl:0.05/gated/tis=20", ClipSpec("binary_kl", delta=0.05, form="gated", params={"tis_cap": 20.0})),
        ("binary_tv:0.1/cispo", ClipSpec("binary_tv", delta=0.1, form="cispo")),
        ("dapo/dual=3", ClipSpec("ratio", eps_low=0.2, eps_high=0.28, params={"dual_clip_c": 3.0})),
        ("atr/gated", ClipSpec("kl3", delta=delta_for_eps("kl3", eps_low=0.2), form="gated")),
        ("ratio:3e-4:4e-4/seq", ClipSpec("ratio", eps_low=3e-4, eps_high=4e-4, level="sequence")),
        ("sapo/tau=1:1.1", ClipSpec(form="sapo", params={"tau_pos": 1.0, "tau_neg": 1.1})),
        ("kl3/sapo", ClipSpec("kl3", form="sapo")),
        ("chi2:1.5/dual=2.5", ClipSpec("chi2", delta=1.5, params={"dual_clip_c": 2.5})),
    ],
)
def test_method_strings_parse_to_the_spec_and_back(text, expected):
    spec = parse_method(text)
    assert spec == expected
    assert parse_method(method_string(spec)) == spec


@pytest.mark.parametrize("name", sorted(n for n, m in MEASURES.items() if not m.p_dependent and n != "ratio"))
def test_a_bare_measure_puts_its_lower_bound_at_grpos(name):
    lo, _ = parse_method(name).ratio_bounds()
    assert lo == pytest.approx(1.0 - DEFAULT_EPS_LOW, rel=1e-10)


def test_method_string_round_trips_every_measure_and_option():
    specs = [ClipSpec(n, delta=0.0317) for n in MEASURES if n != "ratio"]
    specs += [ClipSpec("ratio", eps_low=0.13, eps_high=0.37, params={"dual_clip_c": 2.0 + 1 / 3})]
    specs += [dataclasses.replace(s, form="gated", params={"tis_cap": 7.25}) for s in specs[:3]]
    specs += [
        ClipSpec("kl3", delta=1 / 7, level="sequence"),
        ClipSpec(form="sapo", params={"tau_pos": 0.5, "tau_neg": 2.0}),
    ]
    for spec in specs:
        assert parse_method(method_string(spec)) == spec, method_string(spec)


@pytest.mark.parametrize(
    "text, message",
    [
        ("kl4", r"unknown method 'kl4': 'kl4' is neither a preset nor a measure; allowed: a preset \['atr'"),
        ("kl3:x", r"method 'kl3:x': the budget after 'kl3:' must be a finite number, got 'x'"),
        ("kl3:nan", r"must be a finite number, got 'nan'"),
        ("kl3:-1", r"method 'kl3:-1': ClipSpec.delta must be a finite number > 0, got -1.0"),
        ("kl3:0.1:0.2", r"a divergence measure takes one budget, 'kl3:delta'"),
        ("ratio:0.1:0.2:0.3", r"a ratio clip is 'ratio', 'ratio:eps' or 'ratio:eps_low:eps_high'"),
        ("binary_kl", r"the p-dependent measure 'binary_kl' needs a budget, e.g. 'binary_kl:0.05'"),
        ("grpo/foo", r"method 'grpo/foo': unknown option '/foo'; allowed:"),
        ("grpo/dual=", r"the dual-clip cap after 'dual=' must be a finite number, got ''"),
        ("grpo/tau=1", r"unknown option '/tau=1'"),
        ("dppo_kl/dual=3", r"method 'dppo_kl/dual=3': ClipSpec.dual_clip_c applies to form='clip' only"),
        ("kl3&dppo_kl", r"method 'kl3&dppo_kl': AllOf.parts\[1\] has form='gated'"),
        ("kl3@0.1", r"method 'kl3@0.1': after '@' comes SIGNAL=TARGET"),
        ("grpo,dapo", r"',' \(a list separator"),
        ("", r"method must be a non-empty string"),
        ("  ", r"method must be a non-empty string"),
    ],
)
def test_bad_method_strings_name_the_string_and_what_is_allowed(text, message):
    with pytest.raises(ValueError, match=message):
        parse_method(text)


def test_non_strings_are_refused():
    for bad in (None, 0.2, ["grpo"]):
        with pytest.raises(ValueError, match="method must be a non-empty string"):
            parse_method(bad)
        if bad is not None:
            with pytest.raises(ValueError, match="spec must be a ClipSpec or a method string"):
                as_spec(bad)


def test_labels_are_short_comma_free_and_tell_presets_apart():
    expected = {
        "grpo": "ratio 0.2/0.2",
        "dapo": "ratio 0.2/0.28",
        "atr": "kl3 δ=0.02314",
        "dppo_kl": "binary_kl δ=0.05 gated tis=20",
        "dppo_tv": "binary_tv δ=0.2 gated tis=20",
        "gspo": "ratio 0.0003/0.0004 seq",
        "sapo": "sapo τ=1/1.05",
    }
    assert {name: spec_label(spec) for name, spec in PRESETS.items()} == expected
    assert spec_label("dapo/dual=3") == "ratio 0.2/0.28 dual=3"
    assert spec_label(ClipSpec("chi2", delta=1.5, form="cispo")) == "chi2 δ=1.5 cispo"
    assert all("," not in label for label in expected.values())


def test_parse_methods_keeps_order_and_labels():
    specs = parse_methods("grpo, kl3:0.05 ,ratio:0.2:0.28")
    assert list(specs) == ["grpo", "kl3:0.05", "ratio:0.2:0.28"]
    assert specs["kl3:0.05"] == ClipSpec("kl3", delta=0.05)
    mixed = parse_methods([PRESETS["dapo"], ("mine", "chi2:0.3"), "atr"])
    assert list(mixed) == ["ratio 0.2/0.28", "mine", "atr"] and mixed["mine"] == ClipSpec("chi2", delta=0.3)
    with pytest.raises(ValueError, match="unique and comma-free, got 'grpo'"):
        parse_methods("grpo,grpo")
    with pytest.raises(ValueError, match="at least one method"):
        parse_methods(" , ")


def _theory_imports() -> dict[str, set[str]]:
    """module -> the divclip.theory modules it imports anywhere in its source (function-level imports too)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "theory"
    graph = {}
    for path in root.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("divclip.theory."):
                found.add(node.module.split(".")[2])
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[2] for a in node.names if a.name.startswith("divclip.theory.")}
        graph[path.stem] = found - {path.stem}
    return graph


def test_theory_modules_import_each_other_without_cycles():
    graph = _theory_imports()
    assert {"reallocation", "softmax_dynamics", "spec", "comparison"} <= set(graph)
    state: dict[str, int] = {}

    def visit(node, path):
        assert state.get(node) != 1, f"import cycle: {' -> '.join([*path, node])}"
        if state.get(node) == 2:
            return
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, [*path, node])
        state[node] = 2

    for module in sorted(graph):
        visit(module, [])
    assert "softmax_dynamics" not in graph["reallocation"]  # the LP maths stays torch-free (see the first test)


def test_bare_kl3_is_the_atr_preset():
    """'kl3' means the budget whose lower bound is 1 - 0.2, which is ATR-GRPO: one spec, not two a float apart."""
    assert parse_method("kl3") == PRESETS["atr"] == parse_method("atr")
    assert PRESETS["atr"].ratio_bounds()[0] == pytest.approx(0.8, rel=1e-15)
