"""Constructs the tree-sitter-bash reader handles that the former hand-written splitter did not (issue 31 item 1):
`&&` / `||` conditions (also inside `[[ ]]`), `for` loops over known values, subshells, heredoc-fed commands with
nested quotes, a pipe after a heredoc, words tree-sitter-bash 0.25 cuts short, and what stays unresolved.

The reference is bash itself: each script runs under /usr/bin/bash with `python3` replaced by a function that prints
its arguments (an empty environment), and the words divclip reads must be the ones bash passed. divclip never runs
anything.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest

from divclip.engines.config import read_config
from divclip.engines.shellwords import expand_script
from divclip.sanity.errors import ConfigError

BASH = shutil.which("bash")
_STUB = 'python3() { printf "%s\\0" python3 "$@"; printf "\\n"; }\n'


def _bash(script: str) -> list[list[str]]:
    done = subprocess.run(
        [BASH, "--noprofile", "--norc", "-c", _STUB + script],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    return [line.split("\0")[:-1] for line in done.stdout.splitlines() if line.startswith("python3\0")]


def _divclip(script: str) -> list[list[str]]:
    return [words for _, words, _ in expand_script(script, "t.sh").commands if words[:1] == ["python3"]]


SCRIPTS = {
    "and_or_conditions": (
        "D=${D:-gpu}\nN=2\n"
        'if [[ $D == gpu && $N -le 4 ]] || [ -z "$UNSET_X" ]; then\n  python3 -m m a=1\n'
        'elif [ "$D" != gpu ] && [ 1 -eq 1 ]; then\n  python3 -m m a=2\nelse\n  python3 -m m a=3\nfi\n'
        "if [[ ! ( $D == npu || $D == ascend ) && -n $D ]]; then python3 -m m b=1; else python3 -m m b=2; fi\n"
    ),
    "for_over_values": "for clip in 0.2 0.28; do\n  for n in 4 8; do python3 -m m high=$clip n=$n; done\ndone\n",
    "subshell_keeps_its_variables": "X=1\n(X=2; python3 -m m inner=$X)\npython3 -m m outer=$X\n",
    "heredoc_fed_nested_quotes": (
        'V="d e"\npython3 -m m "a\'b" \'c"d\' --x="${U:-"$V f"}" <<\'END\' tail=1\nbody $V "not a word"\nEND\n'
    ),
    "pipe_after_heredoc": "cat <<END | python3 -m m a.b=1 'c d'\nx=$HOME\nEND\n",
    "long_names_between_slashes": (
        "R=/r\nproject_name=p\ne=x\nd=$R/checkpoint/$project_name/$e\n"
        "python3 -m m dir=$d arg=$R/checkpoint/$project_name/$e\n"
    ),
    "cut_words_in_every_context": (
        "D=/r\nproject_name=p\ne=x\nA=( $D/checkpoint/$project_name/$e b )\nexport E=$D/checkpoint/$project_name/$e\n"
        "f() { local L=$D/checkpoint/$project_name/$e; python3 -m m l=$L; }\nf\n"
        "for v in $D/checkpoint/$project_name/$e; do python3 -m m v=$v; done\n"
        'python3 -m m "${A[@]}" e=$E\n'
        "if [ $D/checkpoint/$project_name/$e = /r/checkpoint/p/x ]; then python3 -m m c=1; else python3 -m m c=2; fi\n"
    ),
    "positional_after_a_slash": "f() { python3 -m m p=$D/ifaces/$1 q=$1x r=$D-$2.$D; }\nD=/d\nf one two\n",
    "hash_in_the_first_word": "a#b c\npython3 -m m x#y=1 # a comment\n",
    "grammar_recovered_in_a_word": 'T=${T:-["/Y"]}\n: "${N:=$(( 2 * (3 + 1) ))}"\npython3 -m m t=$T n=$N\n',
    "unset_forgets": "A=1\nB=2\nunset A\npython3 -m m a=${A:-u} b=$B\n",
    # one element set (slime's scripts/models/qwen3.5-35B-A3B-vl.sh: MODEL_ARGS[1]=...), by a variable's index too
    "array_elements": (
        "A=(x=1 y=2)\nA[1]=y=3\ni=0\nA[$i]+=0\nA[i+2]=z=4\nB[3]=b=1\n"
        'python3 -m m "${A[@]}" "${B[@]}" ${A[1]} "${A[2]}"\n'
    ),
    # OpenRLHF's scripts: the training command read from a heredoc (`read -r -d '' NAME <<EOF`), run as $NAME
    "read_a_heredoc_into_a_variable": (
        "EPS=0.28\nread -r -d '' cmd <<EOF\n-m openrlhf.cli.train_ppo_ray \\\n"
        "   --actor.eps_clip_low_high 0.2 $EPS \\\n   --train.batch_size 128\nEOF\npython3 $cmd 'a b'\n"
        "read -r -d '' raw <<'EOF'\nx=$EPS \\\n  y=1\nEOF\npython3 -m m $raw\n"
    ),
    # an empty array passed on quoted is no word (SkyRL's thunder_agent run_trainer.sh: EXTRA_ARGS=()), "" is one
    "empty_arrays_passed_on": (
        'E=()\nB=(b=1)\nY=\nif [ -n "$Y" ]; then E+=("e=1"); fi\n'
        'python3 -m m a=1 "${E[@]}" "${B[@]}" "x${E[@]}y" ${E[@]} "" "${E[*]}" k=1\n'
    ),
    "ansi_and_escaped_strings": "python3 -m m $'a\\tb' \"q\\\"q\" 'raw\\n' f\\ g\n",
    # a quoted * ? [ in a pattern is itself, an unquoted one (also from an unquoted $P) a glob; so is \\*
    "quoted_patterns": (
        "M=Qwen2.5-7B\nP='*7B'\n"
        'if [[ $M == "*7B" ]]; then python3 -m m q=1; else python3 -m m q=2; fi\n'
        'if [[ $M == *"7B" ]]; then python3 -m m r=1; else python3 -m m r=2; fi\n'
        "if [[ $M == $P ]]; then python3 -m m s=1; else python3 -m m s=2; fi\n"
        'if [[ $M == "$P" ]]; then python3 -m m t=1; else python3 -m m t=2; fi\n'
        "if [[ $M != '*'7B ]]; then python3 -m m u=1; else python3 -m m u=2; fi\n"
        'case $M in "*7B") python3 -m m c=1 ;; *7B) python3 -m m c=2 ;; esac\n'
        "S='a*b'\ncase $S in a\\*b) python3 -m m e=1 ;; *) python3 -m m e=2 ;; esac\n"
        "case axb in a\\*b) python3 -m m f=1 ;; a?b) python3 -m m f=2 ;; esac\n"
        "case \"a[1]\" in 'a[1]') python3 -m m g=1 ;; a[1]) python3 -m m g=2 ;; esac\n"
    ),
}


@pytest.mark.skipif(BASH is None, reason="bash is the reference")
@pytest.mark.parametrize("name", SCRIPTS)
def test_the_words_are_the_ones_bash_passes(name):
    expected = _bash(SCRIPTS[name])
    assert expected and _divclip(SCRIPTS[name]) == expected


def test_and_or_conditions_are_decided_and_said():
    notes = expand_script(SCRIPTS["and_or_conditions"], "t.sh").notes
    assert any(n.startswith("line 3:") and "is true with the script's own values" in n for n in notes)
    assert any(n.startswith("line 10:") and "is true with the script's own values" in n for n in notes)


def test_a_while_read_loop_is_read_once_and_its_variable_named():
    script = "while IFS= read -r clip; do\n  python3 -m verl.trainer.main_ppo a.clip=$clip\ndone < clips.txt\n"
    done = expand_script(script, "t.sh")
    [(line, words, _)] = done.commands
    assert (line, words) == (2, ["python3", "-m", "verl.trainer.main_ppo", "a.clip=$clip"])
    [[(text, origin)]] = done.unresolved
    assert text == "$clip" and origin.startswith("$clip is set at line 1 from the loop `while IFS= read -r clip`")
    assert any(n.startswith("line 1:") and "its body is read once ($clip named as unresolved)" in n for n in done.notes)


def test_a_for_loop_over_values_only_running_knows_is_read_once():
    done = expand_script("for s in $(seq 3); do python3 -m m seed=$s; done\n", "t.sh")
    assert [w for _, w, _ in done.commands] == [["python3", "-m", "m", "seed=$s"]]
    assert "from the loop `for s in $(seq 3)" in done.unresolved[0][0][1]


def test_a_for_loop_over_more_known_values_than_are_read_one_by_one_says_how_many():
    """A sweep over 20 known seeds: the body is read once with $s unresolved, and the note gives the count (it
    used to say only running the script knows how often the loop runs)."""
    from divclip.engines.shellwords import MAX_LOOP_VALUES

    n = MAX_LOOP_VALUES + 4
    known = expand_script(f"for s in {' '.join(map(str, range(n)))}; do python3 -m m seed=$s; done\n", "t.sh")
    assert [w for _, w, _ in known.commands] == [["python3", "-m", "m", "seed=$s"]]
    assert "from the loop `for s in 0 1 2" in known.unresolved[0][0][1]
    assert any(
        f"loops over {n} values the script sets, more than the {MAX_LOOP_VALUES} read one by one: its body is read "
        "once ($s named as unresolved)" in note
        for note in known.notes
    ), known.notes
    assert not any("only running the script knows" in note for note in known.notes)
    few = expand_script("for s in 1 2; do python3 -m m seed=$s; done\n", "t.sh")
    assert [w for _, w, _ in few.commands] == [["python3", "-m", "m", "seed=1"], ["python3", "-m", "m", "seed=2"]]


def test_a_string_replacement_is_named_unresolved():
    key = "actor_rollout_ref.actor.clip_ratio_low"
    script = f"V=0.2\npython3 -m verl.trainer.main_ppo {key}=${{V//2/3}}\n"
    raw = read_config(script.encode(), name="run.sh")
    line, _, refs = raw.unresolved[key]
    assert line == 2 and refs == [("${V//2/3}", "a string operation on $V: not evaluated here")]


@pytest.mark.parametrize(
    "script, line, what",
    [
        ("python3 -m m a=1 \\\n  b=$(echo x\n", 2, "no closing '\\)'"),
        ("if [ x ]; then\n  python3 -m m a=1\n", 1, "no closing 'fi'"),
        ("python3 -m m a=`id\n", 1, "no closing backtick"),
    ],
)
def test_an_unclosed_construct_names_the_file_line_and_text(script, line, what):
    with pytest.raises(
        ConfigError, match=rf"config 'r\.sh' cannot be split into shell words \(line {line}\): {what}, at"
    ):
        expand_script(script, "r.sh")


def test_what_the_grammar_cannot_read_inside_a_word_is_said():
    notes = expand_script(SCRIPTS["grammar_recovered_in_a_word"], "t.sh").notes
    assert [n.split(":")[0] for n in notes if "bash's grammar (tree-sitter-bash) cannot read" in n] == [
        "line 1",
        "line 2",
    ]
    assert all("it is kept as written in its word" in n for n in notes if "cannot read" in n)


CONDITIONS = [
    ["[", "a", "=", "a", "]", "&&", "[", "1", "-le", "0", "]"],
    ["[", "a", "=", "b", "]", "||", "[", "-n", "x", "]"],
    ["[", "a", "=", "b", "]", "||", "[", "x", "]", "&&", "[", "-z", "x", "]"],
    ["!", "[", "2", "-gt", "10", "]", "||", "[", "a", "!=", "a", "]"],
    ["[[", "a", "==", "b", "||", "c", "==", "c", "&&", "-n", "x", "]]"],
    ["[[", "!", "(", "gpu", "==", "npu", "||", "gpu", "==", "ascend", ")", "&&", "-z", "", "]]"],
    ["[[", "Qwen2.5-7B", "==", "*7B", "]]"],
    ["test", "3", "-ne", "3", "||", "test", "-z", ""],
]


@pytest.mark.skipif(BASH is None, reason="bash is the reference")
@pytest.mark.parametrize("words", CONDITIONS, ids=[" ".join(w) for w in CONDITIONS])
def test_a_known_condition_is_decided_as_bash_decides_it(words):
    from divclip.engines.shellbranches import evaluate

    quoted = " ".join(
        w if w in ("[[", "]]", "(", ")", "&&", "||", "!", "==") or w.startswith("*") else shlex.quote(w) for w in words
    )
    done = subprocess.run(
        [BASH, "--noprofile", "--norc", "-c", f"if {quoted}; then echo T; else echo F; fi"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert evaluate(words) is (done.stdout.strip() == "T")


def test_a_text_with_far_more_pieces_than_words_allowed_is_refused_before_parsing():
    from divclip.engines.shellwords import MAX_PIECES, MAX_WORDS

    with pytest.raises(ConfigError, match=rf"more than {MAX_WORDS} words, commands and \$references at a glance"):
        expand_script("a " * (MAX_PIECES + 1), "r.sh")
    assert len(expand_script("python3 -m m " + "a" * 3 * MAX_PIECES + "\n", "r.sh").commands) == 1


@pytest.mark.parametrize(
    "script, match",
    [
        ("if true; then " * 100 + "a" + "; fi" * 100 + "\n", r"\(line 1\): statements nested more than 64 deep"),
        ("{ " * 100 + "a; " + "}; " * 100 + "\n", r"\(line 1\): statements nested more than 64 deep"),
        ("for i in 1 2; do " * 20 + "a $i; " + "done; " * 20 + "\n", r"runs more than 100000 commands through"),
    ],
)
def test_deep_or_multiplying_statements_are_refused_by_name(script, match):
    with pytest.raises(ConfigError, match=match):
        expand_script(script, "r.sh")


def test_a_condition_nested_past_the_bound_is_left_undecided_not_recursed():
    done = expand_script("if [[ " + "( " * 3000 + "a" + " )" * 3000 + " ]]; then b; fi\n", "r.sh")
    assert [w for _, w, _ in done.commands] == [["b"]]
    assert any("read as if it could go either way" in n for n in done.notes)


def test_an_undecodable_byte_stays_in_its_word():
    """A file's byte that is not UTF-8 is read as a surrogate (surrogateescape): the parser gets the byte itself and
    the word keeps it, where a split multi-byte sequence once ended in a UnicodeDecodeError."""
    [(_, words, _)] = expand_script("python3 -m m a=\udcff b \udcff${X:-y}\n", "t.sh").commands
    assert words == ["python3", "-m", "m", "a=\udcff", "b", "\udcffy"]


def _random_script(r) -> str:
    """A random script of assignments, exports, arrays and launches whose words join literal pieces, bare and braced
    references, defaults and quotes (no globs, no tilde, no unset references: what bash and divclip both decide)."""
    names, lits = ["A", "B", "long_name", "C2"], ["/x", "/data/", "-v", ".5", ":", "=1", "a.b", "x_y", "/", "0.28", ","]
    set_names: list = []

    def word() -> str:
        out, prev = [], None
        for _ in range(r.randint(1, 4)):
            k, lit = r.randrange(9), r.choice(lits)
            if k == 0 and set_names:
                piece, prev = "$" + r.choice(set_names), "bare"
                out.append(piece)
                continue
            if k == 1 and set_names:
                piece = "${" + r.choice(set_names) + "}"
            elif k == 2:
                piece = "${U:-" + lit.replace("=", "") + "}"
            elif k == 3 and set_names:
                piece = '"' + lit + "$" + r.choice(set_names) + ' q"'
            elif k == 4:
                piece = "'" + lit + " $A'"
            else:
                piece = "/" + lit if prev == "bare" and (lit[0].isalnum() or lit[0] == "_") else lit
            out.append(piece)
            prev = None
        return "".join(out)

    lines = []
    for _ in range(r.randint(1, 6)):
        k, name = r.randrange(5), r.choice(names)
        if k < 2:
            lines.append(("export " if k else "") + f"{name}={word()}")
            set_names.append(name)
        elif k == 2:
            lines += [f"ARR=({' '.join(word() for _ in range(r.randint(1, 3)))})", 'python3 -m m "${ARR[@]}" ${ARR[@]}']
        else:
            lines.append("python3 -m m " + " ".join(word() for _ in range(r.randint(1, 5))))
    return "\n".join(lines) + "\n"


@pytest.mark.skipif(BASH is None, reason="bash is the reference")
def test_random_scripts_give_the_words_bash_passes():
    """150 random scripts (a fixed seed): without the `${NAME}` rewrite, tree-sitter-bash 0.25 misreads some of these
    (`$A/x$B-v`: the second `$` lost)."""
    import random

    r = random.Random(20261203)
    for _ in range(150):
        script = _random_script(r)
        assert _divclip(script) == _bash(script), script


def test_a_command_word_with_a_quoted_glob_stays_a_plain_str():
    """Only a condition's words and a case pattern carry a glob pattern (`shellwords.Field`, a str subclass); a
    command's words are plain str, which YAML and the readers take as they always did."""
    import yaml

    script = "if [[ x == \"*\" ]]; then :; fi\npython3 -m m data.files=\"['/d/*.parquet']\" 'q=a?' r=[b]\n"
    (words,) = _divclip(script)
    assert words == ["python3", "-m", "m", "data.files=['/d/*.parquet']", "q=a?", "r=[b]"]
    assert all(type(w) is str for w in words)
    assert yaml.safe_load(yaml.safe_dump(words)) == words
