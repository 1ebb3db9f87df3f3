"""Multiplication and Countdown: every problem is right, the held-out split depends on the seed, and the
Countdown verifier accepts any correct expression and nothing else."""

import itertools

import pytest

from divclip.trainer.config import TrainerConfig
from divclip.trainer.puzzles import countdown_score, countdown_task, evaluate_expression, multiplication_task
from divclip.trainer.tasks import load_task


def test_multiplication_examples_are_products():
    task = multiplication_task(2, eval_size=100, seed=3)
    assert len(task.train) + len(task.eval) == 10**4 and len(task.eval) == 100
    for e in task.train[::97] + task.eval:
        a, b = e.prompt.rstrip("=").split("*")
        assert e.answer == str(int(a) * int(b)) and task.score(e.answer, e.answer) == 1.0
    assert task.score("12", "21") == 0.0
    assert multiplication_task(2, 100, seed=4).eval != task.eval


@pytest.mark.parametrize(
    "text, value",
    [("3*7+5", 26), ("1-2+5*7", 34), ("2*3*4-1", 23), ("9-9*9", -72), ("8", 8), ("1+", None), ("a+1", None)],
)
def test_expressions_use_the_usual_precedence(text, value):
    expect = None if value is None else eval(text)  # the test's own reference: Python's arithmetic
    assert evaluate_expression(text) == expect == value


def test_countdown_reference_solutions_and_any_other_solution_score():
    task = countdown_task(eval_size=200, seed=0)
    assert len(task.eval) == 200 and not {e.prompt for e in task.eval} & {e.prompt for e in task.train}
    for e in task.train[::151] + task.eval:
        head, target = e.prompt.rstrip("=").split(":")
        numbers = head.split(",")
        assert sorted(numbers) == sorted(c for c in e.answer if c.isdigit())
        assert eval(e.answer) == int(target) and task.score(e.answer, e.answer) == 1.0
        # every other arrangement of the same numbers that reaches the target scores too; others do not
        for order in itertools.islice(itertools.permutations(numbers), 6):
            for ops in itertools.product("+-*", repeat=3):
                expr = "".join(x + o for x, o in zip(order, ops)) + order[-1]
                assert task.score(expr, e.answer) == float(eval(expr) == int(target))


def test_countdown_verifier_needs_each_number_once():
    assert countdown_score("3*7+5", "3,5,7:26") == 1.0
    assert countdown_score("5+3*7", "3,5,7:26") == 1.0
    assert countdown_score("3*7+5+0", "3,5,7:26") == 0.0  # an extra number
    assert countdown_score("21+5", "3,5,7:26") == 0.0  # not the given numbers
    assert countdown_score("3*7+5 ", "3,5,7:26") == 1.0 and countdown_score("", "3,5,7:26") == 0.0


def test_tasks_by_name_and_clear_errors():
    assert load_task("mult", arith_digits=1, eval_size=10).name == "mult1"
    assert load_task("countdown", eval_size=10).name == "countdown"
    with pytest.raises(ValueError, match=r"TrainerConfig.task must be 'arith' or 'mult' or 'countdown' or the path"):
        TrainerConfig(task="sudoku")
    with pytest.raises(ValueError, match=r"eval_size must be in \[0, 100\) for task 'mult1', got 100"):
        multiplication_task(1, eval_size=100)
    with pytest.raises(ValueError, match=r"numbers must be an integer in \[2, 5\], got 9"):
        countdown_task(numbers=9)
