"""Model backends behind the gateway: litellm (hosted and OpenAI-compatible) and embedded llama.cpp."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from finmbs.config import EmbeddedSettings, Endpoint
from finmbs.llm import embedded
from finmbs.llm.embedded import available_cores, shared_scheduler
from finmbs.llm.types import BackendReply, Message, Sample, normalize_finish_reason

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


class Backend(Protocol):
    async def complete(
        self, endpoint: Endpoint, *, messages: list[Message] | None, prompt: str | None, n: int, params: dict[str, Any]
    ) -> BackendReply: ...

    def abort(self) -> None:
        """A run is stopping: end local generations now (a served call is awaited instead)."""

    def resume(self) -> None:
        """Undo `abort`."""


class Served:
    """A backend whose calls a server answers: a stopping run awaits them, so `abort` does nothing."""

    def abort(self) -> None:
        pass

    def resume(self) -> None:
        pass


def _split_tokens(total: int, texts: list[str]) -> list[int]:
    """Share an aggregate completion-token count among samples by text length."""
    if len(texts) == 1:
        return [total]
    lengths = [max(len(t), 1) for t in texts]
    return [round(total * n / sum(lengths)) for n in lengths]


class LiteLLMBackend(Served):
    """Every hosted or OpenAI-compatible endpoint (vLLM, llama.cpp server) through litellm."""

    def __init__(self) -> None:
        import litellm

        litellm.telemetry = False
        litellm.suppress_debug_info = True
        litellm.drop_params = True
        self._litellm = litellm

    async def complete(self, endpoint, *, messages, prompt, n, params):
        kwargs: dict[str, Any] = dict(
            model=endpoint.model, n=n, timeout=endpoint.timeout_s, num_retries=0, **params, **endpoint.extra
        )
        base = endpoint.base_url()
        if base:
            kwargs["api_base"] = base
        key = endpoint.api_key()
        if key:
            kwargs["api_key"] = key
        elif base:
            kwargs["api_key"] = "not-needed"
        if prompt is not None:
            response = await self._litellm.atext_completion(prompt=prompt, **kwargs)
            texts = [c.text or "" for c in response.choices]
        else:
            response = await self._litellm.acompletion(messages=[m.model_dump() for m in messages or []], **kwargs)
            texts = [c.message.content or "" for c in response.choices]
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        shares = _split_tokens(completion_tokens, texts)
        samples = [
            Sample(
                text=text,
                finish_reason=normalize_finish_reason(choice.finish_reason),
                prompt_tokens=prompt_tokens,
                completion_tokens=share,
            )
            for text, choice, share in zip(texts, response.choices, shares)
        ]
        return BackendReply(
            samples=samples,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=self._cost(response),
        )

    @staticmethod
    def _cost(response: Any) -> float | None:
        """The cost litellm already computed for the response (None for models it has no price for)."""
        cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
        return float(cost) if cost is not None else None


class EmbeddedBackend:
    """Embedded GGUF models on the CPU: chat prompts rendered by the GGUF's own chat template (plain
    completion for `chat: false`), the samples of every request made at the same time drawn together
    by the model's `decoding.Decoder` (sample i of a request seeded by its index), a JSON-schema grammar for structured
    calls, and
    generation threads scheduled process-wide so all models together never exceed the cores."""

    def __init__(self, settings: EmbeddedSettings | None = None):
        self.settings = settings or EmbeddedSettings()
        self.cores = min(self.settings.threads or available_cores(), available_cores())
        self.scheduler = shared_scheduler(self.cores)

    def abort(self) -> None:
        embedded.abort_all()

    def resume(self) -> None:
        embedded.resume_all()

    def _threads_wanted(self) -> int | None:
        """serial: every step gets all cores (one model's step at a time); share: the cores divided among
        the models that have work (None: the scheduler's current share)."""
        return self.cores if self.settings.schedule == "serial" else None

    @contextmanager
    def _lease(self) -> Iterator[int]:
        """Cores for one step of a model's batch, taken from the process-wide scheduler."""
        threads = self.scheduler.acquire(self._threads_wanted())
        try:
            yield threads
        finally:
            self.scheduler.release(threads)

    def _generate(self, endpoint: Endpoint, messages, prompt, params: dict[str, Any], seeds: list[int]) -> list[Sample]:
        from finmbs.llm.decoding import ContextOverflow, Sampling

        name = embedded.lookup(endpoint.model).name
        with self.scheduler.wants(name):
            decoder = embedded.decoder(name, self.settings.n_ctx, self.settings.repack)
            tokens = (
                embedded.completion_prompt(name, prompt)
                if prompt is not None
                else embedded.chat_prompt(name, [m.model_dump() for m in messages or []])
            )
            schema = embedded.response_schema(params.get("response_format"))
            temperature = float(params.get("temperature", 1.0))
            samplings = [
                Sampling(temperature=temperature, seed=seed, top_p=float(params.get("top_p", 0.95))) for seed in seeds
            ]
            try:
                out = decoder.generate(
                    tokens,
                    samplings,
                    max_tokens=int(params.get("max_tokens", 256)),
                    threads=self._lease,
                    stop=params.get("stop") or [],
                    grammar=embedded.grammar(schema) if schema else None,
                )
            except ContextOverflow as exc:
                entry = embedded.lookup(name)
                raise embedded.EmbeddedModelError(
                    f"embedded model '{name}' ({entry.packages}): {exc} (raise embedded.n_ctx in the config)"
                ) from exc
        return [
            Sample(
                text=g.text,
                finish_reason=g.finish_reason,
                prompt_tokens=len(tokens),
                completion_tokens=g.completion_tokens,
            )
            for g in out
        ]

    async def complete(self, endpoint, *, messages, prompt, n, params):
        params = dict(params)
        base_seed = int(params.pop("seed", 0))
        seeds = list(params.pop("seeds", None) or range(base_seed, base_seed + n))[:n]
        samples = await asyncio.to_thread(self._generate, endpoint, messages, prompt, params, seeds)
        return BackendReply(
            samples=samples,
            prompt_tokens=samples[0].prompt_tokens if samples else 0,  # the prompt is read once for all samples
            completion_tokens=sum(s.completion_tokens for s in samples),
            cost_usd=0.0,
        )
