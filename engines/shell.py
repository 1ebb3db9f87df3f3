"""Read a launch command (a shell script, an override list, a flag line) into flat settings, safely.

Nothing is executed. The text is read into commands of words through bash's grammar (`divclip.engines.shellwords`
walks tree-sitter-bash's syntax tree: quotes, `\\` continuations, comments, heredoc bodies skipped as data, arrays,
`$V` / `${V:-d}` expanded from the script's own variables within a byte budget, if/case/functions/loops), and each
word is classified:

* `key=value` (with `+`/`++` in front: a key hydra adds) — a hydra override or an environment variable
  (`VERL_USE_EXTERNAL_MODULES=...`) that the command sets; `~key` deletes.
* `--name value`, `--name=value`, `--name v1 v2` (nargs: a list), or a bare `--name` (a switch: true) — a
  flag, kept with its dashes (`--section.name`), as engines' argparse parsers name them.
* anything else is a command word (`python3 -m verl.trainer.main_ppo`, `set -x`): ignored. Listed
  (`Tokens.ignored`) are the arguments of a program that is not the engine (`huggingface-cli download
  --local-dir ...`), and, where no command starts an entry point, every command word; where one does, the
  launcher's and the shell's own words are not (the report says which launch it read). A word that looks like a
  config key (`section.group.key 0.28`: no '=') is listed as a stray, which `divclip check` reports as a
  warning.

A `NAME=( ... )` array is read only where `${NAME[@]}` passes it to a command (as bash does: the definition in
force there); one that never reaches a command, a function never called, and a heredoc body that holds what looks
like settings, are listed in `Tokens.unread` (a warning), as none reaches the engine.

Each command that starts an entry point (`python3 -m ...`, `torchrun`, `ray job submit -- ...`) and passes it
settings is one launch (`Tokens.launches`, in order), so a file that launches twice is reported launch by launch.
In a script that launches, a setting whose value holds what only running the script knows (`$(nproc)`, a
variable the script never sets) is listed in `Tokens.unresolved` with where that value comes from: the reader
goes on with the engine's default. (In a bare override list no shell expands `$V`: the value is typed as written.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from divclip.engines.errors import ConfigError
from divclip.engines.launchers import KEYWORD_PREFIXES, WRAPPERS, engine_words
from divclip.engines.shellwords import expand_script

OVERRIDE_KEY = re.compile(r"^[A-Za-z_][\w\-@/.]*$")
FLAG = re.compile(r"^--[A-Za-z][\w\-.]*$")
_INT = re.compile(r"^[-+]?\d+$")
# Floats as hydra/OmegaConf read them, including "3e-4", which plain YAML 1.1 leaves as a string. Each digit run
# can be split one way only (\d+ then an optional '.\d*'), so a failed match backtracks in linear time (the
# former \d+\.?\d* tried every split of 60 000 digits before a letter: 70 s).
_FLOAT = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$|^[-+]?(?:inf|nan)$", re.IGNORECASE)
_VARIABLE = re.compile(r"^[A-Za-z_]\w*$")
_EXPANSION = re.compile(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)")
_DOTTED = re.compile(r"^[A-Za-z_][\w\-]*(\.[\w\-]+)+$")  # a config key written without '=' (not a file name)
_SETTING_LINE = re.compile(r"^[ \t]*(?:[+~]*[A-Za-z_][\w\-@/.]*=|--[A-Za-z])", re.MULTILINE)
_SETTING_WORD = re.compile(r"(^|\s)[+~]*[A-Za-z_][\w\-@/]*\.[\w\-@/.]*=|(^|\s)--[A-Za-z]")  # a dotted key= or a flag
_FILE_SUFFIXES = (".py", ".sh", ".yaml", ".yml", ".json", ".txt", ".parquet", ".jsonl")
_MODULE_FLAGS = ("-m", "--module")
_INTERPRETER_WORD = re.compile(r"^python(\d+(\.\d+)*)?$")
_ENV_WORD = re.compile(r"^[A-Z][A-Z0-9_]*=")
_DOTTED_OVERRIDE = re.compile(r"^[+~]*[A-Za-z_][\w\-@/]*\.[\w\-@/.]*=")  # a hydra override: a.b=...
_SCRIPT_ARGUMENTS = ("$@", "$*", "${@}", "${*}")  # as the shell reader leaves them: only a run knows them
_DECLARATIONS = ("export", "local", "declare", "readonly", "typeset")
MAX_SCRIPT_DEPTH = 2  # bash -c inside bash -c
MAX_FLAG_VALUES = 8  # values one flag takes (argparse nargs); the rest of a line is command words


@dataclass
class Tokens:
    """What a launch command sets: settings, deletions, added keys, command words and stray key-like words."""

    values: dict = field(default_factory=dict)
    deletions: list = field(default_factory=list)
    added: set = field(default_factory=set)  # keys given as +key=value (hydra adds them: never unknown)
    ignored: list = field(default_factory=list)  # command words
    stray: list = field(default_factory=list)  # [(line, text)]: a key without '=' (an override that was not read)
    flags: bool = False  # any --flag seen
    unread: list = field(default_factory=list)  # [(line, text)]: something that looks like a setting, not read
    notes: list = field(default_factory=list)  # how the script's if/elif/case were decided, functions called
    launches: list = field(default_factory=list)  # [ScriptLaunch]: each command that starts an entry point, in order
    common: dict = field(default_factory=dict)  # the settings of commands that start no entry point
    unresolved: dict = field(default_factory=dict)  # {key: (line, value as written, [(reference, its origin)])}
    classes: list = field(default_factory=list)  # Python: the config classes the script calls or parses into
    fields: set = field(default_factory=set)  # Python: the fields of the script's own parsed dataclasses
    first_launch: bool = False  # the launches are alternatives (a docstring's examples): the first is the one


@dataclass
class ScriptLaunch:
    """One command of a script that starts an entry point, with the settings it passes."""

    line: int
    command: str  # the launcher's and entry point's own words, shortened (`python3 -m verl.trainer.main_ppo`)
    values: dict = field(default_factory=dict)
    added: set = field(default_factory=set)
    deletions: list = field(default_factory=list)


def split_line(line: str, name: str, number: int | None = None) -> list[str]:
    """The words of a line of overrides (the app's text box), split and expanded as the shell would."""
    return [word for _, words, _ in expand_script(line, name).commands for word in words]


def read_script(text: str, name: str, out: Tokens | None = None, depth: int = 0) -> Tokens:
    """The settings of a launch script or override list (see the module doc string)."""
    out = Tokens() if out is None else out
    script = expand_script(text, name)
    launches = [(line, engine_words(words), heredocs) for line, words, heredocs in script.commands]
    scripted = any(launch.entry for _, launch, _ in launches)
    out.notes += script.notes
    for (line, launch, heredocs), unresolved, called in zip(
        launches, script.unresolved, script.call_lines, strict=True
    ):
        if not scripted:  # no entry point found: say which words were taken for a program's own, not settings
            out.ignored += launch.skipped
        if launch.script is not None and depth < MAX_SCRIPT_DEPTH:  # bash -c '...': a script of its own
            try:
                read_script(launch.script, name, out, depth + 1)
            except ConfigError as exc:  # what only running the outer script gives it can leave it unsplittable
                out.unread.append((line, f"the script bash -c runs here is not read: {str(exc).split(': ', 1)[-1]}"))
        # in a script that launches a program, `clip_low=0.2` is a shell variable (its value reached the command
        # through $clip_low, if at all); NAME=value in capitals is the environment the engine may read
        env = [w for w in launch.env if not scripted or _ENV_WORD.match(w)]
        args = launch.args
        if scripted and args[:1] and args[0] in _DECLARATIONS:  # export/local/declare NAME=...: shell variables,
            env += [w for w in args[1:] if args[0] == "export" and _ENV_WORD.match(w)]  # exported capitals the
            args = []  # environment the engine may read
        elif scripted and not launch.entry and args[:1] and args[0].startswith(("--", "$")) and len(args) > 1:
            out.unread.append(
                (
                    line,
                    f"this command starts with {args[0]}, not a program: the line before it probably lacks its "
                    "`\\`, so bash runs it as a command of its own and the launch before it gets none of these flags; "
                    "divclip reads them with the launch, as the script means",
                )
            )
        elif scripted and not launch.entry and args and all(w in _SCRIPT_ARGUMENTS for w in args):
            out.notes.append(  # `... last.key=1` then `  $@` on a line of its own (SkyRL's run_mini_swe_8B.sh)
                f"line {line} runs the script's own arguments ({args[0]}) as a command of its own: the line before it "
                "probably lacks its `\\`, so a setting the script's caller adds (`bash script.sh key=value`) does "
                "not reach the launch"
            )
            args = []
        elif scripted and not launch.entry and args and not any(_DOTTED_OVERRIDE.match(w) for w in args):
            out.ignored += args  # another program's flags (`huggingface-cli download --local-dir ...`)
            args = []
        # a word of a program that is not the engine (`setsid "$@"`, `srun bash -lc "..."`) that is no override
        # is that program's own, not a refusal of the whole script
        lenient = scripted and not launch.entry
        part = read_tokens(env + args, Tokens(), None, f"line {line} of {name!r}", line, expand=False, lenient=lenient)
        # a value the shell expands from the run's environment is unknown here only in a script that runs the
        # engine; in an override list no shell expands it, and the engine would get `$CLIP` as written
        _merge(out, part, line, unresolved if scripted else [])
        if launch.entry and launch.args:
            shown = _entry_shown(launch.skipped)
            shown += f" (in a function, line {line})" if called else ""  # listed at the line of its call
            values, added, deletions = dict(part.values), set(part.added), list(part.deletions)
            out.launches.append(ScriptLaunch(called or line, shown, values, added, deletions))
        else:
            out.common.update(part.values)
        for first, last, body in heredocs:
            if _SETTING_LINE.search(body):
                out.unread.append(
                    (
                        first,
                        f"the heredoc body (lines {first}-{last}) is data the command reads, not settings passed "
                        "to it: not read",
                    )
                )
    for array, line in script.unused_arrays.items():
        out.unread.append(
            (line, f"the array {array} never reaches a command (no ${{{array}[@]}}): its words were not read")
        )
    lines = text.splitlines()
    for function, (first, last) in script.unused_functions.items():
        if _SETTING_WORD.search("\n".join(lines[first - 1 : last])):
            out.unread.append(
                (first, f"the function {function} (lines {first}-{last}) is never called: its commands were not read")
            )
    return out


def _entry_shown(head: list) -> str:
    """A launch's command in a few words: its launcher and its entry point (`accelerate ... examples/x.py`)."""
    words = [w for w in head if w not in KEYWORD_PREFIXES and w not in WRAPPERS] or head or ["?"]
    entry = words[-2:] if len(words) >= 2 and words[-2] in _MODULE_FLAGS else words[-1:]
    start = words[: len(words) - len(entry)]
    if start and _INTERPRETER_WORD.match(start[-1].rsplit("/", 1)[-1]):
        start = start[-1:]  # python3 -m x, python3 x.py: in full
    shown = " ".join([*start[:1], *(["..."] if len(start) > 1 else []), *entry])
    return shown if len(shown) <= 100 else shown[:97] + "..."


def _merge(out: Tokens, part: Tokens, line: int, unresolved: list) -> None:
    """One command's settings into the script's: deletions first, then the values (the last one counts); a value
    holding a reference the script cannot resolve is listed in `out.unresolved` with where it comes from."""
    for key in part.deletions:
        _delete(key, "~" + key, out, "")
    out.deletions += part.deletions
    out.values.update(part.values)
    out.added |= part.added
    out.ignored += part.ignored
    out.notes += [n for n in part.notes if n not in out.notes]
    out.stray += part.stray
    out.unread += part.unread
    out.flags = out.flags or part.flags
    for key, value in part.values.items():
        items = value if isinstance(value, list) else [value]
        refs = [(ref, origin) for ref, origin in unresolved if any(isinstance(v, str) and ref in v for v in items)]
        if refs:
            out.unresolved[key] = (line, value, refs)
        else:
            out.unresolved.pop(key, None)


def read_tokens(
    tokens: list,
    out: Tokens,
    variables: dict | None = None,
    what: str = "override",
    number: int | None = None,
    expand: bool = True,
    lenient: bool = False,
) -> Tokens:
    """Classify one line's tokens into `out` (see the module doc string); `expand=False` for words the shell
    reader has expanded already; `lenient`: a `key=value` or `~key` whose key is no config key is a command word
    (listed), not an error (another program's arguments in a launch script)."""
    variables = {} if variables is None else variables
    if expand:
        tokens = [_expand(t, variables) for t in tokens]
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not isinstance(tok, str):
            raise ConfigError(f"{what} must be a string 'key=value', got {type(tok).__name__}")
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if tok.startswith("--") and FLAG.match(tok.split("=", 1)[0]):
            i += _flag(tok, tokens[i + 1 :], out)
        elif lenient and (tok.startswith("~") or "=" in tok and not tok.startswith("-")) and not _is_key_word(tok):
            out.ignored.append(tok)
            i += 1
        elif tok.startswith("~"):
            _delete(tok[1:].split("=", 1)[0], tok, out, what)
            i += 1
        elif "=" in tok and not tok.startswith("-"):
            _assign(tok, out, variables, what)
            i += 1
        else:
            _word(tok, tokens[i - 1] if i else None, nxt, out, number)
            i += 1
    return out


def _is_key_word(tok: str) -> bool:
    """`tok` is `key=value` or `~key` with a key `_assign` / `_delete` take."""
    return bool(OVERRIDE_KEY.match(tok.lstrip("~").split("=", 1)[0].lstrip("+")))


def _flag(tok: str, rest: list, out: Tokens) -> int:
    out.flags = True
    name, eq, value = tok.partition("=")
    if eq:
        out.values[name] = parse_value(value)
        return 1
    taken = []
    while len(taken) < MAX_FLAG_VALUES and len(rest) > len(taken) and _is_value(rest[len(taken)]):
        if taken and not _FLOAT.match(rest[len(taken)]):  # a second value must be a number (nargs=2 widths);
            break  # a word after `--nproc 8` is the script, not a value
        taken.append(parse_value(rest[len(taken)]))
    # a switch (store_true) is true; nargs=2 flags (OpenRLHF's pair of widths ε_low ε_high) are a list
    out.values[name] = True if not taken else taken[0] if len(taken) == 1 else taken
    return 1 + len(taken)


def _is_value(tok: str) -> bool:
    if tok.startswith("-"):
        return bool(_FLOAT.match(tok))  # -0.5 is a value, -m and --x are not
    key = tok.split("=", 1)[0].lstrip("+")  # a dotted hydra override after a switch is not its value
    return not ("=" in tok and "." in key and OVERRIDE_KEY.match(key))


def _assign(tok: str, out: Tokens, variables: dict, what: str) -> None:
    key, text = tok.split("=", 1)
    added = key.startswith("+")
    key = key.lstrip("+")
    if not OVERRIDE_KEY.match(key):
        raise ConfigError(f"{what} {tok!r} is not a hydra override: the key {key!r} must look like a.b.c")
    if text == "(" and _VARIABLE.match(key):  # the start of a shell array: its flags follow
        return
    if _VARIABLE.match(key):
        variables[key] = text
    out.values[key] = parse_value(text)
    if added:
        out.added.add(key)


def _delete(key: str, tok: str, out: Tokens, what: str) -> None:
    if not OVERRIDE_KEY.match(key):
        raise ConfigError(f"{what} {tok!r} is not a hydra override: the key {key!r} must look like a.b.c")
    out.deletions.append(key)
    for k in [k for k in out.values if k == key or k.startswith(key + ".")]:
        del out.values[k]


def _word(tok: str, prev, nxt, out: Tokens, number) -> None:
    if tok in _SCRIPT_ARGUMENTS:  # "$@": what the script is called with, unknown here; not a word to list
        where = f"line {number}" if number is not None else "the launch"
        out.notes.append(
            f"{where} passes on the script's own arguments ({tok}): a setting its caller adds there "
            "(`bash script.sh key=value`) is not read here"
        )
        return
    out.ignored.append(tok)
    if prev in _MODULE_FLAGS or not _DOTTED.match(tok) or tok.lower().endswith(_FILE_SUFFIXES):
        return
    shown = tok if nxt is None or nxt.startswith("-") or "=" in nxt else f"{tok} {nxt}"
    out.stray.append((number, shown))


def _expand(tok, variables: dict):
    if not isinstance(tok, str) or "$" not in tok:
        return tok
    return _EXPANSION.sub(lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), tok)


def parse_value(text: str):
    """A hydra override value: null, true/false, int, float (3e-4 included), quoted or bare string."""
    s = text.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return s[1:-1]
    low = s.lower()
    if low in ("null", "~", "none"):
        return None
    if low in ("true", "false"):
        return low == "true"
    if _INT.match(s) and len(s) <= 30:  # longer digit strings stay text (and fail typing with their name)
        return int(s)
    if _FLOAT.match(s):
        return float(s)
    return s


def looks_like_float(text: str) -> bool:
    return bool(_FLOAT.match(text.strip()))
