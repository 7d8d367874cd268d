"""dmtd-spec's per-step choice between a prompt-lookup chain and the DMTD copy's draft.

On this CPU a copy step costs ~1.3 plain steps: between base calls the copy's weights come from memory again
(benchmarks/results/dmtd/README.md, twenty-seventh session). A lookup chain costs no model work, so where one is
likely right, verifying it instead is both cheaper and longer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..acceptance import DepthRates
from ..cost_table import CostTable
from ..static_ngrams import StaticNgrams
from ..tree import DraftTree
from ..tree_build import select_tree_scored
from ..tree_sizing import CallCosts, HostCost, size_tree
from .lookup import NgramSource

if TYPE_CHECKING:
    from ..engine import Engine
    from ..graphs import GraphOutput

# the copy's acceptance at every draft depth before a run's evidence (worth 4 drafts): first drafts were accepted
# 28.5% of the time over 1,374 steps of 14 tuning questions on the fast DMTD bundle
# (benchmarks/results/dmtd/README.md, twenty-fifth and twenty-sixth sessions)
COPY_ACCEPTANCE_PRIOR = (0.3,)
# the lookup chain that continues the copy's draft: P(accepted | parent accepted) at its depths 1, 2, 3+ before a
# run's evidence (worth 4 tries). On 39 tuning answers (715 copy steps), where the copy's first draft was right and
# a chain went on from it, its first token was right 29% of the time, the second 47% after the first, the third
# 61% (benchmarks/results/dmtd/session29/copy_steps_sim.log; rounded)
CONTINUATION_PRIOR = (0.28, 0.5, 0.6)


class LookupOrCopy:
    """Per step, the prompt-lookup chain or the copy's draft, whichever promises more tokens per second.

    Expected tokens: 1 + the chain's estimated acceptance probabilities (lookup.NgramSource's rates per match class,
    the chain cut by tree_sizing.size_tree to what pays for its call), against the tokens the copy steps of this run
    gained on average (1 + the copy's prior acceptance before any). Seconds: the cost table's call of the chain's
    width (corrected by the run's calls), against the copy steps' calls plus the copy's own, measured in this run
    and scaled to the table's units by the base calls beside them. A lookup step skips the copy's calls; the tokens
    it verifies enter the copy as heads at the next copy step.

    A copy step's chain goes on past the copy's draft with the lookup chain of the context and the draft
    (`copy_chain`): a longer call, which verifies more than the copy drafts.

    The lookup rates also learn from the chains not taken: once the step after a copy step shows the tokens that
    followed, the chain the copy was preferred to is scored against them. Without that a match class whose prior
    loses to the copy would never be tried, and never learn that on this text it is right (on a summarization
    tuning question τ fell from lookup's own 1.55 to the copy's 1.23)."""

    def __init__(self, engine: Engine, draft_len: int, static: StaticNgrams | None = None) -> None:
        # without a measured table every width costs the same (the NPU assumption, as other drafters' trees fill
        # their width without one)
        table = engine.cost_table or CostTable.flat(engine.manifest)
        self.source = NgramSource(3, 1, engine.graphs.max_decode_width - 1, 1, static)
        self.costs = CallCosts(table)
        self.draft_len = draft_len
        self.steps = {"lookup": 0, "copy": 0}  # steps of each kind this generation
        self.reset()

    def reset(self) -> None:
        self.source.reset()
        self.copy_rate = DepthRates(self.draft_len, COPY_ACCEPTANCE_PRIOR, prior_weight=4.0)
        self.continuation = DepthRates(self.source.length, CONTINUATION_PRIOR, prior_weight=4.0)
        # running sums over copy steps: the copy's seconds, the base call's, the table's for that call, the tokens
        self.copy_seconds = self.call_seconds = self.call_table_seconds = 0.0
        self.copy_tokens = 0
        self._drafted = 0  # the copy's drafts this step (0: no copy step); the continuation follows them
        self.looked_up = False  # the current step verifies a lookup chain
        self.steps = dict.fromkeys(self.steps, 0)
        self._untaken: tuple[np.ndarray, int] | None = None  # a chain the copy was preferred to; its context length

    def lookup_chain(self, context_ids: Sequence[int], root: int, room: int) -> np.ndarray | None:
        """The root and the lookup chain to verify this step, or None: the copy drafts."""
        self.looked_up = False
        self._score_untaken(context_ids)
        pool = self.source.pool(context_ids, root)
        if pool[0].shape[0] == 1:  # no match
            return None
        tokens, _, _, scores = select_tree_scored(*pool, room + 1)
        table = self.costs.current
        chain = size_tree(scores[1:], table)
        if self.call_seconds:  # else the copy's cost is not measured yet: it drafts
            if chain.candidates and chain.tokens_per_s > self._copy_tokens_per_s():
                self.looked_up = True
                return tokens[: chain.candidates + 1]
        self._untaken = tokens, len(context_ids)
        return None

    def _copy_tokens_per_s(self) -> float:
        """The copy steps' tokens per second of table time so far (their tokens from a prior worth 4 steps)."""
        steps = self.steps["copy"]
        prior = 1 + self.copy_rate.chain_scores(self.draft_len).sum()
        tokens = (self.copy_tokens + 4 * prior) / (steps + 4)
        return tokens / (self.call_table_seconds / steps + self._copy_cost())

    def _copy_cost(self) -> float:
        """The copy's seconds per copy step in the table's units (0 before any copy step)."""
        if not self.call_seconds:
            return 0.0
        return self.copy_seconds / self.call_seconds * self.call_table_seconds / self.steps["copy"]

    def copy_chain(self, context_ids: Sequence[int], root: int, drafts: Sequence[int], first_prob: float,
                   room: int) -> np.ndarray:
        """The chain a copy step verifies: the root, the copy's drafts, then the lookup chain of the context and the
        drafts (context_ids ends with the root). Scored as acceptance probabilities: the copy's probability of
        its first draft (its softmax is near calibrated: 0.89 right where it was above 0.7, 0.18 at 0.2-0.3, on
        the same tuning answers), times its later drafts' and then the continuation's running rates; cut to what
        pays for the call, the copy's seconds counted as spent."""
        room = max(room, 0)
        _, found = self.source.candidates([*context_ids, *drafts])
        after = found[0][: max(0, room - len(drafts))] if found else np.zeros(0, dtype=np.int64)
        scores = first_prob * np.concatenate([[1.0], self.copy_rate.chain_scores(len(drafts) - 1)])
        scores = np.concatenate([scores, scores[-1] * self.continuation.chain_scores(after.size)])
        kept = size_tree(scores[:room], self.costs.current, host=HostCost(fixed=self._copy_cost())).candidates
        self._drafted = len(drafts)
        return np.asarray([root, *drafts, *after][: kept + 1], dtype=np.int64)

    def _score_untaken(self, context_ids: Sequence[int]) -> None:
        """Record the untaken chain's acceptance against the tokens that followed its root (as deep as they go)."""
        if self._untaken is None:
            return
        chain, at = self._untaken
        self._untaken = None
        followed = np.asarray(context_ids[at:], dtype=np.int64)
        depth = min(len(chain) - 1, followed.size)
        matched = int(np.cumprod(chain[1: depth + 1] == followed[:depth]).sum())
        self.source.record(DraftTree(chain[: depth + 1], np.arange(-1, depth)), np.ones(depth + 1, dtype=bool),
                           list(range(matched + 1)))
        self.source.streak = False  # the step itself verified the copy's draft

    def copy_ran(self, seconds: float) -> None:
        self.copy_seconds += seconds

    def observe(self, tree: DraftTree, out: GraphOutput, path: list[int]) -> None:
        width = self.costs.table.width_for(len(tree))
        self.costs.observe(width, out.seconds)
        if self.looked_up:
            self.steps["lookup"] += 1
            self.source.record(tree, np.ones(len(tree), dtype=bool), path)
        elif self._drafted:  # a copy step, even one whose drafts did not pay for a wider call
            self.steps["copy"] += 1
            self.call_seconds += out.seconds
            self.call_table_seconds += self.costs.table.cost(width)
            self.copy_tokens += len(path)
            depths = np.arange(1, len(tree))  # a chain: node i is at depth i
            parent_accepted, accepted = depths <= len(path), depths < len(path)
            copy = depths <= self._drafted
            self.copy_rate.record(depths[copy], parent_accepted[copy], accepted[copy])
            self.continuation.record(depths[~copy] - self._drafted, parent_accepted[~copy], accepted[~copy])
            self.source.streak = False
            self._drafted = 0
