"""`if` / `elif` / `else` / `fi` and `case` in a launch script, decided with the script's own values where it can be.

A condition `[ A = B ]`, `[ A != B ]`, `[[ A == B ]]`, `[ A -le B ]`, `[ -z A ]`, `[ -n A ]`, `[ A ]` (with `!`
in front, or `test ...`; several joined by `&&` / `||`, also inside `[[ ]]`) whose words are fully known after
expansion (the script's defaults, `${DEVICE:-gpu}`) is evaluated and only the branch bash would take is read; each
decision is said in a note. The condition's words come from bash's syntax tree (`divclip.engines.shellwords`). A
condition that depends on what only running the script knows (an unset variable, `$(nproc)`, `-f file`) reads
every branch, said too.

`case WORD in PATTERN | PATTERN) ... ;; esac` is decided the same way: with WORD known, the first branch whose
pattern matches it (bash's glob patterns: `*`, `?`, `[...]`) is read and the others are not (`;&` falls
through to the next branch, `;;&` tests the next patterns too); with WORD unknown every branch is read, said in a
note. In a `case` pattern and on the right of `[[ A == B ]]` a quoted or backslash-escaped `*`, `?` or `[` stands for
itself and an unquoted one (an unquoted `$P` too) is a glob, as in bash (`shellwords.Field`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

_COMPARE = {"=": True, "==": True, "!=": False}


@dataclass
class _Frame:
    parent: bool  # the enclosing code runs
    active: bool  # the current branch runs (or may: undecided)
    taken: bool = False  # a branch before was surely taken
    subject: str | None = None  # case: the word the patterns match (None: not known without running)
    case_line: int = 0


class Branches:
    """The if-frames of a script as it is read top to bottom, and what was decided (`notes`)."""

    def __init__(self):
        self.frames: list = []
        self.notes: list = []

    def active(self) -> bool:
        return all(f.active for f in self.frames)

    def keyword(self, first: str | None, fields_of, line: int):
        """Handle a command starting with if/elif/else/fi: returns (handled, how many leading words to drop);
        `fields_of()` expands the condition's words (called only where the enclosing code runs)."""
        if first == "if":
            parent = self.active()
            value = self._decide(fields_of()[1:], line) if parent else None
            self.frames.append(_Frame(parent, parent and value is not False, value is True))
            return True, None
        if not self.frames or first not in ("elif", "else", "fi"):
            return False, 0
        frame = self.frames[-1]
        if first == "fi":
            self.frames.pop()
            return True, None
        if first == "elif":
            value = self._decide(fields_of()[1:], line) if frame.parent and not frame.taken else False
            frame.active = frame.parent and not frame.taken and value is not False
            frame.taken = frame.taken or value is True
            return True, None
        frame.active = frame.parent and not frame.taken  # else: its command follows on the same line
        return True, 1

    def case_keyword(self, kind: str, texts: list, known: bool, line: int) -> None:
        """`case SUBJECT in` (kind "case"), a branch's patterns ("pattern" and how the branch before ended: ";;",
        ";&", ";;&") or `esac`; `known` says whether every
        reference in `texts` was resolved."""
        if kind == "case":
            parent = self.active()
            subject = " ".join(texts) if known else None
            self.frames.append(_Frame(parent, False, subject=subject, case_line=line))
            if parent and subject is None:
                self.notes.append(
                    f"line {line}: `case {' '.join(texts)[:60]}` depends on what only running the script knows: "
                    "read as if any branch could be taken (every branch)"
                )
            return
        if not self.frames or self.frames[-1].case_line == 0:
            return  # a stray pattern or esac (not inside a case divclip saw open)
        frame = self.frames[-1]
        if kind == "esac":
            self.frames.pop()
            return
        shown = " | ".join(texts)[:60]
        after = kind[len("pattern") :]  # how the branch before ended
        if frame.parent and after == ";&" and frame.active:
            return  # fall through: this branch's commands run too, untested
        if not frame.parent or frame.taken and after != ";;&":
            frame.active = False
        elif frame.subject is None or not known:
            frame.active = True
        else:
            match = any(fnmatchcase(frame.subject, pattern_of(pattern)) for pattern in texts)
            frame.active, frame.taken = match, frame.taken or match
            if match:
                self.notes.append(
                    f"line {line}: `case` on {frame.subject!r} (line {frame.case_line}) takes the branch `{shown})` "
                    "with the script's own values: only it is read"
                )

    def _decide(self, words: list, line: int):
        shown = " ".join(words)[:80]
        value = evaluate(words)
        if value is None:
            self.notes.append(
                f"line {line}: `{shown}` depends on what only running the script knows: read as if "
                "it could go either way (every branch)"
            )
        else:
            self.notes.append(
                f"line {line}: `{shown}` is {str(value).lower()} with the script's own values: "
                f"{'its then' if value else 'the next'} branch is read"
            )
        return value


_INTEGER = re.compile(r"^\s*[-+]?\d{1,18}\s*$")
_NUMERIC = {
    "-eq": int.__eq__,
    "-ne": int.__ne__,
    "-lt": int.__lt__,
    "-le": int.__le__,
    "-gt": int.__gt__,
    "-ge": int.__ge__,
}
_LISTS = ("&&", "||")
MAX_GROUPING = 64  # ( and ! in one condition


def evaluate(words: list):
    """True/False of a condition's words, or None where it cannot be decided without running anything.

    The words are a list of commands joined by `&&` / `||` (bash: equal precedence, left to right), each
    `[ ... ]`, `[[ ... ]]` or `test ...` (with `!` in front), any other command undecided. Inside `[[ ]]`, `&&`
    binds tighter than `||`, with `!` and `( )`; a test is `A = B`, `A == B`, `A != B`, `A -eq B` (and `-ne -lt
    -le -gt -ge` on integers), `-z A`, `-n A` or `A`. Unknown parts keep a decision open unless the others settle
    it (`false && unknown` is false), as bash would short-circuit."""
    if sum(w in ("(", "!") for w in words) > MAX_GROUPING:
        return None  # nested deeper than any launch script's condition: not decided (and no deep recursion)
    value, i = _command_list(list(words), 0)
    return value if i == len(words) else None


def _command_list(words: list, i: int):
    value, i = _command(words, i)
    while i < len(words) and words[i] in _LISTS:
        op = words[i]
        rhs, i = _command(words, i + 1)
        value = _and(value, rhs) if op == "&&" else _or(value, rhs)
    return value, i


def _command(words: list, i: int):
    negate = False
    while i < len(words) and words[i] == "!":
        negate, i = not negate, i + 1
    if i >= len(words):
        return None, i
    head = words[i]
    if head in ("[", "[["):
        close = "]" if head == "[" else "]]"
        end = next((k for k in range(i + 1, len(words)) if words[k] == close), None)
        if end is None:
            return None, len(words)
        inner = words[i + 1 : end]
        value = _test(inner) if head == "[" else _conditional(inner)
        i = end + 1
    else:
        end = next((k for k in range(i, len(words)) if words[k] in _LISTS), len(words))
        value = _test(words[i + 1 : end]) if head == "test" else None
        i = end
    return (None if value is None else value != negate), i


def _conditional(words: list):
    """`[[ ... ]]`: || of && of ! / ( ) / tests."""
    value, i = _cond_or(words, 0)
    return value if i == len(words) else None


def _cond_or(words, i):
    value, i = _cond_and(words, i)
    while i < len(words) and words[i] == "||":
        rhs, i = _cond_and(words, i + 1)
        value = _or(value, rhs)
    return value, i


def _cond_and(words, i):
    value, i = _cond_not(words, i)
    while i < len(words) and words[i] == "&&":
        rhs, i = _cond_not(words, i + 1)
        value = _and(value, rhs)
    return value, i


def _cond_not(words, i):
    if i < len(words) and words[i] == "!":
        value, i = _cond_not(words, i + 1)
        return (None if value is None else not value), i
    if i < len(words) and words[i] == "(":
        value, i = _cond_or(words, i + 1)
        if i < len(words) and words[i] == ")":
            return value, i + 1
        return None, len(words)
    end = next((k for k in range(i, len(words)) if words[k] in ("&&", "||", ")")), len(words))
    return _test(words[i:end], pattern=True), end


def _test(inner: list, pattern: bool = False):
    """One test's words (inside `[ ]`, after `test`, or one operand of `[[ ]]`)."""
    negate = bool(inner) and inner[0] == "!" and len(inner) > 1
    inner = inner[1:] if negate else inner
    if not inner or any("$" in w or "`" in w for w in inner):
        return None
    if len(inner) == 3 and inner[1] in _COMPARE:
        glob = pattern_of(inner[2])  # its quoted characters escaped (`Field`)
        if pattern and any(c in glob for c in "*?["):  # [[ A == glob ]]: bash matches a pattern
            value = fnmatchcase(inner[0], glob) == _COMPARE[inner[1]]
        else:
            value = (inner[0] == inner[2]) == _COMPARE[inner[1]]
    elif len(inner) == 3 and inner[1] in _NUMERIC:
        if not (_INTEGER.match(inner[0]) and _INTEGER.match(inner[2])):
            return None
        value = _NUMERIC[inner[1]](int(inner[0]), int(inner[2]))
    elif len(inner) == 2 and inner[0] in ("-z", "-n"):
        value = (inner[1] == "") == (inner[0] == "-z")
    elif len(inner) == 1:
        value = inner[0] != ""
    else:
        return None
    return value != negate


def pattern_of(text: str) -> str:
    """The glob pattern of an expanded field: `shellwords.Field.pattern` (its quoted `*`, `?` and `[` escaped) or,
    for a plain str, the text itself."""
    return getattr(text, "pattern", text)


def _and(a, b):
    return False if a is False or b is False else True if a is True and b is True else None


def _or(a, b):
    return True if a is True or b is True else False if a is False and b is False else None
