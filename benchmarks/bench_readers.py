"""Config readers on 1 MB adversarial inputs (issue 36): each reader's time against a linear baseline, a plain
`str.split` of the same text, in one run (goal: every reader within 2 s, i.e. no super-linear work).

    python benchmarks/bench_readers.py [--mib 1] [--repeats 3]

Each input aims at one reader's worst case: a digit run ending in a letter (the float regex used to try every
split of it), one long word (shlex built it by concatenation), newlines then a word (a `^\\s*` regex rescanned
the rest of the text from every line), deep `${...}` chains, heredocs, operators, a Python list literal (refused
by size before ast.parse), a YAML `${...}` interpolation chain. `read_config` is what `divclip check` calls; the
row's result is the error it gives, or the number of settings read. Times are the best of --repeats.
"""

from __future__ import annotations

import argparse
import time

from divclip.engines.config import read_config
from divclip.sanity.errors import ConfigError

GOAL_S = 2.0


def adversarial(size: int) -> dict[str, tuple[str, bytes]]:
    """{label: (file name, bytes)}: about `size` bytes each (tests/sanity/test_input_bombs.py runs them too)."""
    links = max(size // 40, 2)
    chain = ["actor:", f"  eps_clip: ${{x.k{links - 1}}}", "x:", "  k0: 0.3"]
    chain += [f"  k{i}: ${{x.k{i - 1}}}" for i in range(1, links)]
    return {
        "float: digits then a letter": ("c.txt", b"a.b=" + b"9" * size + b"x\n"),
        "flag value: digits then a letter": ("r.sh", b"python3 train.py --eps-clip " + b"9" * size + b"x\n"),
        "one long word": ("r.sh", b"python3 train.py --save " + b"a" * size + b"\n"),
        "newlines then a word (sniffing)": ("c", b"\n" * (size // 2) + b"a" * (size // 2)),
        "blank-separated words": ("r.sh", b"a=1 " * (size // 4)),
        "operators": ("r.sh", b"a=1;" * (size // 4)),
        "hash inside words": ("r.sh", b"x#y " * (size // 4)),
        "unclosed heredoc": ("r.sh", b"cat <<EOF\n" + b"a=1\n" * (size // 4)),
        "variable references": ("r.sh", b"A=1\n" + b"$A" * (size // 2) + b"\n"),
        "nested ${...:-...}": ("r.sh", (b"x=" + b"${A:-" * 30 + b"1" + b"}" * 30 + b"\n") * (size // 200)),
        "quotes": ("r.sh", b"a='1' " * (size // 6)),
        "Python list literal": ("c.py", b"x = [" + b"1," * (size // 2) + b"]\n"),
        "YAML interpolation chain": ("c.yaml", ("\n".join(chain) + "\n").encode()),
    }


def _read(name: str, data: bytes) -> str:
    try:
        raw = read_config(data, name=name)
    except ConfigError as exc:
        return str(exc)[:90]
    if name.endswith(".yaml"):  # the chain is resolved when an engine reads the settings
        from divclip.sanity.settings import clip_settings

        found = clip_settings(raw, "areal")
        return f"actor.eps_clip = {found.budget_low}"
    return f"{len(raw.values)} settings read"


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    size = int(args.mib * 2**20)
    print(f"{'input':36} {'bytes':>9} {'split s':>9} {'reader s':>9} {'ratio':>8}  result")
    worst = 0.0
    for label, (name, data) in adversarial(size).items():
        text = data.decode()
        base = _best(text.split, args.repeats)
        result = _read(name, data)
        took = _best(lambda n=name, d=data: _read(n, d), args.repeats)
        worst = max(worst, took)
        print(f"{label:36} {len(data):9d} {base:9.4f} {took:9.4f} {took / base:8.0f}  {result}")
    print(f"slowest reader: {worst:.3f} s (goal: under {GOAL_S:g} s on each 1 MB input)")


if __name__ == "__main__":
    main()
