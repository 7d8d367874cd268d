"""Runs inside the optimum-onnx venv (transformers < 4.58), NOT inside mtpedge: a standalone script.

    python optimum_worker.py HF_FOLDER ONNX_FOLDER THREADS EXPECTED_ROPE_THETA

Exports HF_FOLDER with optimum's dynamic-shape ONNX export into ONNX_FOLDER (once), loads it with
ORTModelForCausalLM, checks the rope θ the loaded config uses, then answers JSON lines on stdin
{"prompt_ids": [...], "max_new_tokens": n, "eos": [...]} with {"token_ids", "first_token_s", "elapsed_s"}.
The first stdout line is {"ready": true, ...} or {"error": "..."}.
"""

import json
import resource
import sys
import time
from pathlib import Path


class FirstTokenClock:
    def __init__(self):
        self.puts = 0
        self.first_at = None

    def put(self, value):
        self.puts += 1
        if self.puts == 2:
            self.first_at = time.perf_counter()

    def end(self):
        pass


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    hf_dir, onnx_dir, threads, theta = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    import onnxruntime as ort
    import torch
    from optimum.onnxruntime import ORTModelForCausalLM

    torch.set_num_threads(threads)
    if not (onnx_dir / "model.onnx").is_file():
        tmp = onnx_dir.with_name(onnx_dir.name + ".tmp")
        model = ORTModelForCausalLM.from_pretrained(str(hf_dir), export=True)
        model.save_pretrained(str(tmp))
        tmp.rename(onnx_dir)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    model = ORTModelForCausalLM.from_pretrained(str(onnx_dir), session_options=opts, use_cache=True)
    # transformers < 4.58 reads `rope_theta`, not transformers 5's `rope_parameters`: a config it misreads
    # silently decodes with θ = 10000 (diverging after ~30 tokens), so check what it actually uses
    used = getattr(model.config, "rope_theta", None)
    if used is None or abs(float(used) - theta) > 1e-3 * theta:
        say({"error": f"optimum's config has rope_theta {used}, the model needs {theta}"})
        return 1
    import importlib.metadata

    import transformers

    say({"ready": True, "rope_theta": used, "versions": {
        "optimum-onnx": importlib.metadata.version("optimum-onnx"), "optimum": importlib.metadata.version("optimum"),
        "transformers": transformers.__version__,
        "onnxruntime": ort.__version__, "torch": torch.__version__}})
    for line in sys.stdin:
        request = json.loads(line)
        ids = torch.tensor([request["prompt_ids"]], dtype=torch.long)
        eos = request["eos"]
        clock = FirstTokenClock()
        started = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=request["max_new_tokens"],
                             do_sample=False, eos_token_id=eos, pad_token_id=eos[0], streamer=clock)
        elapsed = time.perf_counter() - started
        new = [int(t) for t in out[0, ids.shape[1]:]]
        for i, token in enumerate(new):
            if token in eos:
                new = new[:i]
                break
        say({"token_ids": new, "first_token_s": (clock.first_at - started) if clock.first_at else elapsed,
             "elapsed_s": elapsed, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    return 0


if __name__ == "__main__":
    sys.exit(main())
