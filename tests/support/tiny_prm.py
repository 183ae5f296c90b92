"""A tiny random reward model of Qwen2.5-Math-PRM's shape, built in-process: `tiny_prm(tmp_path)` writes a loadable
checkpoint plus tokenizer (byte-level BPE with the ChatML specials, "<extra_0>" and a chat template) and returns its
directory. Needs torch, transformers and tokenizers (imported when called, so that importing this module does not)."""
from __future__ import annotations

from pathlib import Path

from ttc.harvest.prm import STEP_SEPARATOR, native_prm_class

CHAT_TEMPLATE = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
_CORPUS = ["Step 1: Compute 2 + 2 = 4. Step 2: The answer is \\boxed{4}.",
           "Let x be the number of apples; then 3x = 12 so x = 4.", "Problem: find the sum of the roots."]


def tiny_tokenizer(with_separator: bool = True):
    """A byte-level BPE tokenizer (any text encodes) built like Qwen2's, with the ChatML specials and, optionally,
    <extra_0>."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + ([STEP_SEPARATOR] if with_separator else [])
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    # Qwen2's own normalizer and pre-tokenizer: AutoTokenizer may rebuild a saved copy as a Qwen2Tokenizer from
    # vocab + merges, and the round trip must tokenize exactly like the in-memory tokenizer.
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(_CORPUS * 4, trainers.BpeTrainer(
        vocab_size=320, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_model(tokenizer, head: str = "mlp", seed: int = 0):
    """Random 2-layer Qwen2 (hidden 32) with a 2-label token head: "mlp" is the PRM's own head (Linear-ReLU-Linear,
    `native_prm_class`), "token-classification" is transformers' Qwen2ForTokenClassification. A wide initializer
    spreads the step probabilities away from 0.5 so comparisons between runs mean something."""
    from transformers import Qwen2Config, Qwen2ForTokenClassification

    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, num_labels=2,
                         initializer_range=0.3, pad_token_id=tokenizer.pad_token_id)
    import torch

    torch.manual_seed(seed)
    cls = native_prm_class() if head == "mlp" else Qwen2ForTokenClassification
    return cls(config).eval()


def tiny_prm(tmp_path, head: str = "mlp", seed: int = 0) -> Path:
    """Write a tiny PRM checkpoint + tokenizer to tmp_path/tiny-prm-<head> and return that directory."""
    out = Path(tmp_path) / f"tiny-prm-{head}"
    tokenizer = tiny_tokenizer()
    tiny_model(tokenizer, head, seed).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
