"""Which training method each measure stands for, with one fixed colour per method.

The colours are the single source for every figure; `.streamlit/config.toml` lists the same colours in the
same order as `theme.chartCategoricalColors` (a test keeps the two in step). The ratio measure is GRPO when
it has GRPO's ε = 0.2 / 0.2, DAPO (clip-higher) at 0.2 / 0.28, GSPO at 3e-4 / 4e-4, and otherwise is just
"ratio clip" (coloured as GRPO when symmetric, as DAPO when ε_high > ε_low).
"""

from __future__ import annotations

METHOD_COLOURS: dict[str, str] = {
    "GRPO": "#1f77b4",
    "DAPO": "#ff7f0e",
    "ATR-GRPO": "#d62728",
    "DPPO-Binary-KL": "#2ca02c",
    "DPPO-Binary-TV": "#9467bd",
    "k1 |log r|": "#8c564b",
    "k2": "#e377c2",
    "reverse KL3": "#7f7f7f",
    "χ²": "#bcbd22",
    "Hellinger": "#17becf",
    "custom": "#111111",
}

# Registered measure name -> method label (the ratio measure is resolved by its ε, see `method_for`).
MEASURE_METHOD: dict[str, str] = {
    "ratio": "GRPO",
    "kl3": "ATR-GRPO",
    "binary_kl": "DPPO-Binary-KL",
    "binary_tv": "DPPO-Binary-TV",
    "log_ratio": "k1 |log r|",
    "k2": "k2",
    "kl3_reverse": "reverse KL3",
    "chi2": "χ²",
    "hellinger": "Hellinger",
}

# Short names for legends and tables; the measure's own name is the fallback.
MEASURE_LABEL: dict[str, str] = {
    "ratio": "ratio clip",
    "kl3": "KL3 r−1−log r",
    "binary_kl": "binary KL",
    "binary_tv": "binary TV",
    "log_ratio": "log-ratio |log r|",
    "k2": "k2 ½(log r)²",
    "kl3_reverse": "reverse KL3",
    "chi2": "χ² (r−1)²",
    "hellinger": "Hellinger (√r−1)²",
}


# The ratio clip's published settings (ε_low, ε_high) -> method; any other ε is a plain "ratio clip".
RATIO_METHODS: dict[tuple[float, float], str] = {(0.2, 0.2): "GRPO", (0.2, 0.28): "DAPO", (3e-4, 4e-4): "GSPO"}
RATIO_CLIP = "ratio clip"


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b))


def method_for(measure_name: str, eps_low: float | None = None, eps_high: float | None = None) -> str:
    """The method a measure stands for; the ratio measure is named by its ε (GRPO, DAPO, GSPO or ratio clip)."""
    if measure_name == "ratio":
        if eps_low is None or eps_high is None:
            return MEASURE_METHOD["ratio"]
        for (lo, hi), method in RATIO_METHODS.items():
            if _close(eps_low, lo) and _close(eps_high, hi):
                return method
        return RATIO_CLIP
    return MEASURE_METHOD.get(measure_name, "custom")


def colour_for(measure_name: str, eps_low: float | None = None, eps_high: float | None = None) -> str:
    if measure_name == "ratio":  # every ratio clip shares GRPO's colour, clip-higher DAPO's
        higher = eps_low is not None and eps_high is not None and eps_high > eps_low
        return METHOD_COLOURS["DAPO" if higher else "GRPO"]
    return METHOD_COLOURS[method_for(measure_name, eps_low, eps_high)]


def label_for(measure_name: str) -> str:
    return MEASURE_LABEL.get(measure_name, measure_name)
