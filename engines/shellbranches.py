"""`if` / `elif` / `else` / `fi` and `case` in a launch script, decided with the script's own values where it can be.

A condition `[ A = B ]`, `[ A != B ]`, `[[ A == B ]]`, `[ -z A ]`, `[ -n A ]`, `[ A ]` (with `!` in front, or
`test ...`) whose words are fully known after expansion (the script's defaults, `${DEVICE:-gpu}`) is evaluated
and only the branch bash would take is read; each decision is said in a note. A condition that depends on what
only running the script knows (an unset variable, `$(nproc)`, `-f file`) reads every branch, said too.

`case WORD in PATTERN | PATTERN) ... ;; esac` is decided the same way: with WORD known, the first branch whose
pattern matches it (bash's glob patterns: `*`, `?`, `[...]`) is read and the others are not (`;&` falls
through to the next branch, `;;&` tests the next patterns too); with WORD unknown every branch is read, said in a
note.
"""

from __future__ import annotations

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
            match = any(fnmatchcase(frame.subject, pattern) for pattern in texts)
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


def evaluate(words: list):
    """True/False of a test command's words, or None where it cannot be decided without running anything."""
    negate = bool(words) and words[0] == "!"
    words = words[1:] if negate else words
    if words[:1] == ["["] and words[-1:] == ["]"] or words[:1] == ["[["] and words[-1:] == ["]]"]:
        inner = words[1:-1]
    elif words[:1] == ["test"]:
        inner = words[1:]
    else:
        return None
    if any("$" in w or "`" in w for w in inner):
        return None
    if len(inner) == 3 and inner[1] in _COMPARE:
        value = (inner[0] == inner[2]) == _COMPARE[inner[1]]
    elif len(inner) == 2 and inner[0] in ("-z", "-n"):
        value = (inner[1] == "") == (inner[0] == "-z")
    elif len(inner) == 1:
        value = inner[0] != ""
    else:
        return None
    return value != negate
