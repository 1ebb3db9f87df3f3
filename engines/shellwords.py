"""Split a shell script into commands of words as bash would, without running anything, in one linear pass.

`shlex` is not used: it treats `#` inside a word as a comment (`--save /ckpt/run#1` lost the rest of the line),
knows no heredocs, arrays or `${V:-d}`, and builds each word by string concatenation (quadratic: minutes on one
3.9 MB word). Here:

* words split on blanks; `;`, `&&`, `||`, `|`, `&` and newlines end a command; `\\`-newline continues it;
  `#` starts a comment only at the start of a word;
* quotes are the shell's: '...' literal; "..." with `\\` escaping only `$ \\` " `` ` `` and newline, and
  expansions inside; `$'...'` with C escapes;
* `<<WORD`, `<<-WORD`, `<<'WORD'` heredocs: the body is data, skipped (and reported in `Command.heredocs`);
  `<<<` here-strings and the target of a redirection (`> log`, `2>&1`) are dropped from the words;
* `NAME=( ... )` / `NAME+=( ... )` arrays (over several lines, with comments) are one `Word` holding its elements;
* `$NAME`, `${NAME}`, `${NAME:-d}`, `${NAME-d}`, `${NAME:=d}`, `${NAME=d}`, `${NAME:+a}`, `${NAME[@]}`,
  `${NAME[i]}` are references (`Ref`) that `expand` resolves from the script's own variables; anything else
  (`$(cmd)`, backticks, `$1`, `${#A[@]}`, `${V%x}`) is kept as written, since only running the script knows it.

`expand` does what bash does with the words: unquoted expansions are split on blanks, `"${A[@]}"` gives one
word per element, an assignment's value is not split. Every byte an expansion produces is counted against
MAX_EXPANSION_BYTES before it is built (variables that each repeat the last ten times, six deep, would otherwise
grow a 7 kB script to gigabytes), and `${...}` nests at most MAX_NESTING deep.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from divclip.engines.errors import ConfigError
from divclip.engines.shellbranches import Branches

MAX_EXPANSION_BYTES = 4 * 2**20  # what a script's expansions may produce in all: a config's own size limit
MAX_NESTING = 32  # ${a:-${b:-${c...}}} levels
MAX_WORDS = 100_000  # words, commands and references of one script (a launch script has a few thousand)

_PLAIN = re.compile(r"[^\s'\"\\$`;&|()<>#]+")  # one character class, no backtracking
_IN_DOUBLE = re.compile(r"[^\"\\$`]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN_HEAD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_SPECIAL = re.compile(r"[0-9@*#?$!-]")
_OPS = (":-", ":=", ":+", ":?", "-", "=", "+", "?")
_C_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "e": "\x1b", "a": "\a", "0": "\0"}


@dataclass
class Ref:
    """A parameter expansion: `name`, an array `index` ('@', '*', digits or None), an operator with its word."""

    name: str
    quoted: bool
    text: str  # as written, for when it cannot be resolved
    index: str | None = None
    op: str = ""
    word: list | None = None  # the parts of the word after the operator
    opaque: bool = False  # $(...), `...`, $1, ${V%x}: only running the script knows its value


@dataclass
class Word:
    """One shell word before expansion: parts are `str` (literal text) or `Ref`; `array` holds the element
    words of a `NAME=( ... )` assignment (then `parts` is its `NAME=` head)."""

    parts: list = field(default_factory=list)
    line: int = 0
    quoted: bool = False
    array: list | None = None

    def literal(self) -> str | None:
        """The word's text when it has no expansion, else None."""
        return "".join(self.parts) if all(isinstance(p, str) for p in self.parts) else None


@dataclass
class Command:
    words: list
    line: int
    heredocs: list = field(default_factory=list)  # [(first line, last line, body)]


class _Lexer:
    def __init__(self, text: str, name: str):
        self.text, self.n, self.name = text, len(text), name
        self.i, self.line = 0, 1
        self.commands: list = []
        self.words: list = []
        self.cur: Word | None = None
        self.heredocs: list = []  # pending [(delimiter, strip tabs)]
        self.array: Word | None = None  # an open NAME=( ... )
        self.drop_next = False  # the next word is a redirection's target
        self.count = 0

    def fail(self, what: str, line: int | None = None):
        raise ConfigError(f"config {self.name!r} cannot be split into shell words (line {line or self.line}): {what}")

    # ------------------------------------------------------------------------------------- words
    def word(self) -> Word:
        if self.cur is None:
            self.cur = Word(line=self.line)
        return self.cur

    def tick(self) -> None:
        """Count one word, command or reference against MAX_WORDS: the bound on all later work."""
        self.count += 1
        if self.count > MAX_WORDS:
            self.fail(f"more than {MAX_WORDS} words, commands and $references: refused, not a launch script")

    def end_word(self) -> None:
        w, self.cur = self.cur, None
        if w is None:
            return
        self.tick()
        if self.drop_next:
            self.drop_next = False
        elif self.array is not None:
            self.array.array.append(w)
        else:
            self.words.append(w)

    def end_command(self) -> None:
        self.end_word()
        if self.array is not None:
            return  # a newline inside NAME=( ... ) separates elements
        self.drop_next = False
        if self.words:
            self.tick()
            self.commands.append(Command(self.words, self.words[0].line))
        self.words = []

    # -------------------------------------------------------------------------------------- main loop
    def run(self) -> list:
        text = self.text
        while self.i < self.n:
            c = text[self.i]
            m = _PLAIN.match(text, self.i)
            if m:
                self.word().parts.append(m.group())
                self.i = m.end()
            elif c == "\n":
                self.end_command()
                self.i += 1
                self.line += 1
                if self.heredocs:
                    self.skip_heredocs()
            elif c in " \t\r\f\v":
                self.end_word()
                self.i += 1
            elif c == "#":
                if self.cur is None:  # a comment only at the start of a word
                    end = text.find("\n", self.i)
                    self.i = self.n if end < 0 else end
                else:
                    self.cur.parts.append("#")
                    self.i += 1
            elif c == "\\":
                self.backslash()
            elif c == "'":
                self.single_quote()
            elif c == '"':
                self.double_quote()
            elif c == "$":
                self.word().parts.append(self.dollar(quoted=False))
            elif c == "`":
                self.word().parts.append(self.backtick(quoted=False))
            elif c in "()":
                self.paren(c)
            elif c in "<>":
                self.redirection()
            else:  # ; & |
                self.operator()
        self.end_command()
        if self.array is not None:
            self.fail("an array '(' is never closed", self.array.line)
        return self.commands

    def backslash(self) -> None:
        nxt = self.text[self.i + 1] if self.i + 1 < self.n else ""
        if nxt == "\n":
            self.line += 1
        elif nxt:
            w = self.word()
            w.parts.append(nxt)
            w.quoted = True
        self.i += 2

    def single_quote(self) -> None:
        end = self.text.find("'", self.i + 1)
        if end < 0:
            self.fail("no closing quotation (')")
        body = self.text[self.i + 1 : end]
        w = self.word()
        w.parts.append(body)
        w.quoted = True
        self.line += body.count("\n")
        self.i = end + 1

    def double_quote(self) -> None:
        w, start = self.word(), self.line
        w.quoted = True
        self.i += 1
        text = self.text
        while True:
            if self.i >= self.n:
                self.fail('no closing quotation (")', start)
            m = _IN_DOUBLE.match(text, self.i)
            if m:
                w.parts.append(m.group())
                self.line += m.group().count("\n")
                self.i = m.end()
                continue
            c = text[self.i]
            if c == '"':
                self.i += 1
                return
            if c == "\\":
                nxt = text[self.i + 1] if self.i + 1 < self.n else ""
                if nxt == "\n":
                    self.line += 1
                elif nxt in '$`"\\':
                    w.parts.append(nxt)
                else:
                    w.parts.append("\\" + nxt)
                self.i += 2
            elif c == "$":
                w.parts.append(self.dollar(quoted=True))
            else:
                w.parts.append(self.backtick(quoted=True))

    # ------------------------------------------------------------------------------------- expansions
    def dollar(self, quoted: bool, depth: int = 0):
        self.tick()
        text, start = self.text, self.i
        nxt = text[start + 1] if start + 1 < self.n else ""
        if nxt == "{":
            return self.braced(quoted, depth)
        if nxt == "(":
            end = self.matching(start + 1, "(", ")")
            self.i = end
            return Ref("", quoted, text[start:end], opaque=True)
        if nxt == "'" and not quoted:
            return self.ansi_c()
        m = _NAME.match(text, start + 1)
        if m:
            self.i = m.end()
            return Ref(m.group(), quoted, "$" + m.group())
        if nxt and _SPECIAL.match(nxt):
            self.i = start + 2
            return Ref("", quoted, text[start : start + 2], opaque=True)
        self.i = start + 1
        return "$"

    def braced(self, quoted: bool, depth: int):
        if depth >= MAX_NESTING:
            self.fail(f"${{...}} nested more than {MAX_NESTING} deep")
        text, start = self.text, self.i
        m = _NAME.match(text, start + 2)
        if not m:  # ${#A[@]}, ${!x}, ${1}: not resolved here
            end = self.matching(start + 1, "{", "}")
            self.i = end
            return Ref("", quoted, text[start:end], opaque=True)
        ref = Ref(m.group(), quoted, "")
        i = m.end()
        if i < self.n and text[i] == "[":
            close = text.find("]", i)
            if close < 0:
                self.fail("no closing ']' in ${...}")
            ref.index = text[i + 1 : close]
            i = close + 1
        if i < self.n and text[i] == "}":
            self.i = i + 1
            ref.text = text[start : self.i]
            return ref
        op = next((o for o in _OPS if text.startswith(o, i)), None)
        if op is None:  # ${V%x}, ${V/a/b}, ${V:1:2}: string operations
            end = self.matching(start + 1, "{", "}")
            self.i = end
            ref.opaque, ref.text = True, text[start:end]
            return ref
        ref.op, self.i = op, i + len(op)
        ref.word = self.word_until_brace(quoted, depth + 1, self.line)
        ref.text = text[start : self.i]
        return ref

    def word_until_brace(self, quoted: bool, depth: int, first_line: int) -> list:
        """The parts of an operator's word inside ${NAME:-word}, up to its closing brace."""
        parts: list = []
        text = self.text
        while True:
            if self.i >= self.n:
                self.fail("no closing '}' in ${...}", first_line)
            c = text[self.i]
            if c == "}":
                self.i += 1
                return parts
            if c == "$":
                parts.append(self.dollar(quoted, depth))
            elif c == "\\" and self.i + 1 < self.n:
                parts.append(text[self.i + 1])
                self.i += 2
            elif c == "'" and not quoted:
                end = text.find("'", self.i + 1)
                if end < 0:
                    self.fail("no closing quotation (')")
                parts.append(text[self.i + 1 : end])
                self.i = end + 1
            elif c == '"':
                self.i += 1  # quotes inside the word group, they do not end it
            else:
                if c == "\n":
                    self.line += 1
                parts.append(c)
                self.i += 1

    def matching(self, i: int, opening: str, closing: str) -> int:
        """The index after the `closing` that matches text[i] == `opening`, skipping quoted text."""
        level, text = 0, self.text
        while i < self.n:
            c = text[i]
            if c == opening:
                level += 1
            elif c == closing:
                level -= 1
                if level == 0:
                    return i + 1
            elif c == "\\":
                i += 1
            elif c == "'":
                end = text.find("'", i + 1)
                i = self.n if end < 0 else end
            elif c == "\n":
                self.line += 1
            i += 1
        self.fail(f"no closing {closing!r}")

    def backtick(self, quoted: bool) -> Ref:
        self.tick()
        start, i = self.i, self.i + 1
        while i < self.n and self.text[i] != "`":
            i += 2 if self.text[i] == "\\" else 1
        if i >= self.n:
            self.fail("no closing backtick")
        self.line += self.text.count("\n", start, i)
        self.i = i + 1
        return Ref("", quoted, self.text[start : self.i], opaque=True)

    def ansi_c(self) -> str:
        out, i, text = [], self.i + 2, self.text
        while i < self.n and text[i] != "'":
            if text[i] == "\\" and i + 1 < self.n:
                out.append(_C_ESCAPES.get(text[i + 1], "\\" + text[i + 1]))
                i += 2
            else:
                out.append(text[i])
                i += 1
        if i >= self.n:
            self.fail("no closing quotation in $'...'")
        self.i = i + 1
        self.word().quoted = True
        return "".join(out)

    # ------------------------------------------------------------------------------------- operators
    def paren(self, c: str) -> None:
        head = self.cur.literal() if self.cur is not None and not self.cur.quoted else None
        if c == "(" and head is not None and self.array is None and _ASSIGN_HEAD.fullmatch(head):
            self.array, self.cur = Word([head], self.cur.line, array=[]), None
            self.i += 1
            return
        if c == ")" and self.array is not None:
            self.end_word()
            array, self.array = self.array, None
            self.words.append(array)
            self.i += 1
            return
        self.end_command()  # a subshell's or a function's parentheses: command boundaries
        self.i += 1

    def operator(self) -> None:
        text = self.text
        if text.startswith("&>", self.i):
            self.end_word()
            self.drop_next = True
            self.i += 3 if text.startswith("&>>", self.i) else 2
            return
        self.end_command()
        self.i += 2 if text[self.i : self.i + 2] in ("&&", "||", ";;", "|&") else 1

    def redirection(self) -> None:
        text, i = self.text, self.i
        fd = self.cur.literal() if self.cur is not None else None
        if fd is not None and fd.isdigit():
            self.cur = None  # 2>&1: the digits are a file descriptor, not a word
        else:
            self.end_word()
        if text.startswith("<<<", i):
            self.i, self.drop_next = i + 3, True
            return
        if text.startswith("<<", i):
            self.i = i + 3 if text.startswith("<<-", i) else i + 2
            self.heredoc(strip=text.startswith("<<-", i))
            return
        j = i + 1
        while j < self.n and text[j] in "<>&|":
            j += 1
        self.i = j
        if text[j - 1] == "&" and j < self.n and (text[j].isdigit() or text[j] == "-"):
            self.i = j + 1  # >&2, <&-
            return
        self.drop_next = True

    def heredoc(self, strip: bool) -> None:
        while self.i < self.n and self.text[self.i] in " \t":
            self.i += 1
        m = _PLAIN.match(self.text, self.i)
        c = self.text[self.i] if self.i < self.n else ""
        if m:
            delim = m.group()
            self.i = m.end()
        elif c in "'\"":
            end = self.text.find(c, self.i + 1)
            if end < 0:
                self.fail("no closing quotation in a heredoc delimiter")
            delim, self.i = self.text[self.i + 1 : end], end + 1
        else:
            self.fail("a heredoc '<<' without its delimiter word")
        self.heredocs.append((delim, strip))

    def skip_heredocs(self) -> None:
        """After the line that opened them, each heredoc's body up to its delimiter line (data, not words)."""
        text = self.text
        for delim, strip in self.heredocs:
            first, lines = self.line, []
            while self.i < self.n:
                end = text.find("\n", self.i)
                end = self.n if end < 0 else end
                line = text[self.i : end]
                self.i, self.line = end + 1, self.line + 1
                if (line.lstrip("\t") if strip else line) == delim:
                    break
                lines.append(line)
            if self.commands:
                self.commands[-1].heredocs.append((first, self.line - 1, "\n".join(lines)))
        self.heredocs = []


def split_commands(text: str, name: str) -> list[Command]:
    """The commands of a shell script, as words before expansion (module doc string)."""
    return _Lexer(text, name).run()


# ------------------------------------------------------------------------------------------- expansion
class Variables:
    """A script's variables as it runs top to bottom ({name: str or [str]}), and the bytes expansions built."""

    def __init__(self, name: str):
        self.name, self.values, self.spent = name, {}, 0
        self.arrays_used: set = set()

    def spend(self, text: str) -> str:
        self.spent += len(text)
        if self.spent > MAX_EXPANSION_BYTES:
            raise ConfigError(
                f"config {self.name!r} expands to more than {MAX_EXPANSION_BYTES} bytes through its variables: "
                "refused before building it (a launch script's variables hold a few flags each)"
            )
        return text

    def lookup(self, ref: Ref):
        """The value (str, or [str] for an array's '@') of `ref`, or None where the script does not know it."""
        if ref.opaque:
            return None
        value = self.values.get(ref.name)
        if isinstance(value, list):
            self.arrays_used.add(ref.name)
            if ref.index in ("@", "*"):
                return value
            k = int(ref.index) if ref.index and ref.index.isdigit() else 0
            value = value[k] if k < len(value) else ""
        elif ref.index not in (None, "0", "@", "*"):
            value = "" if value is not None else None
        unset, empty = value is None, not value
        if ref.op in (":-", ":=") and empty or ref.op in ("-", "=") and unset:
            value = self.word_text(ref.word)
            if ref.op in (":=", "="):
                self.values[ref.name] = value
            return value
        if ref.op in (":+", "+"):
            return "" if (empty if ref.op == ":+" else unset) else self.word_text(ref.word)
        if ref.op in (":?", "?") and (empty if ref.op == ":?" else unset):
            return None
        return value

    def word_text(self, parts: list) -> str:
        out = []
        for p in parts:
            if isinstance(p, str):
                out.append(self.spend(p))
            else:
                value = self.lookup(p)
                value = p.text if value is None else " ".join(value) if isinstance(value, list) else value
                out.append(self.spend(value))
        return "".join(out)


def expand(word: Word, env: Variables, split: bool = True) -> list[str]:
    """The fields bash makes of `word`: literal text as is, quoted expansions whole (`"${A[@]}"`: one field per
    element), unquoted ones split on blanks; `split=False` (an assignment's value) joins them into one."""
    fields: list = []
    cur: list = []
    live = word.quoted  # a quoted empty word ("") is still a word

    def close():
        nonlocal cur, live
        if cur or live:
            fields.append("".join(cur))
        cur, live = [], False

    for part in word.parts:
        value = part if isinstance(part, str) else env.lookup(part)
        if value is None:  # not known without running the script: kept as written
            value = part.text
        if isinstance(part, str) or isinstance(value, str) and (part.quoted or not split):
            cur.append(env.spend(value))
            live = True
            continue
        pieces = value if isinstance(value, list) else [value]
        if not split:
            cur.append(env.spend(" ".join(pieces)))
            live = True
            continue
        for k, piece in enumerate(pieces):
            env.spend(piece)
            if k:
                close()
            if part.quoted:  # "${A[@]}": each element one field, as it is
                cur.append(piece)
                live = True
                continue
            if piece[:1].isspace():
                close()
            chunks = piece.split()
            for j, chunk in enumerate(chunks):
                if j:
                    close()
                cur.append(chunk)
                live = True
            if chunks and piece[-1:].isspace():
                close()
    close()
    return fields


# ---------------------------------------------------------------------------------------------- a script
_DECLARE = ("export", "declare", "local", "readonly", "typeset")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass
class Script:
    """A script's commands as the words each receives, top to bottom, and the arrays no command received."""

    commands: list  # [(line, [word], [(first line, last line, heredoc body)])]
    variables: dict  # {name: value or [values]} at the end
    unused_arrays: dict  # {name: line of its definition}
    notes: list = field(default_factory=list)  # how each if/elif was decided (sanity.shellbranches)


def expand_script(text: str, name: str) -> Script:
    """Split `text` (split_commands) and expand each command's words as bash would running it top to bottom:
    `NAME=value` before the command word (or after export/declare/...) sets a variable for what follows,
    `NAME=( ... )` defines an array, `${NAME[@]}` passes one (module doc string)."""
    env, arrays, out, branches = Variables(name), {}, [], Branches()
    for command in split_commands(text, name):
        first = command.words[0].literal() if command.words else None
        handled, drop = branches.keyword(
            first, lambda c=command: [f for w in c.words for f in expand(w, env)], command.line
        )
        if not branches.active() or drop is None:
            continue  # a branch bash would not take, or an if/elif condition or fi
        words, prefix = [], True  # prefix: only assignments (or export ...) so far
        for word in command.words[drop:]:
            if word.array is not None:
                arrays[_define_array(word, env)] = word.line
                continue
            head = word.parts[0] if word.parts and isinstance(word.parts[0], str) else ""
            fields = expand(word, env, split=not _ASSIGNMENT.match(head))  # NAME=$V is not split
            if prefix and fields and _ASSIGNMENT.match(fields[0]):
                key, value = fields[0].split("=", 1)
                env.values[key] = value
            elif word.literal() not in _DECLARE:
                prefix = False
            words += fields
        out.append((command.line, words, command.heredocs))
    unused = {a: line for a, line in arrays.items() if a not in env.arrays_used}
    return Script(out, env.values, unused, branches.notes)


def _define_array(word: Word, env: Variables) -> str:
    """NAME=( ... ) (or NAME+=( ... ), appending) into `env`; returns NAME."""
    head = word.parts[0]
    name, append = head.rstrip("=").rstrip("+"), head.endswith("+=")
    items = [f for element in word.array for f in expand(element, env)]
    old = env.values.get(name) if append else None
    env.values[name] = (old if isinstance(old, list) else [old] if old else []) + items
    return name
