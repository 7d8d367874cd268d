"""One way to name a drafter and its settings: the spec "hybrid:width=32:masks=2", checked before any engine loads."""

from __future__ import annotations

import pytest

from mtpedge.runtime.drafters import (
    DRAFTERS,
    DrafterSpec,
    check_fits,
    describe_drafters,
    drafter_names,
    parse_drafter,
    split_specs,
)


def test_a_spec_reads_each_option_as_its_declared_type():
    assert parse_drafter("hybrid") == DrafterSpec("hybrid")
    spec = parse_drafter("hybrid:width=32:mask-init=soft:mask_update=0.2")
    assert spec.kwargs == {"width": 32, "mask_init": "soft", "mask_update": 0.2}
    assert parse_drafter("mtp:mtp_layout=tree:lookup=true").kwargs == {"mtp_layout": "tree", "lookup": True}
    assert parse_drafter("mtp:lookup=False").kwargs == {"lookup": False}  # not the truthy string "False"
    spec = parse_drafter("esp:masks=2:tree=static:6,1:width=32")  # a value with a colon in it
    assert spec.kwargs == {"masks": 2, "tree": "static:6,1", "width": 32}
    assert parse_drafter(" none ") == DrafterSpec("none")


def test_a_spec_prints_as_it_parses_and_keys_a_cache():
    spec = parse_drafter("hybrid:masks=2:width=32")
    assert str(spec) == "hybrid:masks=2:width=32" and parse_drafter(str(spec)) == spec
    assert str(parse_drafter("mtp:lookup=true")) == "mtp:lookup=true"
    assert {spec: 1}[parse_drafter("hybrid:width=32:masks=2")] == 1  # option order does not matter


@pytest.mark.parametrize("text, message", [
    ("medusa", "unknown drafter 'medusa': choose one of none, dmtd, dmtd-spec, esp, hybrid, lookup, mtp"),
    ("lookup:masks=2", "takes no option masks; its options: width, max_ngram, min_ngram, branches"),
    ("none:width=4", "plain decoding \\(none\\) takes no options"),
    ("hybrid:width=wide", "option width takes an integer, got 'wide'"),
    ("hybrid:width=3.5", "option width takes an integer"),
    ("esp:mask_update=fast", "option mask_update takes a number"),
    ("mtp:lookup=maybe", "option lookup takes true or false"),
    ("esp:mask_init=zeros", "unknown mask init 'zeros': choose soft, hard, sample, mean or learned"),
    ("esp:tree=spiral", "unknown tree 'spiral'"),
    ("esp:masks=1:tree=static:3,1", "2 depths but only 1 mask slot"),
    ("esp:masks=4", "mask slots must be 1..3"),
    ("mtp:mtp_layout=quadratic:lookup=true", "need the tree layout"),
    ("dmtd:tau=0", "τ must be >= 1"),
    ("esp:soft", "is not KEY=VALUE|options are KEY=VALUE"),
    ("hybrid:width=8:width=16", "gives option width twice"),
    (":width=8", "has no name"),
])
def test_bad_specs_are_refused_with_the_fix(text, message):
    with pytest.raises(ValueError, match=message):
        parse_drafter(text)


def test_keyword_options_are_checked_the_same_way():
    from mtpedge.runtime.drafters.base import make_spec

    assert make_spec("lookup", {"width": 4, "branches": None}, DRAFTERS).kwargs == {"width": 4}  # None: default
    with pytest.raises(ValueError, match="option width takes an integer"):
        make_spec("lookup", {"width": True}, DRAFTERS)
    assert make_spec("esp", {"mask_update": 0}, DRAFTERS).kwargs == {"mask_update": 0.0}


def test_a_comma_list_of_specs_keeps_commas_inside_values():
    assert split_specs("none,lookup,esp:tree=static:6,1,hybrid:width=32, llama.cpp") == [
        "none", "lookup", "esp:tree=static:6,1", "hybrid:width=32", "llama.cpp"]


def test_a_width_is_checked_against_the_bundle_decode_graphs():
    check_fits(parse_drafter("hybrid:width=32"), [1, 8, 32])
    check_fits(parse_drafter("hybrid"), [1, 8])  # a default width is capped, not refused
    with pytest.raises(ValueError, match="width 64 is above this bundle's widest decode graph"):
        check_fits(parse_drafter("hybrid:width=64"), [1, 8, 32])


def test_help_lists_every_drafter_and_option_from_the_registry():
    text = describe_drafters()
    for name in drafter_names():
        assert f"\n{name}: " in f"\n{text}"
    for cls in DRAFTERS.values():
        for field in cls.Options.__dataclass_fields__:
            assert f"    {field}=" in text, (cls.name, field)
    assert "[LOSSY]" in text.split("\ndmtd:")[1].splitlines()[0]


def test_the_drafters_command_prints_the_help(capsys):
    from mtpedge.main import main

    assert main(["drafters"]) == 0
    assert capsys.readouterr().out.strip() == describe_drafters()


def test_the_registry_imports_no_onnxruntime():
    """Help text comes from the registry, so reading it must stay cheap."""
    import subprocess
    import sys

    code = "import sys, mtpedge.runtime.drafters; assert 'onnxruntime' not in sys.modules, 'onnxruntime imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
