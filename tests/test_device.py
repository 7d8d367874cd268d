"""`--device auto|cpu|cuda`: auto takes CUDA only when torch sees it; an impossible choice is refused clearly."""

from __future__ import annotations

import pytest
import torch

from mtpedge.models.device import resolve_device


def test_auto_takes_cuda_only_when_present():
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu").type == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_cuda_without_a_device_names_the_fix():
    with pytest.raises(ValueError, match="sees no CUDA device.*--device cpu"):
        resolve_device("cuda")


def test_unknown_device_is_refused():
    with pytest.raises(ValueError, match="not one of auto, cpu, cuda"):
        resolve_device("gpu")
