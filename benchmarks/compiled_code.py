"""The code torch.compile generates for bench_loss.py's floor cases, one file per case, to compare two trees.

    python benchmarks/compiled_code.py OUT_DIR [--tree PATH] [--case NAME ...]

Compiles each of `bench_loss.FLOOR_CASES` (`policy_loss(..., metrics=False)`, forward and backward, fullgraph) on
small inputs (8 x 64) and writes inductor's output code, forward then backward, to OUT_DIR/<case>.py. With
--tree, the cases, the loss and this machine's torch come from another checkout of divclip (e.g. a
`git worktree add /tmp/before <commit>`): its top-level folders are linked under a temporary `divclip` namespace
that takes the place of the installed one, so no second environment is needed. Two trees whose files are equal
(`diff -r`) run the same kernels: a timing difference between them is the machine's, not the code's. The code is
that of small inputs; the kernels are the same loops at any size (the shapes are symbols or constants in them).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
import tempfile
from pathlib import Path

PACKAGES = ("app", "cli", "engines", "sanity", "theory", "toy_envs", "trainer")


def use_tree(tree: Path) -> None:
    """Make `import divclip.<pkg>` load TREE/<pkg> in place of the installed divclip."""
    if not (tree / "theory").is_dir() or not (tree / "benchmarks" / "bench_loss.py").is_file():
        raise SystemExit(f"--tree must be a divclip checkout with theory/ and benchmarks/bench_loss.py, got {tree}")
    root = Path(tempfile.mkdtemp(prefix="divclip-tree-"))
    (root / "divclip").mkdir()
    for name in PACKAGES:
        if (tree / name).is_dir():
            (root / "divclip" / name).symlink_to(tree / name)
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__name__.lower()]
    sys.path.insert(0, str(root))
    for mod in [m for m in sys.modules if m == "divclip" or m.startswith("divclip.")]:
        del sys.modules[mod]


def load_bench(tree: Path):
    spec = importlib.util.spec_from_file_location("bench_loss", tree / "benchmarks" / "bench_loss.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--tree", type=Path, help="another divclip checkout to take the loss and the cases from")
    ap.add_argument("--case", action="append", help="only this floor case (by its name in bench_loss.py); repeatable")
    args = ap.parse_args()
    tree = args.tree.resolve() if args.tree else Path(__file__).resolve().parents[1]
    if args.tree:
        use_tree(tree)
    from torch._inductor.utils import run_and_get_code

    bench = load_bench(tree)
    import divclip.theory

    print(f"divclip from {Path(divclip.theory.__file__).parent.parent}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    names = [name for name, _, _ in bench.FLOOR_CASES]
    unknown = sorted(set(args.case or ()) - set(names))
    if unknown:
        raise SystemExit(f"--case must be one of {names}, got {unknown}")
    inputs = bench.make_inputs(8, 64)
    for name, spec, _ in bench.FLOOR_CASES:
        if args.case and name not in args.case:
            continue
        agg = "seq-mean-token-mean" if spec == "sapo" else "token-mean"
        _, compiled = bench.floor_fns(spec, agg)
        _, codes = run_and_get_code(bench.step, compiled, inputs)
        path = args.out_dir / (re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_") + ".py")
        path.write_text("\n\n".join(codes))
        print(f"{name}: {sum(c.count(chr(10)) for c in codes)} lines -> {path}")


if __name__ == "__main__":
    main()
