"""`if` / `elif` / `else` / `fi` in a launch script, decided with the script's own values where it can be.

A condition `[ A = B ]`, `[ A != B ]`, `[[ A == B ]]`, `[ -z A ]`, `[ -n A ]`, `[ A ]` (with `!` in front, or
`test ...`) whose words are fully known after expansion (the script's defaults, `${DEVICE:-gpu}`) is evaluated
and only the branch bash would take is read; each decision is said in a note. A condition that depends on what
only running the script knows (an unset variable, `$(nproc)`, `-f file`) reads every branch, said too.
"""

from __future__ import annotations

from dataclasses import dataclass

_COMPARE = {"=": True, "==": True, "!=": False}


@dataclass
class _Frame:
    parent: bool  # the enclosing code runs
    active: bool  # the current branch runs (or may: undecided)
    taken: bool = False  # a branch before was surely taken


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
