"""The one LLM gateway: cache, retries, limits, `n` sampling, structured outputs, accounting, budget.

No other code calls a model. Stages ask the gateway for samples from an endpoint on behalf of a
role (teacher, student, target, judge); the gateway answers from its sqlite cache when it can,
otherwise sends the request through the endpoint's backend under its concurrency and rate limits,
retrying transient failures, and accounts calls, tokens and cost per role.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from finmbs.config import Budget, EmbeddedSettings, Endpoint, RunConfig
from finmbs.errors import FinmbsError
from finmbs.llm.backends import Backend, EmbeddedBackend, LiteLLMBackend
from finmbs.llm.cache import ResponseCache, request_key
from finmbs.llm.decoding import DecodingAborted
from finmbs.llm.limits import EndpointLimits
from finmbs.llm.structured import extract_json, schema_format, strip_think
from finmbs.llm.types import BackendReply, BudgetExceeded, GatewayError, Message, Sample
from finmbs.llm.vllm_offline import PREFIX as VLLM_OFFLINE
from finmbs.llm.vllm_offline import VLLMOfflineBackend
from finmbs.records import RoleUsage, first_error
from finmbs.resources import render_prompt

log = logging.getLogger("finmbs.gateway")
T = TypeVar("T", bound=BaseModel)
REDRAW = 1000  # sample indices of second draws after a cut-off structured reply: apart from a caller's own
Chat = list[Message] | list[dict[str, str]]

_RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529}


def seed_base(purpose: str | None) -> int:
    """The first sampling seed of a purpose's samples: 0 for none, else a stable offset below 2**30, so
    that sample i of the same request drawn for another purpose (calibration after a screen) is a
    fresh draw, not the screen's sample i reproduced by an embedded model seeded with i."""
    if not purpose:
        return 0
    return int(hashlib.sha256(purpose.encode("utf-8")).hexdigest()[:5], 16) * 1024


@cache
def _litellm_price_known(model: str) -> bool:
    try:
        import litellm

        info = litellm.get_model_info(model)
    except Exception:  # noqa: BLE001 - litellm raises its own kinds for a model it does not know
        return False
    return info.get("input_cost_per_token") is not None or info.get("output_cost_per_token") is not None


def price_known(endpoint: Endpoint) -> bool:
    """Whether a call's dollars can be counted: a price set on the endpoint, a local model (embedded,
    offline vLLM: no bill), or a model litellm's price table knows."""
    if endpoint.input_cost_per_mtok is not None or endpoint.output_cost_per_mtok is not None:
        return True
    if endpoint.is_embedded or endpoint.model.startswith(VLLM_OFFLINE):
        return True
    return _litellm_price_known(endpoint.model)


def unpriced(config: RunConfig) -> list[str]:
    """The models of `config` with no known price ("role name (model)"), each once."""
    return list(dict.fromkeys(f"{role} {e.name} ({e.model})" for role, e in config.roles.all() if not price_known(e)))


class EmptyReply(FinmbsError, RuntimeError):
    """A reply with fewer samples than asked (`choices: []`): retried like a malformed body."""


def is_timeout(exc: BaseException) -> bool:
    return isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__


def is_retryable(exc: BaseException) -> bool:
    """Transient failures: rate limits, server errors, timeouts, dropped connections, empty replies."""
    if isinstance(exc, (BudgetExceeded, GatewayError)):
        return False
    if isinstance(exc, EmptyReply):
        return True
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status in _RETRYABLE_STATUS
    name = type(exc).__name__
    transient = ("RateLimit", "Timeout", "Connection", "ServiceUnavailable", "InternalServer", "APIError")
    return any(t in name for t in transient) or isinstance(exc, (TimeoutError, ConnectionError))


class Gateway:
    """Cached, retried, rate-limited, accounted access to every configured endpoint."""

    def __init__(
        self,
        cache_path: str | None = None,
        budget: Budget | None = None,
        retry_initial_s: float = 1.0,
        retry_max_s: float = 60.0,
        embedded: EmbeddedSettings | None = None,
    ):
        self.cache = ResponseCache(cache_path)
        self.budget = budget or Budget()
        self.usage: dict[str, RoleUsage] = {}
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        self.embedded = embedded or EmbeddedSettings()
        self._limits: dict[str, EndpointLimits] = {}
        self._backends: dict[str, Backend] = {}
        self._inflight: dict[tuple[str, int], asyncio.Future[Sample]] = {}
        self.spent_before: tuple[int, float] = (0, 0.0)  # tokens and dollars earlier runs of this run folder spent
        self.on_usage: Callable[[], None] | None = None  # called after every change to the accounting
        self.draining = False  # set by `drain` (SIGTERM): no new call is sent; the ones in flight finish
        self._sending = 0  # calls sent whose reply has not come back

    @classmethod
    def from_config(cls, config: RunConfig, **kwargs: Any) -> Gateway:
        return cls(cache_path=config.cache_path, budget=config.budget, embedded=config.embedded, **kwargs)

    # accounting -----------------------------------------------------------------------------
    def role_usage(self, role: str) -> RoleUsage:
        return self.usage.setdefault(role, RoleUsage())

    @property
    def total_tokens(self) -> int:
        return sum(u.prompt_tokens + u.completion_tokens for u in self.usage.values())

    @property
    def total_cost(self) -> float:
        return sum(u.cost_usd for u in self.usage.values())

    @property
    def total_calls(self) -> int:
        return sum(u.calls for u in self.usage.values())

    def check_budget(self) -> None:
        """Raise BudgetExceeded once the token or dollar budget is spent (earlier runs of the folder included)."""
        tokens, cost = self.spent_before
        budget_check(self.budget, tokens + self.total_tokens, cost + self.total_cost)

    async def drain(self, timeout_s: float) -> bool:
        """Send no new call from now on (a call not yet sent waits until it is cancelled), stop the embedded
        models' generations, and wait up to `timeout_s` for the calls in flight to return; True when none
        is left in flight."""
        self.draining = True
        for backend in self._backends.values():
            backend.abort()  # a local model's generations are nobody's bill: stopped, not awaited
        deadline = time.monotonic() + timeout_s
        while self._sending and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return not self._sending

    def resume(self) -> None:
        """Undo `drain`: calls are sent again (a run that stopped in this process may be followed by another)."""
        self.draining = False
        for backend in self._backends.values():
            backend.resume()

    def _accounted(self) -> None:
        if self.on_usage is not None:
            self.on_usage()

    # plumbing -------------------------------------------------------------------------------
    def _backend(self, endpoint: Endpoint) -> Backend:
        kind = "embedded" if endpoint.is_embedded else "vllm" if endpoint.model.startswith(VLLM_OFFLINE) else "litellm"
        if kind not in self._backends:
            self._backends[kind] = (
                EmbeddedBackend(self.embedded)
                if kind == "embedded"
                else {"vllm": VLLMOfflineBackend, "litellm": LiteLLMBackend}[kind]()
            )
        return self._backends[kind]

    def limits(self, endpoint: Endpoint) -> EndpointLimits:
        key = f"{endpoint.model}|{endpoint.api_base}|{endpoint.name}"
        if key not in self._limits:
            self._limits[key] = EndpointLimits(
                endpoint.max_concurrency, endpoint.requests_per_minute, endpoint.tokens_per_minute
            )
        return self._limits[key]

    def _cost(self, endpoint: Endpoint, prompt_tokens: int, completion_tokens: int, reported: float | None) -> float:
        if endpoint.input_cost_per_mtok is not None or endpoint.output_cost_per_mtok is not None:
            return (
                prompt_tokens * (endpoint.input_cost_per_mtok or 0.0)
                + completion_tokens * (endpoint.output_cost_per_mtok or 0.0)
            ) / 1e6
        return reported or 0.0

    async def _request(
        self,
        endpoint: Endpoint,
        role: str,
        messages: list[Message] | None,
        prompt: str | None,
        n: int,
        params: dict[str, Any],
    ) -> list[Sample]:
        """One backend request (n samples) with limits, retries and accounting.

        Rate limits, server errors, dropped connections and empty or short replies are retried up to
        `max_retries` times; a timeout (a hung endpoint) only once. Every attempt is counted and its
        billed tokens accounted, whether or not its reply was usable.
        """
        self.check_budget()
        usage = self.role_usage(role)
        limits = self.limits(endpoint)
        backend = self._backend(endpoint)
        retrying = AsyncRetrying(
            retry=retry_if_exception(is_retryable),
            wait=wait_exponential_jitter(
                multiplier=self.retry_initial_s, jitter=self.retry_initial_s, max=self.retry_max_s
            ),
            stop=stop_after_attempt(endpoint.max_retries + 1),
            reraise=True,
        )
        timed_out, stopped = 0, False
        try:
            async for attempt in retrying:
                with attempt:
                    if attempt.retry_state.attempt_number > 1:
                        usage.retries += 1
                    await limits.requests.acquire()
                    await limits.tokens.acquire(params.get("max_tokens", 0) * n)
                    async with limits:
                        if self.draining:  # stopping: never sent, so never counted; cancelled with the run
                            await asyncio.get_running_loop().create_future()
                        usage.calls += 1
                        self._accounted()
                        self._sending += 1
                        try:
                            reply = await asyncio.wait_for(  # the hard limit, whatever the backend honours
                                backend.complete(endpoint, messages=messages, prompt=prompt, n=n, params=dict(params)),
                                None
                                if endpoint.is_embedded
                                else endpoint.timeout_s,  # embedded: queued, bounded by max_tokens
                            )
                        except DecodingAborted:
                            stopped = True  # the run is stopping: not an endpoint's failure
                        except Exception as exc:
                            timed_out += is_timeout(exc)
                            if timed_out > 1:
                                raise GatewayError(
                                    f"{role} endpoint '{endpoint.name}' timed out twice after "
                                    f"{endpoint.timeout_s:g} s; "
                                    f"raise its timeout_s (e.g. --set roles.{role_key(role)}.timeout_s=...) if it is "
                                    "just slow"
                                ) from exc
                            raise
                        finally:
                            self._sending -= 1
                        if stopped:  # cancelled with the run, like a call never sent
                            await asyncio.get_running_loop().create_future()
                    self._account(endpoint, usage, reply)
                    if len(reply.samples) != n:
                        raise EmptyReply(f"returned {len(reply.samples)} samples, asked {n}")
        except Exception as exc:
            usage.errors += 1
            self._accounted()
            if isinstance(exc, GatewayError):
                raise
            raise GatewayError(f"{role} endpoint '{endpoint.name}' failed: {type(exc).__name__}: {exc}") from exc
        return reply.samples

    def _account(self, endpoint: Endpoint, usage: RoleUsage, reply: BackendReply) -> None:
        usage.samples += len(reply.samples)
        usage.prompt_tokens += reply.prompt_tokens
        usage.completion_tokens += reply.completion_tokens
        usage.cost_usd += self._cost(endpoint, reply.prompt_tokens, reply.completion_tokens, reply.cost_usd)
        self._accounted()

    # public API -----------------------------------------------------------------------------
    async def generate(
        self,
        endpoint: Endpoint,
        *,
        role: str,
        messages: Chat | None = None,
        prompt: str | None = None,
        n: int = 1,
        first_index: int = 0,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: list[str] | None = None,
        response_format: dict[str, Any] | None = None,
        purpose: str | None = None,
    ) -> list[Sample]:
        """Samples `first_index .. first_index+n-1` for one request, from cache or the endpoint.

        `purpose` names a sampling namespace: the same request drawn for another purpose (final
        calibration, after a student screen drew it) is part of another cache key and seeded apart
        (`seed_base`), so its samples are fresh draws.

        Give `messages` (chat) or `prompt` (plain completion). A chat request to an endpoint with
        `chat: false` is rendered into a completion prompt. Sample i of a request is cached under
        (request, i), so asking again for the same indices costs nothing and returns the same text.
        `response_format` (OpenAI style, e.g. a JSON schema) constrains the output and is part of the key.
        """
        if (messages is None) == (prompt is None):
            raise ValueError("give exactly one of messages or prompt")
        msgs = [m if isinstance(m, Message) else Message(**m) for m in messages] if messages is not None else None
        if msgs is not None and not endpoint.chat:
            from finmbs.llm.prompting import messages_to_prompt

            prompt, msgs = messages_to_prompt(msgs), None
        params: dict[str, Any] = {
            "temperature": endpoint.temperature if temperature is None else temperature,
            "max_tokens": endpoint.max_tokens if max_tokens is None else max_tokens,
        }
        if stop:
            params["stop"] = stop
        if response_format:
            params["response_format"] = response_format
        payload = {
            "model": endpoint.model,
            "api_base": endpoint.api_base,
            "messages": [m.model_dump() for m in msgs] if msgs is not None else None,
            "prompt": prompt,
            "params": params,
            "extra": endpoint.extra,
        }
        if response_format:  # the key is order-blind, but a constrained reply follows the schema's property order
            payload["format_order"] = json.dumps(response_format, default=str)
        if purpose:  # absent otherwise, so every key cached before purposes existed still answers
            payload["purpose"] = purpose
        key = request_key(payload)
        indices = list(range(first_index, first_index + n))
        found = self.cache.get(key, indices)
        waiting = {i: self._inflight[(key, i)] for i in indices if i not in found and (key, i) in self._inflight}
        missing = [i for i in indices if i not in found and i not in waiting]
        self.role_usage(role).cache_hits += len(found) + len(waiting)
        if missing:
            found.update(await self._fetch(endpoint, role, msgs, prompt, params, key, missing, seed_base(purpose)))
        for i, pending in waiting.items():
            found[i] = (await pending).model_copy(update={"cached": True})
        return [found[i] for i in indices]

    async def _fetch(
        self,
        endpoint: Endpoint,
        role: str,
        msgs: list[Message] | None,
        prompt: str | None,
        params: dict[str, Any],
        key: str,
        missing: list[int],
        base: int = 0,
    ) -> dict[int, Sample]:
        """Request the missing sample indices (sample i seeded by base + i); identical requests arriving
        meanwhile wait for these. With a dollar budget, a model with no known price is never called."""
        if self.budget.max_cost_usd is not None and not price_known(endpoint):
            raise BudgetExceeded(
                f"budget.max_cost_usd is set but no price is known for {endpoint.name} ({endpoint.model}), so its "
                f"cost cannot be counted: set roles.{role_key(role)}.input_cost_per_mtok and output_cost_per_mtok "
                "(0 for a self-hosted server), or drop max_cost_usd"
            )
        loop = asyncio.get_running_loop()
        futures = {i: loop.create_future() for i in missing}
        for i, future in futures.items():
            future.add_done_callback(lambda f: f.cancelled() or f.exception())  # no "never retrieved" noise
            self._inflight[(key, i)] = future
        try:
            if endpoint.supports_n or endpoint.is_embedded:  # one request for every missing sample
                # the embedded decoder draws them together, sample i seeded by its index i
                batch = {**params, "seeds": [base + i for i in missing]} if endpoint.is_embedded else params
                fresh = dict(zip(missing, await self._request(endpoint, role, msgs, prompt, len(missing), batch)))
            else:
                replies = await asyncio.gather(
                    *(self._request(endpoint, role, msgs, prompt, 1, {**params, "seed": base + i}) for i in missing)
                )
                fresh = {i: r[0] for i, r in zip(missing, replies)}
            self.cache.put(key, fresh)
            for i, sample in fresh.items():
                futures[i].set_result(sample)
            return fresh
        except BaseException as exc:
            for future in futures.values():
                if not future.done():
                    future.set_exception(exc)
            raise
        finally:
            for i in missing:
                self._inflight.pop((key, i), None)

    async def structured(
        self,
        endpoint: Endpoint,
        schema: type[T],
        *,
        role: str,
        messages: Chat,
        n: int = 1,
        first_index: int = 0,
        temperature: float | None = None,
        max_tokens: int | None = None,
        last: bool = False,
    ) -> list[T | None]:
        """Samples parsed into `schema`, constrained to its JSON schema where the endpoint can.

        With `structured_output: json_schema` (the default) the request carries the schema as
        `response_format` (a llama.cpp grammar for embedded models, guided decoding on vLLM and
        llama.cpp servers, structured outputs on hosted APIs). A sample that still fails to parse
        (`structured_output: none`, a backend that ignores the schema) gets one repair re-ask. A
        constrained sample cut off at `max_tokens` (a model looping inside a string) cannot be
        repaired: it is drawn again instead (sample index `REDRAW + i`, so the cache keeps both). One
        still unparseable comes back as None. Failures and second asks (`repairs`) are counted.
        `last`: read the reply's last JSON value, not its first (verdicts).
        """
        msgs = [m if isinstance(m, Message) else Message(**m) for m in messages]
        fmt = schema_format(schema) if endpoint.structured_output == "json_schema" else None
        samples = await self.generate(
            endpoint,
            role=role,
            messages=msgs,
            n=n,
            first_index=first_index,
            temperature=temperature,
            max_tokens=max_tokens,
            response_format=fmt,
        )
        usage = self.role_usage(role)
        results: list[T | None] = []
        for i, sample in enumerate(samples, start=first_index):
            parsed, error = parse_structured(sample.text, schema, last=last)
            if parsed is None:
                usage.parse_failures += 1
                usage.repairs += 1
                cut_off = fmt is not None and sample.finish_reason == "length"
                if cut_off:  # the same request, another sample
                    again, index, temp = msgs, REDRAW + i, temperature
                else:  # the reply back, with what is wrong with it
                    again, index, temp = (
                        msgs
                        + [
                            Message(role="assistant", content=sample.text),
                            Message(
                                role="user",
                                content=render_prompt(
                                    "repair_json", error=error, schema=json.dumps(schema.model_json_schema())
                                ),
                            ),
                        ],
                        0,
                        0.0,
                    )
                second = await self.generate(
                    endpoint,
                    role=role,
                    messages=again,
                    n=1,
                    first_index=index,
                    temperature=temp,
                    max_tokens=max_tokens,
                    response_format=fmt,
                )
                parsed, error = parse_structured(second[0].text, schema, last=last)
                if parsed is None:
                    usage.parse_failures += 1
                    log.warning(
                        "%s: unparseable %s after %s: %s",
                        role,
                        schema.__name__,
                        "a second draw" if cut_off else "repair",
                        error,
                    )
            results.append(parsed)
        return results

    def close(self) -> None:
        self.cache.close()


def budget_check(budget: Budget, tokens: int, cost: float) -> None:
    """Raise BudgetExceeded when `tokens` or `cost` reach the budget's caps."""
    if budget.max_tokens is not None and tokens >= budget.max_tokens:
        raise BudgetExceeded(f"token budget spent: {tokens} >= {budget.max_tokens}")
    if budget.max_cost_usd is not None and cost >= budget.max_cost_usd:
        raise BudgetExceeded(f"cost budget spent: ${cost:.4f} >= ${budget.max_cost_usd}")


def role_key(role: str) -> str:
    """The config key of a role's (first) endpoint: teachers.0, students.0, target, judge."""
    return {"teacher": "teachers.0", "student": "students.0"}.get(role, role)


def parse_structured(text: str, schema: type[T], *, last: bool = False) -> tuple[T | None, str]:
    """Parse the (first, or `last`) JSON value in `text` into `schema`; (None, reason) when it does not fit."""
    try:
        value = extract_json(strip_think(text), last=last)
    except ValueError as exc:
        return None, str(exc)
    try:
        return schema.model_validate(value), ""
    except ValidationError as exc:
        where, message = first_error(exc)
        return None, f"JSON does not match the schema at '{where}': {message}"
