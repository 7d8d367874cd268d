"""llama.cpp through llama-cpp-python on the same GGUF file: greedy, and with its prompt-lookup drafter."""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..methods import MethodRun
from . import PeerConfig


class LlamaCppPeer:
    kind = "peer"

    def __init__(self, name: str, config: PeerConfig) -> None:
        from llama_cpp import Llama

        draft = None
        if name.endswith("-lookup"):
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            draft = LlamaPromptLookupDecoding(num_pred_tokens=config.lookup_tokens)
        self.name = name
        # logits_all: without it llama-cpp-python 0.3.x crashes on prompts over 512 tokens; the
        # prompt-lookup drafter needs every position's logits anyway
        self.llm = Llama(model_path=str(config.model), n_ctx=config.context, n_threads=config.threads,
                         n_threads_batch=config.threads, logits_all=True, draft_model=draft, verbose=False)
        self.eos = self.llm.token_eos()

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int) -> MethodRun:
        tokens: list[int] = []
        first = 0.0
        started = time.perf_counter()
        # reset=True: no KV reuse from the previous prompt, so every method starts cold alike
        self.llm.reset()
        for token in self.llm.generate(list(prompt_ids), temp=0.0, top_k=1, top_p=1.0, min_p=0.0,
                                       repeat_penalty=1.0, reset=True):
            if not tokens:
                first = time.perf_counter() - started
            if token == self.eos:
                break
            tokens.append(int(token))
            if len(tokens) >= max_new_tokens:
                break
        return MethodRun(tokens, first or time.perf_counter() - started, time.perf_counter() - started)

    def close(self) -> None:
        self.llm.close()


def make(name: str, config: PeerConfig) -> LlamaCppPeer:
    return LlamaCppPeer(name, config)
