"""The shell reader itself (engines/shellwords.py, through tree-sitter-bash): words, quotes, expansions and bounds,
against what bash does with the same text (the expected fields are bash's own, written out)."""

from __future__ import annotations

import pytest

from divclip.engines.shellwords import MAX_EXPANSION_BYTES, expand_script, split_commands
from divclip.sanity.errors import ConfigError


def words(text: str) -> list[list[str]]:
    return [w for _, w, _ in expand_script(text, "t.sh").commands]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a b\tc\n", [["a", "b", "c"]]),
        ("a#b c # d e\n", [["a#b", "c"]]),
        ("a 'b c' \"d e\" f\\ g\n", [["a", "b c", "d e", "f g"]]),
        ("a \\\n b\n", [["a", "b"]]),
        ("a; b && c || d | e & f\n", [["a"], ["b"], ["c"], ["d"], ["e"], ["f"]]),
        ("a $'x\\ty'\n", [["a", "x\ty"]]),
        ('"" x\n', [["", "x"]]),
        ("a > out.txt 2>&1 < in\n", [["a"]]),
        ("a <<< 'here string' b\n", [["a", "b"]]),
        ('echo "$(date +%s)" `id`\n', [["echo", "$(date +%s)", "`id`"]]),
        ("V='x y'\na $V \"$V\"\n", [["V=x y"], ["a", "x", "y", "x y"]]),
        (
            "A=(p 'q r' # c\n s)\na \"${A[@]}\" ${A[1]} $A ${#A[@]}\n",
            [[], ["a", "p", "q r", "s", "q", "r", "p", "${#A[@]}"]],
        ),
        ("a ${U:-d1} ${U-d2} ${E:+alt} ${U:=set} $U\n", [["a", "d1", "d2", "set", "set"]]),
        ("E=\na ${E:-colon} ${E-nocolon}x\n", [["E="], ["a", "colon", "x"]]),
        ("a ${V%.*} $1 $@\n", [["a", "${V%.*}", "$1", "$@"]]),
        ("cat <<-EOF\n\tbody=1\n\tEOF\nb\n", [["cat"], ["b"]]),
    ],
)
def test_words_are_bashs(text, expected):
    assert words(text) == expected


def test_a_heredoc_body_is_reported_with_its_lines():
    [(line, fields, heredocs), (_, after, _)] = expand_script("cat <<'X' > f\na=1\nb=2\nX\nnext\n", "t").commands
    assert (line, fields, after) == (1, ["cat"], ["next"]) and heredocs == [(2, 4, "a=1\nb=2")]


def test_expansion_is_bounded_before_it_is_built():
    lines = ["V0=" + "x" * 1000] + [f"V{i}=" + f"${{V{i - 1}}}" * 10 for i in range(1, 7)]
    with pytest.raises(ConfigError, match=f"expands to more than {MAX_EXPANSION_BYTES} bytes"):
        expand_script("\n".join(lines) + "\n", "t.sh")


def test_a_60_000_digit_run_is_one_word_in_one_match():
    [command] = split_commands("a " + "9" * 60_000 + "x\n", "t")
    assert [w.parts for w in command.words] == [["a"], ["9" * 60_000 + "x"]]


def test_the_float_regex_is_linear_on_a_failing_digit_run():
    """Issue 36: the former float regex tried every split of 60 000 digits before the letter (70 s)."""
    from divclip.engines.shell import looks_like_float, parse_value

    assert not looks_like_float("9" * 60_000 + "x") and parse_value("9" * 60_000 + "x") == "9" * 60_000 + "x"
    assert [looks_like_float(t) for t in ("3e-4", "1.", ".5", "-2.5E+3", "inf", "1e", "e3", "1.2.3")] == [
        True,
        True,
        True,
        True,
        True,
        False,
        False,
        False,
    ]
