"""`--device auto|cpu|cuda` for the commands that run PyTorch (data generation and training).

auto takes the CUDA device when torch sees one, else the CPU, so one command line serves both machines.
"""

from __future__ import annotations

import torch

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(name: str) -> torch.device:
    if name not in DEVICES:
        raise ValueError(f"--device {name!r} is not one of {', '.join(DEVICES)}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device cuda: torch {torch.__version__} sees no CUDA device (a CPU-only build, or no "
                         "driver); pass --device cpu, or auto to take CUDA only when present")
    return torch.device(name)


PRECISIONS = ("float32", "bfloat16")


def training_autocast(device: torch.device | str, precision: str) -> torch.autocast:
    """The trainers' forward passes in `precision`: bfloat16 runs the matrix products in bfloat16 (AMX on recent
    Xeons, tensor cores on a GPU) while the weights, their gradients, the optimizer and the losses stay float32.
    On this Intel Xeon a train-mtp step took ~1.3 s instead of ~1.9 (benchmarks/results/mtp/README.md,
    eighteenth session)."""
    if precision not in PRECISIONS:
        raise ValueError(f"--precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    device_type = torch.device(device).type
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=precision == "bfloat16")
