"""Optional in-process vLLM backend for the target policy: endpoint model `vllm-offline/MODEL_PATH`.

Every request pending in the event loop goes into ONE `vllm.LLM.generate` call with one
`SamplingParams(n=N, max_tokens=L)` per request, so all rollout groups a calibration has in flight
are batched by vLLM itself; each sample keeps its finish_reason (stop / length) for the in-budget
test. Requests that arrive while a batch is generating wait for the next batch. The endpoint's
`max_concurrency` caps how many requests can pend at once (give it e.g. 256), and its `extra` holds
`vllm.LLM` engine arguments (gpu_memory_utilization, max_model_len, ...). Needs the `vllm` extra
and a GPU; the usual deployment is a vLLM server reached through litellm (`openai/MODEL` + api_base).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from finmbs.config import Endpoint
from finmbs.llm.backends import Served
from finmbs.llm.types import BackendReply, GatewayError, Message, Sample, normalize_finish_reason

PREFIX = "vllm-offline/"
SAMPLING_KEYS = ("temperature", "top_p", "stop", "seed")


@dataclass
class Pending:
    """One gateway request waiting for the next batch."""

    endpoint: Endpoint
    messages: list[Message] | None
    prompt: str | None
    sampling: Any
    future: asyncio.Future


class VLLMOfflineBackend(Served):
    """vllm.LLM engines in this process (one per model path), fed in batches; a stopping run awaits a
    batch in flight (vllm's generate has no cancel)."""

    def __init__(self, window_s: float = 0.02):
        try:
            import vllm
        except ImportError:
            raise GatewayError(
                "model vllm-offline/... needs vLLM on a GPU machine: pip install 'finmbs[vllm]'"
            ) from None
        self.vllm = vllm
        self.window_s = window_s
        self.engines: dict[str, Any] = {}
        self.pending: list[Pending] = []
        self.drainer: asyncio.Task | None = None

    async def complete(self, endpoint, *, messages, prompt, n, params) -> BackendReply:
        sampling = self.vllm.SamplingParams(
            n=n, max_tokens=params["max_tokens"], **{k: params[k] for k in SAMPLING_KEYS if k in params}
        )
        future = asyncio.get_running_loop().create_future()
        self.pending.append(Pending(endpoint, messages, prompt, sampling, future))
        if self.drainer is None or self.drainer.done():
            self.drainer = asyncio.create_task(self.drain())
        return await future

    async def drain(self) -> None:
        """Batch after batch until nothing is pending; one generate call per model and batch."""
        while self.pending:
            await asyncio.sleep(self.window_s)  # let every coroutine that is ready add its request
            batch, self.pending = self.pending, []
            for model in dict.fromkeys(p.endpoint.model for p in batch):
                group = [p for p in batch if p.endpoint.model == model]
                try:
                    replies = await asyncio.to_thread(self.generate, group)
                except Exception as exc:  # noqa: BLE001 (handed to every waiting request)
                    replies = [exc] * len(group)
                for request, reply in zip(group, replies):
                    if request.future.done():
                        continue
                    if isinstance(reply, Exception):
                        request.future.set_exception(reply)
                    else:
                        request.future.set_result(reply)

    def engine(self, endpoint: Endpoint) -> Any:
        path = endpoint.model.removeprefix(PREFIX)
        if path not in self.engines:
            self.engines[path] = self.vllm.LLM(model=path, **endpoint.extra)
        return self.engines[path]

    def generate(self, group: list[Pending]) -> list[BackendReply]:
        """One `generate` call for the group (chat requests rendered with the model's chat template)."""
        llm = self.engine(group[0].endpoint)
        prompts = [p.prompt if p.prompt is not None else chat_prompt(llm, p.messages or []) for p in group]
        outputs = llm.generate(prompts, [p.sampling for p in group], use_tqdm=False)
        return [reply(output) for output in outputs]


def chat_prompt(llm: Any, messages: list[Message]) -> str:
    conversation = [m.model_dump() for m in messages]
    return llm.get_tokenizer().apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)


def reply(output: Any) -> BackendReply:
    """A vllm RequestOutput as the gateway's reply: every completion with its finish reason and tokens."""
    prompt_tokens = len(output.prompt_token_ids or [])
    samples = [
        Sample(
            text=c.text,
            finish_reason=normalize_finish_reason(c.finish_reason),
            prompt_tokens=prompt_tokens,
            completion_tokens=len(c.token_ids),
        )
        for c in output.outputs
    ]
    return BackendReply(
        samples=samples,
        prompt_tokens=prompt_tokens,
        completion_tokens=sum(s.completion_tokens for s in samples),
        cost_usd=0.0,
    )
