"""Peers: other decoders of the same model, run by the bench beside mtpedge's own methods.

Each peer is optional: `detect_peers` says which can run here and, for each that cannot, why and how to
install it. Peers receive the same prompt ids (mtpedge's tokenizer and chat template), the same greedy
setting, token limit and thread count.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

# peer name -> (module in this package, what it needs)
PEERS = {
    "llama.cpp": ("llama_cpp_peer", "llama-cpp-python (pip install llama-cpp-python==0.3.36, a ~10 min source build)"),
    "llama.cpp-lookup": ("llama_cpp_peer", "llama-cpp-python, as llama.cpp"),
    "llama.cpp-native": ("llama_cpp_native", "llama.cpp's llama-completion (scripts/setup_bench_peers.sh builds it)"),
    "llama.cpp-native-lookup": ("llama_cpp_native", "llama.cpp's llama-lookup (scripts/setup_bench_peers.sh)"),
    "transformers": ("transformers_peer", "transformers and torch (pip install 'mtpedge[export]')"),
    "transformers-lookup": ("transformers_peer", "transformers and torch, as transformers"),
    "optimum-ort": ("optimum_peer", "a separate venv with optimum-onnx (see --optimum-python)"),
}


@dataclass(frozen=True)
class PeerConfig:
    model: Path  # the GGUF file (or Hugging Face folder) the bundle was exported from
    threads: int
    context: int
    eos_token_ids: tuple[int, ...]
    lookup_tokens: int = 10  # draft length of the prompt-lookup peers (llama.cpp's and transformers' default)
    optimum_python: Path | None = None  # python of the optimum-onnx venv
    work_dir: Path | None = None  # where converted models are cached
    llama_cpp_bin: Path | None = None  # folder of llama.cpp's own tools (None: .venv/llama.cpp/bin)


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def peer_missing_reason(name: str, config: PeerConfig) -> str | None:
    """None if the peer can run here, else why not (with the fix)."""
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}: choose from {', '.join(PEERS)}")
    is_gguf = config.model.suffix == ".gguf"
    if name.startswith("llama.cpp"):
        if not _has("llama_cpp"):
            return f"not installed: {PEERS[name][1]}"
        if not is_gguf:
            return f"llama.cpp needs a GGUF file, the model is {config.model}"
        if name.startswith("llama.cpp-native"):
            from .llama_cpp_native import native_missing_reason

            return native_missing_reason(name, config.llama_cpp_bin)
    if name.startswith("transformers") and not (_has("transformers") and _has("torch")):
        return f"not installed: {PEERS[name][1]}"
    if name == "optimum-ort":
        if config.optimum_python is None or not Path(config.optimum_python).is_file():
            return (f"no optimum-onnx venv (python {config.optimum_python}): python3 -m venv .venv-optimum && "
                    ".venv-optimum/bin/pip install optimum-onnx==0.1.0 onnxruntime torch==2.13.0, "
                    "then pass --optimum-python .venv-optimum/bin/python")
        if not (_has("transformers") and _has("torch")):
            return "converting the model for optimum needs transformers and torch here (pip install 'mtpedge[export]')"
    return None


def make_peer(name: str, config: PeerConfig):
    """Load a peer (slow: reads the model); raises if it cannot run."""
    module = importlib.import_module(f"{__name__}.{PEERS[name][0]}")
    return module.make(name, config)
