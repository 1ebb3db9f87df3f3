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
word per element, an assignment's value is not split; a reference it cannot resolve stays as written, whole (its
words are not known, so `$(scontrol show hostnames)` is not cut at its blanks). `$(( ))` is evaluated on the
script's integers. Every byte an expansion produces is counted against MAX_EXPANSION_BYTES before it is built
(variables that each repeat the last ten times, six deep, would otherwise grow a 7 kB script to gigabytes), and
`${...}` nests at most MAX_NESTING deep. `case`, functions (read where they are called, with their arguments as
$1 ... "$@") and `(( ))` commands are understood; `if`/`case` decisions are `divclip.engines.shellbranches`'.
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
    kind: str = ""  # "" a command; "case" (words: case SUBJECT), "pattern;;" (a case branch's patterns, after
    # a branch that ended with ;; — or ";&", ";;&"), "esac",
    # "function" (words: the name; its body is the compound command after it)


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
        self.cases = 0  # open `case ... esac`
        self.in_pattern = False  # reading a case branch's patterns, up to its ')'
        self.branch_end = ";;"  # how the case branch before ended: ;; (done), ;& (fall through), ;;& (test on)

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
        text = None if w.quoted else w.literal()
        if self.drop_next:
            self.drop_next = False
        elif self.array is not None:
            self.array.array.append(w)
        elif self.cases and not self.words and text == "esac":
            self.cases -= 1
            self.in_pattern, self.branch_end = False, ";;"
            self.emit([w], "esac")
        elif text == "in" and len(self.words) == 2 and self.words[0].literal() == "case" and not self.in_pattern:
            self.emit(self.words, "case")  # case SUBJECT in: the branches' patterns follow
            self.words, self.cases, self.in_pattern, self.branch_end = [], self.cases + 1, True, ";;"
        else:
            self.words.append(w)

    def emit(self, words: list, kind: str) -> None:
        self.tick()
        self.commands.append(Command(list(words), words[0].line if words else self.line, kind=kind))

    def end_command(self) -> None:
        self.end_word()
        if self.array is not None or self.in_pattern:
            return  # a newline inside NAME=( ... ) separates elements; a case pattern runs up to its ')'
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
        text = self.text
        if self.in_pattern:  # case branch: `(pattern | pattern)` up to its ')'
            if c == ")":
                self.end_word()
                self.emit(self.words, "pattern" + self.branch_end)
                self.words, self.in_pattern = [], False
            self.i += 1
            return
        if c == "(" and self.cur is None and text.startswith("((", self.i):  # (( arithmetic )): no words
            self.end_command()
            self.i = self.matching(self.i, "(", ")")
            return
        head = self.cur.literal() if self.cur is not None and not self.cur.quoted else None
        if c == "(" and head is not None and _NAME.fullmatch(head) and self.array is None:
            j = self.i + 1
            while j < self.n and text[j] in " \t":
                j += 1
            if j < self.n and text[j] == ")" and (not self.words or [w.literal() for w in self.words] == ["function"]):
                self.cur = None  # NAME() or function NAME(): a function definition, its body next
                self.emit([Word([head], self.line)], "function")
                self.words = []
                self.i = j + 1
                return
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
        if self.in_pattern and text[self.i] == "|":  # pattern | pattern in a case branch
            self.end_word()
            self.i += 1
            return
        self.end_command()
        op = text[self.i : self.i + 3] if text.startswith(";;&", self.i) else text[self.i : self.i + 2]
        if self.cases and op in (";;", ";&", ";;&"):  # the end of a case branch: the next patterns follow
            self.in_pattern, self.branch_end = True, op
        self.i += len(op) if op in ("&&", "||", ";;", "|&", ";&", ";;&") else 1

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
        self.missing: list = []  # what the current command could not resolve: [(as written, where it comes from)]
        self.args: list | None = None  # the positional parameters inside a function call ($1, "$@"), else unknown
        self.unknown: dict = {}  # {name: (line, [references])}: set to what only running the script knows
        self.tainted: dict = {}  # {name: [(reference, origin)]}: set to text holding such a reference

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
            return arithmetic(ref.text[3:-2], self) if ref.text.startswith("$((") else self.positional(ref.text)
        if ref.name in self.unknown:
            return None
        self.missing.extend(self.tainted.get(ref.name, ()))
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

    def positional(self, text: str):
        """$1 ... $9, $@, $*, $# inside a function call (its arguments); None elsewhere (the script's own)."""
        if self.args is None or len(text) != 2:
            return None
        c = text[1]
        if c in "@*":
            return list(self.args)
        if c == "#":
            return str(len(self.args))
        if c.isdigit() and c != "0":
            k = int(c)
            return self.args[k - 1] if k <= len(self.args) else ""
        return None

    def word_text(self, parts: list) -> str:
        out = []
        for p in parts:
            if isinstance(p, str):
                out.append(self.spend(p))
            else:
                value = self.lookup(p)
                if value is None:
                    self.missing.append((p.text, _origin(p, self)))
                value = p.text if value is None else " ".join(value) if isinstance(value, list) else value
                out.append(self.spend(value))
        return "".join(out)


_ARITH_NAME = re.compile(r"\$\{([A-Za-z_]\w*)\}|\$?([A-Za-z_]\w*)")
_ARITH_TOKENS = re.compile(r"\s*(\d+|[-+*/%()])")
MAX_ARITH_CHARS = 200


def arithmetic(expr: str, env: Variables) -> str | None:
    """bash's `$(( expr ))` for + - * / % and parentheses on integers and the script's integer variables
    (division truncates toward zero, as in C), as text; None for anything else (unknown names, `**`, `?:`, ...)."""
    if len(expr) > MAX_ARITH_CHARS or not expr.strip():
        return None

    def name(m):
        n = m.group(1) or m.group(2)
        if n in env.unknown:
            return "?"
        value = env.values.get(n, "")
        value = value.strip() if isinstance(value, str) else ""
        return value if re.fullmatch(r"-?\d{1,18}", value) else "?"  # unset: the run's environment decides

    text = _ARITH_NAME.sub(name, expr)
    tokens, i = [], 0
    while i < len(text):
        m = _ARITH_TOKENS.match(text, i)
        if not m:
            if text[i:].strip() == "":
                break
            return None
        tokens.append(m.group(1))
        i = m.end()
    if "**" in expr:
        return None
    try:
        value, rest = _arith_sum(tokens, 0)
    except (ValueError, IndexError, ZeroDivisionError):
        return None
    return str(value) if rest == len(tokens) and abs(value) < 2**63 else None


def _arith_sum(tokens, i):
    value, i = _arith_product(tokens, i)
    while i < len(tokens) and tokens[i] in "+-":
        rhs, j = _arith_product(tokens, i + 1)
        value, i = (value + rhs if tokens[i] == "+" else value - rhs), j
    return value, i


def _arith_product(tokens, i):
    value, i = _arith_unary(tokens, i)
    while i < len(tokens) and tokens[i] in "*/%":
        rhs, j = _arith_unary(tokens, i + 1)
        if tokens[i] == "*":
            value = value * rhs
        else:
            q = abs(value) // abs(rhs) * (1 if (value >= 0) == (rhs >= 0) else -1)  # C division; ÷0 raises
            value = q if tokens[i] == "/" else value - q * rhs
        if abs(value) >= 2**63:
            raise ValueError("past bash's 64-bit integers")
        i = j
    return value, i


def _arith_unary(tokens, i):
    if tokens[i] in "+-":
        value, j = _arith_unary(tokens, i + 1)
        return (value if tokens[i] == "+" else -value), j
    if tokens[i] == "(":
        value, j = _arith_sum(tokens, i + 1)
        if tokens[j] != ")":
            raise ValueError("unbalanced")
        return value, j + 1
    if not tokens[i].isdigit():
        raise ValueError(tokens[i])
    return int(tokens[i]), i + 1


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
        unknown = value is None
        if unknown:  # not known without running the script: kept as written, one piece (its words are unknown)
            env.missing.append((part.text, _origin(part, env)))
            value = part.text
        if isinstance(part, str) or unknown or isinstance(value, str) and (part.quoted or not split):
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
MAX_CALL_DEPTH = 8  # a function calling a function ...: deeper calls are not read (a recursive one stops here)


@dataclass
class Script:
    """A script's commands as the words each receives, top to bottom, and the arrays no command received."""

    commands: list  # [(line, [word], [(first line, last line, heredoc body)])]
    variables: dict  # {name: value or [values]} at the end
    unused_arrays: dict  # {name: line of its definition}
    notes: list = field(default_factory=list)  # how each if/elif/case was decided, which functions were called
    unresolved: list = field(default_factory=list)  # per command: [(text as written, where its value comes from)]
    unused_functions: dict = field(default_factory=dict)  # {name: (first line, last line)}: defined, never called
    call_lines: list = field(default_factory=list)  # per command: the line of the call it runs in (None: none)


@dataclass
class _Function:
    name: str
    body: list  # [Command | _Function]
    first: int
    last: int


def _head(command: Command) -> str | None:
    return command.words[0].literal() if command.words and not command.words[0].quoted else None


def _group(commands: list) -> list:
    """The commands with each function definition gathered into a `_Function` holding its body: `NAME() { ... }`,
    `function NAME { ... }`, `function NAME() ...` (a body is the `{ ... }` group after the name, or one command)."""
    out, i, n = [], 0, len(commands)
    while i < n:
        command = commands[i]
        head = _head(command)
        if command.kind == "function" or (head == "function" and not command.kind and len(command.words) >= 2):
            name = command.words[0 if command.kind else 1].literal() or ""
            rest = [] if command.kind else command.words[2:]
            if rest and rest[0].literal() == "{":  # function NAME { cmd ...: the group opens on this line
                opening = [Command(rest[1:], command.line)] if rest[1:] else []
                body, i = _brace_body(commands, i + 1, opening)
            elif i + 1 < n and _head(commands[i + 1]) == "{":
                first = commands[i + 1]
                opening = [Command(first.words[1:], first.line, first.heredocs)] if first.words[1:] else []
                body, i = _brace_body(commands, i + 2, opening)
            else:
                body, i = commands[i + 1 : i + 2], i + 2
            last = body[-1].line if body else command.line
            out.append(_Function(name, _group(body), command.line, max(last, commands[min(i, n) - 1].line)))
            continue
        out.append(command)
        i += 1
    return out


def _brace_body(commands: list, i: int, body: list) -> tuple[list, int]:
    """The commands up to the `}` that closes a function's `{` (groups inside it counted); returns the body and
    the index after that `}`."""
    depth = 1
    while i < len(commands):
        command = commands[i]
        head = _head(command)
        if head == "{":
            depth += 1
        elif head == "}":
            depth -= 1
            if depth == 0:
                return body, i + 1
        body.append(command)
        i += 1
    return body, i


def _origin(ref: Ref, env: Variables) -> str:
    """Where the value of an unresolved reference comes from, in words."""
    text = ref.text
    if ref.name in env.unknown:
        line, refs = env.unknown[ref.name]
        return f"${ref.name} is set at line {line} from {', '.join(refs)[:80]}: only running the script gives it"
    if text.startswith("$(("):
        return "arithmetic on values the script does not know: only running it gives it"
    if text.startswith(("$(", "`")):
        return "the output of a command: only running the script gives it"
    if ref.opaque and ref.name:
        return f"a string operation on ${ref.name}: not evaluated here"
    if ref.opaque:
        return "an argument or special parameter of the script: only running it gives it"
    if ref.op in (":?", "?"):
        return f"${ref.name} is not set in the script (the script stops with an error without it)"
    return f"${ref.name} is not set in the script: it comes from the environment of the run"


class _Runner:
    """Runs the grouped commands top to bottom as bash would, without running anything (expand_script)."""

    def __init__(self, name: str):
        self.env, self.arrays, self.out, self.branches = Variables(name), {}, [], Branches()
        self.functions: dict = {}
        self.called: set = set()
        self.unresolved: list = []
        self.call_lines: list = []  # per command: the line of the outermost function call it runs in, or None
        self.calls: list = []  # the lines of the calls being run
        self.steps = 0  # commands run so far, calls included (bounded by MAX_WORDS)

    def run(self, items: list, depth: int = 0) -> None:
        env, branches = self.env, self.branches
        for item in items:
            self.steps += 1
            if self.steps > MAX_WORDS:  # functions calling functions: ten calls each, eight deep, is 10^8 commands
                raise ConfigError(
                    f"config {env.name!r} runs more than {MAX_WORDS} commands through its function calls: refused "
                    "before reading them (a launch script runs a few hundred)"
                )
            if isinstance(item, _Function):
                if branches.active():
                    self.functions[item.name] = item
                continue
            command = item
            if command.kind in ("case", "esac") or command.kind.startswith("pattern"):
                env.missing = []
                texts = ["".join(expand(w, env, split=False)) for w in command.words[command.kind == "case" :]]
                branches.case_keyword(command.kind, texts, not env.missing, command.line)
                continue
            first = _head(command)
            handled, drop = branches.keyword(
                first, lambda c=command: [f for w in c.words for f in expand(w, env)], command.line
            )
            if not branches.active() or drop is None:
                continue  # a branch bash would not take, or an if/elif condition or fi
            env.missing = []
            words, prefix = [], True  # prefix: only assignments (or export ...) so far
            for word in command.words[drop:]:
                if word.array is not None:
                    self.arrays[_define_array(word, env)] = word.line
                    continue
                head = word.parts[0] if word.parts and isinstance(word.parts[0], str) else ""
                before = len(env.missing)
                fields = expand(word, env, split=not _ASSIGNMENT.match(head))  # NAME=$V is not split
                if prefix and fields and _ASSIGNMENT.match(fields[0]):
                    key, value = fields[0].split("=", 1)
                    env.values[key] = value
                    # NAME=$(nproc): what NAME holds is not known either (kept as $NAME, whole); NAME=$X/data:
                    # its text is kept, and each command using it is told what it holds
                    unknown = env.missing[before:]
                    env.unknown.pop(key, None)
                    env.tainted.pop(key, None)
                    if len(unknown) == 1 and value == unknown[0][0]:
                        env.unknown[key] = (command.line, [unknown[0][0]])
                    elif unknown:
                        env.tainted[key] = unknown
                elif word.literal() not in _DECLARE:
                    prefix = False
                words += fields
            call = self.functions.get(words[0]) if words else None
            if call is not None:
                self.call(call, words[1:], command.line, depth)
                continue
            if words[:1] == ["shift"] and env.args is not None:
                n = int(words[1]) if len(words) > 1 and words[1].isdigit() else 1
                env.args = env.args[n:]
            self.out.append((command.line, words, command.heredocs))
            self.unresolved.append(list(dict.fromkeys(env.missing)))
            self.call_lines.append(self.calls[0] if self.calls else None)

    def call(self, function: _Function, args: list, line: int, depth: int) -> None:
        if depth >= MAX_CALL_DEPTH:
            self.branches.notes.append(
                f"line {line}: the call of {function.name} is {MAX_CALL_DEPTH} functions deep: its body is not read"
            )
            return
        self.called.add(function.name)
        self.branches.notes.append(
            f"line {line}: {function.name} (defined at lines {function.first}-{function.last}) is called: "
            "its body is read here"
        )
        saved, self.env.args = self.env.args, list(args)
        self.calls.append(line)
        try:
            self.run(function.body, depth + 1)
        finally:
            self.env.args = saved
            self.calls.pop()


def expand_script(text: str, name: str) -> Script:
    """Split `text` (split_commands) and expand each command's words as bash would running it top to bottom:
    `NAME=value` before the command word (or after export/declare/...) sets a variable for what follows,
    `NAME=( ... )` defines an array, `${NAME[@]}` passes one, `if`/`case` take the branch the script's own values
    decide, a function's body is read where it is called (module doc string)."""
    runner = _Runner(name)
    runner.run(_group(split_commands(text, name)))
    env = runner.env
    unused = {a: line for a, line in runner.arrays.items() if a not in env.arrays_used}
    never = {f.name: (f.first, f.last) for f in runner.functions.values() if f.name not in runner.called}
    return Script(runner.out, env.values, unused, runner.branches.notes, runner.unresolved, never, runner.call_lines)


def _define_array(word: Word, env: Variables) -> str:
    """NAME=( ... ) (or NAME+=( ... ), appending) into `env`; returns NAME."""
    head = word.parts[0]
    name, append = head.rstrip("=").rstrip("+"), head.endswith("+=")
    items = [f for element in word.array for f in expand(element, env)]
    old = env.values.get(name) if append else None
    env.values[name] = (old if isinstance(old, list) else [old] if old else []) + items
    return name
