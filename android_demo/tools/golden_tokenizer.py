"""Golden cases for the Java tokenizer bridge: tiny byte-level BPE tokenizers trained here (GPT-2 style as
SmolLM2, and Qwen2 style: regex Split + NFC), their encodings and decodings by the `tokenizers` library, the
stream decoder, and chat templates rendered by the Python runtime's jinja2 path."""

from __future__ import annotations

import json
from pathlib import Path

from golden_common import output, write
from mtpedge.runtime.bundle import TokenizerInfo, read_manifest
from mtpedge.runtime.tokenizer import StreamDecoder, TextTokenizer
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
              r"\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's 2026 and we're decoding 12345 tokens!",
    "def main():\n    print('hello, world')\n    return 0\n",
    "Multi-token prediction drafts trees; the verifier accepts the longest matching path.",
    "Café, naïve, façade — déjà vu. Ünïcödé and 日本語のテキスト, emoji 🙂🚀.",
    "  leading spaces\tand\ttabs\n\nnew paragraphs\r\nwindows lines   trailing   ",
] * 20
STRINGS = [
    "", "Hello world", "The quick brown fox jumps over the lazy dog.", "It's we're they'll I'd",
    "numbers 0 7 42 12345 3.14159", "  two leading spaces", "trailing spaces   ", "tabs\tand\nnewlines\n\n",
    "Café déjà vu naïve", "日本語のテキスト", "emoji 🙂🚀 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "<|im_start|>user\nHi!<|im_end|>\n",
    "text<|im_end|>more<|endoftext|>", "x" * 40, "don't DON'T Don'T", "a\r\nb\rc", "unseen zqxj words vv",
    "e\u0301 composed vs \u00e9", "mixed123abc456", "!!!???...,,,", "\u00a0non-breaking\u2003space",
]
CHATS = [
    [{"role": "user", "content": "Hi there"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three fruits."}],
    [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
     {"role": "user", "content": "And times 3?\nExplain."}],
]


def train(style: str) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    if style == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    if style == "gpt2":  # a BOS added by the post-processor, as LLaMA-3 style tokenizers do
        tok.post_processor = processors.TemplateProcessing(single="<|im_start|> $A", special_tokens=[
            ("<|im_start|>", tok.token_to_id("<|im_start|>"))])
    return tok


def encode_cases(tok: Tokenizer) -> list[dict]:
    cases = []
    for text in STRINGS:
        plain = tok.encode(text, add_special_tokens=False).ids
        cases.append({"text": text, "ids": plain, "ids_with_special": tok.encode(text).ids,
                      "decoded": tok.decode(plain, skip_special_tokens=True),
                      "decoded_with_special": tok.decode(plain, skip_special_tokens=False)})
    return cases


def stream_case(folder: Path, tok: Tokenizer) -> list[dict]:
    """Deltas the Python StreamDecoder yields when ids arrive one at a time (split UTF-8 is held back)."""
    info = TokenizerInfo(file="tokenizer.json", bos_token_id=None, eos_token_ids=[2], chat_template=None)
    text_tok = TextTokenizer(folder, info)
    cases = []
    for text in ["emoji 🙂🚀 and 日本語", "Café déjà vu", "plain words here"]:
        ids = tok.encode(text, add_special_tokens=False).ids
        stream = StreamDecoder(text_tok)
        cases.append({"ids": ids, "deltas": [stream.push([i]) for i in ids]})
    return cases


def chat_cases(template: str | None, name: str, folder: Path) -> dict:
    """Conversations rendered by TextTokenizer.render_chat (jinja2), the path the Python runtime takes."""
    info = TokenizerInfo(file="tokenizer.json", bos_token_id=None, eos_token_ids=[], chat_template=template,
                         bos_token="<|im_start|>", eos_token="<|im_end|>")
    renderer = TextTokenizer(folder, info)
    return {"name": name, "template": template,
            "cases": [{"messages": m, "rendered": renderer.render_chat(m)} for m in CHATS]}


QWEN_LIKE_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}{%- if not (message.role == 'system' and "
    "loop.first) %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def write_all(bundle: str) -> None:
    for style in ("gpt2", "qwen"):
        tok = train(style)
        folder = output() / f"tokenizer_{style}"
        folder.mkdir(parents=True, exist_ok=True)
        tok.save(str(folder / "tokenizer.json"))
        write(f"tokenizer_{style}/cases.json", {"encode": encode_cases(tok), "stream": stream_case(folder, tok)})
    templates = {"plain": None, "qwen_like": QWEN_LIKE_TEMPLATE}
    bundle_path = Path(bundle)
    if (bundle_path / "manifest.json").is_file():
        manifest = read_manifest(bundle_path)
        templates["smollm2"] = manifest.tokenizer.chat_template
        real = Tokenizer.from_file(str(bundle_path / manifest.tokenizer.file))
        write("tokenizer_smollm2_cases.json", {"encode": encode_cases(real)})
    elif (output() / "chat.json").is_file():  # keep the recorded real template cases
        templates["smollm2"] = next(c["template"] for c in json.loads((output() / "chat.json").read_text())["templates"]
                                    if c["name"] == "smollm2")
    folder = output() / "tokenizer_gpt2"
    write("chat.json", {"templates": [chat_cases(t, n, folder) for n, t in templates.items()]})
