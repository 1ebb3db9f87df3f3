"""The GRPO-family trainer: sample G completions per prompt, score, group advantages, μ clipped epochs.

One RL step (CleanRL order, every tensor (N, T) with N = prompts_per_step·G, T = longest completion):
  1. sample      G completions per prompt with `generate` (pure sampling at `temperature`), by the current
                 policy, or with `staleness` k > 0 by the policy after step s-1-k (a frozen copy; the warm start
                 while s-1-k < 0), as an asynchronous trainer's rollouts lag k updates behind
  2. score       reward 1/0 from the task's verifier; A = group_advantages(R, G) broadcast over tokens
  3. freeze      old log-probs log π_old under the sampler (and log π_ref for the KL penalty) in one no-grad forward
  4. update      μ epochs x `minibatches` AdamW steps on theory.policy_loss(log π, log π_old, A, mask, spec)
                 + kl_coef·agg(k(π, π_ref)), gradient norm clipped
Randomness at step s comes only from seeds derived from (seed, s), so a run resumed from a checkpoint at step
s continues exactly as the uninterrupted run would (on the same device and thread count).
"""

from __future__ import annotations

import copy
import os
import shutil
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from divclip.theory.adaptive import DeltaController
from divclip.theory.advantages import group_advantages
from divclip.theory.loss_metrics import kl_penalty
from divclip.theory.losses import ClipSpec, agg_loss, policy_loss
from divclip.theory.spec import is_adaptive
from divclip.trainer.checkpoint import (
    check_output_dir,
    check_resumable,
    latest_checkpoint,
    load_checkpoint,
    load_extra_state,
    load_warm_start,
    quiet_saving,
    save_checkpoint,
    say,
    set_aside,
    stale_temporaries,
    verify_checkpoint,
    write_manifest,
)
from divclip.trainer.config import TrainerConfig
from divclip.trainer.puzzles import PUZZLE_ALPHABET
from divclip.trainer.rollout import autocast, completion_mask, decode, encode_prompts, sample, token_log_probs
from divclip.trainer.runlog import MetricsLog, Progress, jsonl_text
from divclip.trainer.sft import warm_start
from divclip.trainer.tasks import Task, load_task
from divclip.trainer.tiny import ARITH_ALPHABET, TEXT_ALPHABET, char_tokenizer, tiny_gpt2

EVAL_BATCH = 512
PASS_K_STREAM = 500_009  # pass@k sampling's torch seed offset, apart from the RL steps' seeds
# What a shared warm start must agree on with the run that loads it (everything the warm start depends on).
WARM_START_FIELDS = (
    "model",
    "task",
    "arith_digits",
    "eval_size",
    "tiny_n_layer",
    "tiny_n_embd",
    "tiny_n_head",
    "sft_steps",
    "sft_batch_size",
    "sft_lr",
    "max_grad_norm",
    "max_new_tokens",
    "temperature",
    "pass_k",
    "seed",
    "bf16",
)
_MEAN_KEYS = ("clipfrac", "clipfrac_low", "clipfrac_high", "dual_clipfrac", "ppo_kl", "kl3", "ratio_mean")


@dataclass
class TrainResult:
    history: list[dict]
    """One row per step; row 0 is the warm start (sft/*, eval/* before RL)."""
    output_dir: str | None

    @property
    def accuracy_before(self) -> float | None:
        return self.history[0].get("eval/accuracy") if self.history else None

    @property
    def accuracy_after(self) -> float | None:
        return self.history[-1].get("eval/accuracy") if self.history else None


def resolve_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but CUDA is not available here; use device='cpu' or 'auto'")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def build_model(cfg: TrainerConfig, task: Task):
    """(model, tokenizer): the tiny GPT-2 + char tokenizer, or a local Hugging Face directory."""
    if cfg.model == "tiny":
        alphabet = {"arith": ARITH_ALPHABET, "mult": PUZZLE_ALPHABET, "countdown": PUZZLE_ALPHABET}
        tokenizer = char_tokenizer(alphabet.get(cfg.task, TEXT_ALPHABET))
        longest = max(len(e.prompt) for e in task.train + task.eval)  # one token per character
        # the warm start trains on answer + EOS, which may be longer than a sampled completion
        answer = max(len(str(e.answer)) for e in task.train + task.eval) + 1 if cfg.sft_steps else 0
        model = tiny_gpt2(
            len(tokenizer),
            cfg.tiny_n_layer,
            cfg.tiny_n_embd,
            cfg.tiny_n_head,
            n_positions=longest + max(cfg.max_new_tokens, answer) + 1,
            seed=cfg.seed,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        return model, tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(cfg.model)
    if tokenizer.pad_token_id is None:  # common for base models; completions are masked after EOS anyway
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=torch.float32)
    return model, tokenizer


def _step_seed(seed: int, step: int) -> int:
    return seed * 1_000_003 + step


class GRPOTrainer:
    """Runs `TrainerConfig`: optional warm start, then `steps` GRPO-family steps with any ClipSpec."""

    def __init__(
        self, config: TrainerConfig, model=None, tokenizer=None, task: Task | None = None, spec: ClipSpec | None = None
    ):
        """`model`/`tokenizer`/`task` replace what config.model/config.task would build; `spec`, any ClipSpec
        (a custom Measure, form, level, tis_cap, ...), replaces config.clip_spec(). A spec given here is not
        recorded in checkpoints: resume with the same one."""
        if not isinstance(config, TrainerConfig):
            raise ValueError(f"config must be a TrainerConfig, got {type(config).__name__}")
        if (model is None) != (tokenizer is None):
            raise ValueError("pass both model and tokenizer, or neither (then config.model is loaded)")
        if spec is not None and not isinstance(spec, ClipSpec):
            raise ValueError(f"spec must be a theory.losses.ClipSpec or None, got {type(spec).__name__}")
        self.cfg = config
        self.spec = spec or config.clip_spec()
        # The task (and a JSONL file's every line) is checked before any model is built.
        self.task = task or load_task(
            config.task, arith_digits=config.arith_digits, eval_size=config.eval_size, seed=config.seed
        )
        self.device = resolve_device(config.device)
        if model is None:
            model, tokenizer = build_model(config, self.task)
        if tokenizer.eos_token_id is None or tokenizer.pad_token_id is None:
            raise ValueError("tokenizer must define eos_token and pad_token (set pad_token = eos_token if unsure)")
        self.model = model.to(self.device).eval()  # eval(): no dropout, so π_old and π_θ are one function
        self.tokenizer = tokenizer
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=config.lr, betas=config.adam_betas, weight_decay=config.weight_decay
        )
        self.ref_model = None
        self.step = 0
        # Adaptive δ ('kl3@clipfrac=0.1'): the controller sets each step's δ; its state rides in checkpoints.
        self.controller = DeltaController(self.spec) if is_adaptive(self.spec) else None
        # staleness k > 0: the k policies before the current one, oldest first, as (step after which, frozen
        # model); the oldest samples the next rollout. Set after the warm start or from a checkpoint.
        self.stale_policies: deque | None = None

    # ------------------------------------------------------------------------------------------ run
    def train(self, on_step=None) -> TrainResult:
        """Resume or warm-start, then RL until `steps`; `on_step(row)` is called after each step is saved."""
        threads = torch.get_num_threads()
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        try:
            return self._train(on_step)
        finally:
            torch.set_num_threads(threads)

    def prepare(self) -> list[dict]:
        """Resume from output_dir, or run (or load) the warm start and save it as checkpoint 0; returns the
        history so far. `train` calls it first; alone it makes a warm start that runs can share
        (`warm_start_from`)."""
        threads = torch.get_num_threads()
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        try:
            return self._prepare()
        finally:
            torch.set_num_threads(threads)

    def _prepare(self) -> list[dict]:
        cfg, out = self.cfg, self.cfg.output_dir
        history = self._resume() if out is not None else None
        if history is None:
            history = [self._warm_start()]
            self._init_stale_policies()
            if out is not None:  # the warm start is minutes of work on a real model: keep it
                save_checkpoint(
                    out,
                    0,
                    self.model,
                    self.tokenizer,
                    self.optimizer,
                    history,
                    cfg.to_dict(),
                    cfg.keep_checkpoints,
                    extra=self._extra_state(),
                )
        return history

    def _train(self, on_step) -> TrainResult:
        cfg, out = self.cfg, self.cfg.output_dir
        history = self._prepare()
        log = MetricsLog(out, history)
        progress = Progress(cfg.steps, self.step, cfg.progress)
        try:
            while self.step < cfg.steps:
                self.step += 1
                row = self.rl_step(self.step)
                if self.step % cfg.eval_every == 0 or self.step == cfg.steps:
                    row.update(self.evaluate(with_pass_k=self.step == cfg.steps))
                log.log(row)
                progress.update(row)
                every = cfg.checkpoint_every
                if out is not None and ((every and self.step % every == 0) or self.step == cfg.steps):
                    save_checkpoint(
                        out,
                        self.step,
                        self.model,
                        self.tokenizer,
                        self.optimizer,
                        log.history,
                        cfg.to_dict(),
                        cfg.keep_checkpoints,
                        extra=self._extra_state(),
                    )
                if on_step is not None:
                    on_step(row)
        finally:
            progress.close()
        return TrainResult(log.history, out)

    def _resume(self) -> list[dict] | None:
        """Load the newest intact checkpoint of output_dir and return its history; None when the run starts
        over. Nothing there is deleted: files a fresh start or a resume would overwrite go to superseded/."""
        cfg, out = self.cfg, Path(self.cfg.output_dir)
        check_output_dir(out)
        for tmp in stale_temporaries(out):
            shutil.rmtree(tmp, ignore_errors=True)
            say(f"removed {tmp.name}, an unfinished checkpoint a stopped run left behind")
        ckpt = latest_checkpoint(out, announce=True) if cfg.resume else None
        if ckpt is None:
            set_aside(
                out,
                ["checkpoints", "reference", "metrics.jsonl", "metrics.csv"],
                "before-resume-false" if not cfg.resume else "no-checkpoint",
            )
            return None
        check_resumable(ckpt, cfg.to_dict())
        self.step, history = load_checkpoint(ckpt, self.model, self.optimizer, self.device)
        self._load_reference()
        self._load_controller(ckpt)
        self._load_stale_policies(ckpt)
        left = "nothing left to do" if self.step >= cfg.steps else f"{cfg.steps - self.step} steps to go"
        say(f"resuming from step {self.step} ({ckpt.name} in {out}); {left}")
        metrics = out / "metrics.jsonl"
        if metrics.is_file() and metrics.read_bytes() != jsonl_text(history).encode():
            # rows logged after the checkpoint (a kill between checkpoints) are rewritten by the resumed run
            set_aside(out, ["metrics.jsonl", "metrics.csv"], f"resume-at-step-{self.step}")
        return history

    def _warm_start(self) -> dict:
        cfg = self.cfg
        torch.manual_seed(_step_seed(cfg.seed, 0))
        if cfg.warm_start_from is not None:
            row = load_warm_start(cfg.warm_start_from, self.model, cfg.to_dict(), WARM_START_FIELDS)
            if cfg.progress:
                say(f"warm start loaded from {cfg.warm_start_from} (held-out accuracy {row.get('eval/accuracy')})")
            self._reference_after_warm_start()
            return row
        row = {"step": 0}
        bar = Progress(cfg.sft_steps, 0, cfg.progress and cfg.sft_steps > 0, desc="warm start")
        try:
            row.update(
                warm_start(
                    self.model,
                    self.tokenizer,
                    self.task,
                    steps=cfg.sft_steps,
                    batch_size=cfg.sft_batch_size,
                    lr=cfg.sft_lr,
                    seed=cfg.seed,
                    device=self.device,
                    bf16=cfg.bf16,
                    max_grad_norm=cfg.max_grad_norm,
                    on_step=lambda loss: bar.update({"sft/loss": loss}),
                )
            )
        finally:
            bar.close()
        if cfg.progress and self.task.eval:
            say(f"evaluating the warm start on {len(self.task.eval)} held-out problems")
        row.update(self.evaluate(with_pass_k=True))
        self._reference_after_warm_start()
        return row

    def _reference_after_warm_start(self):
        if self.cfg.kl_coef > 0:
            self.ref_model = self._frozen_copy()
            if self.cfg.output_dir is not None:
                self._save_reference()

    def _extra_state(self) -> dict:
        extra = {} if self.controller is None else {"delta_controller": self.controller.state_dict()}
        if self.stale_policies is not None:  # each distinct policy once (early on the warm start fills the queue)
            steps = [s for s, _ in self.stale_policies]
            models = dict(self.stale_policies)
            weights = [{k: v.detach().cpu().clone() for k, v in models[s].state_dict().items()} for s in sorted(models)]
            extra["stale_policies"] = {"steps": steps, "weights": weights}
        return extra

    def _init_stale_policies(self):
        k = self.cfg.staleness
        if k > 0:  # before step 1 the policies of steps 1-k .. 0 are all the warm start
            warm = self._frozen_copy()
            self.stale_policies = deque([(0, warm)] * k, maxlen=k)

    def _load_stale_policies(self, ckpt):
        k = self.cfg.staleness
        if k == 0:
            return
        state = load_extra_state(ckpt).get("stale_policies")
        steps = None if state is None else list(state.get("steps", []))
        if state is None or len(steps) != k or len(state.get("weights", [])) != len(set(steps)):
            raise ValueError(
                f"checkpoint {str(ckpt)!r} holds no {k} stale policies to sample from, but staleness={k}; "
                "resume=False (--no-resume) to start over"
            )
        models = {}
        for s, weights in zip(sorted(set(steps)), state["weights"]):
            models[s] = self._frozen_copy()
            models[s].load_state_dict(weights)
        self.stale_policies = deque([(s, models[s]) for s in steps], maxlen=k)

    def _load_controller(self, ckpt):
        if self.controller is None:
            return
        state = load_extra_state(ckpt).get("delta_controller")
        if state is None:
            raise ValueError(
                f"checkpoint {str(ckpt)!r} has no adaptive-δ controller state, but the method "
                f"{self.cfg.method!r} adapts δ; resume=False (--no-resume) to start over"
            )
        self.controller.load_state_dict(state)

    def step_spec(self) -> ClipSpec:
        """The ClipSpec this step's loss uses: the spec, or for an adaptive δ the controller's current one."""
        return self.spec if self.controller is None else self.controller.spec_for(0)

    def _frozen_copy(self):
        ref = copy.deepcopy(self.model).eval()
        ref.requires_grad_(False)
        return ref

    def _save_reference(self):
        final = Path(self.cfg.output_dir) / "reference"
        tmp = final.with_name(f".reference.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        with quiet_saving():
            self.ref_model.save_pretrained(tmp)
        write_manifest(tmp)
        if final.exists() or final.is_symlink():  # a fresh start moved any older one aside; never delete it here
            set_aside(self.cfg.output_dir, ["reference"], "replaced-reference")
        os.replace(tmp, final)

    def _load_reference(self):
        if self.cfg.kl_coef == 0:
            return
        from transformers import AutoModelForCausalLM

        path = Path(self.cfg.output_dir) / "reference"
        if not path.is_dir() or path.is_symlink():
            raise ValueError(
                f"kl_coef={self.cfg.kl_coef} but the run in {self.cfg.output_dir!r} has no reference "
                "model to resume with (it was started with kl_coef=0)"
            )
        why = verify_checkpoint(path, required=("config.json",))
        if why is not None:
            raise ValueError(
                f"the reference model in {str(path)!r} is damaged ({why}); nothing was changed there. "
                "Use another output_dir, or resume=False (--no-resume) to start over"
            )
        self.ref_model = self._frozen_copy()
        try:
            self.ref_model.load_state_dict(AutoModelForCausalLM.from_pretrained(path).state_dict())
        except Exception as exc:  # noqa: BLE001 - one clear message, whatever the loader raised
            raise ValueError(f"the reference model in {str(path)!r} cannot be loaded ({type(exc).__name__})") from None

    # ------------------------------------------------------------------------------------------ step
    def rl_step(self, step: int) -> dict:
        cfg = self.cfg
        torch.manual_seed(_step_seed(cfg.seed, step))
        t0 = time.perf_counter()
        sampler = self.model
        if self.stale_policies is not None:
            sampled_by, sampler = self.stale_policies[0]
        batch = self._rollout(np.random.default_rng([cfg.seed, step]), sampler)
        if self.stale_policies is not None:  # this step's starting policy samples k steps from now
            self.stale_policies.append((step - 1, self._frozen_copy()))
            batch["metrics"]["rollout/policy_lag"] = step - 1 - sampled_by  # updates between sampler and learner
        t1 = time.perf_counter()
        spec = self.step_spec()
        metrics = self._update(batch, torch.Generator().manual_seed(_step_seed(cfg.seed, step)), spec)
        t2 = time.perf_counter()
        tokens = batch["tokens"]
        row = {"step": step, **batch["metrics"], **metrics}
        if spec.delta is not None:
            row["clip/delta"] = float(spec.delta)
        if self.controller is not None:
            signal = {
                "clipfrac": metrics["clip/clipfrac"],
                "kl3": metrics["clip/kl3"],
                "entropy": batch["metrics"]["policy/entropy"],
            }[self.controller.signal]
            row["clip/delta_next"] = float(self.controller.update(signal)[0])
        row.update(
            {
                "time/rollout_s": t1 - t0,
                "time/update_s": t2 - t1,
                "time/step_s": t2 - t0,
                "perf/tokens_per_s": tokens / (t2 - t0),
            }
        )
        return row

    @torch.no_grad()
    def _rollout(self, rng: np.random.Generator, sampler) -> dict:
        """Samples, scores and freezes one rollout batch; `sampler` (the policy, or a stale copy) is π_old."""
        cfg, tok, G = self.cfg, self.tokenizer, self.cfg.group_size
        examples = self.task.sample(cfg.prompts_per_step, rng)
        prompt_ids, prompt_mask = encode_prompts(tok, [e.prompt for e in examples], self.device)
        prompt_ids = prompt_ids.repeat_interleave(G, dim=0)  # (N, P), each group contiguous
        prompt_mask = prompt_mask.repeat_interleave(G, dim=0)
        with autocast(self.device, cfg.bf16):
            comp = sample(
                sampler, tok, prompt_ids, prompt_mask, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature
            )  # (N, T)
        mask = completion_mask(comp, tok.eos_token_id)  # (N, T)
        texts = decode(tok, comp, mask)
        answers = [e.answer for e in examples for _ in range(G)]
        rewards = torch.tensor([self.task.score(t, a) for t, a in zip(texts, answers)], dtype=torch.float32)
        advantages = group_advantages(rewards, G, norm=cfg.adv_norm).to(self.device)  # (N,)
        input_ids = torch.cat([prompt_ids, comp], dim=1)  # (N, P+T)
        attention = torch.cat([prompt_mask, mask], dim=1)
        T = comp.shape[1]
        with autocast(self.device, cfg.bf16):
            old_log_prob, entropy = token_log_probs(
                sampler, input_ids, attention, T, cfg.temperature, with_entropy=True
            )
            ref_log_prob = None
            if self.ref_model is not None:
                ref_log_prob = token_log_probs(self.ref_model, input_ids, attention, T, cfg.temperature)
        fmask = mask.float()
        groups = rewards.view(-1, G)
        constant = (groups.amax(-1) == groups.amin(-1)).float().mean().item()
        n_tokens = int(mask.sum())
        metrics = {
            "reward/mean": rewards.mean().item(),
            "reward/std": rewards.std().item(),
            "reward/constant_group_frac": constant,  # groups with one reward value: no gradient signal
            "rollout/completion_len": n_tokens / len(texts),
            "rollout/eos_frac": (comp == tok.eos_token_id).any(-1).float().mean().item(),
            "rollout/tokens": n_tokens,
            "policy/entropy": ((entropy * fmask).sum() / fmask.sum()).item(),
        }
        return {
            "input_ids": input_ids,
            "attention": attention,
            "mask": fmask,
            "advantages": advantages,
            "old_log_prob": old_log_prob,
            "ref_log_prob": ref_log_prob,
            "metrics": metrics,
            "tokens": n_tokens,
        }

    def _update(self, batch: dict, gen: torch.Generator, spec: ClipSpec) -> dict:
        cfg = self.cfg
        N, T = batch["mask"].shape
        sums = dict.fromkeys(("loss/policy", "loss/kl", "grad/norm", *(f"clip/{k}" for k in _MEAN_KEYS)), 0.0)
        ratio_min, ratio_max, updates = float("inf"), float("-inf"), 0
        for _ in range(cfg.ppo_epochs):
            for idx in torch.randperm(N, generator=gen).tensor_split(cfg.minibatches):
                idx = idx.to(self.device)
                mask = batch["mask"][idx]  # (b, T)
                with autocast(self.device, cfg.bf16):
                    log_prob = token_log_probs(
                        self.model, batch["input_ids"][idx], batch["attention"][idx], T, cfg.temperature
                    )  # (b, T)
                adv = batch["advantages"][idx].unsqueeze(1).expand(-1, T)  # (b, T) outcome reward on every token
                loss, m = policy_loss(log_prob, batch["old_log_prob"][idx], adv, mask, spec, cfg.loss_agg_mode)
                sums["loss/policy"] += loss.item()
                if self.ref_model is not None:
                    kl = agg_loss(
                        kl_penalty(log_prob, batch["ref_log_prob"][idx], cfg.kl_estimator), mask, cfg.loss_agg_mode
                    )
                    loss = loss + cfg.kl_coef * kl
                    sums["loss/kl"] += kl.item()
                loss.backward()
                norm = torch.nn.utils.clip_grad_norm_(
                    self.model.parameters(), cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
                )
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                sums["grad/norm"] += norm.item()
                for k in _MEAN_KEYS:
                    sums[f"clip/{k}"] += m[k]
                for k in m:  # an intersection's per-part clip fractions (clipfrac_low_part0, ...)
                    if "_part" in k:
                        sums[f"clip/{k}"] = sums.get(f"clip/{k}", 0.0) + m[k]
                ratio_min, ratio_max = min(ratio_min, m["ratio_min"]), max(ratio_max, m["ratio_max"])
                updates += 1
        out = {k: v / updates for k, v in sums.items()}
        if self.ref_model is None:
            del out["loss/kl"]
        out.update({"clip/ratio_min": ratio_min, "clip/ratio_max": ratio_max, "optim/lr": cfg.lr})
        return out

    # ------------------------------------------------------------------------------------------ eval
    @torch.no_grad()
    def evaluate(self, with_pass_k: bool = False) -> dict:
        """Greedy-decoding accuracy on the held-out split (empty when eval_size is 0); with `with_pass_k` and
        pass_k = k > 0 also eval/pass@k and eval/pass@1_sampled from k samples per problem at `temperature`."""
        examples = self.task.eval
        if not examples:
            return {}
        row = {"eval/accuracy": float(self._held_out_scores(examples, greedy=True).mean())}
        k = self.cfg.pass_k
        if with_pass_k and k > 0:
            with torch.random.fork_rng(devices=[]):  # the samples leave the run's random stream untouched
                torch.manual_seed(_step_seed(self.cfg.seed, self.step) + PASS_K_STREAM)
                scores = self._held_out_scores([e for e in examples for _ in range(k)], greedy=False)
            per_problem = scores.reshape(len(examples), k)  # (problems, k)
            # with n = k samples the unbiased estimator 1 - C(n-c, k)/C(n, k) is 1 exactly when c > 0
            row[f"eval/pass@{k}"] = float((per_problem.max(axis=1) > 0).mean())
            row["eval/pass@1_sampled"] = float(per_problem.mean())
        return row

    def _held_out_scores(self, examples, greedy: bool) -> np.ndarray:
        scores = []
        for i in range(0, len(examples), EVAL_BATCH):
            chunk = examples[i : i + EVAL_BATCH]
            ids, mask = encode_prompts(self.tokenizer, [e.prompt for e in chunk], self.device)
            with autocast(self.device, self.cfg.bf16):
                comp = sample(
                    self.model,
                    self.tokenizer,
                    ids,
                    mask,
                    max_new_tokens=self.cfg.max_new_tokens,
                    temperature=self.cfg.temperature,
                    greedy=greedy,
                )
            texts = decode(self.tokenizer, comp, completion_mask(comp, self.tokenizer.eos_token_id))
            scores += [self.task.score(t, e.answer) for t, e in zip(texts, chunk)]
        return np.asarray(scores, dtype=float)


def train(config: TrainerConfig, **kwargs) -> TrainResult:
    """Build a `GRPOTrainer` for `config` and run it."""
    return GRPOTrainer(config, **kwargs).train()
