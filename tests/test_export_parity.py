"""The exported graphs compute what the PyTorch reference computes, and the reference what transformers computes.

Tiny random LLaMA (llama3 rope scaling, untied output), Qwen2 (q/k/v biases, tied) and Qwen3 (q/k norms, tied).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mtpedge.export.parity import graph_parity, reference_call
from mtpedge.models.loading import load_model
from mtpedge.runtime.bundle import read_manifest
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate

ARCHS = ["llama", "qwen2", "qwen3"]
PROMPTS = ["The quick brown fox", "def add(a, b):", "Numbers like 12", "Questions? Answers!", "A small model",
           "one, two, three. The end of the story is near. The quick brown fox jumps over the lazy dog again"]


def hf_model(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


@pytest.mark.parametrize("arch", ARCHS)
def test_reference_decoder_equals_transformers(arch, tiny_model_dir):
    folder = tiny_model_dir(arch)
    ours = load_model(folder).decoder
    tokens = np.random.default_rng(0).integers(0, ours.cfg.vocab_size, 40)
    logits, _ = reference_call(ours, tokens, context=64)
    with torch.no_grad():
        theirs = hf_model(folder)(torch.from_numpy(tokens)[None]).logits[0].numpy()
    np.testing.assert_allclose(logits, theirs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("n_past", [0, 5, 200])
def test_every_graph_matches_the_reference(arch, n_past, tiny_model_dir, tiny_bundle):
    decoder = load_model(tiny_model_dir(arch)).decoder
    bundle = tiny_bundle(arch)
    manifest = read_manifest(bundle)
    for graph in manifest.graphs:
        past = min(n_past, manifest.context - graph.width)
        result = graph_parity(decoder, bundle / graph.file, manifest.graph_shape(graph.width), past)
        assert result["max_abs"] < 1e-4, (graph.name, result)
        assert result["argmax_agree"] == 1.0


def transformers_greedy(model, prompt_ids, max_new_tokens, stop_ids):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=max_new_tokens, do_sample=False,
                             eos_token_id=sorted(stop_ids), pad_token_id=sorted(stop_ids)[0])
    new = out[0, len(prompt_ids):].tolist()
    return [t for t in new[: next((i for i, t in enumerate(new) if t in stop_ids), len(new))]]


@pytest.mark.parametrize("arch", ARCHS)
def test_runtime_greedy_equals_transformers_generate(arch, tiny_model_dir, tiny_bundle):
    engine = Engine.load(tiny_bundle(arch))
    model = hf_model(tiny_model_dir(arch))
    stops = engine.stop_token_ids
    for prompt in PROMPTS:  # the last prompt is longer than the prefill width: chunked prefill
        ids = engine.tokenizer.encode(prompt)
        ours = generate(engine, ids, max_new_tokens=40).token_ids
        assert ours == transformers_greedy(model, ids, 40, stops), prompt


def test_tokenizer_and_chat_template_match_transformers(tiny_model_dir, tiny_bundle):
    from transformers import AutoTokenizer

    theirs = AutoTokenizer.from_pretrained(tiny_model_dir("qwen3"))
    ours = Engine.load(tiny_bundle("qwen3")).tokenizer
    for text in PROMPTS:
        assert ours.encode(text) == theirs(text)["input_ids"]
        assert ours.decode(ours.encode(text)) == theirs.decode(theirs(text)["input_ids"], skip_special_tokens=True)
    messages = [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "and now?"}]
    rendered = theirs.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert ours.render_chat(messages) == rendered
    assert ours.encode_chat(messages) == theirs(rendered, add_special_tokens=False)["input_ids"]
