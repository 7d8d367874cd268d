"""mtpedge: multi-token prediction for LLMs on edge devices.

Layout of the namespace (each a top-level folder of the repository):
  mtpedge.models   weights loading, the PyTorch reference decoder (torch)
  mtpedge.export   static-shape ONNX graphs and the bundle writer (torch)
  mtpedge.runtime  bundle loader, KV cache, draft trees, verifier, generate loop (numpy + onnxruntime only)
  mtpedge          the command line (this folder, `cli/`)
"""

__version__ = "0.1.0"
