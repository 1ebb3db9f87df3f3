"""verl 0.9.1's own actor update on CPU: TrainingWorker -> FSDPEngineWithLMHead.train_batch -> ppo_loss.

Run as a script (`python verl_actor_run.py OUT.json`) by tests/trainer/test_verl_actor.py, in a fresh process:
FSDP2 over gloo with world size 1, a tiny Llama built from a config in code (no download), the same rollout
batch for every loss mode. Prints nothing the test needs; writes, per run, the clip fractions verl's metrics
report for each mini-batch and the final weights (as lists) to OUT.json.

Test-only shims, because verl 0.9.1 ships none for a CPU-only machine (they never go into the product):
* `CPUPlatform`: a verl platform whose device is "cpu" and whose collective backend is gloo
  (verl.plugin.platform registers cuda/npu/rocm only, and falls back to "nvidia" without a GPU).
* `FSDPEngineWithLMHead` registered for device "cpu" (verl registers it for cuda and npu only).
* `trl` made unimportable: with TRL 1.16 installed, verl's monkey_patch imports
  `AutoModelForCausalLMWithValueHead` from trl, which TRL 1.16 no longer has, and the engine fails to build.
"""

from __future__ import annotations

import importlib.abc
import json
import os
import sys
import tempfile


class _BlockTRL(importlib.abc.MetaPathFinder):
    """`import trl` (and importlib.util.find_spec('trl')) fail as if TRL were not installed."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "trl" or fullname.startswith("trl."):
            raise ModuleNotFoundError(f"No module named {fullname!r} (blocked: verl 0.9.1 and TRL 1.16 conflict)")
        return None


sys.meta_path.insert(0, _BlockTRL())

os.environ.update(
    {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "VERL_PLATFORM": "cpu",
        "TOKENIZERS_PARALLELISM": "false",
    }
)
os.environ.setdefault("MASTER_PORT", "29533")

import torch  # noqa: E402
from verl.plugin.platform import PlatformBase, PlatformRegistry  # noqa: E402


class _CPUDeviceModule:
    """torch.cpu plus the memory statistics verl logs after each update (0 on CPU)."""

    def __getattr__(self, name):
        return getattr(torch.cpu, name)

    def max_memory_allocated(self, *args, **kwargs):
        return 0

    def max_memory_reserved(self, *args, **kwargs):
        return 0

    def memory_allocated(self, *args, **kwargs):
        return 0

    def memory_reserved(self, *args, **kwargs):
        return 0

    def get_device_name(self, *args, **kwargs):
        return "CPU"

    def mem_get_info(self, *args, **kwargs):
        return (0, 0)

    def empty_cache(self):
        pass


_CPU_DEVICE_MODULE = _CPUDeviceModule()


@PlatformRegistry.register(platform="cpu")
class CPUPlatform(PlatformBase):
    """The least verl needs to run its FSDP engine on CPU with gloo."""

    @property
    def device_name(self):
        return "cpu"

    @property
    def vendor_name(self):
        return "cpu"

    @property
    def device_module(self):
        return _CPU_DEVICE_MODULE

    def is_available(self):
        return True

    def current_device(self):
        return "cpu"  # verl moves modules with .to(device=current_device()); an index would mean an accelerator

    def device_count(self):
        return 1

    def set_device(self, device_index):
        pass

    def synchronize(self, device_index=None):
        pass

    def manual_seed(self, seed):
        torch.manual_seed(seed)

    def manual_seed_all(self, seed):
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings):
        pass

    def empty_cache(self):
        pass

    def get_device_capability(self, device_index=0):
        return (None, None)

    def communication_backend_name(self):
        return "gloo"

    def visible_devices_envvar(self):
        return "CUDA_VISIBLE_DEVICES"

    def nvtx_range(self, msg):
        import contextlib

        return contextlib.nullcontext()

    def profiler_start(self):
        pass

    def profiler_stop(self):
        pass

    def ray_resource_name(self):
        return "CPU"

    def ray_noset_envvars(self):
        return []

    def is_ipc_supported(self):
        return False

    def cudart(self):
        return None


def main(out_path: str) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM
    from verl.workers.engine import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device="cpu")(FSDPEngineWithLMHead)

    import divclip.trainer.integrations.verl  # noqa: F401  registers atr_kl3 and divclip_*

    # verl would ask for "cpu:gloo,cpu:gloo" (its CPU half plus the platform's); one gloo group is the same thing.
    torch.distributed.init_process_group(backend="gloo", rank=0, world_size=1)

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = LlamaForCausalLM(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        batch = make_batch(model, cfg)
        runs = json.loads(sys.argv[2])
        results = {}
        for name, actor_kw in runs.items():
            results[name] = run_actor(tmp, batch, actor_kw)
    import importlib.util

    try:
        trl_importable = importlib.util.find_spec("trl") is not None
    except ModuleNotFoundError:
        trl_importable = False
    for r in results.values():
        r["trl_importable"] = trl_importable
    with open(out_path, "w") as f:
        json.dump(results, f)


def make_batch(model, cfg, bsz=8, prompt_len=4, resp_len=6):
    """Left-padded prompts, right-padded responses; old log-probs = the model's own plus noise (ratios != 1)."""
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(3, cfg.vocab_size, (bsz, prompt_len), generator=g)
    responses = torch.randint(3, cfg.vocab_size, (bsz, resp_len), generator=g)
    prompt_mask = torch.ones(bsz, prompt_len, dtype=torch.long)
    resp_mask = torch.ones(bsz, resp_len, dtype=torch.long)
    for i in range(bsz):
        prompt_mask[i, : i % 2] = 0  # left padding
        resp_mask[i, resp_len - (i % 3) :] = 0  # right padding
    prompts = prompts * prompt_mask
    responses = responses * resp_mask
    input_ids = torch.cat([prompts, responses], 1)
    attention_mask = torch.cat([prompt_mask, resp_mask], 1)
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
        logp = torch.log_softmax(logits[:, prompt_len - 1 : -1].float(), -1)
        logp = logp.gather(-1, responses.unsqueeze(-1)).squeeze(-1)
    old = (logp + 0.35 * torch.randn(logp.shape, generator=g)) * resp_mask
    adv = torch.randn(bsz, generator=g).unsqueeze(1).expand(bsz, resp_len) * resp_mask
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "prompts": prompts,
        "responses": responses,
        "response_mask": resp_mask,
        "old_log_probs": old,
        "advantages": adv.contiguous(),
    }


def run_actor(model_path, batch, actor_kw):
    from functools import partial

    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig, TrainingWorkerConfig
    from verl.workers.config.actor import FSDPActorConfig, PolicyLossConfig
    from verl.workers.engine_workers import TrainingWorker
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import left_right_2_no_padding

    bsz = batch["input_ids"].shape[0]
    model_config = HFModelConfig(
        path=model_path,
        load_tokenizer=False,
        use_remove_padding=False,
        override_config={"attn_implementation": "eager"},
    )
    engine = FSDPEngineConfig(
        strategy="fsdp2",
        model_dtype="fp32",
        use_torch_compile=False,
        micro_batch_size_per_gpu=bsz // 4,
        use_dynamic_bsz=False,
        param_offload=False,
        optimizer_offload=False,
    )
    optim = FSDPOptimizerConfig(lr=1e-2, weight_decay=0.0, clip_grad=1e9, total_training_steps=10)
    kw = dict(actor_kw)
    policy_loss = PolicyLossConfig(**kw.pop("policy_loss", {}))
    actor = FSDPActorConfig(
        strategy="fsdp2",
        ppo_mini_batch_size=bsz // 2,
        ppo_micro_batch_size_per_gpu=bsz // 2,
        use_dynamic_bsz=False,
        loss_agg_mode="token-mean",
        entropy_coeff=0.0,
        use_kl_loss=False,
        rollout_n=1,
        policy_loss=policy_loss,
        **kw,
    )
    worker = TrainingWorker(
        TrainingWorkerConfig(
            model_type="language_model", model_config=model_config, engine_config=engine, optimizer_config=optim
        )
    )
    worker.reset()
    worker.set_loss_fn(partial(ppo_loss, config=actor))
    td = TensorDict({k: v.clone() for k, v in batch.items()}, batch_size=[bsz])
    td = left_right_2_no_padding(td)
    tu.assign_non_tensor(
        td,
        calculate_entropy=False,
        global_batch_size=bsz // 2,
        mini_batch_size=bsz // 2,
        epochs=2,
        seed=7,
        dataloader_kwargs={"shuffle": True},
        compute_loss=True,
        temperature=1.0,
    )
    out = worker.train_mini_batch(td)
    metrics = tu.get(out, "metrics")
    state = {
        k: v.full_tensor().detach().tolist() if hasattr(v, "full_tensor") else v.detach().tolist()
        for k, v in worker.engine.module.state_dict().items()
    }
    return {"metrics": {k: _plain(v) for k, v in metrics.items()}, "weights": state}


def _plain(v):
    if isinstance(v, torch.Tensor):
        return v.tolist()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


if __name__ == "__main__":
    main(sys.argv[1])
