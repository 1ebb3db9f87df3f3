"""The one catalogue of named methods: each a method string with its label, sources, loss aggregation and note.

Every list of methods divclip shows derives from `METHODS`:

* the presets of the method-string grammar (`divclip.theory.spec.PRESETS`: `grpo`, `dapo`, `atr`, `dppo_kl`,
  `dppo_tv`, `gspo`, `sapo`) are the entries with `preset=True`, in `PRESET_ORDER`; their method strings are
  written in the base grammar (a measure and its budget), so a preset name and its string are one spec;
* the atlas's rows (`divclip.theory.atlas`, `divclip atlas`) are every entry, then each declared form no entry
  uses, at its `Form.example`;
* the names of the published ratio clips (`divclip.theory.method_names.RATIO_METHODS`: GRPO, DAPO, GSPO) and the
  method each built-in measure stands for (`Measure.method`: ratio GRPO, kl3 ATR-GRPO, binary_kl DPPO-Binary-KL,
  ...) are the labels of the presets;
* the clip explorer's presets (`divclip.app.presets`) are labelled and sized from the presets here.

Adding a method is one `Method(...)` in the tuple below (docs/CONTRIBUTING.md, "Adding a method");
tests/test_method_catalogue.py checks that nothing else defines one. Torch-free, and it imports nothing of divclip
but the aggregation names (the measures and the method-string parser read it); a method's family is its form's
(the atlas's rows, `divclip.theory.atlas.atlas_row`, give it).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from divclip.theory.agg_modes import LOSS_AGG_MODES

__all__ = ["METHODS", "PRESET_ORDER", "Method", "declare_method", "measure_method", "preset_methods"]


@dataclass(frozen=True)
class Method:
    """A named method: a method string with the loss aggregation and the sources it comes from."""

    name: str
    """'grpo', 'verl:vanilla', 'trl:dapo', 'dcpo'... (what `divclip atlas --methods` takes)"""
    method: str
    """the method string (`divclip.theory.spec.parse_method`); a preset's is in the base grammar (no preset name)"""
    sources: tuple[str, ...]
    """'arXiv:2402.03300', 'verl:vanilla', 'trl:grpo'"""
    agg: str | None = None
    """the loss_agg_mode the engine or paper uses; None: not fixed by the method"""
    note: str = ""
    label: str = ""
    """the method's name in prose and figures ('ATR-GRPO'); empty: `name`"""
    preset: bool = False
    """True: `name` is a preset of the method-string grammar (`divclip.theory.spec.PRESETS`)"""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or "," in self.name or self.name != self.name.strip():
            raise ValueError(f"Method.name must be a non-empty comma-free name, got {self.name!r}")
        if self.agg is not None and self.agg not in LOSS_AGG_MODES:
            raise ValueError(f"Method.agg must be None or one of {list(LOSS_AGG_MODES)}, got {self.agg!r}")
        if not isinstance(self.sources, tuple) or not self.sources:
            raise ValueError(f"Method.sources must be a non-empty tuple of strings, got {self.sources!r}")
        if not self.label:
            object.__setattr__(self, "label", self.name)


_TRL_CISPO = (
    "TRL clamps the IS weight above only, at its ε_high (ScaleRL's ε_max, 5.0 recommended in TRL's "
    "GRPOConfig doc): ratio:1:4 is the cap r <= 5 with no lower bound"
)

_CATALOGUE = (
    Method("grpo", "ratio:0.2:0.2", ("arXiv:2402.03300", "trl:grpo"), "seq-mean-token-mean", label="GRPO", preset=True),
    Method(
        "dapo",
        "ratio:0.2:0.28",
        ("arXiv:2503.14476",),
        "token-mean",
        "clip-higher ε 0.2/0.28, token-mean",
        label="DAPO",
        preset=True,
    ),
    Method("dual_clip", "grpo/dual=3", ("arXiv:1912.09729",), None, "dual clip c = 3 on A < 0", label="dual clip"),
    # ATR-GRPO: the KL3 budget whose lower bound is 1 - GRPO's ε_low, δ = KL3(0.8) = 0.023144 (docs/theory.md §2):
    # a bare 'kl3' is that δ, so the method strings 'atr' and 'kl3' are one spec
    Method(
        "atr", "kl3", ("arXiv:2602.05494",), None, "KL3 budget with GRPO's lower bound", label="ATR-GRPO", preset=True
    ),
    Method(
        "gspo",
        "ratio:0.0003:0.0004/seq",
        ("arXiv:2507.18071", "verl:gspo"),
        "seq-mean-token-mean",
        "sequence ratio",
        label="GSPO",
        preset=True,
    ),
    Method("cispo", "ratio:0.2:0.2/cispo", ("arXiv:2506.13585", "verl:cispo"), "token-mean", label="CISPO"),
    Method(
        "sapo",
        "ratio/sapo",
        ("arXiv:2511.20347", "verl:sapo", "trl:sapo"),
        "seq-mean-token-mean",
        label="SAPO",
        preset=True,
    ),
    # DPPO (arXiv 2602.04879, verl dppo_*): verl reuses its PPO width (default 0.2) as δ; 0.05 for binary KL and
    # 0.2 for binary TV are the values validated in SkyRL's DPPO port. The TIS cap is verl's in-code fallback 20
    # ("a large threshold is recommended"); an ActorConfig's default cap is 3.
    Method(
        "dppo_kl",
        "binary_kl:0.05/gated/tis=20",
        ("arXiv:2602.04879", "verl:dppo_kl"),
        "token-mean",
        label="DPPO-Binary-KL",
        preset=True,
    ),
    Method(
        "dppo_tv",
        "binary_tv:0.2/gated/tis=20",
        ("arXiv:2602.04879", "verl:dppo_tv"),
        "token-mean",
        label="DPPO-Binary-TV",
        preset=True,
    ),
    Method("verl:vanilla", "grpo/dual=3", ("verl:vanilla",), "token-mean", "verl's default dual-clip cap c = 3"),
    Method("trl:dapo", "grpo", ("trl:dapo",), "token-mean", "TRL's ε_high defaults to its ε (0.2)"),
    Method("trl:bnpo", "grpo", ("trl:bnpo",), "token-mean", "token mean over the local batch"),
    Method("trl:dr_grpo", "grpo", ("arXiv:2503.20783", "trl:dr_grpo"), "seq-mean-token-sum-norm"),
    Method("trl:cispo", "ratio:1:4/cispo", ("trl:cispo",), "token-mean", _TRL_CISPO),
    # verl's own defaults (actor.yaml): ratio width 0.2, loss_agg_mode token-mean
    Method("verl:gpg", "ratio/gpg", ("arXiv:2504.02546", "verl:gpg"), "token-mean"),
    Method(
        "verl:dro",
        "ratio/dro",
        ("arXiv:2405.19107", "verl:dro"),
        "token-mean",
        "verl requires policy_loss.dro_beta; β = 0.05 here",
    ),
    Method(
        "verl:clip_cov", "ratio:0.2:0.2/clip_cov", ("arXiv:2505.22617", "verl:clip_cov"), "token-mean", label="Clip-Cov"
    ),
    Method("verl:kl_cov", "ratio/kl_cov", ("arXiv:2505.22617", "verl:kl_cov"), "token-mean", label="KL-Cov"),
    Method(
        "verl:geo_mean",
        "ratio/geo_mean/gmpo_eps_low=0.2/gmpo_eps_high=0.2",
        ("arXiv:2507.20673", "verl:geo_mean"),
        None,
        "verl's default width 0.2 as log-space widths; the mean over sequences whatever loss_agg_mode says",
        label="GMPO",
    ),
    Method(
        "verl:bypass_ppo_clip",
        "grpo/dual=3",
        ("verl:bypass_mode",),
        "token-mean",
        "its PPO-clip branch: vanilla on the rollout log-probs",
    ),
    Method(
        "verl:bypass_reinforce_token",
        "ratio/reinforce_is",
        ("verl:bypass_mode",),
        "token-mean",
        "REINFORCE, IS weight per token, threshold 2",
    ),
    Method(
        "verl:bypass_reinforce_sequence",
        "ratio/reinforce_seq_is",
        ("verl:bypass_mode",),
        "token-mean",
        "REINFORCE, IS weight per sequence, threshold 2",
    ),
)

_METHODS: dict[str, Method] = {m.name: m for m in _CATALOGUE}
METHODS = MappingProxyType(_METHODS)
"""{name: Method}, read-only, in catalogue order; `declare_method` adds to it."""

PRESET_ORDER = ("grpo", "dapo", "atr", "dppo_kl", "dppo_tv", "gspo", "sapo")
"""The order of the presets in `divclip.theory.spec.PRESETS` (every `preset=True` entry, once)."""


def declare_method(method: Method) -> Method:
    """Add a named method to the catalogue (its method string is parsed when a row is built). A preset is declared
    here in the tuple above, not at run time: `PRESETS` is built once."""
    if not isinstance(method, Method):
        raise ValueError(f"declare_method takes a Method, got {method!r}")
    if method.preset:
        raise ValueError(f"Method {method.name!r}: presets are the catalogue's own entries (theory/methods.py)")
    _METHODS[method.name] = method
    return method


def preset_methods() -> list[Method]:
    """The preset entries, in `PRESET_ORDER`."""
    return [_METHODS[name] for name in PRESET_ORDER]


def measure_method(measure_name: str) -> str | None:
    """The label of the first preset whose method string is built on `measure_name` (ratio: GRPO, kl3: ATR-GRPO,
    binary_kl: DPPO-Binary-KL), or None: what the measure stands for (`Measure.method`)."""
    for m in preset_methods():
        if m.method.split("/")[0].split(":")[0] == measure_name:
            return m.label
    return None


if sorted(PRESET_ORDER) != sorted(m.name for m in _CATALOGUE if m.preset):
    raise RuntimeError("PRESET_ORDER must list every preset of the catalogue once")
