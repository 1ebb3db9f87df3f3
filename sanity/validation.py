"""Validation of rollout arrays once read: fields, shapes, dtypes, values; padding of ragged rows.

The output is a `Rollouts` of (B, T) arrays that share one float dtype: float64 when a log-prob field is
float64, else float32 (the dtype `divclip.theory.losses.policy_loss` computes in for float32/bf16/fp16 inputs).
Values under `response_mask = 0` are padding: set to 0 and never checked. Every problem raises
`RolloutFileError` naming the field, the position and what was expected.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from divclip.sanity.errors import RolloutFileError

FIELDS = ("old_log_prob", "log_prob", "advantages", "response_mask", "rollout_log_prob")
ALIASES = {
    # verl's DataProto batch keys (old_log_probs, response_mask, advantages) and TRL's GRPOTrainer tensors
    # (old_per_token_logps, per_token_logps, completion_mask, advantages), read as divclip's fields.
    "old_log_prob": ("old_log_probs", "old_per_token_logps"),
    "log_prob": ("log_probs", "per_token_logps"),
    "advantages": ("advantage",),
    "response_mask": ("completion_mask",),
    # the inference engine's log-probs: verl's rollout_log_probs, TRL's sampling_per_token_logps
    "rollout_log_prob": ("rollout_log_probs", "sampling_per_token_logps"),
}
"""Other names a rollout file may give each field: the engines' own tensor names."""


def field_names(keys) -> dict[str, str]:
    """{divclip field: the file's key for it} for the keys a file has, reading the engines' names (ALIASES);
    a field given under two names is refused (which one is meant is not ours to guess)."""
    out = {}
    for fld in FIELDS:
        found = [k for k in (fld, *ALIASES.get(fld, ())) if k in keys]
        if len(found) > 1:
            raise RolloutFileError(f"rollout file has {fld} twice, as {found}: keep one of them")
        if found:
            out[fld] = found[0]
    return out


def _has(keys) -> str:
    """The keys a file really has, shortened for a message."""
    keys = sorted(str(k) for k in keys)
    shown = ", ".join(keys[:20]) + (f", ... ({len(keys)} keys)" if len(keys) > 20 else "")
    return f"[{shown}]" if keys else "no keys"


REQUIRED = ("old_log_prob", "advantages")  # response_mask is required too, except in ragged files
LOG_PROB_TOLERANCE = 1e-3  # bf16 rounding can leave a log-prob of a near-certain token slightly above 0


MAX_BYTES_CAP = 2**30
"""Upper bound of Limits.max_bytes (1 GiB): a file is read into memory whole."""
MAX_TOKENS_CAP = 2**23
"""Upper bound of Limits.max_tokens (about 8.4 M tokens): the analysis over every measure takes about 150 bytes
and a few microseconds per token, so this keeps one check within about 1.3 GB."""


@dataclass(frozen=True)
class Limits:
    """Size limits, checked before the data they guard is read or allocated (decoded sizes come from the file's
    own metadata: npz headers and uncompressed member sizes, parquet value counts, JSONL line lengths)."""

    max_bytes: int = 512 * 2**20
    """Largest file accepted, and largest decoded payload (npz members, parquet columns); at most 1 GiB."""
    max_tokens: int = 2**22
    """Largest padded batch B·T, and largest number of values in any one field (about 4.2 M tokens, e.g. 1024
    sequences of 4096 tokens; check a slice of a larger batch); at most 2^23."""

    def __post_init__(self):
        for name, cap in (("max_bytes", MAX_BYTES_CAP), ("max_tokens", MAX_TOKENS_CAP)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= cap:
                raise ValueError(f"Limits.{name} must be an integer in [1, {cap}], got {v!r}")


@dataclass
class Rollouts:
    """Validated (B, T) arrays. Log-probs and advantages share one float dtype (float32 or float64)."""

    old_log_prob: np.ndarray
    advantages: np.ndarray
    response_mask: np.ndarray  # same float dtype, values 0/1
    log_prob: np.ndarray | None
    name: str
    format: str
    notes: list = field(default_factory=list)
    rollout_log_prob: np.ndarray | None = None  # the inference engine's log-probs (the third policy), if given

    @property
    def shape(self) -> tuple[int, int]:
        return self.old_log_prob.shape

    @property
    def n_tokens(self) -> int:
        return int(self.response_mask.sum())


def validate(arrays: dict, name: str, fmt: str, ragged: bool, limits: Limits = Limits(), file_keys=None) -> Rollouts:
    """Check fields, shapes, dtypes and values; pad ragged rows; return float (B, T) arrays. `file_keys`: every
    key the file has (for the message when fields are missing)."""
    missing = [k for k in REQUIRED if k not in arrays]
    if not ragged and "response_mask" not in arrays:
        missing.append("response_mask")
    if missing:
        names = "; ".join(f"{k} (or {' / '.join(ALIASES[k])})" for k in missing)
        raise RolloutFileError(
            f"rollout file {name!r} lacks {names}; it has {_has(arrays if file_keys is None else file_keys)} "
            f"(needed: old_log_prob, advantages, response_mask; optional: log_prob; verl's and TRL's tensor names "
            "are read too)"
        )
    notes = []
    if ragged:
        arrays, pad_note = _pad_rows(arrays, name, limits)
        notes.extend(pad_note)
    else:
        arrays = {k: _as_array(v, k, name) for k, v in arrays.items()}
    shape = arrays["old_log_prob"].shape
    if len(shape) != 2 or 0 in shape:
        raise RolloutFileError(f"old_log_prob in {name!r} must be a non-empty (batch, length) array, got shape {shape}")
    if shape[0] * shape[1] > limits.max_tokens:
        raise RolloutFileError(too_many_tokens(name, f"holds {shape[0]}×{shape[1]} tokens", limits))
    for key, arr in arrays.items():
        if key == "advantages" and arr.shape == shape[:1]:
            arrays[key] = np.repeat(arr[:, None], shape[1], axis=1)
            notes.append("advantages are one number per sequence, broadcast over its tokens")
        elif arr.shape != shape:
            raise RolloutFileError(f"{key} in {name!r} has shape {arr.shape} but old_log_prob has shape {shape}")
    mask = _check_mask(arrays["response_mask"], name)
    dtype = (
        np.float64
        if any(arrays[k].dtype == np.float64 for k in ("old_log_prob", "log_prob", "rollout_log_prob") if k in arrays)
        else np.float32
    )
    out = {}
    for key in ("old_log_prob", "log_prob", "advantages", "rollout_log_prob"):
        if key in arrays:
            out[key] = _check_values(arrays[key], key, mask, name, dtype)
    return Rollouts(
        out["old_log_prob"],
        out["advantages"],
        mask.astype(dtype),
        out.get("log_prob"),
        name,
        fmt,
        notes,
        rollout_log_prob=out.get("rollout_log_prob"),
    )


def too_many_tokens(name: str, what: str, limits: Limits) -> str:
    return (
        f"rollout file {name!r} {what}, over the {limits.max_tokens}-token limit (the analysis needs about "
        "150 bytes per token); check a slice of the batch, e.g. its first sequences"
    )


def _as_array(v, key, name) -> np.ndarray:
    if not isinstance(v, np.ndarray):
        raise RolloutFileError(f"{key} in {name!r} is not an array")
    if v.dtype.kind not in "biuf":
        raise RolloutFileError(f"{key} in {name!r} must be numeric, got dtype {v.dtype}")
    if key != "response_mask" and v.dtype.kind != "f":
        raise RolloutFileError(f"{key} in {name!r} must be floating point, got dtype {v.dtype}")
    return v


def _pad_rows(rows: dict, name: str, limits: Limits):
    n = len(rows["old_log_prob"])
    if n == 0:
        raise RolloutFileError(f"rollout file {name!r} has no rows")
    for i, r in enumerate(rows["old_log_prob"]):
        if np.ndim(r) != 1:
            raise RolloutFileError(f"old_log_prob in row {i} of {name!r} must be a list of per-token numbers")
    lengths = np.array([len(r) for r in rows["old_log_prob"]], dtype=np.int64)
    width = int(lengths.max())
    if width == 0:
        raise RolloutFileError(f"old_log_prob in {name!r} has only empty rows")
    if n * width > limits.max_tokens:
        raise RolloutFileError(too_many_tokens(name, f"pads to {n}×{width} tokens", limits))
    out = {}
    for key, vals in rows.items():
        if key == "advantages" and all(np.ndim(v) == 0 for v in vals):
            out[key] = np.asarray(vals, dtype=np.float64)  # one advantage per sequence
            continue
        padded = np.zeros((n, width), dtype=np.float64)
        for i, v in enumerate(vals):
            if np.ndim(v) == 0 or len(v) != lengths[i]:
                got = "a number" if np.ndim(v) == 0 else f"{len(v)} values"
                raise RolloutFileError(f"{key} in row {i} of {name!r} has {got}, old_log_prob has {lengths[i]}")
            padded[i, : lengths[i]] = v
        out[key] = padded
    if "response_mask" not in out:
        out["response_mask"] = (np.arange(width)[None, :] < lengths[:, None]).astype(np.float64)
        notes = ["no response_mask: every listed token counts, padding is masked"]
    else:
        out["response_mask"] = out["response_mask"] * (np.arange(width)[None, :] < lengths[:, None])
        notes = []
    if len(set(lengths.tolist())) > 1:
        notes.append(f"ragged rows (lengths {int(lengths.min())}–{width}) padded with response_mask = 0")
    return out, notes


def _check_mask(mask: np.ndarray, name: str) -> np.ndarray:
    m = mask.astype(np.float64)
    bad = ~((m == 0) | (m == 1))
    if bad.any():
        i = tuple(int(x) for x in np.argwhere(bad)[0])
        raise RolloutFileError(f"response_mask in {name!r} must be 0 or 1, got {mask[i]!r} at {i}")
    if not m.any():
        raise RolloutFileError(f"response_mask in {name!r} selects no tokens (all zero)")
    return m


def _check_values(arr: np.ndarray, key: str, mask: np.ndarray, name: str, dtype) -> np.ndarray:
    inside = mask > 0
    vals = np.where(inside, arr.astype(dtype, copy=False), dtype(0))  # padding is 0, never checked
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(vals)
    if bad.any():
        i = tuple(int(x) for x in np.argwhere(bad)[0])
        kind = "NaN" if np.isnan(vals[i]) else "±inf"
        raise RolloutFileError(
            f"{key} in {name!r} is not finite at {int(bad.sum())} masked token(s), e.g. {kind} at {i}"
        )
    if key != "advantages":
        pos = vals > LOG_PROB_TOLERANCE
        if pos.any():
            i = tuple(int(x) for x in np.argwhere(pos)[0])
            hint = " (these look like probabilities, not log-probabilities)" if (vals[inside] >= 0).all() else ""
            raise RolloutFileError(
                f"{key} in {name!r} must hold log-probabilities <= 0, got {float(vals[i]):g} at {i} "
                f"and {int(pos.sum())} positive value(s) in all{hint}"
            )
    return vals
