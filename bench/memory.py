"""Resident memory: the process's current RSS sampled in a background thread, its peak per named window."""

from __future__ import annotations

import resource
import threading
from contextlib import contextmanager
from pathlib import Path


def current_rss_mb() -> float:
    """VmRSS of this process (Linux /proc); falls back to the lifetime peak elsewhere."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class RssMonitor:
    """`with monitor.window("lookup"): ...` records the highest RSS seen inside each window (every 10 ms)."""

    def __init__(self, interval_s: float = 0.01) -> None:
        self.interval_s = interval_s
        self.peaks: dict[str, float] = {}
        self._active: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._note()

    def _note(self) -> None:
        with self._lock:
            if self._active is not None:
                self.peaks[self._active] = max(self.peaks.get(self._active, 0.0), current_rss_mb())

    @contextmanager
    def window(self, name: str):
        with self._lock:
            self._active = name
        self._note()
        try:
            yield
        finally:
            self._note()
            with self._lock:
                self._active = None

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
