"""Round trip, for every preset and 20 random method strings: `divclip export` -> `divclip check` -> the verl
plug-in's loss (verl's own function for verl's modes) -> the TRL plug-in's loss, against `policy_loss` with the
method's spec on the same tensors. Bounds are compared with theory's, computed here from the spec.

What an engine cannot express is asserted as a refusal instead: TRL has no DPPO mask (dppo_kl, dppo_tv), and
the TRL plug-in runs token-level PPO clips only (GSPO and SAPO export to TRL's stock GRPOConfig).
"""

from __future__ import annotations

import copy
import dataclasses
import random

import pytest
import torch
import yaml

pytest.importorskip("verl")
pytest.importorskip("trl")

from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402
from verl.workers.config.actor import ActorConfig, PolicyLossConfig  # noqa: E402

import divclip.trainer.integrations.verl as verl_plugin  # noqa: E402
from divclip.app.export import method_export  # noqa: E402
from divclip.cli import main  # noqa: E402
from divclip.engines.advice import REFERENCE_P  # noqa: E402
from divclip.sanity import build_report  # noqa: E402
from divclip.theory.losses import policy_loss  # noqa: E402
from divclip.theory.measures import MEASURES, get_measure  # noqa: E402
from divclip.theory.spec import PRESETS  # noqa: E402
from divclip.theory.spec import parse_method as method_spec  # noqa: E402

A = "actor_rollout_ref.actor."
# a budget range per measure whose interval stays inside (0, ∞) at every tabulated p, so both bounds are finite
DELTA_RANGE = {
    "log_ratio": (0.05, 0.4),
    "k2": (0.005, 0.08),
    "kl3": (0.005, 0.08),
    "kl3_reverse": (0.005, 0.08),
    "chi2": (0.005, 0.15),
    "hellinger": (0.002, 0.03),
    "binary_kl": (0.005, 0.08),
    "binary_tv": (0.02, 0.3),
}


def random_methods(n=20, seed=14):
    rng = random.Random(seed)
    out = []
    while len(out) < n:  # every form, in turn; random budgets and measures
        kind = ["measure", "measure:delta", "ratio", "ratio2", "dual", "measure:delta"][len(out) % 6]
        if kind == "measure":
            out.append(rng.choice([m for m in MEASURES if m != "ratio" and not MEASURES[m].p_dependent]))
        elif kind == "measure:delta":
            m = rng.choice(sorted(DELTA_RANGE))
            lo, hi = DELTA_RANGE[m]
            out.append(f"{m}:{rng.uniform(lo, hi):.6g}")
        elif kind == "ratio":
            out.append(f"ratio:{rng.uniform(0.05, 0.4):.4g}")
        elif kind == "ratio2":
            out.append(f"ratio:{rng.uniform(0.05, 0.3):.4g}:{rng.uniform(0.1, 0.4):.4g}")
        else:  # a dual-clip cap on a ratio or p-independent divergence clip
            out.append(f"{rng.choice(['dapo', 'kl3', 'k2', 'ratio:0.25'])}/dual={rng.uniform(1.5, 4):.3g}")
    return out


METHODS = sorted(PRESETS) + random_methods() + ["dapo/dual=1.2"]  # a dual clip below 1 + ε_high (issue 36)


def expected_bounds(spec):
    """[lo, hi] or [{p, lo, hi}] straight from theory (None for SAPO, which has no hard clip)."""
    name = spec.measure if isinstance(spec.measure, str) else spec.measure.name
    if spec.form == "sapo":
        return None
    if name == "ratio":
        return [1 - spec.eps_low, 1 + spec.eps_high]
    m = get_measure(name)
    if m.p_dependent:
        return [{"p": p, "lo": m.bounds(spec.delta, p)[0], "hi": m.bounds(spec.delta, p)[1]} for p in REFERENCE_P]
    return list(m.bounds(spec.delta))


def assert_bounds(got, want):
    if want is None:
        assert got is None
        return
    if isinstance(want[0], dict):
        assert [r["p"] for r in got] == [r["p"] for r in want]
        for g, w in zip(got, want):
            assert g["lo"] == pytest.approx(w["lo"], rel=1e-12, abs=1e-15)
            assert g["hi"] == pytest.approx(w["hi"], rel=1e-12)
    else:
        assert got == pytest.approx(want, rel=1e-12)


def tensors(seed=0, b=10, t=24):
    g = torch.Generator().manual_seed(seed)
    old = torch.log_softmax(2.0 * torch.randn(b, t, 6, generator=g, dtype=torch.float64), -1)[..., 0]
    lp = old + 0.6 * torch.randn(b, t, generator=g, dtype=torch.float64)
    adv = torch.randn(b, 1, generator=g, dtype=torch.float64).expand(b, t).clone()
    mask = (torch.arange(t)[None] < torch.randint(2, t + 1, (b, 1), generator=g)).to(torch.float64)
    return old, lp, adv, mask


def reference_loss(spec, old, lp, adv, mask, agg="token-mean"):
    leaf = lp.clone().requires_grad_()
    loss, _ = policy_loss(leaf, old, adv, mask, spec, agg)
    loss.backward()
    return loss.detach(), leaf.grad


@pytest.fixture
def clean_env(monkeypatch):
    for var in ("DIVCLIP_DELTA", "VERL_USE_EXTERNAL_MODULES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(verl_plugin, "_WARNED", set())
    return monkeypatch


@pytest.mark.parametrize("method", METHODS)
def test_verl_export_check_and_plugin_loss_agree_with_policy_loss(method, clean_env, capsys, tmp_path):
    spec = method_spec(method)
    assert main(["export", "--method", method, "--engine", "verl"]) == 0
    text = capsys.readouterr().out
    f = tmp_path / "run.sh"
    f.write_text(text)
    report = build_report(f)
    c = report["config"]
    assert_bounds(c["ratio_bounds"], expected_bounds(spec))
    codes = [w["code"] for w in report["warnings"]]
    assert not {"ignored_key", "divergence_budget_verl_default", "clip_ratio_shadowed"} & set(codes), codes
    # every exported key once; loss_mode always explicit
    lines = [ln.strip(" \\") for ln in text.splitlines() if ln and not ln.startswith("#")]
    keys = [ln.split("=", 1)[0] for ln in lines if "=" in ln]
    assert len(keys) == len(set(keys)) and f"{A}policy_loss.loss_mode" in keys
    # the exported YAML is the same settings
    y = yaml.safe_load(method_export(spec, "verl").text("yaml"))["actor_rollout_ref"]["actor"]
    flat = {
        "policy_loss.loss_mode": y["policy_loss"]["loss_mode"],
        **{k: v for k, v in y.items() if k != "policy_loss"},
    }
    for k, v in flat.items():  # what check read from the command line is what the YAML says
        if f"{A}{k}" in c["keys"]:
            assert c["keys"][f"{A}{k}"] == {"value": v, "origin": "set"}, k
    # the verl run: the environment the command sets, the actor config the overrides set
    env = {ln.split("=", 1)[0]: ln.split("=", 1)[1] for ln in lines if not ln.startswith(("python3", A))}
    for k, v in env.items():
        clean_env.setenv(k, v)
    assert ("VERL_USE_EXTERNAL_MODULES" in env) == (y["policy_loss"]["loss_mode"] in verl_plugin.LOSS_MODES)
    kw = {k: v for k, v in y.items() if k != "policy_loss"}
    cfg = ActorConfig(
        strategy="fsdp",
        rollout_n=4,
        ppo_micro_batch_size_per_gpu=1,
        policy_loss=PolicyLossConfig(loss_mode=y["policy_loss"]["loss_mode"]),
        **kw,
    )
    old, lp, adv, mask = tensors()
    if spec.level == "sequence":  # GSPO: one ratio per sequence, the same interval
        old, lp, adv, mask = tensors(seed=3, t=8)
        lp = old + 2e-3 * (lp - old)
    # verl's sapo aggregates seq-mean-token-mean whatever loss_agg_mode says (the export notes it)
    want, want_grad = reference_loss(
        spec, old, lp, adv, mask, "seq-mean-token-mean" if spec.form == "sapo" else "token-mean"
    )
    leaf = lp.clone().requires_grad_()
    got, _ = get_policy_loss_fn(y["policy_loss"]["loss_mode"])(
        old_log_prob=old,
        log_prob=leaf,
        advantages=adv,
        response_mask=mask.bool(),
        loss_agg_mode="token-mean",
        config=cfg,
    )
    got.backward()
    if spec.form != "sapo":  # the clip binds on these tensors, so agreeing is not vacuous
        assert policy_loss(lp, old, adv, mask, spec)[1]["clipfrac"] > 0.02
    assert got.item() == pytest.approx(want.item(), rel=1e-9, abs=1e-12)
    torch.testing.assert_close(leaf.grad, want_grad, rtol=1e-7, atol=1e-10)


# --------------------------------------------------------------------------------------------------- TRL
@pytest.fixture(scope="module")
def trl_args(tmp_path_factory):
    """DivClipGRPOConfig for every exportable method, from its exported YAML (built before any trainer: once an
    Accelerator exists, TrainingArguments cannot be built again in this process)."""
    from divclip.trainer.integrations.trl import DivClipGRPOConfig

    out = {}
    for method in METHODS:
        spec = method_spec(method)
        if spec.form == "gated":
            continue
        export = method_export(spec, "trl")
        if export.config_class == "DivClipGRPOConfig":
            out[method] = DivClipGRPOConfig(
                output_dir=str(tmp_path_factory.mktemp("args")),
                report_to="none",
                use_cpu=True,
                **yaml.safe_load(export.text("yaml")),
            )
    return out


@pytest.fixture(scope="module")
def trl_trainer(tmp_path_factory, trl_args):
    from datasets import Dataset

    from divclip.trainer.integrations.trl import DivClipGRPOConfig, DivClipGRPOTrainer
    from divclip.trainer.tiny import ARITH_ALPHABET, char_tokenizer, tiny_gpt2

    tok = char_tokenizer(ARITH_ALPHABET)
    model = tiny_gpt2(
        len(tok), n_layer=1, n_embd=32, n_head=2, seed=0, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id
    )
    args = DivClipGRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("trl")),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=4,
        report_to="none",
        use_cpu=True,
        loss_type="bnpo",
        save_strategy="no",
        num_iterations=2,
    )
    data = Dataset.from_dict({"prompt": ["07+35=", "12+30="]})
    trainer = DivClipGRPOTrainer(
        model=copy.deepcopy(model),
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=args,
        train_dataset=data,
        processing_class=tok,
    )
    trainer.current_gradient_accumulation_steps = 1
    return trainer, tok


@pytest.mark.parametrize("method", METHODS)
def test_trl_export_check_and_plugin_loss_agree_with_policy_loss(method, trl_args, trl_trainer):
    spec = method_spec(method)
    if spec.form == "gated":
        with pytest.raises(ValueError, match="TRL has no 'gated' loss form"):
            method_export(spec, "trl")
        return
    export = method_export(spec, "trl")
    settings = yaml.safe_load(export.text("yaml"))
    assert settings == export.settings and settings  # the YAML text is exactly the settings, each key once
    report = build_report(export.text("yaml").encode(), config_name="args.yaml")
    if export.config_class == "GRPOConfig":  # GSPO / SAPO: TRL's own trainer, not the plug-in
        assert spec.level == "sequence" or spec.form == "sapo"
        assert_bounds(report["config"]["ratio_bounds"] if spec.form != "sapo" else None, expected_bounds(spec))
        return
    assert_bounds(report["config"]["ratio_bounds"], expected_bounds(spec))
    assert not {"ignored_key", "divergence_budget_verl_default"} & {w["code"] for w in report["warnings"]}
    trainer, tok = trl_trainer
    args = trl_args[method]
    # clip_measure specs run TRL's unclamped ratio (clamp_log_ratio=False); a clip_method string is taken as written
    runs = (
        spec
        if args.clip_method is not None
        else dataclasses.replace(spec, params={**dict(spec.params), "clamp_log_ratio": False})
    )
    assert args.clip_spec() == runs
    trainer.clip_spec = args.clip_spec()
    g = torch.Generator().manual_seed(5)
    b, t = 8, 5
    prompt = tok(["07+35="] * b, return_tensors="pt", add_special_tokens=False)
    inputs = {
        "prompt_ids": prompt["input_ids"],
        "prompt_mask": prompt["attention_mask"],
        "completion_ids": torch.randint(3, len(tok), (b, t), generator=g),
        "completion_mask": (torch.arange(t)[None] < torch.randint(1, t + 1, (b, 1), generator=g)).long(),
        "advantages": torch.randn(b, generator=g),
    }
    model = trainer.model.train()
    with torch.no_grad():
        lp, _, _ = trainer._get_per_token_logps_and_entropies(
            model,
            torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1),
            t,
        )
    inputs["old_per_token_logps"] = lp + 0.5 * torch.randn(lp.shape, generator=g)
    got = trainer._compute_loss(model, inputs).detach()
    want, _ = policy_loss(
        lp,
        inputs["old_per_token_logps"],
        inputs["advantages"][:, None].expand(b, t),
        inputs["completion_mask"].float(),
        spec,
        "token-mean",
    )
    assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-7)
    assert abs(want.item()) > 1e-4
