"""Export a DMTD bundle (fast recipe, context 1024) of a DMTD model file: python export_dmtd.py MODEL|default OUT"""
import sys
from pathlib import Path

from mtpedge.bundles import dmtd_export_config
from mtpedge.export.dmtd_bundle import export_dmtd_bundle
from mtpedge.models.loading import load_model

export_dmtd_bundle(load_model(None), sys.argv[1], Path(sys.argv[2]), dmtd_export_config(1024, True), progress=print)
