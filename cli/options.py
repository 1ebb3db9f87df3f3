"""argparse types shared by the subcommands: each error names the flag, the text given and what is allowed."""

from __future__ import annotations

import argparse
import math


def finite_float(name: str, minimum: float | None = None):
    """An argparse type: a finite float (optionally >= minimum), the error naming the flag and the text."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not math.isfinite(v) or (minimum is not None and v < minimum):
            at_least = "" if minimum is None else f" >= {minimum:g}"
            raise argparse.ArgumentTypeError(f"{name} must be a finite number{at_least}, got {text!r}")
        return v

    return parse


def positive_int(name: str):
    """An argparse type: an integer >= 1, the error naming the flag and the text."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {text!r}")
        return v

    return parse


def bounded_int(name: str, minimum: int, maximum: int):
    """An argparse type: an integer in [minimum, maximum] (the documented bound of a size flag)."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if not minimum <= v <= maximum:
            raise argparse.ArgumentTypeError(f"{name} must be an integer in [{minimum}, {maximum}], got {text!r}")
        return v

    return parse
