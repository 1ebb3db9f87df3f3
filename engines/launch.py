"""Read a launch command: the shell script of `--flag value` arguments that OpenRLHF and slime are started with.

OpenRLHF runs `python3 -m openrlhf.cli.train_ppo_ray --actor.eps_clip 0.2 ...` and slime `python3 train.py
--eps-clip 0.2 ...` (often through bash arrays, `GRPO_ARGS=( --eps-clip 0.2 ... )`, expanded with
`${GRPO_ARGS[@]}`). Both parse their flags with argparse, so a script reads here as argparse would see it:

* a flag is a token that starts with `--` (or `--flag=value`); the tokens after it, up to the next flag, are its
  values: none (a `store_true` switch, read as True), one (a string, typed later by the engine's Key), or several
  (`nargs`, kept as a list: `--actor.eps_clip_low_high 0.2 0.27`);
* a flag given twice keeps its last value, as argparse does (`repeated` lists it);
* the words are the shell's (`divclip.engines.shellwords`, bash's grammar through tree-sitter-bash, no shlex):
  `\\` continuations, comments, quotes (a quoted string that spans lines, a JSON runtime environment, is one
  word), heredoc bodies skipped as data, arrays passed with `${X[@]}` spliced in, `$VAR` / `${VAR:-default}`
  expanded from the script's own variables as it runs top to bottom (otherwise the text stays as written and typing
  names it);
* shell words around the flags (`python3`, `-m`, `ray job submit`) are skipped, and `VAR=value` assignments
  (with or without `export`) become environment entries `{VAR: value}` when VAR is in capitals, so a plug-in
  hook (`DIVCLIP_METHOD=...`) reads like a setting.

Nothing is executed. `parse_launch` returns `{flag or VAR: value}`; `looks_like_launch` says whether a text is
such a script (used to pick the reader before an engine is known).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from divclip.engines.config import MAX_CONFIG_BYTES
from divclip.engines.errors import ConfigError
from divclip.engines.launchers import engine_words
from divclip.engines.shellwords import expand_script

_FLAG = re.compile(r"^--[A-Za-z][\w.\-]*(=.*)?$", re.DOTALL)
_ASSIGN = re.compile(r"^([A-Za-z_]\w*)=(.*)$", re.DOTALL)
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_SHELL_WORDS = {")", "(", "|", "||", "&&", ";", "&", "\\"}


@dataclass
class Launch:
    """A launch command as read: its flags and environment, in order, and what was set twice."""

    values: dict = field(default_factory=dict)  # {"--flag": value | [values] | True, "VAR": "value"}
    repeated: list = field(default_factory=list)  # flags given more than once (the last one counts)


def parse_launch(text: str, name: str = "launch script") -> dict:
    """{flag or VAR: value} of a launch script (module doc string); a ConfigError names what it cannot split."""
    return read_launch(text, name).values


def read_launch(text: str, name: str = "launch script") -> Launch:
    """The flags and environment of a launch script, with the flags set twice (module doc string)."""
    if not isinstance(text, str):
        raise ConfigError(f"{name} must be text, got {type(text).__name__}")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{name} is over the {MAX_CONFIG_BYTES}-byte limit for a config")
    out = Launch()
    for _, words, _ in expand_script(text, name).commands:
        launch = engine_words(words)  # torchrun's, ray's or uv's own flags are not the engine's
        _read_tokens(launch.env + launch.args, out)
    return out


def looks_like_launch(text: str) -> bool:
    """True when `text` passes flags as `--name value` (at least two of them) rather than hydra `key=value`."""
    try:
        values = parse_launch(text)
    except ConfigError:
        return False
    return sum(1 for k in values if k.startswith("--")) >= 2


def _read_tokens(tokens: list, out: Launch) -> None:
    flag = None
    for tok in tokens:
        if _FLAG.match(tok):
            key, eq, value = tok.partition("=")
            _set(out, key, value if eq else True)
            flag = None if eq else key
            continue
        if tok in _SHELL_WORDS:
            flag = None
            continue
        m = _ASSIGN.match(tok)
        if m and flag is None:
            var, value = m.groups()
            if _ENV_NAME.match(var):
                out.values[var] = value
            continue
        if flag is not None:  # a value of the flag before it
            current = out.values[flag]
            out.values[flag] = tok if current is True else [*_as_list(current), tok]


def _set(out: Launch, key: str, value) -> None:
    if key in out.values:
        out.repeated.append(key)
        del out.values[key]  # argparse keeps the last: so does the order here
    out.values[key] = value


def _as_list(value) -> list:
    return list(value) if isinstance(value, list) else [value]


def flag_words(key: str, value) -> list[str]:
    """The shell words of one flag: `--switch` for True, nothing for False/None (argparse's default stands),
    `--flag a b` for a list, else `--flag value` (floats as repr, so they read back exactly)."""
    if value is True:
        return [key]
    if value is False or value is None:
        return []
    values = value if isinstance(value, (list, tuple)) else [value]
    return [key, *(shlex.quote(repr(v) if isinstance(v, float) else str(v)) for v in values)]


def render_launch(command: str, env: dict, settings: dict) -> list[str]:
    """A launch command, one flag per line with `\\` continuations: `VAR=value ... command --flag value ...`."""
    lines = [f"{k}={shlex.quote(str(v))}" for k, v in env.items()] + [command]
    lines += ["    " + " ".join(words) for key, value in settings.items() if (words := flag_words(key, value))]
    return [line + " \\" for line in lines[:-1]] + lines[-1:]
