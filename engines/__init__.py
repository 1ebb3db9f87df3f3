"""One home per training engine: what divclip knows of verl, TRL, OpenRLHF, AReaL, SkyRL and slime.

Each engine is one module here (`divclip.engines.verl`, ...; the shared types in `divclip.engines.base`), with
its key names, types and defaults (read from the engine's own code, checked in tests/engines), `read(settings)
-> EngineRead` (the method as a ClipSpec plus the batch structure that decides whether a clip can bind),
`write(spec) -> EngineWrite` (the engine's settings for a method, and what it cannot say) and its plug-in.

    from divclip.engines import from_engine, to_engine, translate
    spec = from_engine("verl", {"actor_rollout_ref.actor.clip_ratio_high": 0.28})   # DAPO's clip, verl's c = 3
    to_engine(spec, "trl")                       # {'loss_type': 'dapo', 'epsilon': 0.2, 'epsilon_high': 0.28, ...}
    translate(settings, "verl", "trl")           # (TRL settings, [Difference, ...])

Settings are flat mappings in the engine's own names: dotted keys (`actor_rollout_ref.actor.clip_ratio_low`),
flags as written (`--actor.eps_clip`), environment variables in capitals (`DIVCLIP_DELTA`). `divclip check`,
`divclip export`, `divclip translate` and the app read and write engines only through this package.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module

from divclip.engines.base import Difference, EngineRead, EngineWrite, Key, as_ratio_clip, describe, example_origin_parts

__all__ = [
    "ENGINES",
    "Difference",
    "EngineRead",
    "EngineWrite",
    "Key",
    "as_ratio_clip",
    "describe",
    "detect_engine",
    "from_engine",
    "get_engine",
    "read",
    "read_correction",
    "to_engine",
    "translate",
    "translation_differences",
    "unknown_key_origin",
    "write",
    "write_correction",
]

ENGINES = ("verl", "trl", "openrlhf", "areal", "skyrl", "slime")
"""Every engine divclip reads and writes, in the order the CLI and the app list them."""


def get_engine(name: str):
    """The module of engine `name` (NAME, VERSION, DEFAULTS_FROM, KEYS, read, write, detect, FORMATS, render,
    PLUGIN); a ValueError lists the engines."""
    if name not in ENGINES:
        raise ValueError(f"engine must be one of {list(ENGINES)}, got {name!r}")
    try:
        return import_module(f"divclip.engines.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"divclip.engines.{name}":
            raise
        raise ValueError(f"engine {name!r} is not available in this divclip build") from None


def available_engines() -> tuple[str, ...]:
    """The engines of ENGINES whose module is present."""
    out = []
    for name in ENGINES:
        try:
            get_engine(name)
        except ValueError:
            continue
        out.append(name)
    return tuple(out)


def read(engine: str, settings: Mapping, **options) -> EngineRead:
    """What divclip reads in `settings` of `engine` (options: TRL's num_processes)."""
    return get_engine(engine).read(_mapping(settings), **options)


def write(spec, engine: str, **options) -> EngineWrite:
    """`spec` (a ClipSpec or a method string) as `engine`'s settings (options: recipe, loss_agg_mode, label)."""
    from divclip.theory.spec import as_spec

    return get_engine(engine).write(as_spec(spec), **options)


def from_engine(engine: str, settings: Mapping, **options):
    """The method `settings` of `engine` run, as a ClipSpec; a ValueError when divclip does not model it."""
    found = read(engine, settings, **options)
    if found.spec is None:
        why = "; ".join(found.notes) or f"loss {found.loss_mode!r} is not modelled"
        raise ValueError(f"{engine} settings run loss {found.loss_mode!r}, which divclip does not model: {why}")
    return found.spec


def to_engine(spec, engine: str, *, correction=None, **options) -> dict:
    """`spec` as one flat mapping of `engine`'s settings (environment variables included), as `read` takes them;
    with `correction` (a `divclip.theory.correction.Correction` or its string) its keys too, and a ValueError
    naming what `engine` cannot express of it."""
    out = write(spec, engine, **options).flat()
    if correction is not None:
        keys, cannot = write_correction(correction, engine)
        if cannot:
            raise ValueError(f"{engine} cannot express the correction {correction}: " + "; ".join(cannot))
        out.update(keys)
    return out


def read_correction(engine: str, settings: Mapping):
    """The rollout correction (`divclip.theory.correction.Correction`) `settings` of `engine` apply, or None."""
    from divclip.engines.correction import read_correction as read_one

    get_engine(engine)
    return read_one(engine, _mapping(settings))


def write_correction(correction, engine: str) -> tuple[dict, list[str]]:
    """(settings, cannot): `correction` in `engine`'s keys and what `engine` cannot say of it."""
    from divclip.engines.correction import write_correction as write_one

    get_engine(engine)
    return write_one(correction, engine)


def translate(settings: Mapping, src: str, dst: str, **options) -> tuple[dict, list]:
    """(dst settings, [Difference]): the method `settings` of `src` run, written for `dst` with the same
    aggregation; the differences name what `dst` says differently or not at all, every key of `settings` that is
    not a `src` setting (a typo is never dropped in silence) and every batch-structure fact the target's defaults
    change (`translation_differences`). A ValueError where `dst` has nothing close."""
    found = read(src, settings, **options)
    spec = from_engine(src, settings, **options) if found.spec is None else found.spec
    out = get_engine(dst).write(spec, recipe=False, loss_agg_mode=found.loss_agg_mode)
    flat, diffs = out.flat(), translation_differences(found, out)
    correction = read_correction(src, settings)  # the third policy travels too (docs/engines.md)
    if correction is not None:
        keys, cannot = write_correction(correction, dst)
        flat.update(keys)
        diffs += [Difference(f"rollout correction {correction}", f"{dst}: {why}") for why in cannot]
    return flat, diffs


STRUCTURE = (
    ("group_size", "group size (responses per prompt)"),
    ("updates_per_batch", "optimizer updates per rollout batch"),
    ("loss_agg_mode", "loss aggregation"),
)
"""The batch-structure facts of a read that a translation must carry or name: each decides, beside the clip,
what the loss computes (the group baseline, whether the clip can bind at all, how tokens are averaged)."""


def unknown_key_origin(engine: str, key: str, entry: str | None = None) -> str | None:
    """Where a key `engine` does not know comes from, when divclip can tell: another version of the engine had it
    (the engine module's `key_origin`), and/or one of the engine's own examples declares it in its own config
    (`divclip.engines.base.example_origin_parts`; `entry`, the module the launch runs, when it is such an example whose
    config lacks the key); None otherwise. The key stays unknown: the modelled version refuses it."""
    own = getattr(get_engine(engine), "key_origin", None)  # key_origin(key, entry)
    launched, others = example_origin_parts(engine, key, entry)
    parts = [launched, own(key, entry) if own is not None else None, others]
    return "; ".join(p for p in parts if p) or None


def translation_differences(found: EngineRead, out: EngineWrite) -> list:
    """Everything a translation of `found` (the source's read) into `out` (the target's write) does not carry:
    the source's own differences, the target's, each key of the source that is not a source setting (with the
    nearest known key), and each STRUCTURE fact whose value the target's defaults change (read back from `out`)."""
    diffs = [*found.differences, *out.differences]
    for key, near in found.unknown_keys:
        origin = unknown_key_origin(found.engine, key, found.entry)  # another version's, or an example's own key
        hint = f"; {origin}" if origin else f", nearest {near}" if near else ""
        diffs.append(Difference(f"{key!s} (not a {found.engine} setting{hint})", "dropped, not written"))
    back = read(out.engine, out.flat())
    for attr, what in STRUCTURE:
        was, now = getattr(found, attr), getattr(back, attr)
        if _known(was) and _known(now) and was != now:
            diffs.append(
                Difference(
                    f"{what} {_show(was)} in the {found.engine} config",
                    f"{out.engine}'s default gives {_show(now)}; set it in the {out.engine} launch to keep it",
                )
            )
    return diffs


def _known(v) -> bool:
    return v is not None and v == v  # not None, not NaN (a count the config leaves to the launch)


def _show(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def detect_engine(settings: Mapping) -> str | None:
    """The engine whose keys the settings use most (None when no engine's): a ValueError when two engines tie."""
    scores = {}
    for name in available_engines():
        score = get_engine(name).detect(settings)
        if score > 0:
            scores[name] = score
    if not scores:
        return None
    best = max(scores.values())
    top = [name for name, score in scores.items() if score == best]
    if len(top) > 1:
        raise ValueError(f"the settings fit {' and '.join(top)} equally well ({best:g} keys each): name the engine")
    return top[0]


def _mapping(settings) -> Mapping:
    from divclip.engines.base import check_keys

    if not isinstance(settings, Mapping):
        raise ValueError(f"settings must be a mapping of the engine's keys to values, got {type(settings).__name__}")
    check_keys(settings)
    return settings
