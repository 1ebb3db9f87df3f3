"""The launch-command reader: flags as argparse sees them, bash arrays, continuations, quotes, variables."""

import pytest

from divclip.engines.launch import flag_words, looks_like_launch, parse_launch, read_launch
from divclip.sanity.errors import ConfigError

SCRIPT = """#!/bin/bash
export DIVCLIP_METHOD='kl3:0.02'
EPS=0.28
ARGS=(
   --eps-clip 0.2   # the lower width
   --eps-clip-high ${EPS}
   # --eps-clip-c 3
   --use-tis
)
JSON="{
  \\"a\\": 1
}"
python3 train.py --actor.eps_clip_low_high 0.2 0.27 \\
   --lr=1e-6 ${ARGS[@]} --x ${UNSET:-7} --eps-clip 0.3
"""


def test_flags_values_arrays_and_variables():
    got = read_launch(SCRIPT)
    v = got.values
    assert v["DIVCLIP_METHOD"] == "kl3:0.02" and v["JSON"] == '{\n  "a": 1\n}'
    assert v["--eps-clip-high"] == "0.28" and v["--use-tis"] is True and "--eps-clip-c" not in v
    assert v["--actor.eps_clip_low_high"] == ["0.2", "0.27"] and v["--lr"] == "1e-6" and v["--x"] == "7"
    assert v["--eps-clip"] == "0.3" and got.repeated == ["--eps-clip"]  # argparse keeps the last
    assert looks_like_launch(SCRIPT) and not looks_like_launch("trainer.seed=1 data.x=2")


def test_an_unclosed_quote_is_named():
    with pytest.raises(ConfigError, match="line 1"):
        parse_launch("python3 train.py --x 'open\n--y 2\n")


def test_flag_words_round_trip():
    assert flag_words("--a", True) == ["--a"] and flag_words("--a", None) == [] and flag_words("--a", False) == []
    assert flag_words("--a", [0.1, 0.2]) == ["--a", "0.1", "0.2"] and flag_words("--a", "x y") == ["--a", "'x y'"]


def test_the_launch_reader_splits_words_as_bash():
    """Issue 36: parse_launch shares the shell splitter of `divclip check` (no shlex): '#' inside a word,
    heredoc bodies as data, arrays spliced where `${A[@]}` passes them, variables as the script runs."""
    script = (
        "CLIP=( --eps-clip 0.3 )\n"
        "EPS_HIGH=0.28\n"
        "cat <<EOF > notes.txt\n--eps-clip 0.9\nEOF\n"
        'python3 train.py --save /ckpt/run#1 "${CLIP[@]}" --eps-clip-high ${EPS_HIGH} --lr ${LR:-1e-6} # --x 1\n'
    )
    assert parse_launch(script) == {
        "EPS_HIGH": "0.28",
        "--save": "/ckpt/run#1",
        "--eps-clip": "0.3",
        "--eps-clip-high": "0.28",
        "--lr": "1e-6",
    }


def test_one_3_9_mb_word_is_read_not_a_hang():
    values = parse_launch("python3 train.py --save /ckpt/" + "a" * (39 * 2**20 // 10) + " --eps-clip 0.3\n")
    assert values["--eps-clip"] == "0.3" and len(values["--save"]) == 6 + 39 * 2**20 // 10
