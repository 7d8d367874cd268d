"""The static n-gram table: counted from the model's own answers, read back safely, drafted from by `lookup` where the
context has no match of two or more tokens, and never changing the output."""

from __future__ import annotations

import numpy as np
import pytest

from mtpedge.models.distill_data import DistillSample
from mtpedge.models.ngram_table import NgramTableConfig, build_table
from mtpedge.runtime.drafters import make_drafter
from mtpedge.runtime.drafters.lookup import static_table
from mtpedge.runtime.engine import Engine
from mtpedge.runtime.generate import generate
from mtpedge.runtime.static_ngrams import (
    StaticNgrams,
    StaticNgramsError,
    ngram_key,
    ngram_keys,
    shipped_table,
    vocab_fingerprint,
)


def answer(prompt: list[int], response: list[int]) -> DistillSample:
    return DistillSample(np.asarray(prompt, dtype=np.int64), np.asarray(response, dtype=np.int64))


def test_the_vectorized_keys_are_the_scalar_ones_and_tell_orders_apart():
    windows = np.random.default_rng(0).integers(0, 50_000, size=(100, 3))
    assert ngram_keys(windows).tolist() == [ngram_key(w) for w in windows.tolist()]
    assert ngram_key([5, 6]) != ngram_key([0, 5, 6])  # the length is hashed too


def test_the_table_keeps_the_most_frequent_successor_where_it_is_frequent_and_dominant_enough():
    samples = [answer([1, 2], [10, 11, 12, 13])] * 3 + [answer([1, 2], [10, 11, 99])]
    table = build_table(samples, "v", NgramTableConfig(orders=(2,), min_count=3, min_share=0.5))
    assert table.next_token([10, 11]) == (2, 12)  # 12 followed "10 11" three times, 99 once
    assert table.next_token([2, 10]) == (2, 11)  # the prompt's tail is context for the answer's first tokens
    assert table.next_token([12, 13]) == (0, -1)  # nothing followed it
    assert table.chain([7, 1, 2], 5) == (2, pytest.approx([10, 11, 12, 13]))  # each drafted token extends the key
    strict = build_table(samples, "v", NgramTableConfig(orders=(2,), min_count=4, min_share=0.5))
    assert strict.next_token([10, 11]) == (0, -1)  # 3 < min_count
    dominant = build_table(samples, "v", NgramTableConfig(orders=(2,), min_count=1, min_share=0.8))
    assert dominant.next_token([10, 11]) == (0, -1)  # 3 of 4 < min_share
    both = build_table(samples, "v", NgramTableConfig(orders=(2, 3), min_count=1, min_share=0.5))
    assert both.orders == (3, 2) and both.next_token([2, 10, 11]) == (3, 12)  # the longest n that matches wins


def test_a_table_reads_back_as_written_and_bad_files_are_named_never_unpickled(tmp_path):
    table = build_table([answer([1], [4, 5, 6, 4, 5, 7])] * 3, "abc", NgramTableConfig(orders=(1, 2), min_count=1))
    path = tmp_path / "t.npz"
    table.save(path)
    back = StaticNgrams.load(path, vocab_size=10)
    assert back.keys.tolist() == table.keys.tolist() and back.next_ids.tolist() == table.next_ids.tolist()
    assert back.orders == (2, 1) and back.vocab == "abc" and not list(tmp_path.glob(".*"))  # no temporary left
    with pytest.raises(StaticNgramsError, match="outside the vocabulary"):
        StaticNgrams.load(path, vocab_size=5)
    with pytest.raises(StaticNgramsError, match="no static n-gram table.*train-ngrams"):
        StaticNgrams.load(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    with pytest.raises(StaticNgramsError, match="not a static n-gram table"):
        StaticNgrams.load(tmp_path / "junk.npz")
    pickled = tmp_path / "pickled.npz"  # an object array would need pickle to read: refused, not run
    np.savez(pickled, format=np.array("mtpedge-static-ngrams"), version=np.array(1), keys=np.array([object()]),
             next_ids=np.zeros(1, np.int32), orders=np.array([2]), vocab=np.array("abc"))
    with pytest.raises(StaticNgramsError, match="not a static n-gram table"):
        StaticNgrams.load(pickled)
    unsorted = tmp_path / "unsorted.npz"
    np.savez(unsorted, format=np.array("mtpedge-static-ngrams"), version=np.array(1),
             keys=np.array([5, 3], np.uint64), next_ids=np.zeros(2, np.int32), orders=np.array([2]),
             vocab=np.array("abc"))
    with pytest.raises(StaticNgramsError, match="damaged.*not sorted"):
        StaticNgrams.load(unsorted)


def test_lookup_drafts_from_a_table_of_the_models_answers_and_still_equals_plain_decoding(tiny_bundle, tmp_path):
    """A table of the tiny model's own answers to some prompts: on those prompts and others, `lookup` with it is
    plain decoding token for token, and on the prompts it saw it commits more tokens per call than without it."""
    engine = Engine.load(tiny_bundle(), threads=1)
    rng = np.random.default_rng(3)
    seen = [rng.integers(3, 250, size=8).tolist() for _ in range(6)]
    unseen = [rng.integers(3, 250, size=8).tolist() for _ in range(6)]
    answers = [generate(engine, p, 40, stop_token_ids=set()).token_ids for p in seen]
    fingerprint = vocab_fingerprint(engine.tokenizer.vocab())
    table = build_table([answer(p, a) for p, a in zip(seen, answers, strict=True)], fingerprint,
                        NgramTableConfig(min_count=1))
    path = tmp_path / "tiny-ngrams.npz"
    table.save(path)
    with_table = make_drafter(f"lookup:static={path}", engine)
    without = make_drafter("lookup:static=none", engine)
    assert with_table.settings["static"] == str(path) and without.settings["static"] == "none"
    assert make_drafter("lookup", engine).settings["static"] == "none"  # auto: nothing shipped for this tokenizer
    tau = {"with": [], "without": []}
    for prompt in seen + unseen:
        plain = generate(engine, prompt, 40, stop_token_ids=set()).token_ids
        for name, drafter in (("with", with_table), ("without", without)):
            out = generate(engine, prompt, 40, stop_token_ids=set(), drafter=drafter)
            assert out.token_ids == plain, (name, prompt)
            tau[name].append(out.stats.tokens_per_call)
    assert np.mean(tau["with"][:6]) > np.mean(tau["without"][:6]) + 0.3, tau
    assert any(str(key[0]).startswith("static") for key in with_table.source.classes)
    hybrid = make_drafter(f"hybrid:static={path}", engine)  # the hybrid's lookup chains take it too
    assert hybrid.settings["static"] == str(path) and hybrid.lookup.static is not None
    for prompt in seen[:2] + unseen[:2]:
        plain = generate(engine, prompt, 40, stop_token_ids=set()).token_ids
        assert generate(engine, prompt, 40, stop_token_ids=set(), drafter=hybrid).token_ids == plain


def test_a_table_of_another_tokenizer_is_refused_with_the_fix(tiny_bundle, tmp_path):
    engine = Engine.load(tiny_bundle(), threads=1)
    path = tmp_path / "other.npz"
    build_table([answer([1], [4, 5, 6])], "000000000000", NgramTableConfig(orders=(1,), min_count=1)).save(path)
    with pytest.raises(StaticNgramsError, match="another tokenizer.*train-ngrams.*static=none"):
        static_table(str(path), engine)
    with pytest.raises(ValueError, match="no static n-gram table"):
        make_drafter(f"lookup:static={tmp_path / 'missing.npz'}", engine)


def test_the_shipped_table_reads_and_serves_only_its_own_tokenizer():
    from mtpedge.runtime.static_ngrams import SHIPPED_DIR

    files = sorted(SHIPPED_DIR.glob("*-ngrams.npz"))
    assert [f.name for f in files] == ["smollm2-135m-instruct-ngrams.npz"]
    table = StaticNgrams.load(files[0], vocab_size=49152)
    assert table.orders == (4, 3, 2) and table.keys.size > 100_000
    assert shipped_table(table.vocab, 49152) is not None and shipped_table("0" * 12, 49152) is None


def test_an_export_copies_the_table_shipped_for_its_tokenizer_into_the_bundle(tiny_model_dir, tiny_bundle, tmp_path,
                                                                               monkeypatch):
    """Where a table ships for the model's tokenizer, the bundle holds a copy (hashed with its other files), which
    `lookup` reads from there (as the Android engine does); a quantized bundle made from it keeps it."""
    from mtpedge.export.bundle_writer import ExportConfig, export_bundle
    from mtpedge.export.quant_config import QuantConfig
    from mtpedge.export.quantize_bundle import quantize_bundle
    from mtpedge.runtime import static_ngrams
    from mtpedge.runtime.bundle import read_manifest, verify_files

    engine = Engine.load(tiny_bundle(), threads=1)
    shipped = tmp_path / "shipped"
    build_table([answer([1, 2], [3, 4, 5, 6])] * 2, vocab_fingerprint(engine.tokenizer.vocab()),
                NgramTableConfig(min_count=1)).save(shipped / "tiny-ngrams.npz")
    monkeypatch.setattr(static_ngrams, "SHIPPED_DIR", shipped)
    bundle = export_bundle(tiny_model_dir(), tmp_path / "bundle", ExportConfig(context=64, prefill_width=16,
                                                                               decode_widths=(1, 8)))
    manifest = read_manifest(bundle)
    assert manifest.extras["static_ngrams"] == "static_ngrams.npz" and "static_ngrams.npz" in manifest.files
    assert (bundle / "static_ngrams.npz").read_bytes() == (shipped / "tiny-ngrams.npz").read_bytes()
    assert {check.status for check in verify_files(bundle, manifest)} == {"ok"}
    monkeypatch.setattr(static_ngrams, "SHIPPED_DIR", tmp_path / "nothing-shipped")  # read from the bundle alone
    drafter = make_drafter("lookup", Engine.load(bundle, threads=1))
    assert drafter.settings["static"] == "auto" and drafter.source.static.next_token([3, 4]) == (2, 5)
    quantized = quantize_bundle(bundle, tmp_path / "int8", QuantConfig(weights="int8", block_size=16))
    assert (quantized / "static_ngrams.npz").is_file()
    assert make_drafter("lookup", Engine.load(quantized, threads=1)).source.static is not None


def test_a_cached_default_bundle_is_exported_again_when_another_table_ships_for_its_tokenizer(tiny_model_dir,
                                                                                              tiny_bundle, tmp_path,
                                                                                              monkeypatch):
    """An upgrade that ships a new table reaches a cached bundle by export: the bundle's copy is what `lookup` (and
    the Android engine) reads. A bundle with no copy where one ships is exported too; one of another tokenizer is
    left alone."""
    from mtpedge import bundles
    from mtpedge.export.bundle_writer import ExportConfig, export_bundle
    from mtpedge.runtime import static_ngrams

    fingerprint = vocab_fingerprint(Engine.load(tiny_bundle(), threads=1).tokenizer.vocab())
    shipped = tmp_path / "shipped"
    build_table([answer([1, 2], [3, 4, 5, 6])] * 2, fingerprint, NgramTableConfig(min_count=1)).save(
        shipped / "tiny-ngrams.npz")
    monkeypatch.setattr(static_ngrams, "SHIPPED_DIR", shipped)
    bundle = export_bundle(tiny_model_dir(), tmp_path / "bundle", ExportConfig(context=64, prefill_width=16,
                                                                               decode_widths=(1, 8)))
    assert not bundles._predates_shipped_table(bundle)  # its copy is the shipped table
    assert bundles._predates_shipped_table(tiny_bundle())  # exported before a table shipped for its tokenizer
    assert "static n-gram table" in bundles._why_reexport(tiny_bundle(), None, mtp=False, dmtd=False, fast=False)
    assert bundles._why_reexport(tiny_bundle(), "other.gguf", mtp=False, dmtd=False, fast=False) is None
    build_table([answer([1, 2], [3, 4, 9, 9])] * 2, fingerprint, NgramTableConfig(min_count=1)).save(
        shipped / "tiny-ngrams.npz")  # an upgrade shipped another table
    assert bundles._predates_shipped_table(bundle)
    monkeypatch.setattr(static_ngrams, "SHIPPED_DIR", tmp_path / "nothing-shipped")  # none ships for its tokenizer
    assert not bundles._predates_shipped_table(bundle) and not bundles._predates_shipped_table(tiny_bundle())


def test_train_ngrams_names_bad_input_before_any_work(tmp_path, capsys):
    from mtpedge.main import main

    out = tmp_path / "table.npz"
    assert main(["train-ngrams", "--data", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert "no distillation data" in capsys.readouterr().err and not out.exists()
    assert main(["train-ngrams", "--data", str(tmp_path), "--out", str(out), "--min-share", "2"]) == 2
    assert "--min-share in (0, 1]" in capsys.readouterr().err and not out.exists()


def test_train_ngrams_counts_a_distill_folder_into_a_table_this_models_bundles_accept(tiny_model_dir, tiny_bundle,
                                                                                      tmp_path):
    from mtpedge.main import main
    from mtpedge.models.distill_data import save_distill_data

    engine = Engine.load(tiny_bundle(), threads=1)
    prompts = [[1, 5, 9, 33], [7, 7, 120, 45]]
    save_distill_data([answer(p, generate(engine, p, 30, stop_token_ids=set()).token_ids) for p in prompts] * 3,
                      tmp_path / "data" / "first-0000.npz")
    out = tmp_path / "tiny-ngrams.npz"
    assert main(["train-ngrams", str(tiny_model_dir()), "--data", str(tmp_path / "data"), "--out", str(out)]) == 0
    drafter = make_drafter(f"lookup:static={out}", engine)  # the tokenizer fingerprints agree
    assert drafter.source.static.keys.size > 0 and drafter.source.static.orders == (4, 3, 2)
