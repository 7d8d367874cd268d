"""Which MatMuls of the exact GGUF grid can take int8 activations (MatMulNBits accuracy level 4) and keep quality.

For each mix (the roles that keep float activations, level 0, and the roles whose int8 activations are quantized
in blocks of 16 inputs instead of the grid's 32; every other 4-bit MatMul gets level 4; 8-bit blocks always run at
level 4), the float32 bundle is quantized with that mix and compared with it on the
quality report's held-out text (top-1 agreement, perplexity) and its three prompts (greedy tokens equal before
the first difference, of 32).

    python benchmarks/activation_mix.py FLOAT_BUNDLE OUT_DIR [MIX ...]    # MIX: all4 down0 ... down16 all16

One JSON line per mix.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mtpedge.export.quality import HELD_TEXT, PROMPTS, _common_prefix, _prompt_ids, perplexity, sequence_logits  # noqa: E402
from mtpedge.export.quant_config import QuantConfig  # noqa: E402
from mtpedge.export.quantize_bundle import quantize_bundle  # noqa: E402
from mtpedge.models.loading import default_model_path  # noqa: E402
from mtpedge.runtime.engine import Engine  # noqa: E402
from mtpedge.runtime.generate import generate  # noqa: E402

ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
MIXES = {  # name: (float-activation roles, fine-block roles)
    "all4": ((), ()),
    "down0": (("down_proj",), ()),
    "down0-o0": (("down_proj", "o_proj"), ()),
    "mlp0": (("down_proj", "gate_proj", "up_proj"), ()),
    "attn0": (("q_proj", "k_proj", "v_proj", "o_proj"), ()),
    "down16": ((), ("down_proj",)),
    "down16-head16": ((), ("down_proj", "lm_head")),
    "all16": ((), ALL),
    "all16-head16": ((), (*ALL, "lm_head")),
}


def greedy(engine: Engine) -> list[list[int]]:
    return [generate(engine, _prompt_ids(engine, p), 32, stop_token_ids=set(), on_overflow="stop").token_ids
            for p in PROMPTS]


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    float_bundle, out_dir, mixes = Path(argv[0]), Path(argv[1]), argv[2:] or list(MIXES)
    ref = Engine.load(float_bundle, threads=2)
    ids = ref.tokenizer.encode(HELD_TEXT)[: ref.context]
    ref_logits, ref_greedy = sequence_logits(ref, ids), greedy(ref)
    del ref
    for name in mixes:
        float_roles, fine_roles = MIXES[name]
        config = QuantConfig("gguf", accuracy_level=4, float_activation_roles=float_roles,
                             fine_activation_roles=fine_roles, quality_report=False)
        folder = quantize_bundle(float_bundle, out_dir / name, config, default_model_path(), progress=lambda _: None)
        engine = Engine.load(folder, threads=2)
        logits = sequence_logits(engine, ids)
        print(json.dumps({
            "mix": name, "float_activation_roles": float_roles, "fine_activation_roles": fine_roles,
            "label": config.label,
            "top1_agreement": round(float((logits.argmax(-1) == ref_logits.argmax(-1)).mean()), 4),
            "perplexity": round(perplexity(logits, ids), 4),
            "perplexity_float32": round(perplexity(ref_logits, ids), 4),
            "greedy_match": [_common_prefix(a, b) for a, b in zip(ref_greedy, greedy(engine), strict=True)],
        }), flush=True)
        del engine
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
