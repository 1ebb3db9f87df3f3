"""divclip's divergence clipping inside TRL 1.16's GRPOTrainer.

    from divclip.trainer.integrations.trl import DivClipGRPOConfig, DivClipGRPOTrainer
    args = DivClipGRPOConfig(output_dir="out", clip_measure="kl3", epsilon=0.2, num_iterations=2, ...)
    DivClipGRPOTrainer(model=..., reward_funcs=..., args=args, train_dataset=...).train()

`DivClipGRPOTrainer._compute_loss` is TRL's, with one line replaced: the per-token loss is divclip's
`divclip.theory.losses` clip form for `ClipSpec(clip_measure, clip_delta)` instead of TRL's ratio clamp. Everything
around it is TRL's: the log-prob forward, the reference KL term (k3, optional bias correction), the entropy
and off-policy masks, vLLM importance weights, and the normalisation of each `loss_type` (grpo, bnpo,
dr_grpo, dapo), including gradient-accumulation scaling. Metrics keep TRL's names (clip_ratio/low_mean,
clip_ratio/high_mean, clip_ratio/region_mean, ...), now counting divclip's bounds, plus divclip/kl3.
With clip_measure='ratio' the loss is TRL's, bit for bit, at any log-ratio: like TRL, the plug-in never clamps log r
before exp (the form parameter `clamp_log_ratio=False`; tests/trainer/test_trainer_trl.py). A `clip_method` string
is taken as written: add '/noclamp' for TRL's unclamped ratio there too.

`clip_measure` defaults to 'ratio', TRL's own clip (epsilon / epsilon_high): switching from GRPOConfig changes
nothing until a measure is chosen. Warnings (the codes `divclip check` reports) are logged once when the trainer
is built: `epsilon_high` set under a divergence measure (ignored: the upper bound follows from δ), a budget that
is GRPO's default width 0.2 or at the scale of a ratio width, a clip that cannot bind, and an on-policy setup
(TRL's default num_iterations=1 with steps_per_generation = gradient_accumulation_steps: the ratio is identically
1, so no clip has any effect).

`clip_method` takes any method string instead (`divclip.theory.spec`): an intersection
('kl3:0.023144&binary_tv:0.2', per-part clip fractions logged as divclip/clipfrac_{low,high}_part{i}) or an
adaptive δ ('kl3@clipfrac=0.1'). The adaptive controller steps after every training-mode loss computation (each
micro-batch, so `gradient_accumulation_steps` times per optimizer step) from the signal reduced over all
processes (so every rank holds the same δ): the clip fraction (clip_ratio/region_mean), the per-token k3 of
π_θ against π_old, or the mean token entropy. δ is logged as divclip/delta and saved with every checkpoint
(checkpoint-N/divclip_delta.json), and restored by `train(resume_from_checkpoint=...)`.

Not supported (a ValueError at construction): loss types other than the four above, sequence-level
importance sampling, and the entropy bonus (entropy_coef / use_adaptive_entropy).
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass, field

import torch
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import nanmax, nanmin

from divclip.engines import advice
from divclip.engines import trl as engine
from divclip.theory.adaptive import DeltaController
from divclip.theory.conversions import delta_for_eps
from divclip.theory.losses import ClipSpec, policy_terms
from divclip.theory.measures import MEASURES, get_measure
from divclip.theory.spec import is_adaptive, parse_method

CONTROLLER_FILE = "divclip_delta.json"

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
_MODEL_INPUTS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


@dataclass
class DivClipGRPOConfig(GRPOConfig):
    """GRPOConfig plus the divergence measure and its budget δ."""

    clip_measure: str = field(
        default="ratio",
        metadata={
            "help": "Divergence measure of the clip (a theory.MEASURES name). 'ratio' (the default) is TRL's "
            "own clip with epsilon / epsilon_high; 'kl3' is ATR-GRPO."
        },
    )
    clip_delta: float | None = field(
        default=None,
        metadata={
            "help": "Budget δ of D(r[, p]) <= δ. None derives it from `epsilon` as δ = D(1 - epsilon), so "
            "the lower bound stays GRPO's 1 - epsilon (KL3, epsilon 0.2: δ = 0.023144, upper bound "
            "1.2308). Required for p-dependent measures (binary_kl, binary_tv). TRL's own `delta` "
            "(the two-sided clip cap) is a different knob and maps to divclip's dual clip."
        },
    )

    clip_method: str | None = field(
        default=None,
        metadata={
            "help": "A divclip method string instead of clip_measure/clip_delta: e.g. 'kl3:0.02', an "
            "intersection 'kl3:0.023144&binary_tv:0.2' or an adaptive δ 'kl3@clipfrac=0.1' "
            "(grammar: divclip.theory.spec). Modes clip/gated/cispo; put a dual clip in it as "
            "'/dual=C'."
        },
    )

    def __post_init__(self):
        super().__post_init__()
        if self.clip_method is not None:
            if (
                self.clip_measure != "ratio"
                or self.clip_delta is not None
                or self.delta is not None
                or self.epsilon_high is not None
            ):
                raise ValueError(
                    f"clip_method={self.clip_method!r} replaces clip_measure/clip_delta, epsilon_high "
                    f"and TRL's delta; got clip_measure={self.clip_measure!r}, "
                    f"clip_delta={self.clip_delta!r}, epsilon_high={self.epsilon_high!r}, "
                    f"delta={self.delta!r} (leave them at their defaults; dual clip: '/dual=C'; "
                    "`epsilon` is ignored too)"
                )
            try:
                spec = parse_method(self.clip_method)
            except ValueError as exc:
                raise ValueError(f"clip_method: {exc}") from None
            if spec.form == "sapo" or spec.level != "token":
                raise ValueError(
                    f"clip_method={self.clip_method!r}: DivClipGRPOTrainer runs token-level clip, "
                    f"gated or cispo forms, got form={spec.form!r}, level={spec.level!r}"
                )
            return
        if self.clip_measure not in MEASURES:
            raise ValueError(f"clip_measure must be one of {sorted(MEASURES)}, got {self.clip_measure!r}")
        if self.clip_measure == "ratio" and self.clip_delta is not None:
            raise ValueError(
                f"clip_measure='ratio' uses epsilon/epsilon_high, so clip_delta must be None, got {self.clip_delta!r}"
            )
        if self.clip_delta is not None and not (
            isinstance(self.clip_delta, (int, float)) and math.isfinite(self.clip_delta) and self.clip_delta > 0
        ):
            raise ValueError(f"clip_delta must be None or a finite number > 0, got {self.clip_delta!r}")
        if self.clip_delta is None and get_measure(self.clip_measure).p_dependent:
            raise ValueError(
                f"clip_measure={self.clip_measure!r} depends on p = π_old(a): give clip_delta "
                f"explicitly, got clip_delta=None"
            )
        self.clip_spec()  # fail now on a bad combination

    def clip_spec(self) -> ClipSpec:
        """The divclip ClipSpec these arguments describe (an `AdaptiveSpec` holds its starting δ)."""
        if self.clip_method is not None:
            return parse_method(self.clip_method)
        c = self.delta  # TRL's two-sided clip: clamp r at `delta`; for A < 0 that is the dual clip at c = delta
        # TRL exponentiates the raw log-ratio (no ±20 clamp as verl): clamp_log_ratio=False keeps its arithmetic
        if self.clip_measure == "ratio":
            high = self.epsilon_high if self.epsilon_high is not None else self.epsilon
            return ClipSpec(
                "ratio", eps_low=self.epsilon, eps_high=high, params={"dual_clip_c": c, "clamp_log_ratio": False}
            )
        delta = self.clip_delta
        if delta is None:
            delta = delta_for_eps(self.clip_measure, eps_low=self.epsilon)
        return ClipSpec(self.clip_measure, delta=delta, params={"dual_clip_c": c, "clamp_log_ratio": False})

    def divclip_advice(self) -> list[advice.Advice]:
        """The warnings these arguments deserve (logged once by DivClipGRPOTrainer; `divclip check` gives the same)."""
        return engine.plugin_advice(
            self.clip_measure,
            self.clip_delta,
            self.epsilon_high,
            self.num_iterations,
            self.steps_per_generation,
            self.gradient_accumulation_steps,
        )


logger = logging.getLogger("divclip.trl")


class DivClipGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer whose clipped surrogate is divclip's (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        a = self.args
        if not isinstance(a, DivClipGRPOConfig):
            raise ValueError(f"args must be a DivClipGRPOConfig, got {type(a).__name__}")
        if a.loss_type not in LOSS_TYPES:
            raise ValueError(f"DivClipGRPOTrainer supports loss_type in {list(LOSS_TYPES)}, got {a.loss_type!r}")
        if a.importance_sampling_level != "token":
            raise ValueError(
                f"DivClipGRPOTrainer supports importance_sampling_level='token' only, got "
                f"{a.importance_sampling_level!r}"
            )
        if self._entropy_bonus_enabled:
            raise ValueError(
                f"DivClipGRPOTrainer does not support the entropy bonus, got entropy_coef="
                f"{a.entropy_coef!r}, use_adaptive_entropy={a.use_adaptive_entropy!r}"
            )
        self.clip_spec = a.clip_spec()
        for item in a.divclip_advice():
            logger.warning(item.log_line())
        self.delta_controller = DeltaController(self.clip_spec) if is_adaptive(self.clip_spec) else None

    def _step_spec(self):
        return self.clip_spec if self.delta_controller is None else self.delta_controller.spec_for(0)

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.delta_controller is not None and self.args.should_save:
            folder = os.path.join(self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}")
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, CONTROLLER_FILE), "w", encoding="utf-8") as fh:
                json.dump(self.delta_controller.state_dict(), fh)

    def _load_rng_state(self, checkpoint):
        super()._load_rng_state(checkpoint)
        if self.delta_controller is not None and checkpoint is not None:
            path = os.path.join(checkpoint, CONTROLLER_FILE)
            if not os.path.isfile(path):
                raise ValueError(
                    f"checkpoint {checkpoint!r} has no {CONTROLLER_FILE}, but clip_method "
                    f"{self.args.clip_method!r} adapts δ: resume from a checkpoint this method wrote"
                )
            with open(path, encoding="utf-8") as fh:
                self.delta_controller.load_state_dict(json.load(fh))

    def _compute_loss(self, model, inputs):
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        logits_to_keep = completion_ids.size(1)
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]  # (B, T)
        per_token_logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            **{k: inputs.get(k) for k in _MODEL_INPUTS},
        )  # (B, T)
        entropy_mask = None
        if self.top_entropy_quantile < 1.0:
            entropy_mask = self.get_high_entropy_mask(entropies, mask, 1 - self.top_entropy_quantile)
        advantages = inputs["advantages"]
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(1)
        old_per_token_logps = inputs.get("old_per_token_logps")
        old_per_token_logps = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
        if self.off_policy_mask_threshold is not None:
            off_policy_mask = self.get_off_policy_mask(
                advantages=advantages,
                per_token_logps=per_token_logps,
                sampling_per_token_logps=inputs.get("sampling_per_token_logps", old_per_token_logps),
                mask=mask,
                off_policy_threshold=self.off_policy_mask_threshold,
            )

        # divclip: the clipped surrogate max(-A·r, -A·clip(r)) with clip(r) from D(r[, p]) <= δ.
        spec = self._step_spec()
        terms = policy_terms(per_token_logps, old_per_token_logps, advantages.expand_as(per_token_logps), mask, spec)
        per_token_loss = terms.loss  # (B, T)

        if self.beta != 0.0:
            ref_per_token_logps = inputs["ref_per_token_logps"]
            log_ref_ratio = ref_per_token_logps - per_token_logps
            per_token_kl = torch.exp(log_ref_ratio) - log_ref_ratio - 1
            if self.args.use_bias_correction_kl:
                per_token_kl = per_token_kl * torch.exp(per_token_logps - old_per_token_logps)
        if self.off_policy_mask_threshold is not None:
            per_token_loss = per_token_loss * off_policy_mask
        if entropy_mask is not None:
            per_token_loss = per_token_loss * entropy_mask
        if self.use_vllm and self.vllm_importance_sampling_correction:
            per_token_loss = per_token_loss * inputs["importance_sampling_ratio"]
        if self.beta != 0.0:
            per_token_loss = per_token_loss + self.beta * per_token_kl

        mode = "train" if self.model.training else "eval"
        loss = self._normalise(per_token_loss, mask, inputs, mode)
        if self.aux_loss_enabled:
            normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            loss = loss + self.router_aux_loss_coef * aux_loss / normalizer
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather_for_metrics(aux_loss).mean().item())
        low, high = terms.clipped_low, terms.clipped_high  # (B, T) 0/1: the lower / upper bound changed the term
        signals = self._log_metrics(
            mode, low, high, terms.log_ratio, mask, entropies, per_token_kl if self.beta != 0.0 else None, terms.by_part
        )
        if self.delta_controller is not None:
            self._metrics[mode]["divclip/delta"].append(float(spec.delta))
            if mode == "train":
                self.delta_controller.update(signals[self.delta_controller.signal])
        return loss

    def _normalise(self, per_token_loss, mask, inputs, mode):
        """TRL 1.16's aggregation of each loss_type, gradient-accumulation scaling included."""
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        if self.loss_type == "grpo":
            return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / accumulation
        if self.loss_type == "bnpo":
            return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0) / accumulation
        if self.loss_type == "dr_grpo":
            return (per_token_loss * mask).sum() / (per_token_loss.size(0) * self.max_completion_length) / accumulation
        # dapo: normalise by the generation batch's token count, split over processes and accumulation windows
        normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
        if mode == "train":
            normalizer = normalizer * self.current_gradient_accumulation_steps / self.args.steps_per_generation
        return (per_token_loss * mask).sum() / normalizer

    def _log_metrics(self, mode, low, high, log_ratio, mask, entropies, per_token_kl, by_part=None) -> dict:
        """Log TRL's metrics plus divclip's; returns the controller signals (reduced over processes)."""

        def global_masked_mean(x):
            local = torch.stack([(x * mask).sum(), mask.sum().float()])
            totals = self.accelerator.reduce(local, reduction="sum")
            return (totals[0] / totals[1].clamp(min=1.0)).item()

        def seq_mean(x):
            return (x * mask).sum(-1) / mask.sum(-1)

        m = self._metrics[mode]
        if per_token_kl is not None:
            m["kl"].append(global_masked_mean(per_token_kl))
        entropy = global_masked_mean(entropies)
        region = global_masked_mean(torch.maximum(low, high))
        m["entropy"].append(entropy)
        m["clip_ratio/low_mean"].append(global_masked_mean(low))
        m["clip_ratio/high_mean"].append(global_masked_mean(high))
        m["clip_ratio/region_mean"].append(region)
        for i, (low_i, high_i) in enumerate(by_part or ()):
            m[f"divclip/clipfrac_low_part{i}"].append(global_masked_mean(low_i))
            m[f"divclip/clipfrac_high_part{i}"].append(global_masked_mean(high_i))
        m["clip_ratio/low_min"].append(nanmin(self.accelerator.gather(seq_mean(low))).item())
        m["clip_ratio/high_max"].append(nanmax(self.accelerator.gather(seq_mean(high))).item())
        with torch.no_grad():
            kl3 = global_masked_mean(torch.expm1(log_ratio) - log_ratio)  # r - 1 - log r >= 0
        m["divclip/kl3"].append(kl3)
        return {"clipfrac": region, "kl3": kl3, "entropy": entropy}
