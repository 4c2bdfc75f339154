"""Sampling for the embedded models on llama.cpp's own context API: every sample of every request at once.

llama-cpp-python's high-level `create_chat_completion` generates one sequence at a time, so the N
rollouts of a difficulty screen or calibration were N generations in a row. `Decoder` owns a context
of its own over the loaded weights, with several sequences in one unified KV cache (throughput
against `create_chat_completion`: `python bench/bench_embedded.py --decoding-only`, figures in
docs/measurements.md):

- the prompt is decoded once into sequence 0 and shared by every sample (`llama_memory_seq_cp`); a
  following request keeps the longest common prefix of the previous prompt, as the high-level API
  does, so Nt traces or repeated rollouts of one prompt never re-read it;
- the n samples of a request advance together, one token each per `llama_decode`;
- each sample has its own sampler chain (top-k 40, top-p, min-p 0.05, temperature, its own seed:
  llama-cpp-python's defaults), or greedy at temperature 0;
- a JSON-schema grammar is checked the way llama.cpp's common sampler does it: the token drawn
  without the grammar is kept when the grammar accepts it, and only otherwise is the grammar applied
  to the whole vocabulary and the token drawn again (the grammar over the whole vocabulary is costly
  per token; the check of one token is not).

Requests made at the same time share the batch (continuous batching, as a serving engine does it):
a request that arrives while others decode has its prompt read and its samples join the next step,
and a request whose samples are done returns at once. Decoding on a CPU is bound by reading the
weights, so a step of several sequences costs little more than a step of one. No thread drives the
batch in the background: the caller of a request that is not done drives the steps while no other
does, and hands over when its own request is done. The prompts of finished
requests stay in the KV cache as prefixes for later ones while the window has room (the sequence whose
prompt shares the longest prefix with a new request's is reused).

Batching changes the order of floating-point sums, so a sample drawn beside other requests can differ
in its low bits, and rarely in a token, from the same sample drawn alone (as in vLLM); the response
cache makes a run replay exactly.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from finmbs.errors import FinmbsError

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


class ContextOverflow(FinmbsError, ValueError):
    """The prompt does not fit the context window."""


class DecodingAborted(FinmbsError):
    """`Decoder.abort` stopped the request before its samples were done (a run being stopped)."""


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
    """One sample in flight: its sampler chain, grammar, KV sequence and position, tokens so far and text."""

    def __init__(self, decoder: Decoder, seq_id: int, pos: int, sampling: Sampling, grammar: Any | None):
        api = decoder.api
        self.decoder, self.seq_id, self.pos = decoder, seq_id, pos
        self.chain = _chain(api, sampling)
        self.grammar = (
            api.llama_sampler_init_grammar(decoder.vocab, grammar._grammar.encode(), grammar._root.encode())
            if grammar is not None
            else None
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


@dataclass(eq=False)
class _Request:
    """One wave of a `generate` call: a prompt and the samples drawn from it together."""

    prompt: list[int]
    samplings: list[Sampling]
    max_tokens: int
    stop: list[str]
    grammar: Any | None
    ids: list[int] = field(default_factory=list)  # its KV sequences, the first holding the prompt
    seqs: list[_Sequence] = field(default_factory=list)
    result: list[Generation] | None = None
    error: BaseException | None = None

    @property
    def cells(self) -> int:
        """KV cells the request may fill: its prompt once (shared by its samples) and every sample's tokens."""
        return len(self.prompt) + len(self.samplings) * self.max_tokens

    @property
    def done(self) -> bool:
        return self.result is not None or self.error is not None


def fixed_threads(threads: int) -> Callable[[], AbstractContextManager[int]]:
    """A thread lease that is always `threads`."""

    @contextmanager
    def lease() -> Iterator[int]:
        yield threads

    return lease


class Decoder:
    """A llama.cpp context over a loaded model's weights that samples the sequences of every request
    made at the same time in one batch."""

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
        self.threads = 0
        # the whole vocabulary as llama_token_data, for the rare grammar resample
        self._full = np.zeros(self.n_vocab, dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
        self._one = (llama_cpp.llama_token_data * 1)()
        # the batch: requests waiting and decoding, the prompts kept by idle sequences (oldest first),
        # and whether a caller is driving the steps
        self._cond = threading.Condition()
        self._pending: list[_Request] = []
        self._active: list[_Request] = []
        self._kept: dict[int, list[int]] = {}
        self._driving = False
        self._aborting = False  # set by `abort`: every request fails at the next step, until `resume`
        self.peak_requests = 0  # the most requests that shared one step

    @property
    def cached(self) -> list[int]:
        """The prompt kept most recently for later requests."""
        return next(reversed(self._kept.values()), [])

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

    def _prefill(self, seq: int, prompt: list[int], keep: int) -> None:
        """Hold `prompt` in `seq`, whose first `keep` tokens are already there; logits for its last token."""
        self.api.llama_memory_seq_rm(self.memory, seq, keep, -1)
        for start in range(keep, len(prompt), self.n_batch):
            part = prompt[start : start + self.n_batch]
            self._decode([(t, start + i, seq, start + i == len(prompt) - 1) for i, t in enumerate(part)])

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

    # stopping --------------------------------------------------------------------------------------
    def abort(self) -> None:
        """Fail every request, waiting or decoding, within one step (DecodingAborted), and every new one
        until `resume`: a stopped run need not wait for generations nobody will read."""
        with self._cond:
            self._aborting = True
            for request in self._pending:
                request.error = DecodingAborted("decoding stopped")
            self._pending.clear()
            self._cond.notify_all()

    def resume(self) -> None:
        with self._cond:
            self._aborting = False

    # generation ------------------------------------------------------------------------------------
    def generate(
        self,
        prompt: list[int],
        samplings: list[Sampling],
        *,
        max_tokens: int,
        threads: int | Callable[[], AbstractContextManager[int]],
        stop: list[str] | None = None,
        grammar: Any | None = None,
    ) -> list[Generation]:
        """One sample per `Sampling`, all from `prompt`, in waves that fit the context window, decoded
        beside every other request made at the same time. `threads` is a count, or a lease taken for
        each step this caller drives (so the cores can be shared with other models between steps)."""
        if not prompt:
            raise ValueError("empty prompt")
        if len(prompt) >= self.n_ctx:
            raise ContextOverflow(f"Requested tokens ({len(prompt)}) exceed context window of {self.n_ctx}")
        max_tokens = max(1, min(max_tokens, self.n_ctx - len(prompt)))
        wave = max(1, min(self.n_seq_max, (self.n_ctx - len(prompt)) // max_tokens))
        lease = fixed_threads(threads) if isinstance(threads, int) else threads
        out: list[Generation] = []
        for start in range(0, len(samplings), wave):
            request = _Request(prompt, samplings[start : start + wave], max_tokens, stop or [], grammar)
            with self._cond:
                if self._aborting:
                    raise DecodingAborted("decoding stopped")
                self._pending.append(request)
            self._wait_or_drive(request, lease)
            if request.error is not None:
                raise request.error
            out += request.result or []
        return out

    def _wait_or_drive(self, request: _Request, lease: Callable[[], AbstractContextManager[int]]) -> None:
        """Wait for `request`, driving the steps of the whole batch whenever no other caller does.

        The steps of one stint run on a new thread that ends with it. llama.cpp's OpenMP threads belong
        to the thread that called it, and libgomp keeps them until that thread ends; once it manages
        more threads than there are cores, every barrier of every step sleeps after a few spins instead
        of spinning. Driven from long-lived caller threads, the teams pile up, and decoding stays slower
        from the moment a second thread has run a step (docs/measurements.md, "OpenMP threads")."""
        with self._cond:
            self._cond.wait_for(lambda: request.done or not self._driving)
            if request.done:
                return
            self._driving = True
        failed: list[BaseException] = []

        def stint() -> None:
            try:
                while not request.done:
                    if self._aborting:
                        raise DecodingAborted("decoding stopped")
                    with lease() as threads:
                        if threads != self.threads:
                            self.api.llama_set_n_threads(self.ctx, threads, threads)
                            self.threads = threads
                        self._admit()
                        self._step()
            except BaseException as exc:  # handed to the caller below
                failed.append(exc)

        try:
            # a thread of its own that ends with the stint: see `_wait_or_drive`'s docstring
            driver = threading.Thread(target=stint, name="finmbs-decoder", daemon=True)
            driver.start()
            driver.join()
            if failed:
                raise failed[0]
        except BaseException as exc:
            self._fail(exc)
            with self._cond:
                if request in self._pending:
                    self._pending.remove(request)
            raise
        finally:
            with self._cond:
                self._driving = False
                self._cond.notify_all()

    def _busy(self) -> set[int]:
        return {seq for r in self._active for seq in r.ids}

    def _idle(self) -> list[int]:
        """Sequences that no request uses and that keep no prompt."""
        busy = self._busy()
        return [s for s in range(self.n_seq_max) if s not in busy and s not in self._kept]

    def _room(self, reuse: int) -> int:
        """KV cells free for a new request that takes over the prompt kept by `reuse` (-1: none)."""
        kept = sum(len(p) for seq, p in self._kept.items() if seq != reuse)
        return self.n_ctx - sum(r.cells for r in self._active) - kept

    def _admit(self) -> None:
        """Start the waiting requests (in arrival order) while sequences and KV cells are free for all their samples."""
        while True:
            with self._cond:
                if not self._pending:
                    return
                request = self._pending[0]
                want = len(request.samplings)
                if self.n_seq_max - len(self._busy()) < want:
                    return
                seq, keep = self._longest_prefix(request.prompt)
                for old in [s for s in self._kept if s != seq]:  # the oldest kept prompts make room first
                    if self._room(seq) >= request.cells and len(self._idle()) + (seq >= 0) >= want:
                        break
                    self._drop(old)
                if self._room(seq) < request.cells:
                    if self._active:
                        return  # waits for a request to finish
                    self._drop(seq)  # alone in the window, it needs the kept prefix's cells too
                    seq, keep = -1, 0
                request.ids = ([seq] if seq >= 0 else []) + self._idle()[: want - (seq >= 0)]
                self._kept.pop(seq, None)
                self._pending.pop(0)
                self._active.append(request)
            self._start(request, keep)

    def _longest_prefix(self, prompt: list[int]) -> tuple[int, int]:
        """The idle sequence whose kept prompt shares the longest prefix with `prompt` (-1: none) and how
        many tokens of it to keep (never the last: its logits start the samples)."""
        best, common = -1, 0
        for seq, kept in self._kept.items():
            n = 0
            for a, b in zip(kept, prompt):
                if a != b:
                    break
                n += 1
            if n > common:
                best, common = seq, n
        return best, min(common, len(prompt) - 1)

    def _drop(self, seq: int) -> None:
        if self._kept.pop(seq, None) is not None:
            self.api.llama_memory_seq_rm(self.memory, seq, -1, -1)

    def _start(self, request: _Request, keep: int) -> None:
        """Read the prompt into the first sequence, share it with the others, draw every sample's first token."""
        ids = request.ids
        self._prefill(ids[0], request.prompt, keep)
        for seq in ids[1:]:
            self.api.llama_memory_seq_rm(self.memory, seq, -1, -1)
            self.api.llama_memory_seq_cp(self.memory, ids[0], seq, -1, -1)
        request.seqs = [
            _Sequence(self, seq, len(request.prompt), s, request.grammar) for seq, s in zip(ids, request.samplings)
        ]
        for sequence in request.seqs:  # the first token of every sample from the prompt's last logits
            self._push(sequence, sequence.sample(-1), request.max_tokens, request.stop)
        self._finish_done()

    def _step(self) -> None:
        """One token for every live sample of every active request, in one `llama_decode`."""
        live = [(r, s) for r in self._active for s in r.seqs if s.finish is None]
        if not live:
            return
        self.peak_requests = max(self.peak_requests, len({id(r) for r, _ in live}))
        self._decode([(s.tokens[-1], s.pos, s.seq_id, True) for _, s in live])
        for i, (request, seq) in enumerate(live):
            seq.pos += 1
            self._push(seq, seq.sample(i), request.max_tokens, request.stop)
        self._finish_done()

    def _finish_done(self) -> None:
        """Hand back the requests whose samples are all done; the first sequence keeps the prompt."""
        finished = [r for r in self._active if all(s.finish is not None for s in r.seqs)]
        if not finished:
            return
        with self._cond:
            for request in finished:
                request.result = [
                    Generation(
                        text=self._text(s, request.stop),
                        finish_reason=s.finish or "length",
                        completion_tokens=len(s.tokens),
                    )
                    for s in request.seqs
                ]
                for i, seq in enumerate(request.seqs):
                    seq.close()
                    self.api.llama_memory_seq_rm(self.memory, seq.seq_id, len(request.prompt) if i == 0 else 0, -1)
                self._kept[request.ids[0]] = request.prompt
                request.seqs, request.ids = [], []
            self._active = [r for r in self._active if r not in finished]
            self._cond.notify_all()

    def _fail(self, exc: BaseException) -> None:
        """A failed step fails every request in the batch (their KV state is unknown) and clears the cache."""
        with self._cond:
            failed, self._active = self._active, []
            for request in failed:
                if request.result is None:
                    request.error = exc
                for seq in request.seqs:
                    seq.close()
                request.seqs, request.ids = [], []
            self._kept.clear()
            self.api.llama_memory_clear(self.memory, True)
            self._cond.notify_all()

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
