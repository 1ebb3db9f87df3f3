"""Divergence measures D(r[, p]) and their clip intervals {r : D <= δ} (docs/theory.md §1, §3).

A measure is one object: its name, formula (LaTeX, and `code`, from which `divclip.theory.symbolic` derives its
SymPy form through the safe parser), `value`, `bounds(delta, p=None)` (the same signature for every measure,
'ratio' included: its δ is the clip width), and its presentation (label, method, colour, text) that the app,
the CLI listing and the figures read. `divclip.theory.register_measure` adds one at run time. Every measure in
`MEASURES` is decreasing on r < 1 and increasing on r > 1 with D(1) = 0, so by the gradient-equivalence
theorem clipping on D <= δ is exactly ratio clipping on [lo, hi] (per token when D depends on p = π_old(a)).

`value` and `bounds` validate their inputs and accept scalars or numpy arrays. The unchecked
`_value(r, p, xp)` takes an array namespace so that `divclip.theory.losses` evaluates the same formula in torch.
Where D(0+) <= δ (e.g. χ² with δ >= 1) no ratio below 1 violates the budget and `lo` is 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from divclip.theory.bounds import _kl3_bounds, binary_kl_bounds_array, binary_kl_value, kl3_roots
from divclip.theory.methods import measure_method
from divclip.theory.validation import check_delta, check_p, check_ratio


def _scalarise(lo, hi, *inputs):
    if all(np.ndim(x) == 0 for x in inputs if x is not None):
        return float(lo), float(hi)
    return lo, hi


@dataclass(frozen=True)
class Measure:
    """A divergence measure D(r[, p]) >= 0 with D(1) = 0, decreasing below 1 and increasing above."""

    name: str
    latex: str
    code: str
    """D as a formula in r (and p) that `divclip.theory.formula.parse_formula` reads: the one definition that
    `divclip.theory.symbolic` derives from (a test checks it against `_value` everywhere)."""
    p_dependent: bool
    source: str
    description: str
    # -- presentation (one place: the app, the CLI listing and the figures read these) ---------
    label: str = ""
    """Short legend name ('KL3 r−1−log r'); empty: the name."""
    method: str = ""
    """The training method this measure stands for ('ATR-GRPO'), the key of its colour; empty: the label."""
    colour: str = ""
    """'#rrggbb' of that method in every figure; empty: `register_measure` picks an unused one."""
    text: str = ""
    """Plain-text formula for explanations ('r − 1 − log r'); empty: `code`."""

    # -- public, validated -------------------------------------------------------------------
    def value(self, r, p=None):
        """D(r[, p]) elementwise; floats in, float out."""
        rr = check_ratio(r, "r")
        pp = self._check_p(p)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = self._value(rr, pp, np)
        return float(out) if np.ndim(out) == 0 else out

    def bounds(self, delta, p=None):
        """(lo, hi) with D(lo) = D(hi) = δ and lo < 1 < hi (lo = 0 where D(0+) <= δ)."""
        d = check_delta(delta, "delta")
        pp = self._check_p(p)
        if pp is not None:
            d, pp = np.broadcast_arrays(d, pp)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            lo, hi = self._bounds(d, pp)
        return _scalarise(lo, hi, delta, p)

    def _check_p(self, p):
        if self.p_dependent:
            if p is None:
                raise ValueError(f"p is required for the p-dependent measure {self.name!r}: pass π_old(a) in (0, 1)")
            return check_p(p, "p")
        if p is not None:
            check_p(p, "p")  # accepted and ignored, but never silently wrong
        return None

    # -- unchecked maths, overridden per measure ---------------------------------------------
    def _value(self, r, p, xp):
        raise NotImplementedError

    def _bounds(self, d, p):
        raise NotImplementedError


class _Ratio(Measure):
    """PPO/GRPO ratio clip |r - 1| <= δ: the budget is the clip width, [1 - δ, 1 + δ]. DAPO's asymmetric
    clip-higher is a `ClipSpec` with eps_low/eps_high, not a different measure."""

    def _value(self, r, p, xp):
        return xp.abs(r - 1.0)

    def _bounds(self, d, p):
        return np.maximum(1.0 - d, 0.0), 1.0 + d


class _LogRatio(Measure):
    def _value(self, r, p, xp):
        return xp.abs(xp.log(r))

    def _bounds(self, d, p):
        return np.exp(-d), np.exp(d)


class _K2(Measure):
    def _value(self, r, p, xp):
        return 0.5 * xp.log(r) ** 2

    def _bounds(self, d, p):
        s = np.sqrt(2.0 * d)
        return np.exp(-s), np.exp(s)


class _KL3(Measure):
    def _value(self, r, p, xp):
        # r - 1 - log r with log1p so that D(1 + 1e-8) ~ 5e-17 is not lost to cancellation.
        x = r - 1.0
        return x - xp.log1p(x)

    def _bounds(self, d, p):
        return _kl3_bounds(d)


class _KL3Reverse(Measure):
    def _value(self, r, p, xp):
        # 1/r - 1 + log r = KL3(1/r)
        x = 1.0 / r - 1.0
        return x - xp.log1p(x)

    def _bounds(self, d, p):
        roots = kl3_roots(d)  # 1/l_δ from its own exponential form: exact to the float64 overflow at δ ~ 708.8
        return 1.0 / roots.hi, roots.inv_lo


class _BinaryKL(Measure):
    def _value(self, r, p, xp):
        return binary_kl_value(r, p, xp)

    def _bounds(self, d, p):
        return binary_kl_bounds_array(d, p)


class _BinaryTV(Measure):
    def _value(self, r, p, xp):
        return xp.abs(p * (r - 1.0))

    def _bounds(self, d, p):
        return np.maximum(1.0 - d / p, 0.0), 1.0 + d / p


class _Chi2(Measure):
    def _value(self, r, p, xp):
        return (r - 1.0) ** 2

    def _bounds(self, d, p):
        s = np.sqrt(d)
        return np.maximum(1.0 - s, 0.0), 1.0 + s


class _Hellinger(Measure):
    def _value(self, r, p, xp):
        return (xp.sqrt(r) - 1.0) ** 2

    def _bounds(self, d, p):
        s = np.sqrt(d)
        return np.maximum(1.0 - s, 0.0) ** 2, (1.0 + s) ** 2


_BUILTIN: tuple[Measure, ...] = (
    _Ratio(
        "ratio",
        r"\lvert r - 1 \rvert",
        "abs(r - 1)",
        False,
        "PPO; GRPO; DAPO clip-higher",
        "Ratio clip [1-δ, 1+δ] (δ is the width ε); ClipSpec takes ε_low/ε_high for DAPO's clip-higher.",
        label="ratio |r−1|",
        method=measure_method("ratio"),  # the catalogue's label (divclip.theory.methods)
        colour="#1f77b4",
        text="|r − 1|",
    ),
    _LogRatio(
        "log_ratio",
        r"\lvert \log r \rvert",
        "abs(log(r))",
        False,
        "Schulman k1 (absolute)",
        "Symmetric in log space: [e^{-δ}, e^{δ}].",
        label="log-ratio |log r|",
        method="k1 |log r|",
        colour="#8c564b",
        text="|log r|",
    ),
    _K2(
        "k2",
        r"\tfrac12 (\log r)^2",
        "0.5 * log(r)**2",
        False,
        "Schulman k2",
        "Symmetric in log space: [e^{-√(2δ)}, e^{√(2δ)}].",
        label="k2 ½(log r)²",
        method="k2",
        colour="#e377c2",
        text="½(log r)²",
    ),
    _KL3(
        "kl3",
        r"r - 1 - \log r",
        "r - 1 - log(r)",
        False,
        "ATR-GRPO (arXiv 2602.05494); Schulman k3",
        "Asymmetric: the upper side is looser (clip-higher derived, not tuned).",
        label="KL3 r−1−log r",
        method=measure_method("kl3"),  # the catalogue's label (divclip.theory.methods)
        colour="#d62728",
        text="r − 1 − log r",
    ),
    _KL3Reverse(
        "kl3_reverse",
        r"\tfrac1r - 1 + \log r",
        "1/r - 1 + log(r)",
        False,
        "k3 of KL(π_θ‖π_old)",
        "Mirror of KL3: [1/u_δ, 1/l_δ], looser above (ε_high − ε_low ≈ 8δ/3).",
        label="reverse KL3",
        method="reverse KL3",
        colour="#7f7f7f",
        text="1/r − 1 + log r",
    ),
    _BinaryKL(
        "binary_kl",
        r"p \log\tfrac{1}{r} + (1-p)\log\tfrac{1-p}{1-rp}",
        "p*log(1/r) + (1-p)*log((1-p)/(1-r*p))",
        True,
        "DPPO-Binary-KL (arXiv 2602.04879, verl dppo_kl); TRGPPO",
        "Per-token: wide for rare tokens, tight for confident ones; hi < 1/p.",
        label="binary KL",
        method=measure_method("binary_kl"),  # the catalogue's label (divclip.theory.methods)
        colour="#2ca02c",
        text="p log(1/r) + (1 − p) log((1 − p)/(1 − rp))",
    ),
    _BinaryTV(
        "binary_tv",
        r"\lvert p (r - 1) \rvert",
        "abs(p*(r - 1))",
        True,
        "DPPO-Binary-TV (verl dppo_tv)",
        "Per-token: [1-δ/p, 1+δ/p].",
        label="binary TV",
        method=measure_method("binary_tv"),  # the catalogue's label (divclip.theory.methods)
        colour="#9467bd",
        text="|p (r − 1)|",
    ),
    _Chi2(
        "chi2",
        r"(r - 1)^2",
        "(r - 1)**2",
        False,
        "χ² f-divergence estimator",
        "Symmetric in r: [1-√δ, 1+√δ].",
        label="χ² (r−1)²",
        method="χ²",
        colour="#bcbd22",
        text="(r − 1)²",
    ),
    _Hellinger(
        "hellinger",
        r"(\sqrt{r} - 1)^2",
        "(sqrt(r) - 1)**2",
        False,
        "squared Hellinger estimator",
        "[(1-√δ)², (1+√δ)²]: looser above.",
        label="Hellinger (√r−1)²",
        method="Hellinger",
        colour="#17becf",
        text="(√r − 1)²",
    ),
)
BUILTIN_NAMES = frozenset(m.name for m in _BUILTIN)

MEASURES: dict[str, Measure] = {m.name: m for m in _BUILTIN}
"""Every registered measure by name: the built-ins, then what `divclip.theory.register_measure` added."""


def get_measure(name) -> Measure:
    """The registered measure called `name`; a ValueError lists the allowed names otherwise."""
    if isinstance(name, Measure):
        return name
    if not isinstance(name, str) or name not in MEASURES:
        raise ValueError(f"measure must be one of {sorted(MEASURES)}, got {name!r}")
    return MEASURES[name]


def value_at_zero(measure: Measure, p=None) -> float:
    """D(0+): the largest δ for which the lower bound is a root rather than 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        v = float(measure._value(np.float64(0.0), None if p is None else np.float64(p), np))
    return v if math.isfinite(v) else math.inf  # log-type measures give inf or inf - inf = nan at 0


LISTING_DELTA, LISTING_P = 0.02, 0.5


def measure_listing(delta: float = LISTING_DELTA, p: float = LISTING_P) -> list[dict]:
    """One row per registered measure (run-time ones included), for `divclip measures` and the docs:
    name, label, formula (its code), p_dependent, its clip interval at budget `delta` (and `p` where it
    depends on p) as [lo, hi], and source. Every measure is read the same way, through `bounds(delta, p)`."""
    rows = []
    for m in MEASURES.values():
        lo, hi = m.bounds(delta, p if m.p_dependent else None)
        rows.append(
            {
                "name": m.name,
                "label": m.label or m.name,
                "formula": m.code,
                "p_dependent": m.p_dependent,
                "interval": [float(lo), float(hi)],
                "source": m.source,
            }
        )
    return rows
