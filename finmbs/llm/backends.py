"""Model backends behind the gateway: litellm (hosted and OpenAI-compatible) and embedded llama.cpp."""

from __future__ import annotations

import asyncio
import os
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


def _split_tokens(total: int, texts: list[str]) -> list[int]:
    """Share an aggregate completion-token count among samples by text length."""
    if len(texts) == 1:
        return [total]
    lengths = [max(len(t), 1) for t in texts]
    return [round(total * n / sum(lengths)) for n in lengths]


class LiteLLMBackend:
    """Every hosted or OpenAI-compatible endpoint (vLLM, llama.cpp server) through litellm."""

    def __init__(self) -> None:
        import litellm

        litellm.telemetry = False
        litellm.suppress_debug_info = True
        litellm.drop_params = True
        self._litellm = litellm

    async def complete(self, endpoint, *, messages, prompt, n, params):
        kwargs: dict[str, Any] = dict(
            model=endpoint.model,
            n=n,
            timeout=endpoint.timeout_s,
            num_retries=0,
            **params,
            **endpoint.extra,
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
    """Embedded GGUF models through llama-cpp-python: chat completion with the GGUF's own chat template
    (plain completion for `chat: false`), one sample at a time, a JSON-schema grammar for structured
    calls, and generation threads scheduled process-wide so all models together never exceed the cores."""

    def __init__(self, settings: EmbeddedSettings | None = None):
        self.settings = settings or EmbeddedSettings()
        self.cores = min(self.settings.threads or available_cores(), available_cores())
        self.scheduler = shared_scheduler(self.cores)

    def _threads_wanted(self) -> int | None:
        """serial: every generation gets all cores (one at a time); share: the cores divided among the
        models that have work (None: the scheduler's current share)."""
        return self.cores if self.settings.schedule == "serial" else None

    def _generate(self, endpoint: Endpoint, messages, prompt, params: dict[str, Any], seed: int) -> Sample:
        name = embedded.lookup(endpoint.model).name
        with self.scheduler.wants(name), embedded.model_lock(name):
            model = embedded.load(name, self.settings.n_ctx, self.cores, self.settings.repack)
            threads = self.scheduler.acquire(self._threads_wanted())
            try:
                embedded.set_threads(model, threads)
                out = self._call(model, name, messages, prompt, params, seed)
            finally:
                self.scheduler.release(threads)
        choice = out["choices"][0]
        usage = out.get("usage", {})
        text = choice["text"] if prompt is not None else choice["message"].get("content") or ""
        return Sample(
            text=text,
            finish_reason=normalize_finish_reason(choice.get("finish_reason")),
            prompt_tokens=usage.get("prompt_tokens", 0),
            completion_tokens=usage.get("completion_tokens", 0),
        )

    @staticmethod
    def _call(model: Any, name: str, messages, prompt, params: dict[str, Any], seed: int) -> dict[str, Any]:
        sampling = dict(
            max_tokens=params.get("max_tokens", 256),
            temperature=params.get("temperature", 1.0),
            top_p=params.get("top_p", 0.95),
            stop=params.get("stop") or [],
            seed=seed,
        )
        schema = embedded.response_schema(params.get("response_format"))
        try:
            if prompt is not None:
                grammar = embedded.grammar(schema) if schema else None
                return model.create_completion(prompt=prompt, grammar=grammar, **sampling)
            fmt = {"type": "json_object", "schema": schema} if schema else None
            return model.create_chat_completion(
                messages=[m.model_dump() for m in messages or []], response_format=fmt, **sampling
            )
        except ValueError as exc:  # llama.cpp: the prompt does not fit the context window
            entry = embedded.lookup(name)
            raise embedded.EmbeddedModelError(
                f"embedded model '{name}' ({entry.packages}): {exc} (raise embedded.n_ctx in the config)"
            ) from exc

    async def complete(self, endpoint, *, messages, prompt, n, params):
        base_seed = int(params.pop("seed", 0))
        samples = [
            await asyncio.to_thread(self._generate, endpoint, messages, prompt, dict(params), base_seed + i)
            for i in range(n)
        ]
        return BackendReply(
            samples=samples,
            prompt_tokens=sum(s.prompt_tokens for s in samples),
            completion_tokens=sum(s.completion_tokens for s in samples),
            cost_usd=0.0,
        )
