"""Tiny random LLaMA / Qwen2 / Qwen3 models, built in code, saved as ordinary Hugging Face folders.

Tests go through the same loader as real checkpoints. Sizes differ on every axis (hidden 48, 4 heads over
2 KV heads, head_dim 12 or 16, 3 layers) so that a transposed or mis-grouped dimension cannot pass by symmetry.
"""

from __future__ import annotations

from pathlib import Path

import torch

TINY_TEXT = (
    "The quick brown fox jumps over the lazy dog. A small model speaks in short sentences. "
    "Numbers like 12, 345 and 6789 appear. def add(a, b): return a + b. "
    "Questions? Answers! Lists: one, two, three. The end of the story is near."
)
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TINY_ARCHITECTURES = ("llama", "qwen2", "qwen3")


def tiny_tokenizer(vocab_size: int = 384):
    """A byte-level BPE trained on a few sentences: real merges, special tokens, a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([TINY_TEXT] * 4, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )


def tiny_hf_config(architecture: str, vocab_size: int):
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    common = dict(
        vocab_size=vocab_size,
        hidden_size=48,
        intermediate_size=80,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    if architecture == "llama":
        # llama3-style rope scaling and an untied output matrix exercise those code paths
        rope = {"rope_type": "llama3", "rope_theta": 50000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
        return LlamaConfig(head_dim=12, tie_word_embeddings=False, rope_parameters=rope, **common)
    if architecture == "qwen2":
        return Qwen2Config(tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                           **common)
    if architecture == "qwen3":
        return Qwen3Config(head_dim=16, tie_word_embeddings=True,
                           rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, **common)
    raise ValueError(f"no tiny config for {architecture!r} (choose from {TINY_ARCHITECTURES})")


def make_tiny_model(architecture: str, folder: Path, seed: int = 0) -> Path:
    """Write a random tiny model of `architecture` as a Hugging Face folder and return the folder."""
    from transformers import AutoModelForCausalLM

    tokenizer = tiny_tokenizer()
    config = tiny_hf_config(architecture, vocab_size=len(tokenizer))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # default init is tiny; widen it so logits are far from uniform and ties are rare
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            elif name.endswith("bias"):
                param.normal_(0.0, 0.1)
            else:
                param.normal_(0.0, 0.15)
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
