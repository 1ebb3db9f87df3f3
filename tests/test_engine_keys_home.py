"""Every engine's key names have one home: `divclip.engines` (and the plug-ins in trainer/integrations/).

Issue 23 item 1: a verl, TRL, OpenRLHF, AReaL, SkyRL or slime key spelled anywhere else is a second copy that goes
stale when the engine renames it. This scans the string literals and comments of every .py file under app/, cli/,
sanity/, theory/, toy_envs/ and trainer/ (trainer/integrations/ excepted) for the keys of every engine module's
KEYS / PLUGIN_KEYS / ROLES tables: the whole key (`actor_rollout_ref.actor.clip_ratio_low`, `--actor.eps_clip`)
and its plain last component where that is distinctive (`clip_ratio_low`, `eps_clip_low_high`, `epsilon_high`).

A last component is not distinctive when it is one plain word (`epsilon`, `delta`, `n`), one of divclip's own
names (a ClipSpec / form / policy_loss / TrainerConfig / EngineRead field or an EngineRead role: the engines took
some of their names from the same papers), the name of a loss an engine key chooses between (verl's loss_mode
`bypass_mode`), or a generic batch word in GENERIC. Code that needs an engine's key takes it from the engine
module (`verl.ROLES["eps_high"]`), and prose says what the setting is ("verl's dual-clip cap c").
"""

import dataclasses
import inspect
import io
import re
import tokenize
from pathlib import Path

import divclip.theory
from divclip.engines import ENGINES, EngineRead, get_engine
from divclip.theory import policy_loss
from divclip.theory.forms import FORMS
from divclip.theory.spec import AdaptiveSpec, ClipSpec
from divclip.trainer.config import TrainerConfig

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("app", "cli", "sanity", "theory", "toy_envs", "trainer")
SKIPPED = ("trainer/integrations",)  # the plug-ins run inside the engine and read its config by its names
GENERIC = {"batch_size", "max_epochs"}  # OpenRLHF/AReaL last components that are everyday words (a batch's size)

# (file, key) pairs allowed to stay, each with why. A docstring that shows a file format with one real key.
ALLOWED: set = set()
"""(file, key) pairs allowed to spell an engine key outside divclip.engines: none (format examples in docstrings
use neutral names such as `section.group.key`)."""
PENDING: set = set()
"""(file, key) pairs waiting for a rewording in a file another branch is editing (none now)."""


def _cli_flags() -> set:
    """Every long option of divclip's own command line (each subcommand's), without its dashes."""
    from divclip.cli import build_parser

    out, parsers = set(), [build_parser()]
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            out |= {o.lstrip("-") for o in action.option_strings if o.startswith("--")}
            if isinstance(action.choices, dict):  # the subcommands' parsers
                parsers += [p for p in action.choices.values() if hasattr(p, "_actions")]
    return out


def _divclip_names() -> set:
    """divclip's own names: fields of its specs, forms, loss, trainer config and engine read, and role names."""
    names = {f.name for cls in (ClipSpec, AdaptiveSpec, TrainerConfig, EngineRead) for f in dataclasses.fields(cls)}
    names |= set(divclip.theory.__all__)  # divclip's own public names (`kl_penalty`, the k1/k2/k3 penalty)
    names |= _cli_flags()  # divclip's own command-line flags (`divclip train --kl-coef`)
    names |= {p.name for form in FORMS.values() for p in form.params}
    names |= set(inspect.signature(policy_loss).parameters)
    for engine in ENGINES:
        module = get_engine(engine)
        names |= set(getattr(module, "ROLES", {})) | set(getattr(module, "ROLE_KEYS", {}))
    return names


def engine_keys() -> dict:
    """{name to look for: the engines whose key it is}."""
    own = _divclip_names()
    out: dict = {}
    for engine in ENGINES:
        module = get_engine(engine)
        tables = {**getattr(module, "KEYS", {}), **getattr(module, "PLUGIN_KEYS", {})}
        keys = set(tables) | set(getattr(module, "ROLES", {}).values()) | set(getattr(module, "ROLE_KEYS", {}).values())
        loss_names = {str(c) for spec in tables.values() for c in spec.choices}
        for key in keys:
            whole = key.lstrip("-")
            last = whole.rsplit(".", 1)[-1]
            for name in {whole, last}:
                plain = not re.search(r"[_.-]", name)
                if name == whole and "." in name or not (plain or name in own or name in loss_names or name in GENERIC):
                    out.setdefault(name, set()).add(engine)
    return out


def _pattern(names) -> re.Pattern:
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<!\w)({alternatives})(?![\w-])")


def _texts(path: Path):
    """(line, text) of every string literal and comment in a .py file."""
    kinds = {tokenize.STRING, tokenize.COMMENT, getattr(tokenize, "FSTRING_MIDDLE", -1)}
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type in kinds:
            yield tok.start[0], tok.string


def scanned_files():
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith(SKIPPED):
                yield rel, path


def findings() -> list:
    """[(file, line, key)] of every engine key spelled in a scanned file's strings or comments."""
    pattern = _pattern(engine_keys())
    out = []
    for rel, path in scanned_files():
        for line, text in _texts(path):
            for m in pattern.finditer(text):
                out.append((rel, line + text.count("\n", 0, m.start()), m.group(1)))
    return out


def test_the_scan_finds_a_key_in_a_string_and_in_a_comment(tmp_path):
    """The scanner itself: a verl key in a literal, a dotted flag in a comment; divclip's own words pass."""
    src = tmp_path / "x.py"
    src.write_text('MSG = "set clip_ratio_low"  # or --actor.eps_clip_low_high\nOK = "eps_low delta loss_agg_mode"\n')
    pattern = _pattern(engine_keys())
    hits = [(line, m.group(1)) for line, text in _texts(src) for m in pattern.finditer(text)]
    assert hits == [(1, "clip_ratio_low"), (1, "actor.eps_clip_low_high")]


def test_the_key_list_covers_every_engine():
    keys = engine_keys()
    assert {e for engines in keys.values() for e in engines} == set(ENGINES)
    assert {"clip_ratio_low", "eps_clip_low_high", "epsilon_high", "num_iterations", "eps-clip-high"} <= set(keys)
    assert not {"epsilon", "delta", "eps_low", "loss_agg_mode", "bypass_mode", "dual_clip"} & set(keys)


def test_no_engine_key_is_spelled_outside_the_engines():
    found = [(f, line, key) for f, line, key in findings() if (f, key) not in ALLOWED | PENDING]
    listing = "\n".join(f"{f}:{line}: {key}" for f, line, key in found)
    assert not found, f"engine keys spelled outside divclip.engines (take them from the engine module):\n{listing}"


def test_every_allowed_entry_still_occurs():
    seen = {(f, key) for f, _, key in findings()}
    stale = sorted((ALLOWED | PENDING) - seen)
    assert not stale, f"remove these entries, they no longer occur: {stale}"
