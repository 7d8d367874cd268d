"""The trained files this installation ships for the embedded default model (export/data), by path.

Import-light on purpose (no torch): every run on a cached -mtp or -dmtd bundle checks that it was exported from
these files (cli/bundles.py).
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).parent / "data"
# the adapter `train-mtp --release-copy` shipped (README "Trained multi-token adapter"): what `--mtp-adapter
# default` and `generate --drafter mtp` without a bundle use
DEFAULT_ADAPTER = DATA / "smollm2-135m-instruct-mtp.pt"
# the DMTD model (README "DMTD"): what `--drafter dmtd-spec` / `dmtd` export into the default model's -dmtd cache
# bundle on first use
DEFAULT_DMTD = DATA / "smollm2-135m-instruct-dmtd.pt"
