"""mtpedge train-ngrams [MODEL] --data DIR --out FILE [--orders 2,3,4] [--min-count 3] [--min-share 0.5]

Counts a static n-gram table from the model's own answers (`mtpedge distill`): after each n-gram, the token that
most often followed it. `--drafter lookup:static=FILE` drafts from it where the context offers no match of two or
more tokens; the default model's table is shipped and used without the option (`static=auto`). Seconds, no torch
training: the model is loaded only for its tokenizer, whose fingerprint the table records.
"""

from __future__ import annotations

import argparse
import time

from mtpedge.export_cmd import parse_widths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from mtpedge.models.ngram_table import NgramTableConfig

    default = NgramTableConfig()  # the shipped table's settings
    parser.add_argument("model", nargs="?", help="GGUF file or Hugging Face folder (default: embedded SmolLM2-135M)")
    parser.add_argument("--data", required=True, help="self-distilled data: the folder of `mtpedge distill` (or an "
                                                      ".npz), made with this model")
    parser.add_argument("--out", required=True, help="the table to write (.npz)")
    parser.add_argument("--orders", type=parse_widths, default=default.orders,
                        help=f"n-gram lengths (default {','.join(map(str, default.orders))})")
    parser.add_argument("--min-count", type=int, default=default.min_count,
                        help=f"keep a continuation seen at least this often (default {default.min_count})")
    parser.add_argument("--min-share", type=float, default=default.min_share,
                        help=f"... and in at least this share of its n-gram's occurrences "
                             f"(default {default.min_share})")


def run(args: argparse.Namespace) -> int:
    from mtpedge.models.distill_data import load_distill_data
    from mtpedge.models.loading import load_model
    from mtpedge.models.ngram_table import NgramTableConfig, build_table
    from mtpedge.runtime.static_ngrams import vocab_fingerprint

    started = time.perf_counter()
    config = NgramTableConfig(tuple(args.orders), args.min_count, args.min_share)
    samples = load_distill_data(args.data)
    if not samples:
        raise ValueError(f"{args.data} holds no answers: make them with `mtpedge distill --out {args.data}`")
    tokenizer = load_model(args.model).tokenizer.backend_tokenizer
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    if max(int(s.token_ids.max(initial=0)) for s in samples) >= vocab_size:
        raise ValueError(f"{args.data} holds token ids past this model's vocabulary of {vocab_size}: it was made "
                         "with another model; pass that model, or distill with this one")
    print(f"{len(samples):,} answers, {sum(len(s.response_ids) for s in samples):,} answer tokens")
    table = build_table(samples, vocab_fingerprint(tokenizer.get_vocab(with_added_tokens=True)), config)
    table.save(args.out)
    print(f"wrote {args.out}: {table.keys.size:,} n-grams (orders {', '.join(map(str, table.orders))}) in "
          f"{time.perf_counter() - started:.1f} s")
    return 0
