"""Tokens per second of divclip's GRPO trainer against TRL 1.16's GRPOTrainer, same tiny model and settings.

    python benchmarks/bench_trainer.py [--steps 10] [--prompts 8] [--group-size 8] [--max-new-tokens 8]
                                       [--threads 1] [--repeats 3]

Both trainers start from the same randomly initialised tiny GPT-2 (2 layers, width 64, character tokenizer),
sample `group_size` completions for each of `prompts` arithmetic prompts per step with pure sampling
(temperature 1, no top-k/top-p) up to `max_new_tokens`, score them with the same exact-match reward, and take
one AdamW step on the whole batch (divclip: ppo_epochs=1, minibatches=1; TRL: num_iterations=1,
per_device_train_batch_size = prompts x group_size, no gradient accumulation), no KL term, on CPU.

Throughput = completion tokens (up to and including EOS) / wall-clock seconds of `train()` for `steps` steps,
after one warm-up run of each. The runs alternate divclip, TRL, `repeats` times; the table shows medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from divclip.trainer.config import TrainerConfig  # noqa: E402
from divclip.trainer.grpo import GRPOTrainer as DivclipTrainer  # noqa: E402
from divclip.trainer.tasks import arithmetic_task  # noqa: E402
from divclip.trainer.tiny import ARITH_ALPHABET, char_tokenizer, tiny_gpt2  # noqa: E402


def tiny_model(tok):
    return tiny_gpt2(
        len(tok),
        n_layer=2,
        n_embd=64,
        n_head=4,
        n_positions=32,
        seed=0,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )


def run_divclip(args, steps: int) -> tuple[int, float]:
    tok = char_tokenizer(ARITH_ALPHABET)
    cfg = TrainerConfig(
        task="arith",
        arith_digits=2,
        eval_size=0,
        sft_steps=0,
        steps=steps,
        prompts_per_step=args.prompts,
        group_size=args.group_size,
        max_new_tokens=args.max_new_tokens,
        ppo_epochs=1,
        minibatches=1,
        lr=1e-5,
        threads=args.threads,
        device="cpu",
        progress=False,
    )
    trainer = DivclipTrainer(cfg, model=tiny_model(tok), tokenizer=tok)
    start = time.perf_counter()
    history = trainer.train().history
    seconds = time.perf_counter() - start
    return sum(row["rollout/tokens"] for row in history[1:]), seconds


def run_trl(args, steps: int) -> tuple[int, float]:
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    tok = char_tokenizer(ARITH_ALPHABET)
    task = arithmetic_task(2, 0, seed=0)
    examples = task.train[:2048]
    data = Dataset.from_dict({"prompt": [e.prompt for e in examples], "answer": [e.answer for e in examples]})
    tokens = [0]

    def exact(completions, answer, completion_ids, **kwargs):
        tokens[0] += sum(len(ids) for ids in completion_ids)
        return [task.score(c, a) for c, a in zip(completions, answer)]

    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=args.prompts * args.group_size,
            num_generations=args.group_size,
            max_completion_length=args.max_new_tokens,
            num_iterations=1,
            gradient_accumulation_steps=1,
            max_steps=steps,
            learning_rate=1e-5,
            beta=0.0,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            logging_steps=steps,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            disable_tqdm=True,
            seed=0,
            loss_type="dapo",
        )
        trainer = GRPOTrainer(
            model=tiny_model(tok), reward_funcs=exact, args=config, train_dataset=data, processing_class=tok
        )
        trainer.remove_callback(PrinterCallback)  # keep the table readable
        threads = torch.get_num_threads()
        torch.set_num_threads(args.threads)
        try:
            start = time.perf_counter()
            trainer.train()
            seconds = time.perf_counter() - start
        finally:
            torch.set_num_threads(threads)
    return tokens[0], seconds


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    run_divclip(args, 1), run_trl(args, 1)  # warm-up: imports, allocator, first-call overheads
    rates = {"divclip GRPOTrainer": [], "TRL GRPOTrainer": []}
    totals = {k: [] for k in rates}
    for _ in range(args.repeats):
        for name, fn in (("divclip GRPOTrainer", run_divclip), ("TRL GRPOTrainer", run_trl)):
            tokens, seconds = fn(args, args.steps)
            rates[name].append(tokens / seconds)
            totals[name].append((tokens, seconds))
    print(
        f"steps={args.steps} prompts={args.prompts} G={args.group_size} max_new_tokens={args.max_new_tokens} "
        f"threads={args.threads} repeats={args.repeats} (median)"
    )
    print("| trainer | completion tokens | seconds | tokens/s |\n|---|---|---|---|")
    for name, values in rates.items():
        tokens = statistics.median(t for t, _ in totals[name])
        seconds = statistics.median(s for _, s in totals[name])
        print(f"| {name} | {tokens:.0f} | {seconds:.2f} | {statistics.median(values):.0f} |")
    ratio = statistics.median(rates["divclip GRPOTrainer"]) / statistics.median(rates["TRL GRPOTrainer"])
    print(f"divclip / TRL tokens-per-second ratio: {ratio:.2f} (goal >= 1.0)")


if __name__ == "__main__":
    main()
