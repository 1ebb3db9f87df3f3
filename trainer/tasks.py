"""Tasks with verifiable rewards: built-in addition (exact match) and JSONL files (numeric / \\boxed{} match).

A task holds a train split and a held-out split of `Example`s, and a verifier `score(completion, answer)` that
returns 1.0 for a correct completion and 0.0 otherwise. Which problems are held out depends only on the seed.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from pathlib import Path

import numpy as np

from divclip.engines.files import json_object_line
from divclip.trainer.puzzles import countdown_task, multiplication_task
from divclip.trainer.task_types import Example, Task, exact_match


# -------------------------------------------------------------------------------------------- arithmetic
def arithmetic_task(digits: int = 2, eval_size: int = 200, seed: int = 0) -> Task:
    """Every sum a + b of two `digits`-digit operands, zero-padded ("07+35=" -> "42"), scored by exact match."""
    n = 10**digits
    if not 0 <= eval_size < n * n:
        raise ValueError(f"eval_size must be in [0, {n * n}) for arith_digits={digits}, got {eval_size!r}")
    examples = [Example(f"{a:0{digits}d}+{b:0{digits}d}=", str(a + b)) for a in range(n) for b in range(n)]
    held = np.random.default_rng([seed, 7]).permutation(len(examples))[:eval_size]
    is_held = np.zeros(len(examples), dtype=bool)
    is_held[held] = True
    train = tuple(e for e, h in zip(examples, is_held) if not h)
    return Task(f"arith{digits}", train, tuple(examples[i] for i in sorted(held)), exact_match)


# ------------------------------------------------------------------------------------------------ JSONL
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")


def last_boxed(text: str) -> str | None:
    """Contents of the last \\boxed{...} in `text` (nested braces allowed), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def extract_answer(text: str) -> str:
    """The final answer of a completion: the last \\boxed{} content, else the last number, else the text."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else text.strip()


def _as_number(text: str) -> Fraction | float | None:
    s = text.strip().strip("$").replace(",", "").replace(" ", "")
    if s.startswith("\\frac{") and s.endswith("}"):  # \frac{a}{b}
        parts = s[len("\\frac{") : -1].split("}{")
        s = "/".join(parts) if len(parts) == 2 else s
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        try:
            v = float(s)
        except ValueError:
            return None
        return v if math.isfinite(v) else None


def numeric_match(completion: str, answer: str) -> float:
    """1.0 when the completion's final answer (`extract_answer`) equals `answer` (or the \\boxed{} inside it) as
    a number (to 1e-6 relative; fractions and \\frac allowed), else as text with spaces removed."""
    pred, gold = extract_answer(completion), (last_boxed(answer) or answer).strip()
    p, g = _as_number(pred), _as_number(gold)
    if p is not None and g is not None:
        return float(abs(float(p) - float(g)) <= 1e-6 * max(1.0, abs(float(g))))
    return float(pred.replace(" ", "") == gold.replace(" ", ""))


MAX_TASK_BYTES = 256 * 2**20
"""Largest task file read (checked before reading)."""
MAX_PROMPT_CHARS = 65_536
"""Longest prompt or answer, in characters (a tiny model has one position per character)."""
MAX_EXAMPLES = 2**20
"""Most examples in one task file."""


def _read_task_text(path: Path) -> str:
    import stat

    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"task file {str(path)!r} is not a regular file")
        if info.st_size > MAX_TASK_BYTES:
            raise ValueError(f"task file {str(path)!r} is {info.st_size} bytes, over the {MAX_TASK_BYTES}-byte limit")
        with path.open("rb") as f:
            data = f.read(MAX_TASK_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read task file {str(path)!r}: {exc.strerror or exc}") from None
    if len(data) > MAX_TASK_BYTES:
        raise ValueError(f"task file {str(path)!r} is over the {MAX_TASK_BYTES}-byte limit")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"task file {str(path)!r} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def load_jsonl(path: str | Path) -> list[Example]:
    """Read {"prompt": str, "answer": str | number} lines; any bad line is a ValueError naming file and line.
    Duplicate keys in a line, prompts longer than MAX_PROMPT_CHARS and more than MAX_EXAMPLES lines are refused."""
    path = Path(path)
    allowed = "a JSON object with 'prompt' (a non-empty string) and 'answer' (a string or a number)"
    examples = []
    text = _read_task_text(path)
    if text.count("\n") > MAX_EXAMPLES:
        raise ValueError(f"task file {str(path)!r} has more than {MAX_EXAMPLES} lines (the limit of examples)")
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        where = f"task file {str(path)!r} line {lineno}"
        row = json_object_line(line, where, hint=f"; every line must be {allowed}")
        for key in ("prompt", "answer"):
            if key not in row:
                raise ValueError(f"{where} has no {key!r} (keys: {sorted(row)}); every line must be {allowed}")
        prompt, answer = row["prompt"], row["answer"]
        if not isinstance(prompt, str) or not prompt:
            raise ValueError(f"{where} has prompt={_show(prompt)}; every line must be {allowed}")
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
            raise ValueError(f"{where} has answer={_show(answer)}; every line must be {allowed}")
        if len(prompt) > MAX_PROMPT_CHARS or len(str(answer)) > MAX_PROMPT_CHARS:
            longest = max(len(prompt), len(str(answer)))
            raise ValueError(
                f"{where} has a prompt or answer of {longest} characters, over the {MAX_PROMPT_CHARS}-character limit"
            )
        examples.append(Example(prompt, str(answer)))
    if not examples:
        raise ValueError(f"task file {str(path)!r} has no examples; every line must be {allowed}")
    return examples


def jsonl_task(path: str | Path, eval_size: int = 200, seed: int = 0) -> Task:
    """A JSONL file split (by seed) into train and `eval_size` held-out examples, scored by `numeric_match`."""
    examples = load_jsonl(path)
    if not 0 <= eval_size < len(examples):
        raise ValueError(
            f"eval_size must be in [0, {len(examples)}) for task file {str(path)!r} with {len(examples)} examples, "
            f"got {eval_size!r}"
        )
    order = np.random.default_rng([seed, 7]).permutation(len(examples))
    held = set(order[:eval_size].tolist())
    train = tuple(e for i, e in enumerate(examples) if i not in held)
    return Task(Path(path).stem, train, tuple(examples[i] for i in sorted(held)), numeric_match)


BUILTIN_TASKS = ("arith", "mult", "countdown")
"""Tasks generated in code: addition (here), multiplication and Countdown (`divclip.trainer.puzzles`)."""


def load_task(task: str, *, arith_digits: int = 2, eval_size: int = 200, seed: int = 0) -> Task:
    """A `BUILTIN_TASKS` name or a JSONL path (see TrainerConfig.task)."""
    if task == "arith":
        return arithmetic_task(arith_digits, eval_size, seed)
    if task in BUILTIN_TASKS:
        if task == "mult":
            return multiplication_task(arith_digits, eval_size, seed)
        return countdown_task(eval_size, seed)
    return jsonl_task(task, eval_size, seed)
