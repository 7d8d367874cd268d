"""scripts/train_recipe.sh, issue 16's recipe in one command, end to end on the tiny model: data, then both
trainers side by side for a few seconds each, and the release copies that would be shipped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_recipe_makes_data_then_both_release_copies_with_held_out_figures(tiny_model_dir, tmp_path):
    from mtpedge.models.dmtd_train import load_dmtd
    from mtpedge.models.loading import load_model
    from mtpedge.models.mtp_training import load_checkpoint

    model = tiny_model_dir("llama")
    env = {**os.environ, "SCALE": "0.002", "DISTILL_S": "120", "TRAIN_S": "2", "EVAL_EVERY": "1000000",
           "DEVICE": "cpu", "MTPEDGE": f"{sys.executable} -m mtpedge.main",
           "MTP_ARGS": "--k 2 --rank 4 --max-blocks 8", "DMTD_ARGS": "--decoding-layers 1 --thinking-layers 1 --rank 4"}
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(ROOT / "scripts" / "train_recipe.sh"), str(out), str(model)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "done: " in (out / "distill.log").read_text()  # the whole (scaled) plan, not cut by its time limit
    mtp = load_checkpoint(out / "mtp-release.pt")
    assert mtp["optimizer"] is None and mtp["step"] >= 1 and mtp["heldout"]  # final figures of a timed-out run
    assert "time limit" in (out / "dmtd.log").read_text()
    _, dmtd = load_dmtd(out / "dmtd-release.pt", load_model(model))
    assert dmtd["step"] >= 1
    # run again, it resumes both: the data is complete and each trainer is already past its time
    again = subprocess.run(["bash", str(ROOT / "scripts" / "train_recipe.sh"), str(out), str(model)], env=env,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert load_checkpoint(out / "mtp-release.pt")["step"] == mtp["step"]
