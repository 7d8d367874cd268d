"""What machine and software the figures come from."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path

PACKAGES = ("mtpedge", "numpy", "onnxruntime", "tokenizers", "llama_cpp_python", "transformers", "torch",
            "matplotlib")
INTERESTING_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "neon")


def _cpuinfo() -> dict[str, str]:
    path = Path("/proc/cpuinfo")
    info: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if ":" in line:
                key, value = (part.strip() for part in line.split(":", 1))
                info.setdefault(key, value)
    return info


def _memory_gib() -> float | None:
    path = Path("/proc/meminfo")
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    return None


def versions() -> dict[str, str]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def llama_cpp_features() -> str | None:
    """The instruction sets the installed llama.cpp was built with (its own system-info line), or None."""
    try:
        import llama_cpp
    except ImportError:
        return None
    return llama_cpp.llama_print_system_info().decode(errors="replace").strip()


def describe_machine() -> dict:
    cpu = _cpuinfo()
    flags = set((cpu.get("flags") or cpu.get("Features") or "").split())
    return {
        "cpu_model": cpu.get("model name") or platform.processor() or platform.machine(),
        "cpu_mhz": float(cpu["cpu MHz"]) if "cpu MHz" in cpu else None,
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_flags": sorted(f for f in INTERESTING_FLAGS if f in flags),
        "memory_gib": _memory_gib(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "versions": versions(),
        "load_average_at_start": load_average(),
        "llama_cpp_features": llama_cpp_features(),
    }
