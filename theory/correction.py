"""The third policy: what a trainer does about the inference engine's log-probs, without torch.

A rollout is sampled by an inference engine (vLLM/SGLang, often in bf16) whose log-probs π_rollout differ from
the trainer's π_old even at the same weights. With ρ = π_old/π_rollout per token, every engine since late 2025
corrects for it twice over: an importance weight w(ρ) that multiplies the per-token loss, and a rejection that
drops tokens or sequences whose divergence exceeds a threshold. Both are divergence clips of the seed paper's
kind applied to a third policy (docs/theory.md, "The three policies"). `Correction` says which; the torch code
that applies it is `divclip.theory.rollout_correction` (in `divclip.theory.correction_apply`).

Correction strings (beside the method strings of `divclip.theory.spec`; whitespace around the whole string is
ignored, nothing else is; "none" is the empty correction):

    correction := part ("/" part)*
    part  := "is=" LEVEL [":" BOUND]          importance weight, LEVEL token | sequence (ρ_seq = Π_t ρ_t);
                                              BOUND defaults to tis=2.0 (verl's rollout_is_threshold)
           | "rs=" OPTION ":" THRESHOLD        a rejection rule; several rs= parts must all pass (AND)
           | "norm"                            divide the weights by their batch mean (verl's batch normalisation)
           | "opsm=" NUMBER                    DeepSeek-V3.2's off-policy sequence mask (TRL's
                                              off_policy_mask_threshold): a sequence with A < 0 whose mean
                                              log π_rollout - log π_train exceeds NUMBER gets weight 0
           | "filter=" FILTER                  AReaL's rejection_sampling (`Filter`): its behaviour weight, masked or
                                              clamped by a ratio or KL statistic of a token or a sequence
           | "m2po=" NUMBER                    AReaL's M2PO threshold: drop the tokens of the batch with the
                                              largest (log ρ)² until the mean of the rest is below NUMBER
           | "noclamp"                         exp of the raw log-ratio (TRL); default: log ρ clamped to ±20 (verl)
           | "bypass"                          verl's bypass mode: π_old is π_rollout, ρ = π_θ/π_rollout in the loss
           | "exp_dtype=float32"               the is= weight's exp in float32 whatever the inputs' dtype (SkyRL);
                                              rounding only: it does not enter equality
    BOUND := "tis=" C | "tis=" c "_" C         truncate: w = clamp(ρ, c, C) (c omitted: no lower clamp)
           | "mask=" C | "mask=" c "_" C       mask: w = ρ inside [c, C], else 0 (IcePop; TRL's *_mask)
                                              (C may be "inf" after a floor: c "_inf" bounds w from below only)
    OPTION := token_k1 | token_k2 | token_k3 | seq_sum_k1 | seq_sum_k2 | seq_sum_k3
           | seq_mean_k1 | seq_mean_k2 | seq_mean_k3 | seq_max_k2 | seq_max_k3       (verl's rejection options)
           | seq_any_k1                        SkyRL's outlier-token mask: drop the whole sequence when any of its
                                              tokens fails the token_k1 band (not verl's)
    THRESHOLD := NUMBER                        upper bound on the statistic (k2, k3)
           | lo "_" hi                         k1 only: bounds on exp(statistic); a bare NUMBER C means 1/C "_" C
    FILTER := "token:" METRIC ":" ACTION ":" BAND | "sequence:" METRIC ":" AGG ":" ACTION ":" BAND [":token"]
    METRIC := ratio | kl_k1 | kl_k2 | kl_k3    (AReaL's)    | binary_kl | binary_tv    (OpenRLHF's gating)
    ACTION := mask | clamp    AGG := sum | mean | max
    BAND   := upper | lower "_" upper          (bounds on the metric; lower may be negative for kl_k1 and the
                                              binary divergences)
    ":token" (sequence ratio mask only): each token keeps its own ρ as weight where its sequence passes
                                              (OpenRLHF's seq gate); without it the weight is the sequence's
                                              geometric mean (AReaL's)

Examples: `is=token:tis=2.0`, `is=sequence:mask=0.5_5.0/norm`, `rs=seq_mean_k1:0.999_1.001`,
`is=token/rs=token_k3:0.01/rs=seq_max_k2:0.5`, `is=sequence:mask=3.0/noclamp` (TRL's default sequence_mask),
`filter=token:ratio:mask:5.0` (AReaL's migration of the old behave_imp_weight_cap 5), `m2po=0.04`,
`filter=sequence:ratio:mean:mask:0.5_5.0:token` (OpenRLHF's sequence-level IS correction),
`filter=token:binary_kl:mask:0.0_0.05` (OpenRLHF's binary_kl gating of its IS correction at threshold 0.05; the
flags: divclip.engines.openrlhf).

The statistics are verl's: with l = log ρ (clamped to ±20), k1 = -l, k2 = l²/2, k3 = e^l - 1 - l; a seq_sum /
seq_mean / seq_max option sums / averages / maximises the token statistic over the sequence and keeps or drops the
whole sequence. A k1 threshold lo_hi keeps log lo <= k1 <= log hi, i.e. lo <= π_rollout/π_old <= hi (verl
bounds the inverse ratio; the default geometric band 0.999_1.001 is symmetric enough not to notice).

A filter's statistics are AReaL's (areal/utils/functional/functional.py `apply_rejection_sampling`, with
`KLEstimator(log π_prox, log π_behave)`): ratio = ρ, kl_k1 = log ρ, kl_k2 = (log ρ)²/2 and kl_k3 = 1/ρ - 1 + log ρ
(verl's k1 and k3 are of the inverse ratio). Its weight is never clamped in log (AReaL does not). The binary
metrics are OpenRLHF 0.11.2's gating statistics (openrlhf/models/loss.py `PolicyLoss.forward`): with
p = e^{log π_rollout} and q = e^{log π_old}, each clamped to [1e-6, 1 − 1e-6], binary_kl = p·log(p/q) +
(1 − p)·log((1 − p)/(1 − q)) and binary_tv = |p − q|: divclip's binary_kl and binary_tv measures D(ρ, π_rollout)
(`divclip.theory.measures`) in OpenRLHF's arithmetic.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

__all__ = [
    "IS_LEVELS",
    "IS_MODES",
    "RS_OPTIONS",
    "REJECTION_OPTIONS",
    "SEQ_ANY_K1",
    "FILTER_ACTIONS",
    "FILTER_AGGS",
    "FILTER_METRICS",
    "FILTER_SEQ_WEIGHTS",
    "AREAL_METRICS",
    "Correction",
    "Filter",
    "Rejection",
    "correction_string",
    "parse_correction",
]

IS_LEVELS = ("token", "sequence")
IS_MODES = ("truncate", "mask")
RS_OPTIONS = (
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
)
"""verl 0.9.1's `SUPPORTED_ROLLOUT_RS_OPTIONS` (verl has no seq_max_k1: a max of -log ρ bounds only one side)."""
SEQ_ANY_K1 = "seq_any_k1"
"""SkyRL 0.3.0's outlier-token mask (its off-policy correction's outlier thresholds, `compute_outlier_token_mask`;
read by divclip.engines.correction): a sequence is dropped when any valid token has ρ outside [low, high]; as a k1 rule
its band is token_k1's (on exp(k1) = 1/ρ), and one failing token drops the sequence. verl has no such option."""
REJECTION_OPTIONS = RS_OPTIONS + (SEQ_ANY_K1,)
"""Every rejection option divclip applies: verl's `RS_OPTIONS` and SkyRL's `SEQ_ANY_K1`."""
FILTER_METRICS = ("ratio", "kl_k1", "kl_k2", "kl_k3", "binary_kl", "binary_tv")
FILTER_ACTIONS = ("mask", "clamp")
FILTER_AGGS = ("sum", "mean", "max")
"""AReaL 1.0.4's RejectionSamplingConfig choices (metric, action, agg); the binary metrics are OpenRLHF 0.11.2's
binary_kl and tv gating of its IS correction."""
AREAL_METRICS = ("ratio", "kl_k1", "kl_k2", "kl_k3")
"""The metrics AReaL has (binary_kl and binary_tv are OpenRLHF's)."""
FILTER_SEQ_WEIGHTS = ("geometric", "token")
"""A sequence ratio filter's weight: the sequence's geometric mean (AReaL) or each token's own ρ (OpenRLHF)."""
EXP_DTYPES = ("input", "float32")
"""`Correction.exp_dtype`: the dtype the is= weight's exp runs in."""
DEFAULT_IS_CAP = 2.0
"""verl's `rollout_is_threshold` default, used when an `is=` part names no bound."""
MAX_ECHO = 80


def _number(owner: str, name: str, value, *, positive: bool = True, zero_ok: bool = False) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok and positive:
        ok = value > 0 or (zero_ok and value == 0)
    if not ok:
        allowed = "a finite number" + ((" >= 0" if zero_ok else " > 0") if positive else "")
        raise ValueError(f"{owner}.{name} must be {allowed}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Rejection:
    """One rejection rule (one of verl's rejection options with its threshold)."""

    option: str
    """A name in `REJECTION_OPTIONS`: token_k3 drops a token, seq_mean_k1 a whole sequence, seq_any_k1 a whole
    sequence for one token out of the k1 band (SkyRL's outlier mask), and so on."""
    upper: float
    """Upper bound: on the statistic for k2/k3; on exp(k1) = π_rollout/π_old (token) or its sum/mean in log
    space (sequence) for k1."""
    lower: float | None = None
    """k1 only (required there): lower bound, in the same units as `upper`; None for k2/k3."""

    def __post_init__(self):
        if self.option not in REJECTION_OPTIONS:
            raise ValueError(f"Rejection.option must be one of {list(REJECTION_OPTIONS)}, got {self.option!r}")
        object.__setattr__(self, "upper", _number("Rejection", "upper", self.upper))
        if self.is_k1:
            if self.lower is None:
                raise ValueError(f"Rejection.lower is required for the k1 option {self.option!r} (got None)")
            object.__setattr__(self, "lower", _number("Rejection", "lower", self.lower))
            if self.lower > self.upper:
                raise ValueError(f"Rejection.lower must be <= upper, got lower={self.lower!r} upper={self.upper!r}")
        elif self.lower is not None:
            raise ValueError(f"Rejection.lower applies to k1 options only, got {self.option!r} with {self.lower!r}")

    @property
    def is_k1(self) -> bool:
        return self.option.endswith("k1")

    @property
    def level(self) -> str:
        """'token' or 'sequence': what one failure drops."""
        return "token" if self.option.startswith("token_") else "sequence"

    @property
    def aggregation(self) -> str:
        """'token', 'sum', 'mean', 'max' or 'any' (seq_any_k1: the sequence fails when any token fails the band):
        how the token statistic is pooled over a sequence."""
        return self.option.split("_")[1] if self.level == "sequence" else "token"

    @property
    def estimator(self) -> str:
        """'k1', 'k2' or 'k3'."""
        return self.option.rsplit("_", 1)[1]

    @property
    def threshold(self) -> str:
        """verl's `rollout_rs_threshold` entry for this rule ('lo_hi' for k1, the number otherwise)."""
        return f"{self.lower!r}_{self.upper!r}" if self.is_k1 else repr(self.upper)


@dataclass(frozen=True)
class Filter:
    """AReaL 1.0.4's `actor.rejection_sampling` (RejectionSamplingConfig), or OpenRLHF 0.11.2's is_correction
    gate: the behaviour weight π_prox/π_behave and what happens to it where a statistic leaves [lower, upper].

    The weight is ρ per token; at sequence level with metric ratio it is the geometric mean exp(mean log ρ) of
    the sequence, the same for each of its tokens. 'mask' sets the weight to 0 where the token's (or its
    sequence's) statistic is outside the band; the token stays in the loss's denominator (AReaL counts the loss
    mask before the filter). 'clamp' (metric ratio only) clamps the weight to [lower or 0, upper]: every token
    at token level; at sequence level only in a sequence whose statistic is outside the band. The sequence
    statistic of ratio is exp(sum / mean / max of log ρ); of a KL metric the sum / mean / max of the token
    values. AReaL's own validation is applied (ratio: upper > 1, lower > 0; kl_k2/kl_k3: upper > 0).

    OpenRLHF's gate (`seq_weight` 'token', the binary metrics): at sequence level with metric ratio each token
    keeps its own ρ where exp(mean log ρ) is inside the band, 0 in the whole sequence elsewhere (the tokens stay
    in the denominator), with OpenRLHF's bounds (upper > 0, lower >= 0); binary_kl / binary_tv (module
    docstring) gate ρ per token, or by their sequence mean, action mask only, upper > 0."""

    level: str = "token"
    """'token' or 'sequence' (AReaL's default: token)."""
    metric: str = "ratio"
    """'ratio', 'kl_k1', 'kl_k2' or 'kl_k3' (AReaL's signs: module docstring)."""
    action: str = "mask"
    """'mask' (weight 0 outside the band) or 'clamp' (weight clamped to it; metric ratio only)."""
    upper: float = 5.0
    """Upper bound on the statistic (AReaL's default 5.0)."""
    lower: float | None = None
    """Lower bound on it; None: none (clamp: 0)."""
    agg: str = "mean"
    """Sequence level: 'sum', 'mean' or 'max' of the token statistic (of log ρ for ratio). Token level: 'mean'
    (AReaL ignores it there)."""
    seq_weight: str = "geometric"
    """Sequence level, metric ratio, action mask: 'geometric' (AReaL: every token's weight is the sequence's
    geometric mean of ρ) or 'token' (OpenRLHF: each token keeps its own ρ). 'geometric' everywhere else."""

    def __post_init__(self):
        for name, allowed in (
            ("level", IS_LEVELS),
            ("metric", FILTER_METRICS),
            ("action", FILTER_ACTIONS),
            ("agg", FILTER_AGGS),
            ("seq_weight", FILTER_SEQ_WEIGHTS),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"Filter.{name} must be one of {list(allowed)}, got {getattr(self, name)!r}")
        if self.level == "token" and self.agg != "mean":
            raise ValueError(f"Filter.agg applies at level 'sequence' only, got agg={self.agg!r} at level 'token'")
        object.__setattr__(self, "upper", _number("Filter", "upper", self.upper, positive=False))
        if self.lower is not None:
            object.__setattr__(self, "lower", _number("Filter", "lower", self.lower, positive=False))
            if self.lower > self.upper:
                raise ValueError(f"Filter.lower must be <= upper, got lower={self.lower!r} upper={self.upper!r}")
        token_weight = self.seq_weight == "token"
        if token_weight and not (self.level == "sequence" and self.metric == "ratio" and self.action == "mask"):
            raise ValueError(
                "Filter.seq_weight 'token' applies to a sequence ratio mask only (OpenRLHF's seq gate), got "
                f"level={self.level!r} metric={self.metric!r} action={self.action!r}"
            )
        if token_weight:  # OpenRLHF's bounds on exp(mean log ρ): any band of non-negative numbers
            if self.upper <= 0 or (self.lower is not None and self.lower < 0):
                raise ValueError(
                    f"Filter.upper must be > 0 and lower >= 0 for OpenRLHF's sequence ratio gate, got "
                    f"lower={self.lower!r} upper={self.upper!r}"
                )
        elif self.metric == "ratio":
            if self.upper <= 1.0:
                raise ValueError(f"Filter.upper must be > 1 for metric 'ratio' (AReaL refuses it), got {self.upper!r}")
            if self.lower is not None and self.lower <= 0:
                raise ValueError(f"Filter.lower must be > 0 for metric 'ratio' (AReaL refuses it), got {self.lower!r}")
        if self.metric in ("kl_k2", "kl_k3", "binary_kl", "binary_tv") and self.upper <= 0:
            raise ValueError(f"Filter.upper must be > 0 for metric {self.metric!r}, got {self.upper!r}")
        if self.action == "clamp" and self.metric != "ratio":
            raise ValueError(f"Filter.action 'clamp' needs metric 'ratio' (AReaL refuses it), got {self.metric!r}")

    @property
    def areal(self) -> bool:
        """True where AReaL has this filter (its metrics, the geometric sequence weight)."""
        return self.metric in AREAL_METRICS and self.seq_weight == "geometric"

    @property
    def band(self) -> str:
        return repr(self.upper) if self.lower is None else f"{self.lower!r}_{self.upper!r}"

    def __str__(self) -> str:
        agg = f"{self.agg}:" if self.level == "sequence" else ""
        weight = ":token" if self.seq_weight == "token" else ""
        return f"{self.level}:{self.metric}:{agg}{self.action}:{self.band}{weight}"


@dataclass(frozen=True)
class Correction:
    """How the trainer corrects for π_rollout ≠ π_old: an importance weight and/or rejection rules."""

    is_level: str | None = None
    """'token' (w per token), 'sequence' (one w = Π_t ρ_t per sequence), or None: no importance weight."""
    is_mode: str = "truncate"
    """'truncate': w = clamp(ρ, is_floor, is_cap) (TIS); 'mask': w = ρ inside [is_floor, is_cap], else 0 (IcePop,
    TRL's *_mask; the token stays in the loss's denominator with weight 0)."""
    is_cap: float | None = DEFAULT_IS_CAP
    """Upper bound C on w (token TIS: 1.5-5 is sane; sequence: 2-10); None: no upper bound."""
    is_floor: float | None = None
    """Lower bound c on w; None: none (verl's TIS has none; IcePop's default band is 0.5_5.0)."""
    batch_normalize: bool = False
    """Divide the weights by their batch mean (token: over tokens; sequence: over sequences), as verl can."""
    rejections: tuple[Rejection, ...] = ()
    """Rejection rules; a token is kept when every rule keeps it (verl's comma-combined options); stored in
    the order of `REJECTION_OPTIONS`."""
    opsm: float | None = None
    """Off-policy sequence mask threshold δ (DeepSeek-V3.2 eq. 9; TRL off_policy_mask_threshold): weight 0 for a
    sequence with A < 0 and mean(log π_rollout - log π_train) > δ. Needs the advantages."""
    clamp_log_ratio: bool = True
    """True: log ρ is clamped to ±20 before exp (verl, SkyRL); False: raw exp (TRL). Always False with a filter
    (AReaL does not clamp)."""
    bypass: bool = False
    """verl's bypass mode: old_log_prob is the rollout's, so ρ = π_θ/π_rollout is computed inside the loss from the
    current log-probs; a ratio-clipped loss then applies only the rejection (verl's PPO-clip bypass)."""
    filter: Filter | None = None
    """AReaL's rejection_sampling or OpenRLHF's is_correction gate (`Filter`): its behaviour weight (instead of an
    is= weight) with its mask or clamp."""
    m2po: float | None = None
    """AReaL's M2PO threshold τ (AReaL's M2PO setting): of the batch's valid tokens, those with the largest (log ρ)² are
    dropped (they leave the loss's mask and denominator) until the mean (log ρ)² of the rest is below τ; applied
    before every other part, which then sees the reduced mask (AReaL masks before its loss)."""
    exp_dtype: str = field(default="input", compare=False)
    """'input': the is= weight's exp in the inputs' dtype; 'float32': in float32 whatever the inputs' dtype, then
    cast back (SkyRL's safe_exp_delta). Rounding only, so two corrections that differ in it alone compare equal
    (as `recipe_for` treats the form parameter of the same name)."""

    def __post_init__(self):
        if self.is_level is not None and self.is_level not in IS_LEVELS:
            raise ValueError(f"Correction.is_level must be one of {list(IS_LEVELS)} or None, got {self.is_level!r}")
        if self.is_mode not in IS_MODES:
            raise ValueError(f"Correction.is_mode must be one of {list(IS_MODES)}, got {self.is_mode!r}")
        for name in ("is_cap", "is_floor"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _number("Correction", name, value, zero_ok=name == "is_floor"))
        if self.is_level is not None and self.is_cap is None and self.is_floor is None:
            raise ValueError(
                "Correction.is_cap and is_floor are both None: an importance weight needs at least one bound "
                "(an unbounded ρ_seq overflows)"
            )
        if self.is_cap is not None and self.is_floor is not None and self.is_floor > self.is_cap:
            raise ValueError(
                f"Correction.is_floor must be <= is_cap, got is_floor={self.is_floor!r} is_cap={self.is_cap!r}"
            )
        if self.exp_dtype not in EXP_DTYPES:
            raise ValueError(f"Correction.exp_dtype must be one of {list(EXP_DTYPES)}, got {self.exp_dtype!r}")
        for name in ("batch_normalize", "clamp_log_ratio", "bypass"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Correction.{name} must be True or False, got {getattr(self, name)!r}")
        rejections = self.rejections
        if isinstance(rejections, Rejection):
            rejections = (rejections,)
        if not isinstance(rejections, (tuple, list)) or not all(isinstance(r, Rejection) for r in rejections):
            raise ValueError(f"Correction.rejections must be a tuple of Rejection, got {self.rejections!r}")
        options = [r.option for r in rejections]
        if len(set(options)) != len(options):
            raise ValueError(f"Correction.rejections names an option twice: {options}")
        # AND is order-free: one canonical order (REJECTION_OPTIONS') makes equal corrections compare equal
        order = REJECTION_OPTIONS.index
        object.__setattr__(self, "rejections", tuple(sorted(rejections, key=lambda r: order(r.option))))
        if self.opsm is not None:
            object.__setattr__(self, "opsm", _number("Correction", "opsm", self.opsm, zero_ok=True))
        if self.filter is not None:
            if not isinstance(self.filter, Filter):
                raise ValueError(f"Correction.filter must be a Filter or None, got {self.filter!r}")
            if self.is_level is not None or self.batch_normalize:
                raise ValueError(
                    "Correction.filter is a behaviour weight of its own: it takes no is= weight or norm beside it "
                    f"(got is_level={self.is_level!r}, batch_normalize={self.batch_normalize!r}); the weight would "
                    "count twice"
                )
            object.__setattr__(self, "clamp_log_ratio", False)  # AReaL's weight is exp of the raw log-ratio
        if self.m2po is not None:
            object.__setattr__(self, "m2po", _number("Correction", "m2po", self.m2po))

    @property
    def active(self) -> bool:
        """False for the empty correction (no weight, no rejection, no mask): the loss is unchanged."""
        return (
            self.is_level is not None
            or bool(self.rejections)
            or self.opsm is not None
            or self.filter is not None
            or self.m2po is not None
        )

    def rejection(self, option: str) -> Rejection | None:
        return next((r for r in self.rejections if r.option == option), None)

    def __str__(self) -> str:
        return correction_string(self)


# ----------------------------------------------------------------------------------------- strings
def _echo(text: str) -> str:
    return repr(text) if len(text) <= MAX_ECHO else f"{text[:MAX_ECHO]!r}... ({len(text)} characters)"


def _float(text: str, what: str, source: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"correction {_echo(source)}: {what} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"correction {_echo(source)}: {what} must be finite, got {text!r}")
    return value


def _band(text: str, what: str, source: str) -> tuple[float | None, float | None]:
    """'C' -> (None, C); 'c_C' -> (c, C); 'c_inf' -> (c, None)."""
    if "_" in text:
        lo, hi = text.split("_", 1)
        upper = None if hi == "inf" else _float(hi, what + " upper bound", source)  # 'c_inf': a floor alone
        return _float(lo, what + " lower bound", source), upper
    return None, _float(text, what, source)


def _is_part(value: str, fields: dict, source: str) -> None:
    level, _, bound = value.partition(":")
    if level not in IS_LEVELS:
        raise ValueError(f"correction {_echo(source)}: is= takes one of {list(IS_LEVELS)}, got {level!r}")
    fields["is_level"] = level
    if not bound:
        return
    kind, eq, band = bound.partition("=")
    if not eq or kind not in ("tis", "mask"):
        raise ValueError(
            f"correction {_echo(source)}: an is= bound is tis=C, tis=c_C, mask=C or mask=c_C; got {bound!r}"
        )
    fields["is_mode"] = "truncate" if kind == "tis" else "mask"
    fields["is_floor"], fields["is_cap"] = _band(band, f"{kind}=", source)


def _rs_part(value: str, source: str) -> Rejection:
    option, sep, threshold = value.partition(":")
    if option not in REJECTION_OPTIONS:
        raise ValueError(f"correction {_echo(source)}: rs= takes one of {list(REJECTION_OPTIONS)}, got {option!r}")
    if not sep:
        raise ValueError(f"correction {_echo(source)}: rs={option} needs a threshold (rs={option}:NUMBER)")
    lower, upper = _band(threshold, f"rs={option} threshold", source)
    if upper is None:
        raise ValueError(f"correction {_echo(source)}: rs={option} needs a finite upper bound, got {threshold!r}")
    if option.endswith("k1") and lower is None:
        lower = 1.0 / upper if upper > 0 else upper  # verl's rule for a bare k1 number; upper <= 0 fails below
    if not option.endswith("k1") and lower is not None:
        raise ValueError(f"correction {_echo(source)}: rs={option} takes one upper bound, not lo_hi ({threshold!r})")
    return Rejection(option, upper, lower)


def _filter_part(value: str, source: str) -> Filter:
    fields = value.split(":")
    level = fields[0]
    seq_weight = "geometric"
    if level == "sequence" and len(fields) == 6 and fields[-1] == "token":
        seq_weight, fields = "token", fields[:-1]
    want = 5 if level == "sequence" else 4
    if level not in IS_LEVELS or len(fields) != want:
        raise ValueError(
            f"correction {_echo(source)}: filter= is token:METRIC:ACTION:BAND or sequence:METRIC:AGG:ACTION:BAND"
            "[:token] "
            f"(METRIC one of {list(FILTER_METRICS)}, AGG one of {list(FILTER_AGGS)}, ACTION one of "
            f"{list(FILTER_ACTIONS)}); got {value!r}"
        )
    metric, action, band = fields[1], fields[-2], fields[-1]
    agg = fields[2] if level == "sequence" else "mean"
    if "_" in band[1:]:  # kl_k1 bounds may be negative: '-0.1_0.1'
        cut = band.index("_", 1)
        lower = _float(band[:cut], "filter= lower bound", source)
        upper = _float(band[cut + 1 :], "filter= upper bound", source)
    else:
        lower, upper = None, _float(band, "filter= bound", source)
    try:
        return Filter(
            level=level, metric=metric, action=action, upper=upper, lower=lower, agg=agg, seq_weight=seq_weight
        )
    except ValueError as exc:
        raise ValueError(f"correction {_echo(source)}: {exc}") from None


def parse_correction(text: str) -> Correction:
    """A `Correction` from its string (module docstring); 'none' or '' is the empty correction."""
    if isinstance(text, Correction):
        return text
    if not isinstance(text, str):
        raise ValueError(f"a correction must be a string or a Correction, got {type(text).__name__}")
    source = text.strip()
    if source in ("", "none"):
        return Correction()
    fields: dict = {}
    rejections: list[Rejection] = []
    for part in source.split("/"):
        key, eq, value = part.partition("=")
        if key == "is" and eq:
            if "is_level" in fields:
                raise ValueError(f"correction {_echo(source)}: is= given twice")
            _is_part(value, fields, source)
        elif key == "rs" and eq:
            rejections.append(_rs_part(value, source))
        elif key == "opsm" and eq:
            fields["opsm"] = _float(value, "opsm=", source)
        elif key == "filter" and eq:
            if "filter" in fields:
                raise ValueError(f"correction {_echo(source)}: filter= given twice")
            fields["filter"] = _filter_part(value, source)
        elif key == "m2po" and eq:
            fields["m2po"] = _float(value, "m2po=", source)
        elif key == "exp_dtype" and eq:
            fields["exp_dtype"] = value
        elif part in ("norm", "noclamp", "bypass") and not eq:
            name = {"norm": "batch_normalize", "noclamp": "clamp_log_ratio", "bypass": "bypass"}[part]
            fields[name] = part != "noclamp"
        else:
            raise ValueError(
                f"correction {_echo(source)}: unknown part {part!r}; parts are is=LEVEL[:tis=C|:mask=c_C], "
                "rs=OPTION:THRESHOLD, norm, opsm=NUMBER, filter=LEVEL:METRIC[:AGG]:ACTION:BAND, m2po=NUMBER, noclamp, "
                "bypass, exp_dtype=float32"
            )
    try:
        return Correction(**fields, rejections=tuple(rejections))
    except ValueError as exc:
        raise ValueError(f"correction {_echo(source)}: {exc}") from None


def correction_string(c: Correction) -> str:
    """The string that `parse_correction` reads back to `c` (floats written with repr, so exactly)."""
    if not isinstance(c, Correction):
        raise ValueError(f"correction_string takes a Correction, got {type(c).__name__}")
    parts = []
    if c.is_level is not None:
        band = (
            repr(c.is_cap)
            if c.is_floor is None
            else f"{c.is_floor!r}_{c.is_cap!r}"
            if c.is_cap is not None
            else f"{c.is_floor!r}_inf"
        )
        parts.append(f"is={c.is_level}:{'tis' if c.is_mode == 'truncate' else 'mask'}={band}")
    parts += [f"rs={r.option}:{r.threshold}" for r in c.rejections]
    if c.batch_normalize:
        parts.append("norm")
    if c.opsm is not None:
        parts.append(f"opsm={c.opsm!r}")
    if c.filter is not None:
        parts.append(f"filter={c.filter}")
    if c.m2po is not None:
        parts.append(f"m2po={c.m2po!r}")
    if not c.clamp_log_ratio and c.filter is None:
        parts.append("noclamp")
    if c.bypass:
        parts.append("bypass")
    if c.exp_dtype != "input" and c.is_level is not None:
        parts.append(f"exp_dtype={c.exp_dtype}")
    return "/".join(parts) or "none"
