"""Tokenizer, sampling and token log-probs: left padding must not change what a prompt's completion scores."""

import torch
from transformers import AutoTokenizer

from divclip.trainer.rollout import completion_mask, encode_completions, encode_prompts, sample, token_log_probs
from divclip.trainer.tiny import ARITH_ALPHABET, char_tokenizer, tiny_gpt2


def tiny(seed=3):
    tok = char_tokenizer(ARITH_ALPHABET)
    model = tiny_gpt2(
        len(tok),
        n_layer=1,
        n_embd=32,
        n_head=2,
        n_positions=32,
        seed=seed,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    ).eval()
    return model, tok


def test_char_tokenizer_round_trips_and_reloads(tmp_path):
    tok = char_tokenizer(ARITH_ALPHABET)
    ids = tok("07+35=", add_special_tokens=False)["input_ids"]
    assert len(ids) == 6 and tok.decode(ids) == "07+35="
    assert tok.decode(ids + [tok.eos_token_id, tok.pad_token_id], skip_special_tokens=True) == "07+35="
    assert tok("x", add_special_tokens=False)["input_ids"] == [tok.unk_token_id]
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again("07+35=", add_special_tokens=False)["input_ids"] == ids and again.eos_token == "<eos>"


def test_completion_mask_keeps_the_first_eos_and_nothing_after():
    eos = 1
    ids = torch.tensor([[5, 6, 1, 0, 0], [5, 1, 7, 1, 0], [5, 6, 7, 8, 9], [1, 0, 0, 0, 0]])
    expected = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    assert torch.equal(completion_mask(ids, eos), expected)


def test_left_padding_changes_neither_sampling_nor_log_probs():
    model, tok = tiny()
    prompts = ["1+2=", "12+34=", "5="]
    ids, mask = encode_prompts(tok, prompts, "cpu")
    assert ids.shape == (3, 6) and mask[2].tolist() == [0, 0, 0, 0, 1, 1]  # left-padded
    batch = sample(model, tok, ids, mask, max_new_tokens=4, greedy=True)
    comp_mask = completion_mask(batch, tok.eos_token_id)
    log_probs = token_log_probs(model, torch.cat([ids, batch], 1), torch.cat([mask, comp_mask], 1), batch.shape[1])
    for i, p in enumerate(prompts):
        alone, alone_mask = encode_prompts(tok, [p], "cpu")
        single = sample(model, tok, alone, alone_mask, max_new_tokens=4, greedy=True)
        n = int(comp_mask[i].sum())
        assert single[0, :n].tolist() == batch[i, :n].tolist()
        # Independent reference: log_softmax of the full logits of the unpadded sequence.
        seq = torch.cat([alone, single[:, :n]], 1)
        ref = torch.log_softmax(model(seq).logits[0, :-1].float(), -1)
        ref = ref.gather(-1, seq[0, 1:, None])[-n:, 0]
        torch.testing.assert_close(log_probs[i, :n], ref, rtol=1e-5, atol=1e-5)


def test_sampling_is_pure_softmax_sampling():
    """The sampler is softmax(logits / T): empirical next-token frequencies match exp(log-prob)."""
    model, tok = tiny(seed=0)
    ids, mask = encode_prompts(tok, ["3+4="] * 4000, "cpu")
    torch.manual_seed(0)
    first = sample(model, tok, ids, mask, max_new_tokens=1, temperature=1.5)[:, 0]
    freq = torch.bincount(first, minlength=len(tok)).float() / len(first)
    logits = model(ids[:1]).logits[0, -1] / 1.5
    probs = torch.softmax(logits, -1)
    assert (freq - probs).abs().max() < 0.03  # ~4 standard errors at 4000 draws


def test_encode_completions_appends_eos():
    _, tok = tiny()
    ids, mask = encode_completions(tok, ["42", "7"], "cpu")
    assert ids.tolist()[1][:2] == [tok("7", add_special_tokens=False)["input_ids"][0], tok.eos_token_id]
    assert mask.tolist() == [[1, 1, 1], [1, 1, 0]]


def test_temperature_scales_log_probs():
    model, tok = tiny()
    ids, mask = encode_prompts(tok, ["1+1=2"], "cpu")
    lp_t = token_log_probs(model, ids, mask, 2, temperature=2.0)
    logits = model(ids).logits[0, -3:-1] / 2.0
    ref = torch.log_softmax(logits, -1).gather(-1, ids[0, -2:, None])[:, 0]
    torch.testing.assert_close(lp_t[0], ref, rtol=1e-5, atol=1e-6)
