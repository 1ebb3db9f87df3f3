"""A tiny GPT-2-style causal LM and a character tokenizer, built in code (nothing is downloaded).

The tokenizer is a real `PreTrainedTokenizerFast` (a `tokenizers` WordLevel model over single characters), so it
saves with `save_pretrained`, reloads with `AutoTokenizer`, and works unchanged inside TRL.
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
ARITH_ALPHABET = "0123456789+-*= "
TEXT_ALPHABET = string.digits + string.ascii_letters + string.punctuation + " \n"


def char_tokenizer(alphabet: str = TEXT_ALPHABET) -> PreTrainedTokenizerFast:
    """One token per character of `alphabet` (order kept, duplicates dropped) after <pad>, <eos>, <unk>."""
    if not isinstance(alphabet, str) or not alphabet:
        raise ValueError(f"alphabet must be a non-empty string of characters, got {alphabet!r}")
    chars = list(dict.fromkeys(alphabet))
    vocab = {tok: i for i, tok in enumerate([PAD, EOS, UNK, *chars])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # every char is a "word"
    backend.decoder = decoders.Fuse()  # join characters back without spaces
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=PAD, eos_token=EOS, unk_token=UNK)
    tok.padding_side = "left"  # prompts are left-padded so completions start in the same column
    return tok


def tiny_gpt2(
    vocab_size: int,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_positions: int = 64,
    seed: int = 0,
    pad_token_id: int = 0,
    eos_token_id: int = 1,
) -> GPT2LMHeadModel:
    """A randomly initialised GPT-2 (no dropout, so a forward pass is deterministic) seeded by `seed`."""
    import torch

    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(config)
    model.generation_config.pad_token_id = pad_token_id
    model.generation_config.eos_token_id = eos_token_id
    return model
