"""Tasks and verifiers: the arithmetic split, the JSONL loader's errors, the numeric / \\boxed{} verifier."""

import json

import numpy as np
import pytest

from divclip.trainer.tasks import arithmetic_task, extract_answer, jsonl_task, last_boxed, load_jsonl, numeric_match


def test_arithmetic_task_split_is_disjoint_complete_and_seeded():
    task = arithmetic_task(digits=2, eval_size=100, seed=0)
    assert len(task.train) + len(task.eval) == 10_000 and len(task.eval) == 100
    assert not set(task.train) & set(task.eval)
    assert task.eval == arithmetic_task(2, 100, seed=0).eval != arithmetic_task(2, 100, seed=1).eval
    ex = next(e for e in task.train + task.eval if e.prompt == "07+35=")
    assert ex.answer == "42"
    sampled = task.sample(50, np.random.default_rng(0))
    assert sampled == task.sample(50, np.random.default_rng(0)) and all(e in task.train for e in sampled)


def test_exact_verifier():
    task = arithmetic_task(1, 0)
    assert task.score("42", "42") == 1.0 and task.score(" 42\n", "42") == 1.0
    assert task.score("420", "42") == 0.0 and task.score("", "42") == 0.0


def write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_jsonl_loader_reads_numbers_as_text(tmp_path):
    f = write(tmp_path / "t.jsonl", [{"prompt": "1+1=", "answer": 2}, "", {"prompt": "half?", "answer": "1/2"}])
    exs = load_jsonl(f)
    assert [(e.prompt, e.answer) for e in exs] == [("1+1=", "2"), ("half?", "1/2")]


@pytest.mark.parametrize(
    "line, message",
    [
        ({"prompt": "2+2="}, r"line 2 has no 'answer' \(keys: \['prompt'\]\); every line must be a JSON object"),
        ({"answer": "4"}, r"line 2 has no 'prompt'"),
        ("{not json", r"line 2 is not valid JSON"),
        ("[1, 2]", r"line 2 is list, not a JSON object"),
        ({"prompt": "", "answer": "4"}, r"line 2 has prompt=''"),
        ({"prompt": "x", "answer": None}, r"line 2 has answer=None"),
        ({"prompt": "x", "answer": True}, r"line 2 has answer=True"),
        ('{"prompt": "x", "answer": 1, "answer": 2}', r"line 2 sets 'answer' twice \(1, then 2\)"),
        ('{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}", r"line 2 is nested too deeply to read"),
        ({"prompt": "x" * 70_000, "answer": 1}, r"line 2 has a prompt or answer of 70000 characters, over the 65536"),
        ('{"prompt": "x", "answer": ' + "9" * 5000 + "}", r"line 2 has a value JSON cannot read"),
    ],
)
def test_jsonl_loader_names_file_line_and_rule(tmp_path, line, message):
    f = write(tmp_path / "bad.jsonl", [{"prompt": "1+1=", "answer": "2"}, line])
    with pytest.raises(ValueError, match=message) as err:
        load_jsonl(f)
    assert "bad.jsonl" in str(err.value)


def test_jsonl_empty_file_and_eval_size(tmp_path):
    with pytest.raises(ValueError, match="has no examples"):
        load_jsonl(write(tmp_path / "e.jsonl", [""]))
    f = write(tmp_path / "t.jsonl", [{"prompt": f"{i}?", "answer": i} for i in range(5)])
    with pytest.raises(ValueError, match=r"eval_size must be in \[0, 5\) .* got 5"):
        jsonl_task(f, eval_size=5)
    task = jsonl_task(f, eval_size=2, seed=0)
    assert len(task.train) == 3 and len(task.eval) == 2 and not set(task.train) & set(task.eval)


def test_boxed_extraction_handles_nesting_and_takes_the_last():
    assert last_boxed(r"so \boxed{1} no, \boxed{\frac{1}{2}}.") == r"\frac{1}{2}"
    assert last_boxed("no box") is None and last_boxed(r"\boxed{unclosed") is None
    assert extract_answer("The answer is 12, or maybe 13.") == "13"
    assert extract_answer("none") == "none"


@pytest.mark.parametrize(
    "completion, answer, score",
    [
        (r"thus \boxed{42}", "42", 1.0),
        (r"\boxed{42.0}", "42", 1.0),
        (r"\boxed{\frac{1}{2}}", "0.5", 1.0),
        ("1/2", r"\boxed{0.5}", 1.0),
        ("it is 1,000", "1000", 1.0),
        ("-3", "-3", 1.0),
        ("3", "-3", 0.0),
        (r"\boxed{41}", "42", 0.0),
        ("42.0000000001", "42", 1.0),  # within 1e-6 relative
        ("42.001", "42", 0.0),
        (r"\boxed{x + 1}", "x+1", 1.0),  # not numbers: compared as text without spaces
        ("", "7", 0.0),
    ],
)
def test_numeric_match(completion, answer, score):
    assert numeric_match(completion, answer) == score


def test_task_file_that_is_not_a_regular_file_or_not_utf8(tmp_path):
    import os

    os.mkfifo(tmp_path / "fifo.jsonl")  # reading would block forever
    with pytest.raises(ValueError, match=r"fifo.jsonl' is not a regular file"):
        load_jsonl(tmp_path / "fifo.jsonl")
    (tmp_path / "latin.jsonl").write_bytes(b'{"prompt": "\xe9", "answer": 1}\n')
    with pytest.raises(ValueError, match=r"latin.jsonl' is not UTF-8 text \(byte 0xe9 at offset 12\)"):
        load_jsonl(tmp_path / "latin.jsonl")
