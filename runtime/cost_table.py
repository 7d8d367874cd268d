"""What one graph call of each width costs on the device at hand: the table cost-aware draft trees read.

A cost table belongs to one bundle (its source weights and graph set) and one device. It comes from a
measurement on this machine, from an on-device profile (Qualcomm AI Hub: `mtpedge hub profile`), or is flat
(every width costs the same: the NPU assumption). File form (JSON):

    {"format": "mtpedge-cost-table", "version": 1,
     "bundle": {"model_name": "...", "source_sha256": "...", "context": 1024},
     "device": "2-core x86_64, onnxruntime 1.32 CPU, 2 threads",
     "origin": "measured" | "flat" | "aihub-profile" | ...,
     "created": "2026-11-30T22:00:00+00:00",
     "seconds": {"1": 0.0112, "16": 0.0201}}          # median seconds per decode call, by graph width

`CostTable.check(manifest)` says why a table does not fit a bundle (another model, a width it lacks);
the caller then falls back to a safe table and tells the user.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from .bundle import Manifest

COST_FORMAT = "mtpedge-cost-table"
COST_VERSION = 1


class CostTableError(ValueError):
    """A cost table that cannot be read or does not belong to the bundle; the message names the fix."""


def decode_widths(manifest: Manifest) -> list[int]:
    return sorted({g.width for g in manifest.graphs if g.kind == "decode"})


@dataclass(frozen=True)
class CostTable:
    seconds: dict[int, float]  # graph width -> seconds per call
    model_name: str
    source_sha256: str
    context: int
    device: str
    origin: str
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    def __post_init__(self) -> None:
        if not self.seconds:
            raise CostTableError("a cost table needs at least one width")
        bad = {w: s for w, s in self.seconds.items() if not (int(w) >= 1 and float(s) > 0)}
        if bad:
            raise CostTableError(f"cost table widths must be >= 1 and seconds > 0, got {bad}")

    @classmethod
    def flat(cls, manifest: Manifest, device: str = "flat: every width costs the same (NPU assumption)"
             ) -> CostTable:
        return cls({w: 1.0 for w in decode_widths(manifest)}, manifest.model_name, manifest.source_sha256,
                   manifest.context, device, "flat")

    def with_seconds(self, seconds: dict[int, float]) -> CostTable:
        """The same table (bundle, device, origin) with other seconds: a run's corrections (tree_sizing.CallCosts)."""
        return replace(self, seconds=seconds)

    def cost(self, width: int) -> float:
        """Seconds of a call of the narrowest listed width that holds `width` slots."""
        return self.seconds[self.width_for(width)]

    def width_for(self, slots: int) -> int:
        """The narrowest listed width that holds `slots` slots (the graph such a call runs)."""
        fits = [w for w in self.seconds if w >= slots]
        if not fits:
            raise CostTableError(f"no width in the cost table holds {slots} slots (widths {sorted(self.seconds)})")
        return min(fits)

    def check(self, manifest: Manifest) -> str | None:
        """None if the table fits the bundle, else what is wrong (for a message and a fallback)."""
        if self.source_sha256 != manifest.source_sha256:
            return (f"the cost table was made for {self.model_name} (sha256 {self.source_sha256[:12]}), not for "
                    f"this bundle's {manifest.model_name} (sha256 {manifest.source_sha256[:12]})")
        missing = [w for w in decode_widths(manifest) if w not in self.seconds]
        if missing:
            return f"the cost table lacks the bundle's decode widths {missing} (it has {sorted(self.seconds)})"
        return None

    def to_json(self) -> dict:
        return {"format": COST_FORMAT, "version": COST_VERSION,
                "bundle": {"model_name": self.model_name, "source_sha256": self.source_sha256,
                           "context": self.context},
                "device": self.device, "origin": self.origin, "created": self.created,
                "seconds": {str(w): float(s) for w, s in sorted(self.seconds.items())}}

    @classmethod
    def from_json(cls, data: dict, origin_name: str = "cost table") -> CostTable:
        if not isinstance(data, dict) or data.get("format") != COST_FORMAT:
            raise CostTableError(f"{origin_name} is not an mtpedge cost table (format "
                                 f"{data.get('format') if isinstance(data, dict) else None!r})")
        if data.get("version") != COST_VERSION:
            raise CostTableError(f"{origin_name}: cost table version {data.get('version')}, this mtpedge reads "
                                 f"{COST_VERSION}: measure it again (`--cost-model measured`)")
        try:
            bundle = data["bundle"]
            return cls({int(w): float(s) for w, s in data["seconds"].items()}, str(bundle["model_name"]),
                       str(bundle["source_sha256"]), int(bundle["context"]), str(data.get("device", "")),
                       str(data.get("origin", "file")), str(data.get("created", "")))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise CostTableError(f"{origin_name} is malformed ({err!r}): measure it again") from err

    def save(self, path: str | Path) -> None:
        """Written to a temporary file and renamed: a reader never sees half a table."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
        tmp.write_text(json.dumps(self.to_json(), indent=1))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path) -> CostTable:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError as err:
            raise CostTableError(f"cost table {path} does not exist") from err
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
            raise CostTableError(f"cost table {path} is not readable JSON ({err})") from err
        return cls.from_json(data, str(path))
