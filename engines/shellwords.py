"""Read a shell script into commands of words as bash would, through bash's grammar, without running anything.

The syntax is tree-sitter-bash's (the `tree-sitter` and `tree-sitter-bash` packages), and the reader walks its
syntax tree:

* statements and `;`, `&&`, `||`, `|`, `&` lists, `( ... )` subshells (their variables stay inside), `{ ... }`
  groups, `!` negations, `\\`-newline continuations; `#` starts a comment only where bash's grammar says so;
* quotes are the shell's: '...' literal; "..." with `\\` escaping only `$ \\` " `` ` `` and newline, and
  expansions inside; `$'...'` with C escapes;
* `<<WORD`, `<<-WORD`, `<<'WORD'` heredocs: the body is data, not read (reported in `Command.heredocs`);
  `<<<` here-strings and the target of a redirection (`> log`, `2>&1`) are not words;
* `NAME=value`, `NAME+=( ... )`, `export` / `declare` / `local` / `readonly` / `typeset` assignments, `unset`; a
  `NAME=( ... )` array (over several lines, with comments) is one `Word` holding its elements;
* `$NAME`, `${NAME}`, `${NAME:-d}`, `${NAME-d}`, `${NAME:=d}`, `${NAME=d}`, `${NAME:+a}`, `${NAME:?m}`,
  `${NAME[@]}`, `${NAME[i]}` are references (`Ref`) that `expand` resolves from the script's own variables;
  anything else (`$(cmd)`, backticks, `$1` outside a function, `${#A[@]}`, `${V%x}`, `${V//a/b}`) is kept as
  written, since only running the script knows it (a command substitution is never run);
* `if` / `elif` / `else` and `case` are decided with the script's own values where they can be
  (`divclip.engines.shellbranches`, the branch taken said in a note); a function is read where it is called, with
  its arguments as $1 ... "$@"; a `for NAME in ...` loop over values the script knows is read once per value
  (over more than MAX_LOOP_VALUES once, its variable named as unresolved and the count said), any other loop
  (`while read`, `for ((...))`, a list only running knows) once, its variables named as unresolved, said in a
  note; `(( ))` commands set nothing.

A text bash's grammar cannot read (an unclosed quote, `${`, array, `$(` or `if`) is a ConfigError naming the file,
the line and the text there, never a traceback; what it cannot read elsewhere is said in a note. tree-sitter-bash
0.25 misreads three things bash reads plainly, worked around here: `$A/x/$b/` (the second `$` lost, its issue 315;
`$D/ifaces/$1`, issue 306): every bare `$NAME` / `$1` outside quotes, comments and heredoc bodies is given to the
parser as `${NAME}` (the same expansion); a `#` right after the first characters of a script's first word (read as
a comment) is given escaped; and two sibling words with no blank between them are read as the one word they are.
The parser's offsets are mapped back (`_Source`), so every text the reader keeps is the script's own.

`expand` does what bash does with the words: unquoted expansions are split on blanks, `"${A[@]}"` gives one
word per element, an assignment's value is not split; a reference it cannot resolve stays as written, whole (its
words are not known, so `$(scontrol show hostnames)` is not cut at its blanks). `$(( ))` is evaluated on the
script's integers. Every byte an expansion produces is counted against MAX_EXPANSION_BYTES before it is built
(variables that each repeat the last ten times, six deep, would otherwise grow a 7 kB script to gigabytes),
`${...}` nests at most MAX_NESTING deep and statements MAX_SYNTAX_DEPTH deep; a text with more than MAX_PIECES
pieces between blanks and `; & |` plus `$` signs is refused before it is parsed (each is a word or a reference,
outside quotes and heredocs: far more than MAX_WORDS of them is not a launch script).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass, field

import tree_sitter_bash
from tree_sitter import Language, Parser, Query, QueryCursor

from divclip.engines.errors import ConfigError
from divclip.engines.shellbranches import Branches

MAX_EXPANSION_BYTES = 4 * 2**20  # what a script's expansions may produce in all: a config's own size limit
MAX_NESTING = 32  # ${a:-${b:-${c...}}} levels
MAX_WORDS = 100_000  # words, commands and references of one script (a launch script has a few thousand)
MAX_SYNTAX_DEPTH = 64  # statements inside statements: ( ( ( ... ) ) ), if inside if ...
MAX_SYNTAX_NOTES = 8  # places bash's grammar cannot read, each said in a note (the rest counted)
MAX_LOOP_VALUES = 16  # a for loop over more values than this is read once, its variable named as unresolved
MAX_PIECES = MAX_WORDS * 3 // 2  # pieces between blanks and ; & |, plus $ signs, a text may hold before parsing
_PIECE = re.compile(rb"[^\s;&|]+")
_MAX_HASH_FIXES = 16  # re-parses for the `#` in a first word (module doc string)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPS = (":-", ":=", ":+", ":?", "-", "=", "+", "?")
_C_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "e": "\x1b", "a": "\a", "0": "\0"}
_UNQUOTED_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_DOUBLE_ESCAPE = re.compile(r"\\([$`\"\\\n])")


class Quoted(str):
    """Literal text bash took from inside quotes or escaped by a backslash: in a pattern (`[[ A == B ]]`'s right
    side, a `case` pattern) it matches itself, its `*`, `?` and `[` included."""


class Field(str):
    """One field of an expanded word whose text holds a quoted `*`, `?` or `[`; `pattern` is the same text as a glob
    pattern, those characters escaped (`"*7B"` matches only the text `*7B`, `*"7B"` any text ending in 7B, as bash
    matches them). `expand` makes one only where the two differ: every other field is a plain str."""

    pattern: str

    def __new__(cls, text: str, pattern: str | None = None):
        field_ = super().__new__(cls, text)
        field_.pattern = text if pattern is None else pattern
        return field_

    def __getnewargs__(self):
        return str(self), self.pattern


def _escape_glob(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def _unquoted_pieces(text: str) -> list:
    """Unquoted literal text as bash reads it: each backslash-escaped character a `Quoted` piece of its own."""
    if "\\" not in text:
        return [text]
    pieces, pos = [], 0
    for m in _UNQUOTED_ESCAPE.finditer(text):
        if m.start() > pos:
            pieces.append(text[pos : m.start()])
        if m.group(1) != "\n":  # a line continuation is no character
            pieces.append(Quoted(m.group(1)))
        pos = m.end()
    if pos < len(text):
        pieces.append(text[pos:])
    return pieces


_EXPANSIONS = frozenset(
    ("simple_expansion", "expansion", "command_substitution", "arithmetic_expansion", "process_substitution")
)
_LOOPS = frozenset(("for_statement", "c_style_for_statement", "while_statement"))
_LANGUAGE = Language(tree_sitter_bash.language())
_PARSER = Parser(_LANGUAGE)
_LITERAL = Query(_LANGUAGE, "[(raw_string) (comment) (heredoc_body) (ansi_c_string)] @literal")  # no $ expands
_BARE = re.compile(rb"(?<![\\$])\$([A-Za-z_][A-Za-z0-9_]*|[0-9])")  # $NAME, $1: not \$NAME, not $$NAME


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
    expanding: list = field(default_factory=list)  # per heredoc: its delimiter unquoted (<<EOF: $V expands in it)


@dataclass
class _Function:
    name: str
    body: list  # [statement]
    first: int
    last: int


@dataclass
class _If:
    clauses: list  # [(condition words, or None for else; line; body)]
    last: int  # the line of its `fi`


@dataclass
class _Case:
    subject: Word
    line: int
    items: list  # [(pattern words, line, how the branch ends: ";;", ";&" or ";;&", body)]
    last: int


@dataclass
class _Loop:
    kind: str  # for, for ((, while, until
    line: int
    header: str  # as written, for the notes
    body: list
    variable: str | None = None  # for NAME in ...
    values: list | None = None  # the words after `in` (None: no list)
    assigned: list = field(default_factory=list)  # what the loop sets that only running it gives (`read a b`)


@dataclass
class _Group:
    body: list
    subshell: bool  # ( ... ): what it sets stays inside


class _Source:
    """The bytes the parser reads (`new`) and the script's own (`orig`): `inserted` holds the offsets in `new` of the
    bytes added to work around tree-sitter-bash 0.25's misreadings (module doc string), so every text the reader
    takes is the script's as written."""

    def __init__(self, orig: bytes):
        self.orig, self.new, self.inserted = orig, orig, []

    def insert(self, at: list) -> _Source:
        """A copy with `at` [(offset in `new`, bytes)] (sorted, each offset once) inserted."""
        out, pieces, last, shift, added = _Source(self.orig), [], 0, 0, []
        moved = []
        k = 0
        for pos, data in at:
            while k < len(self.inserted) and self.inserted[k] < pos:
                moved.append(self.inserted[k] + shift)
                k += 1
            pieces += [self.new[last:pos], data]
            added += [pos + shift + j for j in range(len(data))]
            shift += len(data)
            last = pos
        moved += [p + shift for p in self.inserted[k:]]
        pieces.append(self.new[last:])
        out.new, out.inserted = b"".join(pieces), sorted(moved + added)
        return out

    def text(self, start: int, end: int) -> str:
        """The script's own text between two offsets of `new`."""
        if self.inserted:
            start, end = start - bisect_left(self.inserted, start), end - bisect_left(self.inserted, end)
        return self.orig[start:end].decode("utf-8", "surrogateescape")


class _Reader:
    """The statements of a syntax tree (tree-sitter-bash) as Commands of Words and the compound statements."""

    def __init__(self, source: _Source, name: str):
        self.src, self.name, self.count = source, name, 0
        self.lines: list | None = None

    def fail(self, what: str, line: int):
        raise ConfigError(f"config {self.name!r} cannot be split into shell words (line {line}): {what}")

    def tick(self, line: int) -> None:
        """Count one word, command or reference against MAX_WORDS: the bound on all later work."""
        self.count += 1
        if self.count > MAX_WORDS:
            self.fail(f"more than {MAX_WORDS} words, commands and $references: refused, not a launch script", line)

    def text(self, start: int, end: int) -> str:
        return self.src.text(start, end)

    # ------------------------------------------------------------------------------------- statements
    def statements(self, nodes, depth: int) -> list:
        if depth > MAX_SYNTAX_DEPTH:
            self.fail(f"statements nested more than {MAX_SYNTAX_DEPTH} deep", _line(nodes[0]) if nodes else 1)
        out: list = []
        for node in nodes:
            out += self.statement(node, depth)
        return out

    def statement(self, node, depth: int) -> list:
        kind, line = node.type, _line(node)
        if kind == "command":
            return [self.command(node)]
        if kind in ("variable_assignment", "variable_assignments"):
            items = [node] if kind == "variable_assignment" else _named(node)
            return [self.emit([self.assignment(a) for a in items if a.type == "variable_assignment"], line)]
        if kind in ("declaration_command", "unset_command"):
            words = [Word([node.children[0].type], line)]
            words += self.words_of(_named(node))
            return [self.emit(words, line)]
        if kind == "redirected_statement":
            return self.redirected(node, depth)
        if kind in ("list", "pipeline"):  # left-nested for a && b && c: walked without recursing per operator
            operands, stack = [], [node]
            while stack:
                n = stack.pop()
                if n.type == kind:
                    stack += reversed([c for c in _named(n) if c.type != "comment"])
                else:
                    operands.append(n)
            return self.statements(operands, depth + 1)
        if kind == "negated_command":
            return self.statements(_statements(node), depth + 1)
        if kind in ("subshell", "compound_statement"):
            return [_Group(self.statements(_statements(node), depth + 1), kind == "subshell")]
        if kind == "if_statement":
            return [self.if_statement(node, depth)]
        if kind == "case_statement":
            return [self.case_statement(node, depth)]
        if kind == "function_definition":
            body = node.child_by_field_name("body")
            inner = _statements(body) if body is not None and body.type == "compound_statement" else [body]
            name = self.word(node.child_by_field_name("name")).literal() or ""
            return [_Function(name, self.statements([n for n in inner if n], depth + 1), line, node.end_point[0] + 1)]
        if kind in _LOOPS:
            return [self.loop(node, depth)]
        if kind == "test_command":
            return [self.emit(self.condition([node]), line)]
        return []  # a comment, an arithmetic (( )) command: nothing set, nothing passed

    def emit(self, words: list, line: int) -> Command:
        self.tick(line)
        return Command(words, line)

    def command(self, node) -> Command:
        words, children, k = [], node.children, 0
        while k < len(children):
            child = children[k]
            k += 1
            if child.type == "file_redirect":  # `2>&1 --flag`: the grammar gives --flag to the redirection
                words += [self.word(d) for d in _field(child, "destination")[1:]]
            elif child.type in ("herestring_redirect", "comment") or not child.is_named and child.type != "$":
                continue
            elif child.type == "$" and k < len(children) and children[k].start_byte == child.end_byte:
                continue  # $"..." (a translated string): the string follows
            else:
                chain = [child]
                while k < len(children) and _adjacent(chain[-1], children[k]):
                    chain.append(children[k])
                    k += 1
                words += self.words_of(chain)
        return self.emit(words, _line(node))

    def words_of(self, nodes: list) -> list:
        """The words of sibling nodes separated by blanks; siblings with no blank between them are one word the
        grammar cut (joined)."""
        out, k = [], 0
        while k < len(nodes):
            chain = [nodes[k]]
            k += 1
            while k < len(nodes) and _adjacent(chain[-1], nodes[k]):
                chain.append(nodes[k])
                k += 1
            if len(chain) > 1:
                out.append(self.joined(chain))
            elif chain[0].type == "variable_assignment":
                out.append(self.assignment(chain[0]))
            else:
                out.append(self.word(chain[0]))
        return out

    def joined(self, chain: list) -> Word:
        """One word the grammar cut in two (tree-sitter-bash 0.25 reads `$A/x/$long_name/$c` as `$A/x/` and
        `long_name/$c`, losing the `$`): its text read again. Without quotes or backslashes in it, the word reads
        the same inside double quotes (what is not split stays the same text): it is parsed so, its references
        marked unquoted again."""
        first = chain[0]
        if first.type == "command_name" and first.named_children:
            first = first.named_children[0]
        head, start = "", first.start_byte
        if first.type == "variable_assignment":
            value = first.child_by_field_name("value")
            start = value.start_byte if value is not None else first.end_byte
            head = self.text(first.start_byte, start)
        text = self.text(start, chain[-1].end_byte)
        tree = _PARSER.parse(b'"' + _encode(text) + b'"')
        string = tree.root_node.named_children[0] if tree.root_node.named_children else None
        string = string.named_children[0] if string is not None and string.named_children else None
        string = string.named_children[0] if string is not None and string.named_children else None
        if any(c in text for c in "'\"\\`") or tree.root_node.has_error or string is None or string.type != "string":
            return self.concatenated(chain)  # *" "* (a pattern with a quoted blank): the pieces as they are
        reader = _Reader(_Source(b'"' + _encode(text) + b'"'), self.name)
        reader.count = self.count
        parts = reader.sequence(string, 1, string.end_byte - 1, True, 0)
        self.count = reader.count
        for part in parts:
            if isinstance(part, Ref):
                part.quoted = False
        return Word([head, *parts] if head else parts, _line(first), False)

    def concatenated(self, chain: list) -> Word:
        """Sibling nodes with no blank between them as one word, each read as it is (and the text between them)."""
        parts, quoted, pos = [], False, chain[0].start_byte
        for node in chain:
            if node.start_byte > pos:
                parts.append(_unescape(self.text(pos, node.start_byte), False))
            if node.type == "variable_assignment":
                word = self.assignment(node)
                sub, q = word.parts, word.quoted
            else:
                sub, q = self.parts(node.named_children[0] if node.type == "command_name" else node, False, 0)
            parts += sub
            quoted = quoted or q
            pos = node.end_byte
        return Word(parts, _line(chain[0]), quoted)

    def redirected(self, node, depth: int) -> list:
        body = node.child_by_field_name("body")
        items = self.statements([body], depth + 1) if body is not None else []
        extra, heredocs, after, expanding = [], [], [], []
        for redirect in _field(node, "redirect"):
            if redirect.type == "file_redirect":
                extra += [self.word(d) for d in _field(redirect, "destination")[1:]]
            elif redirect.type == "heredoc_redirect":
                heredocs.append(self.heredoc(redirect))
                start = next((c for c in redirect.children if c.type == "heredoc_start"), None)
                expanding.append(start is not None and not any(q in _node_text(start) for q in "'\"\\"))
                for k, child in enumerate(redirect.children):
                    if redirect.field_name_for_child(k) == "argument":
                        extra.append(self.word(child))  # python3 - <<EOF arg: arg is the command's
                    elif child.type == "file_redirect":
                        extra += [self.word(d) for d in _field(child, "destination")[1:]]
                    elif child.is_named and child.type not in ("heredoc_start", "heredoc_body", "heredoc_end"):
                        after += self.statements([child], depth + 1)  # cat <<EOF | python3 ...: the pipe goes on
        first = _first_command(items)
        if first is None and (extra or heredocs):
            first = self.emit([], _line(node))
            items.insert(0, first)
        if first is not None:
            first.words += extra
            first.heredocs += heredocs
            first.expanding += expanding
        return items + after

    def heredoc(self, node) -> tuple:
        end = next((c for c in node.children if c.type == "heredoc_end"), None)
        body = next((c for c in node.children if c.type == "heredoc_body"), None)
        last = _line(end) if end is not None else node.end_point[0] + 1
        first = _line(body) if body is not None else last
        if body is None and end is None:
            first = last = _line(node) + 1
        if self.lines is None:  # split once: a script of many heredocs stays linear
            self.lines = self.src.orig.decode("utf-8", "surrogateescape").split("\n")
        return first, last, "\n".join(self.lines[first - 1 : last - 1])

    def if_statement(self, node, depth: int) -> _If:
        clauses = [self.clause(node, depth)]
        for child in node.named_children:
            if child.type in ("elif_clause", "else_clause"):
                clauses.append(self.clause(child, depth))
        return _If(clauses, node.end_point[0] + 1)

    def clause(self, node, depth: int) -> tuple:
        """(condition words or None, line, body) of `if`/`elif ... then ...` or `else ...`."""
        condition, body, seen_then = [], [], node.type == "else_clause"
        for child in node.children:
            if child.type == "then":
                seen_then = True
            elif child.is_named and child.type not in ("elif_clause", "else_clause", "comment"):
                (body if seen_then else condition).append(child)
        words = None if node.type == "else_clause" else self.condition(condition[-1:])
        return words, _line(node), self.statements(body, depth + 1)

    def condition(self, nodes: list) -> list:
        """A condition's words, flattened (`[ A = B ] && [[ -n C || D ]]` word by word) for shellbranches.evaluate."""
        words, stack = [], list(reversed(nodes))
        while stack:
            node = stack.pop()
            if isinstance(node, _Chain):
                words.append(self.joined(node.nodes))
            elif node.type == "redirected_statement":  # `command -v x > /dev/null`: the command decides
                stack += [node.child_by_field_name("body")] if node.child_by_field_name("body") else []
            elif node.type == "command":
                words += self.command(node).words
            elif node.type in _WORDS or node.type in _EXPANSIONS:
                words.append(self.word(node))
            elif node.child_count == 0:
                words.append(Word([_node_text(node)], _line(node)))
            else:  # test_command, binary/unary/parenthesized expressions, lists, negations: their tokens in order
                children, grouped = [c for c in node.children if c.type not in ("comment", ";", "\n")], []
                for child in children:
                    if (
                        grouped
                        and _adjacent(grouped[-1][-1], child)
                        and _WORDS.issuperset((grouped[-1][-1].type, child.type))
                    ):
                        grouped[-1].append(child)  # a word the grammar cut in two (joined)
                    else:
                        grouped.append([child])
                stack += reversed([g[0] if len(g) == 1 else _Chain(g) for g in grouped])
        return words

    def case_statement(self, node, depth: int) -> _Case:
        subject = self.word(node.child_by_field_name("value"))
        items = []
        for item in (c for c in node.named_children if c.type == "case_item"):
            patterns, body, end, seen = [], [], ";;", False
            for k, child in enumerate(item.children):
                name = item.field_name_for_child(k)
                if name == "value" and not seen:
                    patterns.append(self.word(child))
                elif child.type == ")" and not seen:
                    seen = True
                elif name in ("termination", "fallthrough"):
                    end = child.type
                elif child.is_named and child.type != "comment" and seen:
                    body.append(child)
            items.append((patterns, _line(item), end, self.statements(body, depth + 1)))
        return _Case(subject, _line(node), items, node.end_point[0] + 1)

    def loop(self, node, depth: int) -> _Loop:
        body_node = node.child_by_field_name("body")
        body = self.statements(_statements(body_node), depth + 1) if body_node is not None else []
        header_end = body_node.start_byte if body_node is not None else node.end_byte
        header = " ".join(self.text(node.start_byte, header_end).split()).rstrip(";").rstrip()
        line = _line(node)
        if node.type == "for_statement":
            variable = node.child_by_field_name("variable")
            values = self.words_of(_field(node, "value"))
            in_list = any(c.type == "in" for c in node.children)
            return _Loop("for", line, header, body, _node_text(variable), values if in_list else None)
        if node.type == "c_style_for_statement":
            header_nodes = _field(node, "initializer") + _field(node, "update")
            assigned = [_node_text(n) for n in _descendants(header_nodes) if n.type in ("variable_name", "word")]
            return _Loop("for ((", line, header, body, assigned=[a for a in assigned if _NAME.fullmatch(a)])
        assigned = []
        for condition in _field(node, "condition"):
            for command in [condition] if condition.type == "command" else []:
                words = self.command(command).words
                while words and words[0].parts[:1] and _ASSIGNMENT.match(str(words[0].parts[0])):
                    words = words[1:]  # IFS= read -r line
                if words and words[0].literal() == "read":  # while read -r a b: a and b are what it reads
                    texts = [w.literal() or "" for w in words[1:]]
                    skip = {"-p", "-d", "-n", "-N", "-t", "-u", "-a", "-i"}
                    assigned += [
                        t for k, t in enumerate(texts) if _NAME.fullmatch(t) and (k == 0 or texts[k - 1] not in skip)
                    ] or ["REPLY"]
        kind = next((c.type for c in node.children if c.type in ("while", "until")), "while")
        return _Loop(kind, line, header, body, assigned=assigned)

    # ------------------------------------------------------------------------------------- words
    def assignment(self, node) -> Word:
        line = _line(node)
        self.tick(line)
        name = node.child_by_field_name("name")
        op = next((c.type for c in node.children if c.type in ("=", "+=")), "=")
        head = (_node_text(name) if name is not None else "") + op
        value = node.child_by_field_name("value")
        if value is None:
            return Word([head], line)
        if value.type == "array":
            return Word([head], line, array=self.words_of([e for e in value.named_children if e.type != "comment"]))
        parts, quoted = self.parts(value, False, 0)
        return Word([head, *parts], line, quoted)

    def word(self, node) -> Word:
        if node.type == "command_name" and node.named_children:
            node = node.named_children[0]
        self.tick(_line(node))
        parts, quoted = self.parts(node, False, 0)
        return Word(parts, _line(node), quoted)

    def parts(self, node, in_quotes: bool, depth: int) -> tuple[list, bool]:
        """The literal text and references of one word-like node, and whether any of it was quoted."""
        kind = node.type
        if kind in _EXPANSIONS:
            text = self.text(node.start_byte, node.end_byte)
            blank = text[: len(text) - len(text.lstrip())]  # the grammar puts the blank before ${ inside it
            return [*([blank] if blank else []), self.ref(node, text.lstrip(), in_quotes, depth)], False
        if kind == "raw_string":
            return [Quoted(self.text(node.start_byte + 1, node.end_byte - 1))], True
        if kind == "ansi_c_string":
            return [Quoted(_c_string(self.text(node.start_byte + 2, node.end_byte - 1)))], True
        if kind in ("string", "translated_string"):
            start = node.start_byte + (2 if kind == "translated_string" else 1)
            return self.sequence(node, start, node.end_byte - 1, True, depth), True
        if kind in ("concatenation", "array") or kind not in _WORDS and node.named_child_count:
            quoted = False
            parts = []
            pos = node.start_byte
            for child in node.named_children:
                if child.start_byte > pos:
                    parts += self.literal(self.text(pos, child.start_byte), in_quotes)
                sub, q = self.parts(child, in_quotes, depth)
                parts += sub
                quoted = quoted or q
                pos = child.end_byte
            if node.end_byte > pos and kind == "concatenation":
                parts += self.literal(self.text(pos, node.end_byte), in_quotes)
            return parts if node.named_child_count else [self.text(node.start_byte, node.end_byte)], quoted
        text = self.text(node.start_byte, node.end_byte)
        return self.literal(text, in_quotes), "\\" in text and not in_quotes

    @staticmethod
    def literal(text: str, in_quotes: bool) -> list:
        """Literal text's pieces: inside quotes one `Quoted`, outside them its escaped characters `Quoted`."""
        return [Quoted(_unescape(text, True))] if in_quotes else _unquoted_pieces(text)

    def sequence(self, node, start: int, end: int, in_quotes: bool, depth: int) -> list:
        """Inside "...": the text between the expansions (escapes as in double quotes) and the expansions."""
        parts, pos = [], start
        for child in node.named_children:
            if child.type not in _EXPANSIONS:
                continue  # string_content: read from the text itself
            text = self.text(child.start_byte, child.end_byte)
            real = child.start_byte + len(_encode(text)) - len(_encode(text.lstrip()))
            if real > pos:
                parts.append(Quoted(_unescape(self.text(pos, real), True)))
            parts.append(self.ref(child, text.lstrip(), in_quotes, depth))
            pos = child.end_byte
        if end > pos:
            parts.append(Quoted(_unescape(self.text(pos, end), True)))
        return parts

    def ref(self, node, text: str, quoted: bool, depth: int) -> Ref:
        self.tick(_line(node))
        kind = node.type
        if kind == "simple_expansion":
            name = text[1:]
            return Ref(name, quoted, text) if _NAME.fullmatch(name) else Ref("", quoted, text, opaque=True)
        if kind != "expansion":  # $(...), `...`, $(( )), <(...): only running the script knows them
            return Ref("", quoted, text, opaque=True)
        if depth >= MAX_NESTING:
            self.fail(f"${{...}} nested more than {MAX_NESTING} deep", _line(node))
        children = [c for c in node.children if c.type not in ("${", "}")]
        head = children[0] if children else None
        if head is not None and head.type == "variable_name" and _NAME.fullmatch(_node_text(head)):
            ref = Ref(_node_text(head), quoted, text)
        elif head is not None and head.type == "subscript":
            index = head.child_by_field_name("index")
            name = head.child_by_field_name("name")
            ref = Ref(_node_text(name), quoted, text, index=_node_text(index) if index is not None else "")
        else:  # ${#A[@]}, ${!x}, ${1}, ${@:2}: not resolved here
            return Ref("", quoted, text, opaque=True)
        rest = children[1:]
        if not rest:
            return ref
        op = rest[0]
        if op.type not in _OPS or op.is_named:  # ${V%x}, ${V//a/b}, ${V:1:2}: string operations
            ref.opaque = True
            return ref
        ref.op = op.type
        close = node.children[-1].start_byte if node.children[-1].type == "}" else node.end_byte
        words = [c for c in rest[1:]]
        parts, pos = [], op.end_byte
        for child in words:
            if child.start_byte > pos:
                parts.append(_unescape(self.text(pos, child.start_byte), quoted))
            parts += self.parts(child, quoted, depth + 1)[0]
            pos = child.end_byte
        if close > pos:
            parts.append(_unescape(self.text(pos, close), quoted))
        ref.word = parts
        return ref


_WORDS = frozenset(
    (
        "word",
        "number",
        "extglob_pattern",
        "regex",
        "test_operator",
        "variable_name",
        "string",
        "raw_string",
        "ansi_c_string",
        "translated_string",
        "concatenation",
        "special_variable_name",
        "brace_expression",
    )
)


def _encode(text: str) -> bytes:
    """The bytes of `text` for the parser: a file's undecodable bytes (read as surrogates) are those bytes again;
    any text slice of them decodes back (surrogateescape never fails, even on a sequence the parser cut)."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def _node_text(node) -> str:
    return node.text.decode("utf-8", "surrogateescape")


@dataclass
class _Chain:
    nodes: list  # sibling nodes with no blank between them: one word


def _adjacent(before, after) -> bool:
    return after.start_byte == before.end_byte and _wordlike(before) and _wordlike(after)


def _wordlike(node) -> bool:
    return node.is_named and node.type not in ("file_redirect", "heredoc_redirect", "herestring_redirect", "comment")


def _line(node) -> int:
    return node.start_point[0] + 1


def _named(node) -> list:
    return [c for c in node.named_children if c.type != "comment"]


def _field(node, name: str) -> list:
    return [c for k, c in enumerate(node.children) if node.field_name_for_child(k) == name]


def _statements(node) -> list:
    """The statements inside a group, subshell, do-group or negation."""
    return [] if node is None else [c for c in node.named_children if c.type != "comment"]


def _descendants(nodes: list) -> list:
    out, stack = [], list(nodes)
    while stack:
        n = stack.pop()
        out.append(n)
        stack += n.children
    return out


def _first_command(items: list):
    for item in items:
        if isinstance(item, Command):
            return item
        inner = item.body if isinstance(item, (_Group, _Loop)) else None
        found = _first_command(inner) if inner else None
        if found is not None:
            return found
    return None


def _unescape(text: str, in_quotes: bool) -> str:
    if "\\" not in text:
        return text
    if in_quotes:
        return _DOUBLE_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), text)
    return _UNQUOTED_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def _c_string(body: str) -> str:
    out, i = [], 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            out.append(_C_ESCAPES.get(body[i + 1], "\\" + body[i + 1]))
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


def _parse(text: str, name: str):
    """The syntax tree of `text` and notes on what bash's grammar could not read; a ConfigError for an unclosed
    quote, `${`, `$(`, backtick, array or compound statement (bash refuses those too)."""
    source = _encode(text)
    # each piece between blanks and ; & | is a word or more, each $ a reference, outside quotes and heredocs: a
    # text with far more of them than MAX_WORDS is refused before tree-sitter builds its whole syntax tree
    pieces = source.count(b"$") + sum(1 for _ in _PIECE.finditer(source))
    if pieces > MAX_PIECES:
        raise ConfigError(
            f"config {name!r} cannot be split into shell words (line 1): more than {MAX_WORDS} words, commands and "
            f"$references at a glance ({pieces} pieces between blanks and ; & |, and $ signs, over {MAX_PIECES}): "
            "refused before parsing, not a launch script"
        )
    source = _Source(source)
    tree = _PARSER.parse(source.new)
    braced = _braced(source, tree)
    if braced is not None:  # $A/x/$b/: tree-sitter-bash 0.25 loses the second `$` (its issue 315); ${b} it reads
        again = _PARSER.parse(braced.new)
        if not again.root_node.has_error or tree.root_node.has_error:
            source, tree = braced, again
    for _ in range(_MAX_HASH_FIXES):
        if not tree.root_node.has_error:
            return source, tree, []
        hashes = [
            (c.start_byte, b"\\")
            for c in _comments(tree.root_node)
            if c.start_byte and source.new[c.start_byte - 1 : c.start_byte] not in b" \t\n;&|()<>"
        ]
        if not hashes:
            break
        source = source.insert(hashes)  # bash reads `a#b` as one word: the `#` escaped, the text parsed again
        tree = _PARSER.parse(source.new)
    notes = []
    errors = _errors(tree.root_node)
    for node, in_word in errors[:MAX_SYNTAX_NOTES]:
        _refuse_unclosed(node, source, name)
        near = source.text(node.start_byte, node.end_byte).strip().split("\n")[0]
        if in_word:
            how = "it is kept as written in its word"
        else:
            how = "the script around it is read as the parser recovered it (check what this line sets)"
        notes.append(f"line {_line(node)}: bash's grammar (tree-sitter-bash) cannot read `{near[:60]}` here: {how}")
    if len(errors) > MAX_SYNTAX_NOTES:
        for node, _ in errors[MAX_SYNTAX_NOTES:]:
            _refuse_unclosed(node, source, name)
        notes.append(f"{len(errors) - MAX_SYNTAX_NOTES} more places bash's grammar cannot read (not listed)")
    return source, tree, notes


def _errors(root) -> list:
    """The ERROR and missing nodes of a tree in the order of the text (not looking inside an ERROR), each with
    whether it lies inside one word (an expansion's default, a command substitution, a string)."""
    out, stack = [], [(root, False)]
    while stack:
        node, in_word = stack.pop()
        if node.is_error or node.is_missing:
            out.append((node, in_word))
        elif node.has_error:
            inner = in_word or node.type in _EXPANSIONS or node.type in ("string", "concatenation")
            stack += [(c, inner) for c in reversed(node.children)]
    return out


_CLOSERS = frozenset(("'", '"', "`", ")", "}", "]", "]]", "fi", "done", "esac", "))"))


def _refuse_unclosed(node, source: _Source, name: str) -> None:
    at = node.parent if node.is_missing and node.parent is not None else node
    line = _line(at)  # where the construct opens
    near = source.text(at.start_byte, min(at.start_byte + 60, len(source.new))).split("\n")[0].strip()
    what = None
    if node.is_missing and node.type in _CLOSERS:
        if at.type == "array":
            what = "an array '(' is never closed"
        elif node.type == "`":
            what = "no closing backtick"
        elif node.type in ('"', "'"):
            what = f"no closing quotation ({node.type})"
        elif node.type == "}" and at.type == "expansion":
            what = "no closing '}' in ${...}"
        else:
            what = f"no closing {node.type!r}"
    elif node.is_error and not source.new[node.end_byte :].strip():  # an ERROR that runs to the end: never closed
        start = near.lstrip()
        if start.startswith("'"):
            what = "no closing quotation (')"
        elif start.startswith('"'):
            what = 'no closing quotation (")'
        elif start.startswith("${"):
            what = "no closing '}' in ${...}"
        elif start.startswith(("$(", "`")):
            what = "no closing ')' or backtick"
    if what is not None:
        raise ConfigError(f"config {name!r} cannot be split into shell words (line {line}): {what}, at {near!r}")


def _braced(source: _Source, tree):
    """`source` with each bare `$NAME` / `$1` outside quotes, comments and heredoc bodies written `${NAME}` (the same
    expansion in bash: the next character is not a name's), or None when it has none."""
    found = [m for m in _BARE.finditer(source.new)]
    if not found:
        return None
    literal = sorted(
        (n.start_byte, n.end_byte) for n in QueryCursor(_LITERAL).captures(tree.root_node).get("literal", [])
    )
    at, k = [], 0
    for m in found:
        while k < len(literal) and literal[k][1] <= m.start():
            k += 1
        if k < len(literal) and literal[k][0] <= m.start():
            continue  # '$a', # $a, a heredoc's $a: not an expansion the reader reads
        at += [(m.start() + 1, b"{"), (m.end(), b"}")]
    return source.insert(at) if at else None


def _comments(root) -> list:
    out, stack = [], [root]
    while stack:
        node = stack.pop()
        if node.type == "comment":
            out.append(node)
        elif node.has_error:
            stack += node.children
        elif node.type == "program":
            stack += node.children
    return out


def split_commands(text: str, name: str) -> list:
    """The statements of a shell script: Commands of words before expansion, and the compound statements
    (if, case, loops, groups, function definitions) holding theirs (module doc string)."""
    return _read(text, name)[0]


def _read(text: str, name: str) -> tuple[list, list]:
    source, tree, notes = _parse(text, name)
    return _Reader(source, name).statements(_statements(tree.root_node), 0), notes


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


def expand(word: Word, env: Variables, split: bool = True, patterns: bool = False) -> list[str]:
    """The fields bash makes of `word`: literal text as is, quoted expansions whole (`"${A[@]}"`: one field per
    element), unquoted ones split on blanks; `split=False` (an assignment's value) joins them into one. With
    `patterns` (a condition's words, a `case` pattern) a field whose quoted text holds a glob character is a
    `Field`, which carries its pattern too; every other field, and every field of a command, is a plain str."""
    only = word.parts[0] if len(word.parts) == 1 else None
    if split and isinstance(only, Ref) and only.quoted and only.index == "@" and env.lookup(only) == []:
        return []  # "${A[@]}" of an empty array is no word at all (`EXTRA_ARGS=()` passed on), where "" is one
    fields: list = []
    cur: list = []
    pat: list = []  # cur as a glob pattern: quoted text escaped, unquoted text and values as they are
    live = word.quoted  # a quoted empty word ("") is still a word

    def add(text: str, quoted: bool):
        nonlocal live
        cur.append(text)
        if patterns:  # a command's words never need it
            pat.append(_escape_glob(text) if quoted else text)
        live = True

    def close():
        nonlocal cur, pat, live
        if cur or live:
            text, pattern = "".join(cur), "".join(pat)
            fields.append(Field(text, pattern) if patterns and pattern != text else text)
        cur, pat, live = [], [], False

    for part in word.parts:
        value = part if isinstance(part, str) else env.lookup(part)
        unknown = value is None
        if unknown:  # not known without running the script: kept as written, one piece (its words are unknown)
            env.missing.append((part.text, _origin(part, env)))
            value = part.text
        if isinstance(part, str):
            add(env.spend(value), isinstance(part, Quoted))
            continue
        if unknown or isinstance(value, str) and (part.quoted or not split):
            add(env.spend(value), part.quoted and not unknown)
            continue
        pieces = value if isinstance(value, list) else [value]
        if not split:
            add(env.spend(" ".join(pieces)), part.quoted)
            continue
        for k, piece in enumerate(pieces):
            env.spend(piece)
            if k:
                close()
            if part.quoted:  # "${A[@]}": each element one field, as it is
                add(piece, True)
                continue
            if piece[:1].isspace():
                close()
            chunks = piece.split()
            for j, chunk in enumerate(chunks):
                if j:
                    close()
                add(chunk, False)
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
    notes: list = field(default_factory=list)  # how each if/elif/case/loop was read, which functions were called
    unresolved: list = field(default_factory=list)  # per command: [(text as written, where its value comes from)]
    unused_functions: dict = field(default_factory=dict)  # {name: (first line, last line)}: defined, never called
    call_lines: list = field(default_factory=list)  # per command: the line of the call it runs in (None: none)


def _origin(ref: Ref, env: Variables) -> str:
    """Where the value of an unresolved reference comes from, in words."""
    text = ref.text
    if ref.name in env.unknown:
        line, refs = env.unknown[ref.name]
        return f"${ref.name} is set at line {line} from {', '.join(refs)[:80]}: only running the script gives it"
    if text.startswith("$(("):
        return "arithmetic on values the script does not know: only running it gives it"
    if text.startswith(("$(", "`", "<(", ">(")):
        return "the output of a command: only running the script gives it"
    if ref.opaque and ref.name:
        return f"a string operation on ${ref.name}: not evaluated here"
    if ref.opaque:
        return "an argument or special parameter of the script: only running it gives it"
    if ref.op in (":?", "?"):
        return f"${ref.name} is not set in the script (the script stops with an error without it)"
    return f"${ref.name} is not set in the script: it comes from the environment of the run"


class _Runner:
    """Runs the statements top to bottom as bash would, without running anything (expand_script)."""

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
                    f"config {env.name!r} runs more than {MAX_WORDS} commands through its function calls and loops: "
                    "refused before reading them (a launch script runs a few hundred)"
                )
            if isinstance(item, _If):
                self.run_if(item, depth)
            elif isinstance(item, _Case):
                self.run_case(item, depth)
            elif not branches.active():
                continue  # a branch bash would not take
            elif isinstance(item, _Function):
                self.functions[item.name] = item
            elif isinstance(item, _Loop):
                self.run_loop(item, depth)
            elif isinstance(item, _Group):
                saved = (dict(env.values), dict(env.unknown), dict(env.tainted)) if item.subshell else None
                self.run(item.body, depth)
                if saved is not None:  # ( ... ): a subshell's variables stay in it
                    env.values, env.unknown, env.tainted = saved
            else:
                self.command(item, depth)

    def command(self, command: Command, depth: int) -> None:
        env = self.env
        env.missing = []
        words, prefix = [], True  # prefix: only assignments (or export ...) so far
        for word in command.words:
            if word.array is not None:
                self.arrays[_define_array(word, env)] = word.line
                continue
            head = word.parts[0] if word.parts and isinstance(word.parts[0], str) else ""
            if prefix and (element := _ELEMENT.match(head)):  # A[i]=value: one element of an array
                _assign_element(element, word, env, command.line)
                continue
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
            return
        if words[:1] == ["unset"]:  # unset NAME ...: bash forgets the variables (unset -f: functions)
            names = [w for w in words[1:] if not w.startswith("-")]
            table = self.functions if "-f" in words[1:] else None
            for unset in names:
                if table is not None:
                    table.pop(unset, None)
                    continue
                env.values.pop(unset, None)
                env.unknown.pop(unset, None)
                env.tainted.pop(unset, None)
        heredocs = command.heredocs
        if words[:1] == ["read"] and heredocs and (name := _read_whole(words)):
            self.read_heredoc(name, command)
            heredocs = []  # read into NAME: not data left unread
        if words[:1] == ["shift"] and env.args is not None:
            n = int(words[1]) if len(words) > 1 and words[1].isdigit() else 1
            env.args = env.args[n:]
        self.out.append((command.line, words, heredocs))
        self.unresolved.append(list(dict.fromkeys(env.missing)))
        self.call_lines.append(self.calls[0] if self.calls else None)

    def read_heredoc(self, name: str, command: Command) -> None:
        """`read -r -d '' NAME <<EOF ... EOF` (OpenRLHF's scripts keep their training command so, then run
        `deepspeed --module $NAME`): NAME holds the whole body, its `\\` line continuations joined and, for an
        unquoted delimiter, its $V / ${V} from the script's own values (anything else, `$(cmd)`, kept as written),
        stripped of surrounding blanks as read's IFS does. The body is then no longer reported as unread data."""
        body = command.heredocs[-1][2]
        expanding = command.expanding[-1] if command.expanding else False
        unknown = []
        if expanding:
            body = body.replace("\\\n", "")
            body = _BODY_REF.sub(lambda m: _known(self.env, m.group(1) or m.group(2), m.group(0), unknown), body)
            unknown += [
                (m.group(0), "a command's output: only running the script gives it") for m in _BODY_RUN.finditer(body)
            ]
        self.env.values[name] = body.strip()
        self.env.unknown.pop(name, None)
        self.env.tainted.pop(name, None)
        if unknown:  # each command that uses NAME is told what only a run gives
            self.env.tainted[name] = list(dict.fromkeys(unknown))

    def run_if(self, item: _If, depth: int) -> None:
        env = self.env
        for k, (condition, line, body) in enumerate(item.clauses):
            keyword = "if" if k == 0 else "elif" if condition is not None else "else"
            env.missing = []

            def words(c=condition):  # the condition's words, patterns kept (`Field`)
                return ["if", *(f for w in c for f in expand(w, env, patterns=True))]

            self.branches.keyword(keyword, words, line)
            self.run(body, depth)
        self.branches.keyword("fi", None, item.last)

    def run_case(self, item: _Case, depth: int) -> None:
        env, branches = self.env, self.branches
        env.missing = []
        subject = "".join(expand(item.subject, env, split=False))
        branches.case_keyword("case", [subject], not env.missing, item.line)
        before = ";;"  # how the branch before ended
        for patterns, line, end, body in item.items:
            env.missing = []
            # split=False makes one field at most (none for an empty unquoted word); its Field keeps the pattern
            texts = [(expand(w, env, split=False, patterns=True) or [""])[0] for w in patterns]
            branches.case_keyword("pattern" + before, texts, not env.missing, line)
            self.run(body, depth)
            before = end
        branches.case_keyword("esac", [], True, item.last)

    def run_loop(self, loop: _Loop, depth: int) -> None:
        env, notes = self.env, self.branches.notes
        shown = loop.header if len(loop.header) <= 60 else loop.header[:57] + "..."
        values = None
        too_many = 0  # how many values a known list has, where they are more than MAX_LOOP_VALUES
        if loop.variable is not None and loop.values is not None:
            env.missing = []
            values = [f for w in loop.values for f in expand(w, env)]
            if not env.missing and len(values) > MAX_LOOP_VALUES:
                too_many = len(values)
            if env.missing or too_many:
                values = None
        if values is not None and not values:
            notes.append(f"line {loop.line}: `{shown}` loops over no values: its body is not run")
            return
        if values is not None:
            notes.append(
                f"line {loop.line}: `{shown}` loops over {len(values)} value(s) the script sets: its body is read "
                "once per value"
            )
            for value in values:
                env.values[loop.variable] = value
                env.unknown.pop(loop.variable, None)
                env.tainted.pop(loop.variable, None)
                self.run(loop.body, depth)
            return
        assigned = [loop.variable] if loop.variable is not None else loop.assigned
        for name in assigned:
            env.unknown[name] = (loop.line, [f"the loop `{shown}`"])
        named = f" ({', '.join('$' + a for a in assigned)} named as unresolved)" if assigned else ""
        if too_many:
            notes.append(
                f"line {loop.line}: `{shown}` loops over {too_many} values the script sets, more than the "
                f"{MAX_LOOP_VALUES} read one by one: its body is read once{named}"
            )
        else:
            notes.append(
                f"line {loop.line}: how often `{shown}` runs, and what it sets, only running the script knows: its "
                "body is read once" + named
            )
        self.run(loop.body, depth)

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
    """Read `text` (split_commands) and expand each command's words as bash would running it top to bottom:
    `NAME=value` before the command word (or after export/declare/...) sets a variable for what follows,
    `NAME=( ... )` defines an array, `${NAME[@]}` passes one, `if`/`case` take the branch the script's own values
    decide, a function's body is read where it is called, loops as the module doc string says."""
    runner = _Runner(name)
    statements, syntax = _read(text, name)
    runner.branches.notes += syntax
    runner.run(statements)
    env = runner.env
    unused = {a: line for a, line in runner.arrays.items() if a not in env.arrays_used}
    never = {f.name: (f.first, f.last) for f in runner.functions.values() if f.name not in runner.called}
    return Script(runner.out, env.values, unused, runner.branches.notes, runner.unresolved, never, runner.call_lines)


_BODY_REF = re.compile(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)")


_BODY_RUN = re.compile(r"\$\([^()]{0,200}\)|`[^`]{0,200}`")


def _known(env: Variables, name: str, written: str, unknown: list) -> str:
    """A heredoc body's $NAME: the script's own string value, else as written and listed in `unknown` with
    where it comes from (only a run knows it)."""
    value = None if name in env.unknown else env.values.get(name)
    if isinstance(value, str):
        return value
    unknown.append((written, f"${name} is not set by the script: the run's environment gives it"))
    return written


def _read_whole(words: list) -> str | None:
    """NAME of `read [-r] -d '' NAME` (read up to a NUL: the whole input into one variable), else None."""
    args = words[1:]
    if "-d" not in args or args.index("-d") + 1 >= len(args) or args[args.index("-d") + 1] != "":
        return None
    names = [w for i, w in enumerate(args) if not w.startswith("-") and (i == 0 or args[i - 1] != "-d")]
    return names[0] if len(names) == 1 and _NAME.match(names[0]) else None


_ELEMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\[([^\]]{1,200})\](\+?)=")


def _assign_element(element: re.Match, word: Word, env: Variables, line: int) -> None:
    """`A[i]=value` (`A[i]+=value` appends to the element): the subscript is bash's arithmetic on the script's own
    integers (`A[$idx]`, `A[i+1]`). An index past the end appends (bash's arrays are sparse: "${A[@]}" lists the
    set elements in order, which appending keeps for increasing indices); an index only running the script knows
    leaves the whole array unknown (each use named), as does an element of a variable that holds no array."""
    name, index, append = element.groups()
    rest = Word([word.parts[0][element.end() :], *word.parts[1:]], word.line, word.quoted)
    value = "".join(expand(rest, env, split=False))
    k = arithmetic(index.removeprefix("$").strip("{}") if re.fullmatch(r"\$\{?\w+\}?", index) else index, env)
    old = env.values.get(name)
    if name in env.unknown or k is None or int(k) < 0 or not isinstance(old, list) and old not in (None, ""):
        env.values.pop(name, None)
        env.unknown[name] = (line, [f"{name}[{index}]"])
        return
    items = list(old) if isinstance(old, list) else []
    if int(k) < len(items):
        items[int(k)] = items[int(k)] + value if append else value
    else:
        items.append(value)
    env.values[name] = items


def _define_array(word: Word, env: Variables) -> str:
    """NAME=( ... ) (or NAME+=( ... ), appending) into `env`; returns NAME."""
    head = word.parts[0]
    name, append = head.rstrip("=").rstrip("+"), head.endswith("+=")
    items = [f for element in word.array for f in expand(element, env)]
    old = env.values.get(name) if append else None
    env.values[name] = (old if isinstance(old, list) else [old] if old else []) + items
    return name
