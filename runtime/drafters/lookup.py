"""Prompt-lookup drafting (PLD): the continuation of the newest earlier occurrence of the last n tokens.

No mask slots and no model work: the tree is a trie of up to `branches` distinct continuations (newest
match first), cut to the `width` budget by estimated acceptance (per-depth rates learned online; the
r-th continuation is discounted by 1 / (r + 1)). A step without any match is a plain one-slot call.

The rates are kept per match class: the n-gram length that matched and whether the previous step accepted a
lookup draft. A 3-gram match inside a copied passage is accepted far more often than a lone 1-gram match (on
24 held-out answers, first drafts 0.76 against 0.23: benchmarks/results/fast/README.md section 24), and one
rate for both made the cost-aware sizer draft the first too little and the second too much. Each class starts
from those measured rates (MATCH_CLASS_PRIORS) rather than 0.5: τ +0.04-0.07 on the tuning questions
(section 25).

With a static n-gram table (static_ngrams.py: the model's own answers to other prompts, shipped for the default
model), a step whose context matches only a lone token, or nothing, drafts the table's chain instead: on 39
tuning answers its first drafts were accepted 44-68% of the time where a lone 1-gram match's were 24%
(benchmarks/results/fast/README.md section 33). Its classes are the table's matched n-gram length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..acceptance import DepthRates
from ..bundle import bundle_file
from ..ngram import ngram_match
from ..static_ngrams import EXTRAS_KEY, StaticNgrams, StaticNgramsError, shipped_table
from ..tree import DraftTree, node_depths
from ..tree_build import chain_pool, select_tree, select_tree_scored
from .base import Drafter, option, sizer_for, width_for

if TYPE_CHECKING:
    from ..engine import Engine
    from ..graphs import GraphOutput


# Each match class's acceptance rates at depths 1, 2, 3+ before any evidence, worth PRIOR_WEIGHT tries: what 24
# held-out answers measured (benchmarks/results/fast/lookup_match_classes_24q.log, deeper depths pooled and
# rounded). Without them every class started at 0.5, and each answer spent its first steps learning that a lone
# 1-gram match is seldom right.
MATCH_CLASS_PRIORS: dict[tuple[int | str, bool], tuple[float, ...]] = {
    (1, False): (0.23, 0.52, 0.6), (1, True): (0.29, 0.59, 0.75),
    (2, False): (0.40, 0.56, 0.8), (2, True): (0.60, 0.73, 0.8),
    (3, False): (0.55, 0.33, 0.5), (3, True): (0.76, 0.88, 0.93),
    # the shipped table's chains on 39 tuning answers, none of the 52 report questions (results/fast section 33,
    # session28/static_table_sim.log; the table of twice the answers shipped since reads within 0.07 of these at
    # depth 1-2, section 34)
    ("static2", False): (0.44, 0.5, 0.4), ("static2", True): (0.49, 0.6, 0.4),
    ("static3", False): (0.45, 0.45, 0.6), ("static3", True): (0.5, 0.45, 0.6),
    ("static4", False): (0.62, 0.54, 0.59), ("static4", True): (0.68, 0.61, 0.7),
}
PRIOR_WEIGHT = 4.0
# a context match this long beats the static table (first drafts accepted 66% on the tuning answers); shorter
# ones lose to it
STATIC_BELOW = 2


class NgramSource:
    """Lookup candidates as a scored pool, and the per-depth acceptance rates that score them (per match class:
    the matched n-gram length, and whether the previous step accepted a lookup draft)."""

    def __init__(self, max_ngram: int, min_ngram: int, length: int, branches: int,
                 static: StaticNgrams | None = None) -> None:
        if length < 1 or branches < 1:
            raise ValueError(f"lookup length and branches must be >= 1, got {length}, {branches}")
        self.max_ngram, self.min_ngram, self.length, self.branches = max_ngram, min_ngram, length, branches
        self.static = static
        self.classes: dict[tuple[int | str, bool], DepthRates] = {}
        self.rates = DepthRates(length)  # the rates of the current step's match class
        self.streak = False  # the previous step accepted a lookup draft

    def reset(self) -> None:
        """Forget what earlier generations taught (a new prompt)."""
        self.classes.clear()
        self.rates = DepthRates(self.length)
        self.streak = False

    def match_class(self, n: int, static: bool = False) -> tuple[int | str, bool]:
        """The class whose rates score this step's candidates: the n-gram length matched (0: none; "staticN": the
        static table's N-gram), and whether the previous step accepted a lookup draft."""
        return f"static{n}" if static else n, self.streak

    def new_rates(self, match_class: tuple[int | str, bool]) -> DepthRates:
        """A class's rates before any evidence: its measured prior (context n-grams past 3 count as 3)."""
        n, streak = match_class
        prior = MATCH_CLASS_PRIORS.get((min(n, 3), streak) if isinstance(n, int) else match_class)
        return DepthRates(self.length) if prior is None else DepthRates(self.length, prior, PRIOR_WEIGHT)

    def candidates(self, context_ids: Sequence[int]) -> tuple[tuple[int | str, bool], list[np.ndarray]]:
        """The match class and the continuations of the context's end (the context's, else the static table's);
        no rates change."""
        n, found = ngram_match(context_ids, self.max_ngram, self.min_ngram, self.length, self.branches)
        if self.static is not None and n < STATIC_BELOW:
            static_n, chain = self.static.chain(context_ids, self.length)
            if static_n:
                return self.match_class(static_n, static=True), [chain]
        return self.match_class(n), found

    def pool(self, context_ids: Sequence[int], root: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The candidates as a scored pool under the root; their class's rates become the ones `record` updates."""
        match_class, found = self.candidates(context_ids)
        if match_class not in self.classes:
            self.classes[match_class] = self.new_rates(match_class)
        self.rates = self.classes[match_class]
        scores = [self.rates.chain_scores(c.size, 1.0 / (rank + 1)) for rank, c in enumerate(found)]
        return chain_pool(root, found, scores)

    def record(self, tree: DraftTree, from_lookup: np.ndarray, path: list[int]) -> None:
        """Update the rates from this call's lookup nodes (`from_lookup`: one flag per token node)."""
        n = from_lookup.shape[0]
        parents = tree.parents[:n]
        on_path = np.zeros(n, dtype=bool)
        on_path[path] = True
        lookup = from_lookup.copy()
        lookup[0] = False
        depth = node_depths(parents)
        parent_on_path = np.zeros(n, dtype=bool)
        parent_on_path[1:] = on_path[parents[1:]]
        self.rates.record(depth[lookup], parent_on_path[lookup], (on_path & lookup)[lookup])
        self.streak = bool((on_path & lookup).any())


# the `static` option of every drafter whose candidates include lookup chains (lookup, hybrid, mtp, dmtd-spec)
STATIC_HELP = ("static n-gram table for steps without a context match of 2+ tokens: auto (the bundle's, or the one "
               "shipped for this model's tokenizer, if any), none, or a file of `mtpedge train-ngrams`")


@dataclass(frozen=True)
class LookupOptions:
    width: int = option(8, "slots per decode call (root included)")
    max_ngram: int = option(3, "longest n-gram matched")
    min_ngram: int = option(1, "shortest n-gram matched")
    branches: int = option(1, "distinct continuations in one tree")
    # auto: 52 report questions τ 1.53 against 1.40 without the table, 1.18x against 1.16x plain decoding on a quiet
    # machine (benchmarks/results/fast/README.md section 33)
    static: str = option("auto", STATIC_HELP)

    def __post_init__(self) -> None:
        if self.width < 1 or self.branches < 1 or not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(f"lookup needs width >= 1, branches >= 1 and 1 <= min_ngram <= max_ngram, got "
                             f"{self.width}, {self.branches}, {self.min_ngram}, {self.max_ngram}")


class LookupDrafter(Drafter):
    """prompt lookup: n-gram continuations copied from the context (no model work)"""

    name = "lookup"
    Options = LookupOptions
    sized = True

    def __init__(self, engine: Engine, options: LookupOptions) -> None:
        self.budget = width_for(engine, options.width)
        self.max_width = engine.graphs.max_decode_width
        self.sizer = sizer_for(engine)
        table = static_table(options.static, engine)
        self.source = NgramSource(options.max_ngram, options.min_ngram, max(1, self.budget - 1), options.branches,
                                  table)
        self.settings = {"drafter": self.name, "width": self.budget, "max_ngram": options.max_ngram,
                         "min_ngram": options.min_ngram, "branches": options.branches,
                         "static": "none" if table is None else options.static}

    def start(self, engine: Engine, prompt_ids: Sequence[int]) -> None:
        self.source.reset()

    def propose(self, context_ids: Sequence[int], root: int, lead: int = 0) -> tuple[DraftTree, None]:
        pool = self.source.pool(context_ids, root)
        budget = min(self.budget, self.max_width - lead)
        if self.sizer is not None and budget > 0:  # only the candidates that pay for the wider call they need
            scores = select_tree_scored(*pool, budget)[3]
            budget = 1 + self.sizer.size(scores[1:], 1, 1 + lead).candidates
        tokens, parents, _ = select_tree(*pool, budget)
        return DraftTree(tokens, parents), None

    def observe(self, tree: DraftTree, out: GraphOutput, path: list[int]) -> None:
        self.source.record(tree, np.ones(len(tree), dtype=bool), path)
        if self.sizer is not None:
            self.sizer.observe(len(path) - 1, out.seconds)


def static_table(option: str, engine: Engine) -> StaticNgrams | None:
    """The static n-gram table `option` names (LookupOptions.static) for this engine's tokenizer: for `auto`, the
    bundle's copy (export writes one where a table ships for the tokenizer), else the shipped table itself."""
    if option == "none":
        return None
    fingerprint = engine.tokenizer.fingerprint
    in_bundle = engine.manifest.extras.get(EXTRAS_KEY)
    if option == "auto" and in_bundle is None:  # a bundle exported before tables were copied in
        return shipped_table(fingerprint, engine.config.vocab_size)
    path = bundle_file(engine.folder, in_bundle) if option == "auto" else option
    table = StaticNgrams.load(path, engine.config.vocab_size)
    if table.vocab != fingerprint:
        raise StaticNgramsError(f"{path} holds another tokenizer's ids (vocabulary {table.vocab}, this bundle's "
                                f"is {fingerprint}): build one from this model's answers with `mtpedge train-ngrams`, "
                                "or pass static=none")
    return table
