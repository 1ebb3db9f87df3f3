"""A script that starts several launches (`python3 data_prep.py ...` then `python3 -m verl.trainer.main_ppo ...`,
or two training runs): each is read on its own and reported, and the report's summary is one of them, said.

`split_launches` reads every launch of `raw` (`divclip.engines.shell.ScriptLaunch`: its settings on top of the
script's own environment, `RawConfig.common`) with the engine's reader. A launch no engine reads (a data
preparation script, `ray start`) is listed as such; the summary is the last launch an engine reads (a script
ends with its training run), and when two or more are read a warning says the others are in `launches`. The
launch commands of a Python script's docstring are alternatives (`RawConfig.first_launch`): the first is read.
"""

from __future__ import annotations

from dataclasses import replace

from divclip.engines.config import RawConfig
from divclip.sanity.settings import clip_settings
from divclip.theory.spec import method_string


def launch_config(raw: RawConfig, launch) -> RawConfig:
    """The settings one launch receives: the script's environment, then the launch's own words."""
    values = {k: v for k, v in raw.common.items() if not any(k == d or k.startswith(d + ".") for d in launch.deletions)}
    values.update(launch.values)
    kind = "flags" if any(isinstance(k, str) and k.startswith("--") for k in launch.values) else "overrides"
    unresolved = {k: v for k, v in raw.unresolved.items() if k in values}
    return replace(raw, kind=kind, values=values, launches=[launch], unresolved=unresolved)


def split_launches(raw: RawConfig, framework: str | None, num_processes: int) -> tuple[RawConfig, list]:
    """(the config the summary reads, [one row per launch]); the rows are empty with fewer than two launches."""
    if len(raw.launches) < 2:
        return raw, []
    rows, read = [], []
    for launch in raw.launches:
        sub = launch_config(raw, launch)
        row = {"line": launch.line, "command": launch.command, "summary": False}
        try:
            s = clip_settings(sub, framework, num_processes)
        except ValueError as exc:  # a ConfigError, or a value the engine refuses
            why = str(exc).splitlines()[0]
            if " has no " in why:  # no engine's keys: a data-preparation or helper script
                why = "no settings of an engine divclip reads (a helper or data script, not a training run)"
            row.update(engine=None, read=False, why=why[:200])
        else:
            row.update(
                engine=s.engine,
                read=True,
                loss_mode=s.loss_mode,
                method=None if s.spec is None else method_string(s.spec),
                budget_low=s.budget_low,
                budget_high=s.budget_high,
                loss_agg_mode=s.loss_agg_mode,
                group_size=s.group_size,
                updates_per_batch=s.updates_per_batch,
                on_policy=s.on_policy,
            )
            read.append((row, sub))
        rows.append(row)
    if not read:
        return raw, rows
    row, sub = read[0] if raw.first_launch else read[-1]
    row["summary"] = True
    row["alternatives"] = raw.first_launch
    return sub, rows


def launch_notes(rows: list) -> list[str]:
    """What the summary is, when a script starts several launches."""
    if not rows:
        return []
    summary = next((r for r in rows if r["summary"]), None)
    lines = ", ".join(str(r["line"]) for r in rows)
    if summary is None:
        return [f"the script starts {len(rows)} launches (lines {lines}), none of them an engine's: see Launches"]
    if summary.get("alternatives"):
        return [
            f"the docstring shows {len(rows)} launch commands (lines {lines}), ways to run the script: each is "
            f"listed under Launches; the summary above is the first one {summary['engine']} reads (line "
            f"{summary['line']})"
        ]
    return [
        f"the script starts {len(rows)} launches (lines {lines}): each is listed under Launches; the summary above "
        f"is the launch at line {summary['line']} ({summary['command']}), the last one {summary['engine']} reads"
    ]
