"""The real embedded model, SmolLM2-135M-Instruct: export parity and greedy equality with transformers."""

from __future__ import annotations

import pytest
import torch

from mtpedge.export.parity import graph_parity
from mtpedge.runtime.bundle import read_manifest
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate

from .spec_bench import short_questions

pytestmark = pytest.mark.slow


def test_graphs_match_the_reference(smollm2_float_bundle, smollm2_model):
    manifest = read_manifest(smollm2_float_bundle)
    for graph in manifest.graphs:
        for n_past in (0, 100):
            result = graph_parity(smollm2_model.decoder, smollm2_float_bundle / graph.file,
                                  manifest.graph_shape(graph.width), n_past)
            # 30 float32 layers in two kernels: absolute error grows with logit size (~35); relative stays ~1e-5
            assert result["max_rel"] < 1e-4, (graph.name, result)
            assert result["argmax_agree"] == 1.0, (graph.name, result)


def test_greedy_text_equals_transformers_generate_on_20_prompts(smollm2_float_bundle, smollm2_model):
    from transformers import AutoModelForCausalLM

    model_path = smollm2_model.source
    hf = AutoModelForCausalLM.from_pretrained(model_path.parent, gguf_file=model_path.name,
                                              dtype=torch.float32).eval()
    engine = Engine.load(smollm2_float_bundle)
    prompts = [q.turns[0] for q in short_questions(per_category=2, max_chars=400)][:20]
    assert len(prompts) == 20
    stops = sorted(engine.stop_token_ids)
    mismatches = []
    for prompt in prompts:
        ids = engine.tokenizer.encode_chat([{"role": "user", "content": prompt}])
        ours = generate(engine, ids, max_new_tokens=64).token_ids
        with torch.no_grad():
            out = hf.generate(torch.tensor([ids]), max_new_tokens=64, do_sample=False, eos_token_id=stops,
                              pad_token_id=stops[0])
        theirs = out[0, len(ids):].tolist()
        theirs = theirs[: next((i for i, t in enumerate(theirs) if t in stops), len(theirs))]
        if ours != theirs:
            mismatches.append((prompt[:40], ours[:8], theirs[:8]))
    assert not mismatches, mismatches
