"""From a flat config map to the clip settings that matter, through `divclip.engines` (one module per engine).

This is the sanity check's thin layer over the engines: it picks the engine (from the keys, or as told), reads
the settings with that engine's `read` (its key names, types and defaults; `divclip.engines.base.EngineRead`,
what the checks read), and drops from the unknown keys those a hydra `+key=` adds on purpose.
"""

from __future__ import annotations

from divclip.engines import ENGINES, available_engines, get_engine
from divclip.engines import trl as _trl
from divclip.engines import verl as _verl
from divclip.engines.base import EngineRead, Key, entry_module
from divclip.engines.config import RawConfig
from divclip.engines.launchers import NOT_RL_ENTRIES
from divclip.sanity.errors import ConfigError

__all__ = ["Key", "clip_settings", "detect_framework"]

# The engine versions and tables, as this module has always named them (the engines own them).
VERL_VERSION, TRL_VERSION, TRANSFORMERS_VERSION = _verl.VERSION, _trl.VERSION, _trl.TRANSFORMERS_VERSION
VERL_KEYS, TRL_KEYS = _verl.KEYS, _trl.KEYS
MAX_SCANNED = 2000  # keys looked at to name each engine's keys in a "mixes" error


def detect_framework(raw: RawConfig) -> str:
    """The engine whose keys the config uses most; a ConfigError when none, or when two tie."""
    scores = {name: get_engine(name).detect(raw.values) for name in available_engines()}
    if _trl.detect_classes(getattr(raw, "classes", ())):  # GRPOConfig(...) / TrlParser(..., GRPOConfig): TRL's
        scores["trl"] = max(scores.values()) + 1
    ranked = sorted((name for name in scores if scores[name] > 0), key=lambda n: -scores[n])
    if not ranked:
        raise ConfigError(
            f"config {raw.name!r} has no verl keys (actor_rollout_ref.actor.*, data.*, algorithm.*), no TRL "
            f"GRPOConfig fields ({_trl.ROLES['eps_low']}, {_trl.ROLES['epochs']}, ...) and no keys of the other "
            f"engines divclip reads ({', '.join(ENGINES[2:])}); got keys {sorted(map(str, raw.values))[:5]}"
        )
    tied = [name for name in ranked if scores[name] == scores[ranked[0]]]
    if len(tied) > 1:
        keys = list(raw.values)[:MAX_SCANNED]
        parts = [
            f"{name} keys ({', '.join([k for k in keys if get_engine(name).detect({k: 0})][:3])})" for name in tied
        ]
        raise ConfigError(
            f"config {raw.name!r} mixes {' and '.join(parts)}, as many of each; pass --engine "
            f"{' or --engine '.join(tied)}"
        )
    return ranked[0]


def clip_settings(raw: RawConfig, framework: str | None = None, num_processes: int = 1) -> EngineRead:
    """The clip settings of a config of any engine divclip reads (detected from the keys unless given)."""
    launched = getattr(raw, "launches", [])
    entry = entry_module(launched[-1].command) if launched else None  # an example's own config adds keys
    if entry in NOT_RL_ENTRIES:
        raise ConfigError(
            f"config {raw.name!r} launches {NOT_RL_ENTRIES[entry]}: {entry} at line {launched[-1].line} runs no "
            "policy-gradient loss, so there is no clip to check; divclip reads the RL runs of verl, TRL, OpenRLHF, "
            "AReaL, SkyRL and slime (verl.trainer.main_ppo, skyrl.train.entrypoints.main_base, "
            "openrlhf.cli.train_ppo_ray, ...)"
        )
    if framework is not None and framework not in ENGINES:
        raise ConfigError(f"framework must be one of {list(ENGINES)}, got {framework!r}")
    engine = framework or detect_framework(raw)
    try:
        module = get_engine(engine)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not module.detect(raw.values) and not (engine == "trl" and _trl.detect_classes(raw.classes)):
        raise ConfigError(
            f"config {raw.name!r} has no {engine} settings to read "
            f"(keys: {sorted(map(str, raw.values))[:5]}); is --engine right?"
        )
    dropped = unresolved_read_keys(raw, engine)
    values = {k: v for k, v in raw.values.items() if k not in dropped}  # the engine's default stands, said
    found = module.read(
        values,
        entry=entry,
        num_processes=num_processes,
        classes=tuple(getattr(raw, "classes", ())),
        fields=frozenset(getattr(raw, "fields", ())),
    )
    found.unknown_keys = [(k, near) for k, near in found.unknown_keys if k not in raw.added]
    found.entry = entry
    if found.form == "divclip" and found.measure is None:  # per-token bounds: the checks read measure and δ there
        found.measure, found.budget_low, found.budget_high = found.clip_measure, found.delta_low, found.delta_high
    return found


def unresolved_read_keys(raw: RawConfig, engine: str) -> dict:
    """{key: (line, value, [(reference, origin)])} of the settings `engine` reads whose value only running the
    script knows (`$(nproc)`, a variable the script never sets): read with the engine's default instead, and
    named in a `setting_not_read` warning (`sanity.checks.input_findings`)."""
    module = get_engine(engine)
    reads = set(module.KEYS) | set(getattr(module, "RENAMED", {}))
    return {k: v for k, v in getattr(raw, "unresolved", {}).items() if k in raw.values and k in reads}
