"""optimum-onnx's ORTModelForCausalLM (dynamic-shape ONNX export), run as a subprocess in its own venv.

optimum-onnx 0.1.0 pins transformers < 4.58, which clashes with mtpedge's transformers 5, so the model is
converted here (GGUF -> float32 Hugging Face folder) and exported, loaded and run by `optimum_worker.py`
under the other venv's python, one JSON line per generation.
"""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ..methods import MethodRun
from . import PeerConfig

log = logging.getLogger(__name__)
WORKER = Path(__file__).with_name("optimum_worker.py")


def write_hf_folder(model: Path, out: Path) -> float:
    """Save `model` as a float32 Hugging Face folder readable by transformers 4.x; returns its rope θ."""
    from .transformers_peer import load_hf_model

    hf = load_hf_model(model)
    hf.hf_quantizer = None  # a GGUF-loaded model refuses save_pretrained until its quantizer state is dropped
    if hasattr(hf.config, "quantization_config"):
        del hf.config.quantization_config
    tmp = out.with_name(out.name + ".tmp")
    hf.save_pretrained(str(tmp))
    config_path = tmp / "config.json"
    config = json.loads(config_path.read_text())
    rope = config.get("rope_parameters") or {}
    theta = float(rope.get("rope_theta", config.get("rope_theta", 10000.0)))
    # transformers 5 writes only rope_parameters; 4.x reads rope_theta and would silently fall back to 10000
    config["rope_theta"] = theta
    if rope.get("rope_type", "default") != "default":
        config["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
    config_path.write_text(json.dumps(config, indent=2))
    tmp.rename(out)
    return theta


class OptimumPeer:
    kind = "peer"

    def __init__(self, name: str, config: PeerConfig) -> None:
        self.name = name
        self.eos = list(config.eos_token_ids)
        work = Path(config.work_dir or ".") / "optimum"
        work.mkdir(parents=True, exist_ok=True)
        hf_dir, onnx_dir = work / "hf", work / "onnx"
        theta_file = work / "rope_theta.txt"
        if not hf_dir.is_dir():
            log.info("converting %s to a Hugging Face folder for optimum", config.model)
            theta_file.write_text(str(write_hf_folder(config.model, hf_dir)))
        theta = float(theta_file.read_text())
        self.log_path = work / "worker.log"  # optimum and torch warn a lot: keep it out of the bench's output
        with open(self.log_path, "w") as log_file:
            self.proc = subprocess.Popen(
                [str(config.optimum_python), str(WORKER), str(hf_dir), str(onnx_dir), str(config.threads),
                 str(theta)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file, text=True)
        hello = self._read()
        if "error" in hello:
            self.close()
            raise RuntimeError(f"optimum-ort: {hello['error']} (log: {self.log_path})")
        self.info = hello
        self.peak_rss_mb = 0.0

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise RuntimeError(f"the optimum worker exited (code {code}) without answering; see {self.log_path}")
        return json.loads(line)

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int) -> MethodRun:
        request = {"prompt_ids": list(prompt_ids), "max_new_tokens": max_new_tokens, "eos": self.eos}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer = self._read()
        self.peak_rss_mb = max(self.peak_rss_mb, answer["peak_rss_mb"])
        return MethodRun(answer["token_ids"], answer["first_token_s"], answer["elapsed_s"],
                         extra={"subprocess_peak_rss_mb": answer["peak_rss_mb"]})

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def make(name: str, config: PeerConfig) -> OptimumPeer:
    return OptimumPeer(name, config)
