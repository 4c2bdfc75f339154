"""Sampling for the embedded models on llama.cpp's own context API: every sample of a request at once.

llama-cpp-python's high-level `create_chat_completion` generates one sequence at a time, so the N
rollouts of a difficulty screen or calibration were N generations in a row. `Decoder` owns a context
of its own over the loaded weights, with several sequences in one unified KV cache
(`python bench/bench_embedded.py --decoding-only`, 4 samples of 128 tokens on 2 cores: the 0.5B
58.2 tokens/s against 31.9 through `create_chat_completion`, the 1.5B 33.7 against 28.6; one sample
at a time the two are about even):

- the prompt is decoded once into sequence 0 and shared by every sample (`llama_memory_seq_cp`); a
  following request keeps the longest common prefix of the previous prompt, as the high-level API
  does, so Nt traces or repeated rollouts of one prompt never re-read it;
- the n samples of a request advance together, one token each per `llama_decode`;
- each sample has its own sampler chain (top-k 40, top-p, min-p 0.05, temperature, its own seed:
  llama-cpp-python's defaults), or greedy at temperature 0;
- a JSON-schema grammar is checked the way llama.cpp's common sampler does it: the token drawn
  without the grammar is kept when the grammar accepts it, and only otherwise is the grammar applied
  to the whole vocabulary and the token drawn again (the grammar over all 151,936 tokens costs about
  25 ms per token; the check of one token costs nothing).

One `Decoder` runs one request at a time (the caller holds the model's lock).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

TOP_K, MIN_P = 40, 0.05  # llama-cpp-python's create_chat_completion defaults


@dataclass(frozen=True)
class Sampling:
    """How one sample is drawn."""

    temperature: float
    seed: int
    top_p: float = 0.95


@dataclass
class Generation:
    """One finished sample."""

    text: str
    finish_reason: str  # stop | length
    completion_tokens: int


class ContextOverflow(ValueError):
    """The prompt does not fit the context window."""


def _chain(llama_cpp: Any, sampling: Sampling) -> Any:
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    if sampling.temperature <= 0:
        stages = [llama_cpp.llama_sampler_init_greedy()]
    else:
        stages = [
            llama_cpp.llama_sampler_init_top_k(TOP_K),
            llama_cpp.llama_sampler_init_top_p(sampling.top_p, 1),
            llama_cpp.llama_sampler_init_min_p(MIN_P, 1),
            llama_cpp.llama_sampler_init_temp(sampling.temperature),
            llama_cpp.llama_sampler_init_dist(sampling.seed & 0xFFFFFFFF),
        ]
    for stage in stages:
        llama_cpp.llama_sampler_chain_add(chain, stage)
    return chain


class _Sequence:
    """One sample in flight: its sampler chain, grammar, tokens so far and text."""

    def __init__(self, decoder: Decoder, seq_id: int, sampling: Sampling, grammar: Any | None):
        api = decoder.api
        self.decoder, self.seq_id = decoder, seq_id
        self.chain = _chain(api, sampling)
        self.grammar = (
            api.llama_sampler_init_grammar(decoder.vocab, grammar._grammar.encode(), grammar._root.encode())
            if grammar is not None else None
        )
        self.tokens: list[int] = []
        self.text = b""
        self.finish: str | None = None

    def sample(self, index: int) -> int:
        """The next token from the logits at batch position `index` (grammar-checked when constrained)."""
        api = self.decoder.api
        token = api.llama_sampler_sample(self.chain, self.decoder.ctx, index)
        if self.grammar is not None:
            if not self.decoder.grammar_allows(self.grammar, token):
                token = self.decoder.sample_full(self.chain, self.grammar, index)
            api.llama_sampler_accept(self.grammar, token)
        return token

    def close(self) -> None:
        api = self.decoder.api
        api.llama_sampler_free(self.chain)
        if self.grammar is not None:
            api.llama_sampler_free(self.grammar)


class Decoder:
    """A llama.cpp context over a loaded model's weights that samples several sequences at once."""

    def __init__(self, llama: Any, n_ctx: int, n_seq_max: int = 8, n_batch: int = 512):
        import llama_cpp

        self.api, self.llama = llama_cpp, llama
        model = llama._model.model
        self.vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_batch, n_batch
        params.n_seq_max, params.kv_unified = n_seq_max, True
        self.ctx = llama_cpp.llama_init_from_model(model, params)
        if self.ctx is None:
            raise RuntimeError("llama.cpp could not create a context")
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.n_ctx, self.n_seq_max, self.n_batch = llama_cpp.llama_n_ctx(self.ctx), n_seq_max, n_batch
        self.batch = llama_cpp.llama_batch_init(max(n_batch, n_seq_max), 0, n_seq_max)
        self.cached: list[int] = []  # the prompt held in sequence 0
        # the whole vocabulary as llama_token_data, for the rare grammar resample
        self._full = np.zeros(self.n_vocab, dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
        self._one = (llama_cpp.llama_token_data * 1)()

    # batch and memory ------------------------------------------------------------------------------
    def _decode(self, items: list[tuple[int, int, int, bool]]) -> None:
        """Decode (token, position, sequence, wants logits) items as one batch."""
        batch = self.batch
        batch.n_tokens = len(items)
        for i, (token, pos, seq, logits) in enumerate(items):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, logits
            batch.seq_id[i][0] = seq
        status = self.api.llama_decode(self.ctx, batch)
        if status != 0:
            raise RuntimeError(f"llama_decode failed with status {status}")

    def _prefill(self, prompt: list[int]) -> None:
        """Hold `prompt` in sequence 0 (reusing the previous prompt's common prefix), logits for its last token."""
        keep = 0
        for a, b in zip(self.cached, prompt):
            if a != b:
                break
            keep += 1
        keep = min(keep, len(prompt) - 1)  # the last token is decoded again: its logits start the samples
        for seq in range(self.n_seq_max):
            self.api.llama_memory_seq_rm(self.memory, seq, keep if seq == 0 else -1, -1)
        self.cached = prompt[:keep]
        for start in range(keep, len(prompt), self.n_batch):
            part = prompt[start:start + self.n_batch]
            self._decode([(t, start + i, 0, start + i == len(prompt) - 1) for i, t in enumerate(part)])
            self.cached = prompt[:start + len(part)]

    # grammar ---------------------------------------------------------------------------------------
    def grammar_allows(self, grammar: Any, token: int) -> bool:
        one = self._one
        one[0].id, one[0].logit, one[0].p = token, 0.0, 0.0
        array = self.api.llama_token_data_array(data=one, size=1, selected=-1, sorted=False)
        self.api.llama_sampler_apply(grammar, ctypes.byref(array))
        return bool(np.isfinite(one[0].logit))

    def sample_full(self, chain: Any, grammar: Any, index: int) -> int:
        """Apply the grammar to the whole vocabulary at batch position `index`, then the chain."""
        api = self.api
        logits = np.ctypeslib.as_array(api.llama_get_logits_ith(self.ctx, index), shape=(self.n_vocab,))
        full = self._full
        full["id"] = np.arange(self.n_vocab, dtype=np.int32)
        full["logit"], full["p"] = logits, 0.0
        data = full.ctypes.data_as(ctypes.POINTER(api.llama_token_data))
        array = api.llama_token_data_array(data=data, size=self.n_vocab, selected=-1, sorted=False)
        api.llama_sampler_apply(grammar, ctypes.byref(array))
        api.llama_sampler_apply(chain, ctypes.byref(array))
        return int(data[array.selected].id)

    # generation ------------------------------------------------------------------------------------
    def generate(
        self, prompt: list[int], samplings: list[Sampling], *, max_tokens: int, threads: int,
        stop: list[str] | None = None, grammar: Any | None = None,
    ) -> list[Generation]:
        """One sample per `Sampling`, all from `prompt`, in waves that fit the context window."""
        if not prompt:
            raise ValueError("empty prompt")
        if len(prompt) >= self.n_ctx:
            raise ContextOverflow(f"Requested tokens ({len(prompt)}) exceed context window of {self.n_ctx}")
        max_tokens = max(1, min(max_tokens, self.n_ctx - len(prompt)))
        wave = max(1, min(self.n_seq_max, (self.n_ctx - len(prompt)) // max_tokens))
        self.api.llama_set_n_threads(self.ctx, threads, threads)
        out: list[Generation] = []
        for start in range(0, len(samplings), wave):
            out += self._wave(prompt, samplings[start:start + wave], max_tokens, stop or [], grammar)
        return out

    def _wave(self, prompt: list[int], samplings: list[Sampling], max_tokens: int, stop: list[str],
              grammar: Any | None) -> list[Generation]:
        self._prefill(prompt)
        for seq in range(1, len(samplings)):
            self.api.llama_memory_seq_cp(self.memory, 0, seq, -1, -1)
        seqs = [_Sequence(self, i, s, grammar) for i, s in enumerate(samplings)]
        try:
            for seq in seqs:  # the first token of every sample from the prompt's last logits
                self._push(seq, seq.sample(-1), max_tokens, stop)
            pos = len(prompt)
            while live := [s for s in seqs if s.finish is None]:
                self._decode([(s.tokens[-1], pos, s.seq_id, True) for s in live])
                for i, seq in enumerate(live):
                    self._push(seq, seq.sample(i), max_tokens, stop)
                pos += 1
            return [Generation(text=self._text(s, stop), finish_reason=s.finish or "length",
                               completion_tokens=len(s.tokens)) for s in seqs]
        finally:
            for seq in seqs:
                seq.close()
            self.api.llama_memory_seq_rm(self.memory, 0, len(self.cached), -1)  # keep the prompt alone
            for seq in range(1, len(samplings)):
                self.api.llama_memory_seq_rm(self.memory, seq, -1, -1)

    def _push(self, seq: _Sequence, token: int, max_tokens: int, stop: list[str]) -> None:
        """Take one sampled token: end of generation, a stop string, or the token limit finishes the sample."""
        if self.api.llama_vocab_is_eog(self.vocab, token):
            seq.finish = "stop"
            return
        seq.tokens.append(token)
        seq.text += self.llama.detokenize([token])
        if stop and any(s in seq.text.decode("utf-8", errors="ignore") for s in stop):
            seq.finish = "stop"
        elif len(seq.tokens) >= max_tokens:
            seq.finish = "length"

    @staticmethod
    def _text(seq: _Sequence, stop: list[str]) -> str:
        text = seq.text.decode("utf-8", errors="ignore")
        cut = min((text.find(s) for s in stop if s in text), default=-1)
        return text[:cut] if cut >= 0 else text

    def close(self) -> None:
        if self.ctx is not None:
            self.api.llama_batch_free(self.batch)
            self.api.llama_free(self.ctx)
            self.ctx = None
