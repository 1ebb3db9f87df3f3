"""Two harder verifiable tasks generated in code (nothing is downloaded): multiplication and Countdown.

* `multiplication_task(digits)`: every product a·b of two `digits`-digit operands ("07*35=" -> "245"), exact match.
  Each answer is one string; the model must carry across several partial products, which a 2-layer character model
  learns far more slowly than addition.
* `countdown_task()`: four numbers 1-9 and a target ("2,3,5,7:31=" -> "3*7+2*5"); any expression that uses each number
  exactly once with + - * (usual precedence, no parentheses) and evaluates to the target scores 1. Many targets have
  several solutions, so the warm start (one reference solution per problem) leaves room to explore.

The held-out split depends only on the seed, as `tasks.arithmetic_task`'s does.
"""

from __future__ import annotations

import functools
import itertools
import re

import numpy as np

from divclip.trainer.task_types import Example, Task, exact_match

PUZZLE_ALPHABET = "0123456789+-*=,: "
"""Characters of every prompt and answer of these tasks (the tiny model's character vocabulary)."""
COUNTDOWN_NUMBERS = range(1, 10)
COUNTDOWN_OPS = "+-*"


def _split(examples: list[Example], eval_size: int, seed: int, name: str) -> Task:
    if not 0 <= eval_size < len(examples):
        raise ValueError(f"eval_size must be in [0, {len(examples)}) for task {name!r}, got {eval_size!r}")
    held = np.random.default_rng([seed, 7]).permutation(len(examples))[:eval_size]
    is_held = np.zeros(len(examples), dtype=bool)
    is_held[held] = True
    train = tuple(e for e, h in zip(examples, is_held) if not h)
    return Task(name, train, tuple(examples[i] for i in sorted(held)), None)


def multiplication_task(digits: int = 2, eval_size: int = 200, seed: int = 0) -> Task:
    """Every product of two `digits`-digit operands, zero-padded operands, scored by exact match."""
    n = 10**digits
    examples = [Example(f"{a:0{digits}d}*{b:0{digits}d}=", str(a * b)) for a in range(n) for b in range(n)]
    task = _split(examples, eval_size, seed, f"mult{digits}")
    return Task(task.name, task.train, task.eval, exact_match)


# ------------------------------------------------------------------------------------------- Countdown
_EXPR = re.compile(r"\d+(?:[-+*]\d+)*")


def evaluate_expression(text: str) -> int | None:
    """Value of 'a op b op c ...' with + - * and the usual precedence (* first), or None if not of that form."""
    if not _EXPR.fullmatch(text) or len(text) > 64:
        return None
    total, term, sign = 0, None, 1
    for tok in re.findall(r"\d+|[-+*]", text):
        if tok == "*":
            continue
        if tok in "+-":
            total += sign * term
            term, sign = None, 1 if tok == "+" else -1
        else:
            term = int(tok) if term is None else term * int(tok)
    return total + sign * term


def countdown_score(completion: str, answer: str) -> float:
    """1.0 when `completion` uses exactly the prompt's numbers (each once) and evaluates to the target.
    `answer` is 'a,b,c:target' (the task stores the numbers beside the target so the verifier needs no prompt)."""
    numbers, target = answer.split(":")
    text = completion.strip()
    value = evaluate_expression(text)
    if value is None or value != int(target):
        return 0.0
    return float(sorted(re.findall(r"\d+", text)) == sorted(numbers.split(",")))


def _solutions(numbers: tuple[int, ...]) -> dict[int, str]:
    """target -> the first expression (numbers in every order, every operator) reaching it, non-negative only."""
    found: dict[int, str] = {}
    for order in sorted(set(itertools.permutations(numbers))):
        for ops in itertools.product(COUNTDOWN_OPS, repeat=len(numbers) - 1):
            expr = "".join(str(x) + o for x, o in zip(order, ops)) + str(order[-1])
            value = evaluate_expression(expr)
            if value >= 0:
                found.setdefault(value, expr)
    return found


def countdown_task(eval_size: int = 200, seed: int = 0, numbers: int = 4) -> Task:
    """Every multiset of `numbers` numbers 1-9 and every non-negative target an expression of them reaches.
    Prompt 'a,b,c,d:t=' (numbers ascending); the stored answer is one solution, and any solution scores 1."""
    if not isinstance(numbers, int) or isinstance(numbers, bool) or not 2 <= numbers <= 5:
        raise ValueError(f"numbers must be an integer in [2, 5], got {numbers!r}")
    task = _split(list(_countdown_examples(numbers)), eval_size, seed, "countdown")
    return Task(task.name, task.train, task.eval, _CountdownScore())


@functools.cache
def _countdown_examples(numbers: int) -> tuple[Example, ...]:
    """Every Countdown problem of `numbers` numbers, once per process (enumerating them takes seconds, and a
    study loads the task for every warm start and run)."""
    examples = []
    for group in itertools.combinations_with_replacement(COUNTDOWN_NUMBERS, numbers):
        for target, expr in sorted(_solutions(group).items()):
            head = ",".join(map(str, group))
            examples.append(Example(f"{head}:{target}=", expr))
    return tuple(examples)


class _CountdownScore:
    """Countdown's verifier keyed by the example: the trainer calls score(completion, answer), and the answer of
    a Countdown example is its reference solution, whose numbers are the prompt's; the target is its value."""

    def __call__(self, completion: str, answer: str) -> float:
        numbers = ",".join(sorted(re.findall(r"\d+", answer)))
        return countdown_score(completion, f"{numbers}:{evaluate_expression(answer)}")


__all__ = [
    "PUZZLE_ALPHABET",
    "countdown_score",
    "countdown_task",
    "evaluate_expression",
    "multiplication_task",
]
