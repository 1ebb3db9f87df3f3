"""The torch kernels the loss forms share: PPO's clipped surrogate, the ratios, the exact per-token bounds, the
closed-form gradient, and `PolicyTerms`, what every form's `loss` returns (torch is imported here, and only
imported by a form's `loss` when it runs: `divclip.theory.forms` itself stays torch-free).

Each form's `loss` (one module per form in `divclip.theory.forms`) takes (B, T) tensors log π (differentiable),
log π_old, A, mask and a `ClipSpec`, and returns per-token terms; `policy_loss` validates, aggregates and adds
the diagnostics.

p-independent measures give one scalar (lo, hi) per spec (KL3 by Lambert W), then plain clamps: the same code
as PPO, so KL3 at δ is ratio clipping at the float bounds [l_δ, u_δ] bit for bit. p-dependent measures
(binary KL/TV, p = π_old) evaluate D(r, p) for every token and solve exact float64 bounds: on the CPU only for the
tokens that are clipped, elsewhere for every token (`_compact_on_host`).

No host synchronisation: a form must not read a tensor on the host (`.item()`, `float(t)`, `bool(t)`, `.tolist()`,
a Python `if` on a tensor value, `nonzero` or boolean indexing): on a GPU each is a stream synchronisation, and
`torch.compile(fullgraph=True)` cannot trace it. Select with 0/1 flags, clamp and `torch.where` instead, and
read a spec's float bounds with `ratio_bounds(spec)` (a compile-time constant), not `spec.ratio_bounds()`.
tests/theory/test_loss_nosync.py runs every form's loss on the meta device (where any such read raises)
and compiles it; a form that needs parameters beyond a bare `ClipSpec(form=...)` adds an example there
(`example_specs`). The one exception is the CPU-only compaction of the binary-KL bounds (`_per_token_clip`,
`folded_binary_kl_clip`: one custom op, which a compiled graph calls whole).

Speed: the forms compute the loss value without autograd and attach its known gradient (`_WithGradient`), e.g.
-A·r·∇log π on kept tokens and 0 on clipped ones, and hand that gradient to `policy_loss` (`PolicyTerms.grad`),
whose token-level sums then save mask·grad as the one (B, T) tensor of the backward (`masked_sum_closed_form`).
On CPU each autograd max/clamp/where backward allocates several (B, T) temporaries; compiled, the forward is one
fused pass and the backward one multiply. The hot paths (the clip form's `_interval_clip_mode`, the gated
decisions) keep their decisions bool and select the gradient with `torch.where`, converting to 0/1 float flags
only for the metrics: compiled on a CPU the loss is bound by its arithmetic, and each float flag costs a
conversion and a multiply.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from divclip.theory.bounds import binary_kl_root
from divclip.theory.forms._numpy import LOG_RATIO_CLAMP, SEQ_LOG_RATIO_MAX
from divclip.theory.loss_bounds import binary_kl_root_nosync
from divclip.theory.measures import get_measure

if TYPE_CHECKING:
    from divclip.theory.spec import ClipSpec


# ------------------------------------------------------------------------------------ surrogate pieces
class Surrogate(NamedTuple):
    loss: torch.Tensor  # (B, T) max(-A·r, -A·clip(r)), dual-clipped
    loss_unclipped: torch.Tensor  # (B, T) -A·r
    clipped: torch.Tensor  # (B, T) 1.0 where the clipped branch is strictly larger (gradient 0; verl pg_clipfrac)
    dual: torch.Tensor | None  # (B, T) 1.0 where the dual clip caps the loss (verl vanilla's pg_clipfrac_lower)


@torch.compiler.assume_constant_result
def ratio_bounds(spec: ClipSpec) -> tuple[float, float]:
    """`spec.ratio_bounds()` (floats, solved in numpy), taken as a constant by torch.compile: the forms call this,
    never the method, so that a compiled loss bakes the bounds of its fixed spec into the graph instead of
    tracing the numpy solver (which dynamo cannot)."""
    return spec.ratio_bounds()


def _const(t):
    """t without its autograd history; t itself when it has none (skips an op on the no-grad path)."""
    return t.detach() if t.requires_grad else t


def _flag(compare, a, b):
    """compare(a, b) as 0.0/1.0 in a's dtype (float-valued flags are several times faster than bool on CPU)."""
    return compare(a, b, out=torch.empty_like(a))


def clipped_surrogate(ratio, clipped_ratio, advantages, dual_clip_c=None) -> Surrogate:
    """PPO's per-token loss max(-A·r, -A·clip(r)), and for A < 0 at most -A·c (dual clip). Shapes (B, T).

    Plain autograd: differentiate it and the gradient is -A·∇r on unclipped tokens and 0 on clipped ones.
    """
    neg_adv = -advantages  # (B, T)
    loss_unclipped = neg_adv * ratio  # -A·r
    loss_clipped = neg_adv * clipped_ratio  # -A·clip(r)
    loss = torch.maximum(loss_unclipped, loss_clipped)  # the pessimistic (larger-loss) branch
    clipped = _flag(torch.gt, _const(loss_clipped), _const(loss_unclipped))
    dual = None
    if dual_clip_c is not None:
        cap = neg_adv * dual_clip_c  # -A·c
        dual = _flag(torch.gt, _const(loss), _const(cap)).mul_(_flag(torch.lt, _const(advantages), 0.0))
        loss = torch.lerp(loss, cap, dual)  # exactly where(A < 0, min(loss, cap), loss), without a slow where
    return Surrogate(loss, loss_unclipped, clipped, dual)


def clip_loss_with_bounds(ratio, advantages, lo, hi, dual_clip_c=None) -> Surrogate:
    """`clipped_surrogate` with clip(r) = clamp(r, lo, hi); lo, hi scalars or per-token (B, T) tensors."""
    if isinstance(lo, torch.Tensor) or isinstance(hi, torch.Tensor):
        lo = torch.as_tensor(lo, dtype=ratio.dtype, device=ratio.device)
        hi = torch.as_tensor(hi, dtype=ratio.dtype, device=ratio.device)
    return clipped_surrogate(ratio, torch.clamp(ratio, lo, hi), advantages, dual_clip_c)


class _WithGradient(torch.autograd.Function):
    """`value` (computed without autograd) whose derivative with respect to log_prob is `coef`, elementwise.

    Autograd through max/clamp/where costs several (B, T) temporaries per op on the way back; the gradient
    of a clipped loss is known in closed form (docs/theory.md §1), so the loss modes hand it over directly.

    Replaces autograd through each form's plain expression. Held equal to it by the tests that differentiate
    the plain form: tests/theory/test_losses.py (test_gradient_rule_matches_autograd_with_dual_clip_and_saturated_
    log_ratios, test_sapo_and_cispo_gradients_match_their_formulas), the engine parity tests (verl's and TRL's own
    functions differentiated by autograd: tests/theory/test_losses_verl.py, test_losses_verl_atlas.py,
    test_losses_trl.py), tests/theory/test_forms_published.py (each paper's equation) and
    tests/theory/test_atlas.py (every token-level form's numpy weight).
    """

    @staticmethod
    def forward(ctx, log_prob, value, coef):
        ctx.save_for_backward(coef)
        return value

    @staticmethod
    def backward(ctx, grad):
        (coef,) = ctx.saved_tensors
        return grad * coef, None, None


class _MaskedSumWithGradient(torch.autograd.Function):
    """Σ mask·value (a masked token sum of a loss form's per-token value), whose derivative with respect to
    log_prob is mask·grad, `grad` being the form's closed-form derivative (`PolicyTerms.grad`).

    The same numbers as `(_WithGradient(log_prob, value, grad) * mask).sum()` (for a 0/1 mask the backward's
    (g·mask)·grad and g·(grad·mask) are the same floats), with one (B, T) tensor saved instead of two: the
    backward reads mask·grad once and writes the gradient, where autograd through the product reads the
    mask and the derivative. That pass is most of what a compiled loss costs beyond its forward.

    Replaces autograd through `aggregate`'s plain masked sum of `terms.loss`; held equal to it (loss and gradient,
    torch.equal, every form with a closed-form gradient) by tests/theory/test_loss_fast_paths.py::
    test_closed_form_masked_sum_equals_autograd_through_the_terms (test_the_closed_form_sum_saves_one_tensor: what
    it saves).
    """

    @staticmethod
    def forward(ctx, log_prob, value, grad, mask):
        ctx.save_for_backward(grad * mask)
        return (value * mask).sum()

    @staticmethod
    def backward(ctx, g):
        (masked_grad,) = ctx.saved_tensors
        return g * masked_grad, None, None, None


class _SequenceMeanGradient(torch.autograd.Function):
    """`value` (B, T), whose derivative in log π is the chain rule through a sequence mean (the clip form's
    `seq_grad_mean`, GSPO as OpenRLHF and slime differentiate it): for the upstream u, each unmasked token gets
    (Σ_t u_t·grad_t) / rows, `grad` being the per-token ∂value/∂s·s and `rows` the (B, 1) token counts (>= 1).
    Held equal to OpenRLHF's and slime's own autograd through the mean by tests/engines/test_parity_openrlhf.py
    and test_parity_slime.py (with slime's TIS weights as the upstream too)."""

    @staticmethod
    def forward(ctx, log_prob, value, grad, mask, rows):
        ctx.save_for_backward(grad, mask, rows)
        return value

    @staticmethod
    def backward(ctx, upstream):
        grad, mask, rows = ctx.saved_tensors
        per_row = torch.sum(upstream * grad, dim=-1, keepdim=True) / rows  # (B, 1)
        return per_row * mask, None, None, None, None


def masked_sum_closed_form(terms: PolicyTerms, log_prob, mask):
    """Σ mask·terms.loss with its gradient from `terms.grad` (`_MaskedSumWithGradient`); terms.grad must be set."""
    return _MaskedSumWithGradient.apply(log_prob, terms.loss.detach(), terms.grad, mask)


def _in_range(x, lo: float, hi: float):
    """0/1 flags of lo <= x <= hi (0 for NaN), in x's dtype. Always computed: skipping them when every entry is
    in range would need a host read of min/max, a stream synchronisation on a GPU."""
    return _flag(torch.ge, x, lo).mul_(_flag(torch.le, x, hi))


def exp_float32(spec) -> bool:
    """True where the spec's ratio is exp in float32 whatever the input dtype (`exp_dtype` = 'float32', SkyRL)."""
    return spec.param("exp_dtype", "input") == "float32"


def _exp(log_ratio, exp32: bool):
    """exp(log r): in its dtype, or with exp32 in float32 and cast back (SkyRL's safe_exp_delta)."""
    return log_ratio.to(torch.float32).exp().to(log_ratio.dtype) if exp32 else log_ratio.exp()


def ratio_gradient(advantages, log_ratio, exp32: bool, ratio=None):
    """−A·r, the gradient of −A·r in log π (a token-sum upstream of 1): with exp32 the product autograd forms through
    a float32 exp, fp32(−A)·exp32(log r) rounded in float32, then cast back (SkyRL's value, bit for bit); else
    −(A·ratio) in the input's dtype. `log_ratio` is the log r the exp took (clamped where the spec clamps)."""
    if exp32:
        return torch.mul(advantages.to(torch.float32), log_ratio.to(torch.float32).exp()).neg_().to(advantages.dtype)
    return torch.mul(advantages, ratio).neg_()


@torch.no_grad()
def _token_ratio(log_prob, old_log_prob, clamp: bool = True, exp32: bool = False):
    """(log r clamped to ±20 as verl, r, 0/1 flags of |log r| <= 20): the clamp stops the gradient.
    clamp=False (TRL): r = exp(log r) unclamped, flags None; the log r returned (for the metrics) is clamped.

    With clamp=True the flags are always a tensor (they were None when no entry was clamped, before the loss
    became sync-free: deciding that read the host; `if in_range is not None` in a caller still works)."""
    raw = log_prob - old_log_prob  # (B, T)
    log_ratio = raw.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    if not clamp:
        return log_ratio, (_exp(raw, True) if exp32 else raw.exp_()), None
    in_range = _flag(torch.eq, log_ratio, raw)  # |log r| <= 20; 0 for NaN, as _in_range, in one pass
    return log_ratio, _exp(log_ratio, exp32), in_range


@torch.no_grad()
def _sequence_ratio(log_prob, old_log_prob, mask, clamp: bool = True):
    """GSPO (verl `gspo`): s = exp(mean_t log r) per sequence, used for every token. verl writes it as
    sg[s]·π_θ/sg[π_θ], whose gradient is s·∇log π per token; clamped at log s <= 10 as verl (clamp=False: not
    clamped, as TRL's sequence-level importance sampling). Returns (token log r clamped to ±20, s as a stride-0
    (B, T) view of its (B, 1) column (`sequence_column`), (B, 1) flags of log s <= 10 or None)."""
    log_ratio = log_prob - old_log_prob  # (B, T)
    seq_lengths = torch.sum(mask, dim=-1).clamp(min=1)  # (B,)
    seq_log_ratio = (torch.sum(log_ratio * mask, dim=-1) / seq_lengths).unsqueeze(-1)  # (B, 1) log s
    # the ratio is one (B, 1) column seen as (B, T) (stride 0): forms and metrics work on the column where they can
    if not clamp:
        ratio = seq_log_ratio.exp_().expand_as(log_ratio)
        return log_ratio.clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP), ratio, None
    in_range = _in_range(seq_log_ratio, -math.inf, SEQ_LOG_RATIO_MAX)
    ratio = torch.exp(torch.clamp(seq_log_ratio, max=SEQ_LOG_RATIO_MAX)).expand_as(log_ratio)
    log_ratio.clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # token log r, for the metrics only
    return log_ratio, ratio, in_range


def sequence_column(t):
    """The (B, 1) column of a (B, T) tensor that holds one value per row by construction (a stride-0 view, as
    `_sequence_ratio`'s ratio, or any (B, 1) tensor: with T = 1 the expand is the tensor itself), else None. A
    layout test, no host read of values."""
    if t.dim() != 2 or t.shape[-1] == 0:
        return None
    return t[:, :1] if t.shape[-1] == 1 or t.stride(-1) == 0 else None


def _ratio(spec: ClipSpec, log_prob, old_log_prob, mask):
    """`_token_ratio` or, at level='sequence', `_sequence_ratio`, clamped as `spec.param("clamp_log_ratio")` says,
    exp in float32 where `exp_dtype` says (token level)."""
    if spec.level == "sequence":
        return _sequence_ratio(log_prob, old_log_prob, mask, spec.param("clamp_log_ratio"))
    return _token_ratio(log_prob, old_log_prob, spec.param("clamp_log_ratio"), exp_float32(spec))


def _binary_kl_bound(delta: float, p, side: int):
    return binary_kl_root(torch.full_like(p, delta), p, torch, side=side)  # the same solver as the numpy bounds


def _binary_tv_bound(delta: float, p, side: int):
    return (1.0 - delta / p).clamp_(min=0.0) if side < 0 else 1.0 + delta / p


# One root of D(r, p) = δ per entry, float64 torch in and out: side -1 gives lo < 1, side +1 gives hi > 1.
_TORCH_BOUNDS: dict[str, Callable] = {"binary_kl": _binary_kl_bound, "binary_tv": _binary_tv_bound}


@torch.no_grad()
def _divergence(spec: ClipSpec, ratio, old_log_prob, log_prob=None):
    """D(r, p) per token for a p-dependent measure, p = π_old(a) kept below 1 (log p rounds to 0 for sure
    tokens); in the input's dtype, on its device. Returns (D, p).

    With `log_prob` given, binary KL is evaluated from the two log-probabilities themselves,
    p·(log p - log q) + (1-p)·(log(1-p) - log(1-q)) with log(1-q) = log(-expm1(log q)): no ratio is formed, so no
    clamp or overflow enters the decision, and a new probability of exactly 1 gives D = ∞ (the exact KL; verl's
    +1e-8 makes it finite there, the one deliberate difference, tests/theory/test_losses_verl.py)."""
    if spec.measure_name == "binary_kl":
        return _binary_kl_divergence(ratio, old_log_prob, log_prob)
    p = old_log_prob.exp().clamp_(max=1.0 - torch.finfo(old_log_prob.dtype).eps)
    return get_measure(spec.measure)._value(ratio, p, torch), p


def _binary_kl_divergence(ratio, old_log_prob, log_prob=None, xp=torch):
    """`_divergence` of binary KL: (D, p), from the log-probabilities where `log_prob` is given, else from r;
    torch tensors, or numpy arrays with xp=np (the host solve of `binary_kl_clip_signed`), in their dtype."""
    eps = float(xp.finfo(old_log_prob.dtype).eps)
    p = xp.exp(old_log_prob)
    p = xp.where(p > 1.0 - eps, 1.0 - eps, p)  # p kept below 1 (NaN stays NaN)
    if log_prob is not None:
        em1 = xp.expm1(old_log_prob)
        log_1mp = xp.log(-xp.where(em1 > -eps, -eps, em1))
        with np.errstate(divide="ignore", invalid="ignore") if xp is np else contextlib.nullcontext():
            log_1mq = xp.log(-xp.expm1(log_prob))  # -inf at q = 1, NaN above
        return p * (old_log_prob - log_prob) + (1.0 - p) * (log_1mp - log_1mq), p
    return get_measure("binary_kl")._value(ratio, p, xp), p


@torch.no_grad()
def _true_ratio(log_prob, old_log_prob):
    """exp(log π - log π_old) without verl's ±20 clamp: the clip decision must see the real divergence (a token
    at p = e^-30 that rose to 0.9 has r = e^29.9; clamped to e^20 its binary KL would look small). The exp may
    overflow to inf or underflow to 0, which every D and comparison below handles (D = inf, r > hi, r < lo)."""
    return (log_prob - old_log_prob).exp_()


HOST_COMPACTION_DEVICES = ("cpu",)  # where the exact-bound solve may pick its tokens on the host (see below)


def _compact_on_host(t) -> bool:
    """Whether the p-dependent bounds may be solved for the clipped tokens only (nonzero + index + a solver that
    drops converged entries). On the CPU those host reads cost nothing and skip most of the float64 work (six
    Newton steps of float64 expm1/log1p for every token otherwise); on an accelerator each is a stream
    synchronisation, and torch.compile cannot trace them, so there every token is solved with a fixed number of
    Newton steps (`divclip.theory.loss_bounds`). The two agree within 4 ulps (float64) per bound.

    The compaction is the fast path, replacing the every-token solve on the CPU; held equal to it (within those
    4 ulps) by tests/theory/test_loss_nosync.py::test_sync_free_bounds_agree_with_host_compaction and
    test_sync_free_roots_are_exact_to_4_ulps."""
    return t.device.type in HOST_COMPACTION_DEVICES and not torch.compiler.is_compiling()


def _bounds_where(spec: ClipSpec, p64, up):
    """Per token (float64), the upper bound where `up`, the lower one elsewhere, without host synchronisation."""
    if spec.measure_name == "binary_kl":
        return binary_kl_root_nosync(spec.delta, p64, up)
    solve = _TORCH_BOUNDS[spec.measure_name]
    return torch.where(up, solve(spec.delta, p64, +1), solve(spec.delta, p64, -1))


@torch.no_grad()
def _decision_ratio(spec: ClipSpec, ratio, log_prob, old_log_prob):
    """The ratio a clip decision compares with the bounds: verl's clamped `ratio` where that cannot change a
    decision (every D and bound test below agrees on it), else `_true_ratio` (one more exp per token).

    Out of the clamp (|log r| > 20) the clamped ratio is e^±20: beyond any p-independent bound inside
    [e^-19, e^19], and on the same side of 1. Binary KL evaluates D from the log-probs and only asks r > 1.

    Replaces `_true_ratio` where it cannot change a decision; the decisions are held to verl's, which always
    decides on the true ratio, by tests/theory/test_losses_verl.py::test_gated_decides_on_the_true_log_ratio_like_verl
    and test_gated_kl3_decides_on_the_true_ratio.
    """
    if spec.level == "sequence" or not spec.param("clamp_log_ratio"):
        return ratio  # the sequence ratio (verl's gspo decides on its clamped value), or already unclamped
    if spec.p_dependent:
        clamped_ok = spec.measure_name == "binary_kl"
    else:
        lo, hi = ratio_bounds(spec)
        clamped_ok = math.exp(-19.0) < lo and hi < math.exp(19.0)
    return ratio if clamped_ok else _true_ratio(log_prob, old_log_prob)


# ------------------------------------------------------------- binary-KL bounds solved on the host (CPU)
CANDIDATE_SLACK = 1e-3
"""`_binary_kl_candidates` keeps every token whose χ² bound exceeds δ·(1 − CANDIDATE_SLACK): far more than the
rounding of D or of the bound in float32 (a few ulps, ~1e-6 relative), so no token with a computed D > δ is left out."""

_NEAR_ONE_ULPS = 16
"""`_binary_kl_candidates` keeps every token whose new probability bound p̄·r is within this many ulps of 1: there
1 − p̄·r loses its digits to cancellation (D is large there: χ²/D grows without bound as π_θ → 1)."""


def _binary_kl_candidates(spec: ClipSpec, ratio, old_log_prob):
    """A superset of the tokens whose binary KL exceeds δ, from a bound cheap enough to fuse into the loss's pass:
    D = KL(p‖q) <= χ²(p‖q) = (p − q)²/(q(1 − q)) = p(1 − r)²/(r(1 − p·r)), q = p·r, which grows with p, so any
    p̄ >= p may stand for p. p̄ = 1/P with P = 1 + t + t²/2 + t³/6 + t⁴/24, t = −log p >= 0 (the Taylor sum of
    e^t, all of whose terms are >= 0, is below e^t): no exp and no division. Multiplied through by P > 0, D > δ needs
    (1 − r)² > δ·r·(P − r). Tokens whose ratio is clamped (|log r| > 19 here, verl clamps at 20: their D is
    evaluated on the log-probs), whose p̄·r is within `_NEAR_ONE_ULPS` of 1 or above it, whose log π_old is above 0,
    or with a NaN are candidates too. Near r = 1 χ² ≈ 2D, so the candidates are about the tokens with D > δ/2
    (0.4% of bench_loss's tokens).

    Replaces the χ² test on p = exp(log π_old), one exp per token more (the same 7,846 candidates of bench_loss's
    2M tokens); held a superset of the every-token decision by tests/theory/test_binary_kl_host_solve.py."""
    t = old_log_prob.neg()
    big_p = 1.0 + t * (1.0 + t * (0.5 + t * (1.0 / 6.0 + t * (1.0 / 24.0))))  # <= e^t for t >= 0
    threshold = spec.delta * (1.0 - CANDIDATE_SLACK)
    below_one = 1.0 - _NEAR_ONE_ULPS * torch.finfo(ratio.dtype).eps
    inside = ((1.0 - ratio).square() <= threshold * ratio * (big_p - ratio)) & (ratio < below_one * big_p)
    # (a <= b) & ... is False on NaN; the log-ratio test reads r (e^19 = 1.8e8, e^-19 = 5.6e-9): no log per token
    inside = inside & (t >= 0.0) & (ratio < math.exp(19.0)) & (ratio > math.exp(-19.0))
    return ~inside


def _signed_candidates(spec: ClipSpec, ratio, old_log_prob):
    """(signed, flags): what `binary_kl_clip_signed` reads and rewrites. `signed` is r with its sign bit set on the
    candidates (`_binary_kl_candidates`; r >= 0 or NaN, so the bit is free), `flags` one byte per token, 1 on the
    same candidates: the op finds its few thousand tokens in the 2 MiB byte map, eight at a time (`_flagged`),
    where a scan of the sign bits read 8 MiB and cost more than the rest of the op; the sign then tells the op's
    rewrite which tokens it has not decided yet. Compiled, the flags are stored as where(c, 1.0, 0.0) in uint8,
    which inductor stores at vector width (a bool tensor, or where(c, 1, 0) through int64, it stores one lane at a
    time: 5.2 and 2.8 ms more for bench_loss's 2M tokens); eager, the bool test is viewed as bytes."""
    candidates = _binary_kl_candidates(spec, ratio, old_log_prob)
    if torch.compiler.is_compiling():
        flags = torch.where(candidates, 1.0, 0.0).to(torch.uint8)
    else:
        flags = candidates.view(torch.uint8)
    return torch.where(candidates, ratio.neg(), ratio).contiguous(), flags


def _flagged(flags: np.ndarray) -> np.ndarray:
    """np.flatnonzero of a 1-D array of 0/1 bytes, in order, read as 64-bit words: only the words with a flag are
    looked into (numpy's nonzero on the bytes visits each one: 3 ms for 2M of them, this 0.25 ms at 0.4% set)."""
    flags = np.ascontiguousarray(flags).view(np.uint8)
    head = flags.size - flags.size % 8
    words = flags[:head].view(np.uint64)
    hit = np.flatnonzero(words != 0)  # (W,) the words with at least one flag
    rows, cols = np.nonzero(words[hit].view(np.uint8).reshape(-1, 8))  # bytes in memory order, whatever the endianness
    found = hit[rows] * 8 + cols
    tail = np.flatnonzero(flags[head:]) + head
    return np.concatenate([found, tail]) if tail.size else found


@torch.library.custom_op("divclip::binary_kl_clip_signed", mutates_args=("signed",))
def binary_kl_clip_signed(
    signed: torch.Tensor,
    flags: torch.Tensor,
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor | None,
    delta: float,
    clamp: bool,
    from_log_probs: bool,
    fold: bool,
) -> None:
    """Decides the candidate tokens of `signed` (`_signed_candidates`: r, sign bit set on the candidates) exactly
    and rewrites them in place; the candidates are where `flags` (bool or 0/1 uint8) is set, as their sign bits
    are. CPU tensors of one shape, `signed` contiguous.

    A candidate is past the budget where D > δ (`_binary_kl_divergence` on the candidate's log-probabilities with
    from_log_probs, else on r = |signed|: the decisions of the every-token path, to the bit), and where
    `advantages` is given, moved by its own A, (r − 1)·A > 0. Its bound is the upper root hi(p) where r > 1, the
    lower lo(p) elsewhere (`binary_kl_root_nosync`'s Newton steps in float64, within 4 ulps of the exact roots,
    rounded to the dtype).
    * fold=False: a candidate past the budget becomes −bound, every other token keeps its value, so |signed| is
      the clipped ratio (clip(r) where D > δ, r elsewhere).
    * fold=True (the clip form's fast path; `advantages` given): |signed| is the ratio the token's loss −A·|signed|
      takes, and the sign bit says its gradient is dropped. A candidate is clipped where its bound makes the loss
      strictly larger (A·bound < A·r, as `clipped_surrogate` decides): −bound. One that is not keeps r, negative
      where log π − log π_old is outside verl's ±20 clamp or NaN (with clamp: the clamp stops its gradient),
      positive elsewhere. Every such token is a candidate, so the sign says it for every token.

    This is the host compaction of `_per_token_clip` as one op that `torch.compile` calls whole (its nonzero would
    break a graph), so that a compiled loss on the CPU solves the clipped tokens only. The candidates are a few
    thousand: D is evaluated in pieces of `_SERIAL_CHUNK` and the roots in numpy, because torch would spread each
    of those small ops over its threads, which on a loaded machine waits milliseconds per op for them to wake."""
    if fold and advantages is None:
        raise ValueError("binary_kl_clip_signed: fold=True decides the clip form's tokens by their A: pass advantages")
    flat = signed.view(-1).numpy()
    idx = _flagged(flags.reshape(-1).numpy())  # (K,) the candidates
    if not idx.size:
        return
    r = -flat[idx]  # (K,) the candidates' ratios, as the loss formed them
    with np.errstate(all="ignore"):
        if advantages is None:
            sel, r_sel = idx, r  # every candidate may be clipped
        else:
            adv = advantages.reshape(-1).numpy()[idx]
            moved = np.flatnonzero((r - 1.0) * adv > 0)  # positions in idx of the tokens their A pushes outwards
            sel, r_sel, adv = idx[moved], r[moved], adv[moved]
        olds, lps = (t.reshape(-1).numpy()[sel] for t in (old_log_prob, log_prob))
        which, p = [], []
        for start in range(0, sel.size, _SERIAL_CHUNK):  # torch's own ops, so D is `_divergence`'s to the bit
            piece = slice(start, start + _SERIAL_CHUNK)
            old, lp = torch.from_numpy(olds[piece]), torch.from_numpy(lps[piece])
            ratio = torch.from_numpy(r_sel[piece])
            divergence, p_piece = _binary_kl_divergence(ratio, old, lp if from_log_probs else None)
            which.append(~(divergence <= delta))  # NaN from a log-prob above 0 is outside the budget, as in verl
            p.append(p_piece)
        which, p = (torch.cat(x).numpy() if len(x) > 1 else x[0].numpy() if x else np.empty(0) for x in (which, p))
        w = np.flatnonzero(which)  # positions in sel of the tokens past the budget
        bound = binary_kl_root_nosync(delta, p[w].astype(np.float64), r_sel[w] > 1, xp=np).astype(r.dtype)
        if not fold:
            flat[sel[w]] = -bound
            return
        clipped = adv[w] * bound < adv[w] * r_sel[w]  # -A·bound > -A·r: the clipped branch is strictly larger
        out = r  # every candidate that is not clipped keeps r, with its sign set where outside the clamp
        if clamp:
            maybe = np.flatnonzero(~((r < math.exp(19.0)) & (r > math.exp(-19.0))))  # |log r| > 19 or NaN
            raw = log_prob.reshape(-1).numpy()[idx[maybe]] - old_log_prob.reshape(-1).numpy()[idx[maybe]]
            outside = maybe[~(np.abs(raw) <= LOG_RATIO_CLAMP)]
            out[outside] = -r[outside]
        flat[idx] = out
        flat[sel[w[clipped]]] = -bound[clipped]


@binary_kl_clip_signed.register_fake
def _(signed, flags, old_log_prob, log_prob, advantages, delta, clamp, from_log_probs, fold):
    return None


_SERIAL_CHUNK = 32768
"""`binary_kl_clip_signed` evaluates D in pieces of this many entries: ATen's vectorised math runs a piece that
small on the calling thread (`at::internal::GRAIN_SIZE`, 32768, its parallel grain), so no op waits for the thread
pool to wake."""


def host_solves_bounds(spec: ClipSpec, ratio) -> bool:
    """Whether the binary-KL bounds go to `binary_kl_clip_signed` (eager and compiled alike): on the CPU while it is
    a host-compaction device (`HOST_COMPACTION_DEVICES`): its host reads cost nothing there, and it computes in
    numpy."""
    return spec.measure_name == "binary_kl" and ratio.device.type == "cpu" and "cpu" in HOST_COMPACTION_DEVICES


@torch.no_grad()
def folded_binary_kl_clip(spec: ClipSpec, ratio, old_log_prob, log_prob, advantages):
    """The clip form's binary-KL clip on the CPU (`host_solves_bounds`), decided whole: (B, T) `signed`, whose
    |signed| is the ratio of each token's loss −A·|signed| (its bound where clipped, r elsewhere) and whose sign bit
    is set where the gradient is dropped (clipped, or outside verl's ±20 log-ratio clamp).
    `binary_kl_clip_signed` with fold=True; compiled, one fused pass forms r and the candidates, the op rewrites the
    candidates, and the loss's pass reads this one tensor where it read the bounds, r, log π and log π_old.

    Replaces the clipped ratio of `_per_token_clip` and verl's clamp flag there; held equal to it (loss, gradient,
    flags) by tests/theory/test_loss_fast_paths.py::test_interval_fast_path_equals_the_general_clip and
    tests/theory/test_binary_kl_host_solve.py."""
    signed, flags = _signed_candidates(spec, ratio, old_log_prob)
    binary_kl_clip_signed(
        signed, flags, old_log_prob, log_prob, advantages, float(spec.delta), spec.param("clamp_log_ratio"), True, True
    )
    return signed


@torch.no_grad()
def _per_token_clip(spec: ClipSpec, ratio, old_log_prob, advantages, true_ratio=None, log_prob=None, ratio_from=None):
    """clip(r) with exact per-token bounds where D > δ and, where `advantages` is given, the token is moved by its
    own A ((r − 1)·A > 0: only a token pushed past a bound by its A is clipped), else r.

    A clipped token with r > 1 gets its upper root hi(p), one with r < 1 its lower root lo(p). D is evaluated
    on `true_ratio` (the unclamped ratio) when given, from the log-probabilities where `log_prob` is given; the
    value clipped is `ratio`. `ratio_from`, the log π that `ratio` was formed from (token level, as
    `_token_ratio`), lets binary KL on the CPU take the fast path: a fused χ² test picks candidates and
    `binary_kl_clip_signed` decides them exactly and solves the clipped ones, compiled too. Otherwise see
    `_compact_on_host` for which tokens are solved.
    """
    if ratio_from is not None and host_solves_bounds(spec, ratio) and (log_prob is not None or true_ratio is None):
        signed, flags = _signed_candidates(spec, ratio, old_log_prob)
        binary_kl_clip_signed(
            signed,
            flags,
            old_log_prob,
            ratio_from,
            advantages,
            float(spec.delta),
            spec.param("clamp_log_ratio"),
            log_prob is not None,
            False,
        )
        return signed.abs()
    select = None if advantages is None else (ratio - 1.0) * advantages > 0
    divergence, p = _divergence(spec, ratio if true_ratio is None else true_ratio, old_log_prob, log_prob)
    which = ~(divergence <= spec.delta)  # NaN from a log-prob above 0 is outside the budget, as in verl
    if select is not None:
        which &= select
    if not _compact_on_host(ratio):
        bound = _bounds_where(spec, p.double(), ratio > 1)  # (B, T) float64, every token
        return torch.where(which, bound.to(ratio.dtype), ratio)
    idx = which.reshape(-1).nonzero().squeeze(1)  # (K,) flat indices of the tokens to clip
    if idx.numel() == 0:
        return ratio
    r, p64 = ratio.reshape(-1)[idx], p.reshape(-1)[idx].double()  # (K,)
    up = r > 1
    bound = torch.empty_like(p64)
    solve = _TORCH_BOUNDS[spec.measure_name]
    if bool(up.any()):
        bound[up] = solve(spec.delta, p64[up], +1)
    if not bool(up.all()):
        bound[~up] = solve(spec.delta, p64[~up], -1)
    clipped_ratio = ratio.clone(memory_format=torch.contiguous_format)
    clipped_ratio.view(-1)[idx] = bound.to(ratio.dtype)
    return clipped_ratio


# ---------------------------------------------------------------------------------------------- forms
class PolicyTerms(NamedTuple):
    """Per-token terms of the policy loss, all (B, T) in the compute dtype (`divclip.theory.losses.policy_terms`).

    The flags are 0.0/1.0 floats, not yet masked; they are None where the loss form has no such bound (sapo has
    no hard clip; only form 'clip' with dual_clip_c has a dual clip)."""

    loss: torch.Tensor  # (B, T) per-token loss, differentiable in log_prob
    log_ratio: torch.Tensor | None  # (B, T) token log r clamped to ±20, for ppo_kl and kl3
    ratio: torch.Tensor | None  # (B, T) the ratio the loss used (the sequence ratio at level='sequence': a
    # stride-0 view of one (B, 1) column). A form whose loss uses no ratio (gpg) may leave both None: they are the
    # token ratio then, filled in by `policy_terms` and, only when metrics are asked, by `policy_loss`
    # (`with_token_ratio`); `clip_stats` takes ratio None as exp(log_ratio) without forming it.
    clipped: torch.Tensor | None  # (B, T) 1.0 where a bound changed this token's term
    clipped_low: torch.Tensor | None  # (B, T) 1.0 where that bound was the lower one
    dual: torch.Tensor | None = None  # (B, T) 1.0 where the dual clip capped the loss
    by_part: tuple | None = None  # intersections: per part, (low, high) 0/1 flags of the tokens that part clipped
    grad: torch.Tensor | None = None  # (B, T) ∂loss/∂log π in closed form (detached), where the form knows it:
    # its loss is then `_WithGradient(log_prob, value, grad)`, and `policy_loss` takes a token-level masked sum's
    # gradient straight from it (`masked_sum_closed_form`)

    @property
    def clipped_high(self) -> torch.Tensor | None:
        """(B, T) 1.0 where the upper bound changed the token's term (clipped and not by the lower bound)."""
        return None if self.clipped is None else self.clipped - self.clipped_low


@torch.no_grad()
def with_token_ratio(terms: PolicyTerms, log_prob, old_log_prob, ratio: bool = True) -> PolicyTerms:
    """`terms` with log_ratio (clamped to ±20) filled in where the form left it None, and with ratio = its exp when
    `ratio` (clip_stats needs only the log-ratio: it takes ratio None as exp(log_ratio))."""
    if terms.log_ratio is None:
        terms = terms._replace(log_ratio=(log_prob - old_log_prob).clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    if ratio and terms.ratio is None:
        terms = terms._replace(ratio=terms.log_ratio.exp())
    return terms


def part_bounds(part: ClipSpec, old_log_prob):
    """(lo, hi) of one p-free or p-dependent ClipSpec: floats, or (B, T) float64 tensors for p = π_old."""
    if not part.p_dependent:
        return ratio_bounds(part)
    p = old_log_prob.double().exp().clamp_(max=1.0 - torch.finfo(torch.float64).eps)
    if part.measure_name == "binary_kl" and not _compact_on_host(p):
        return (
            binary_kl_root_nosync(part.delta, p, torch.zeros_like(p, dtype=torch.bool)),
            binary_kl_root_nosync(part.delta, p, torch.ones_like(p, dtype=torch.bool)),
        )
    solve = _TORCH_BOUNDS[part.measure_name]
    return solve(part.delta, p, -1), solve(part.delta, p, +1)


@torch.no_grad()
def intersection_bounds(spec, old_log_prob):
    """([max lo], [min hi], [(lo_i, hi_i) per part]) of an `AllOf`; tensors (B, T) float64 where a part
    depends on p, floats otherwise."""
    each = [part_bounds(part, old_log_prob) for part in spec.parts]
    lo, hi = each[0]
    for lo_i, hi_i in each[1:]:
        lo = (
            max(lo, lo_i)
            if not isinstance(lo, torch.Tensor) and not isinstance(lo_i, torch.Tensor)
            else torch.maximum(torch.as_tensor(lo, dtype=torch.float64), torch.as_tensor(lo_i, dtype=torch.float64))
        )
        hi = (
            min(hi, hi_i)
            if not isinstance(hi, torch.Tensor) and not isinstance(hi_i, torch.Tensor)
            else torch.minimum(torch.as_tensor(hi, dtype=torch.float64), torch.as_tensor(hi_i, dtype=torch.float64))
        )
    return lo, hi, each


def _intersection_clip(spec, ratio, old_log_prob):
    """The clipped ratio of an `AllOf`, and per part the (low, high) flags of the clipped tokens whose binding
    bound is that part's (ties count for every tied part)."""
    lo, hi, each = intersection_bounds(spec, old_log_prob)
    as_t = lambda b: torch.as_tensor(b, dtype=ratio.dtype, device=ratio.device)  # noqa: E731
    lo_t, hi_t = as_t(lo), as_t(hi)
    clipped_ratio = torch.minimum(torch.maximum(ratio, lo_t), hi_t)
    return clipped_ratio, each, lo, hi


@torch.no_grad()
def _by_sign(pos, neg, when_pos, when_neg):
    """(B, T): `when_pos` where pos, `when_neg` where neg, 0 elsewhere; pos, neg disjoint 0/1 (B, T) flags, the
    values (B, 1) per sequence and finite, so that x·1 + y·0 is exactly x."""
    return torch.mul(pos, when_pos).addcmul_(neg, when_neg)


# --------------------------------------------------------------------- pieces of several forms
@torch.no_grad()
def _metric_ratio(log_prob, old_log_prob):
    """(log r clamped to ±20, r) for the diagnostics (ppo_kl, kl3, ratio_*), without a host read."""
    log_ratio = (log_prob - old_log_prob).clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T)
    return log_ratio, log_ratio.exp()


@torch.no_grad()
def _clamped_ratio(log_prob, old_log_prob):
    """(log r clamped to ±20, r, in_range): in_range is 1.0 where |log r| <= 20, where dr/d log π = r."""
    log_ratio = log_prob - old_log_prob  # (B, T)
    in_range = _flag(torch.le, log_ratio.abs(), LOG_RATIO_CLAMP)
    log_ratio.clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return log_ratio, log_ratio.exp(), in_range


def _signs(advantages):
    """(1.0 where A > 0, 1.0 where A < 0), each (B, T)."""
    return _flag(torch.gt, advantages, 0.0), _flag(torch.lt, advantages, 0.0)


def _p_free_bounds(spec):
    if spec.p_dependent:
        raise ValueError(
            f"form {spec.form!r} clips with one scalar interval: it needs a p-independent measure, "
            f"got measure={spec.measure_name!r}"
        )
    return ratio_bounds(spec)  # a compile-time constant under torch.compile


def _ppo_terms(log_prob, log_ratio, ratio, in_range, advantages, lo, hi, dual_c=None) -> PolicyTerms:
    """PPO's clipped surrogate at bounds lo, hi (floats, 0-d or (B, T) tensors), with an optional dual clip:
    the loss of the clip form, gradient −A·r on kept tokens and 0 on clipped ones."""
    with torch.no_grad():
        sur = clip_loss_with_bounds(ratio, advantages, lo, hi, dual_c)
        keep = (1.0 - sur.clipped).mul_(in_range)  # (B, T)
        if sur.dual is not None:
            keep.sub_(sur.dual * in_range)
        grad = sur.loss_unclipped * keep  # d(−A·r)/d log π = −A·r where kept
        clipped_low = _flag(torch.lt, advantages, 0.0).mul_(sur.clipped)
    loss = _WithGradient.apply(log_prob, sur.loss, grad)
    return PolicyTerms(loss, log_ratio, ratio, sur.clipped, clipped_low, sur.dual, grad=grad)
