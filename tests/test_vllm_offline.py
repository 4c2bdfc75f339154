"""The in-process vLLM backend (`vllm-offline/MODEL`), checked WITHOUT vLLM or a GPU.

A fake `vllm` module object (LLM, SamplingParams, a chat-template tokenizer) is injected through
sys.modules: these tests check finmbs's side of the contract only (batching every pending rollout
group into one `generate` call, SamplingParams(n=N, max_tokens=L), the chat template, finish_reason
and token accounting, calibration on top), not vLLM itself.
"""

from __future__ import annotations

import asyncio
import sys
import time
import types

import pytest

from finmbs.config import RunConfig
from finmbs.llm import Gateway, GatewayError
from finmbs.mbs.calibrate import calibrate_all
from finmbs.mbs.context import Context
from finmbs.records import DifficultyReport, Problem
from finmbs.testing.world import blocks, expression, value

L = 64
# per problem: which of the 8 samples are correct, and which end with finish_reason "length"
SCRIPT = {
    "1 + 1": (set(range(8)), set()),  # stale
    "2 * 3": ({0, 2, 4, 6}, {0}),  # goldilocks, in budget through samples 2, 4, 6
    "5 - 4": ({0}, {0}),  # goldilocks by count, but its one correct sample was cut: not in budget
    "9 * 9": (set(), set()),  # hard, verified hard
}


class FakeSamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.n = kwargs["n"]


class FakeTokenizer:
    def apply_chat_template(self, conversation, *, tokenize, add_generation_prompt):
        assert tokenize is False and add_generation_prompt is True
        return "".join(f"<|{m['role']}|>{m['content']}" for m in conversation) + "<|assistant|>"


class FakeLLM:
    instances: list[FakeLLM] = []

    def __init__(self, model, **engine_args):
        self.model, self.engine_args, self.calls = model, engine_args, []
        FakeLLM.instances.append(self)

    def get_tokenizer(self):
        return FakeTokenizer()

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.calls.append((list(prompts), list(sampling_params)))
        time.sleep(0.3)  # generating: requests that arrive now wait for the next batch
        outputs = []
        for prompt, params in zip(prompts, sampling_params):
            expr = expression(blocks(prompt, "problem")[-1])
            correct, cut = SCRIPT[expr]
            completions = []
            for j in range(params.n):
                answer = value(expr) + (0 if j in correct else 1)
                text = f"step step Final answer: \\boxed{{{answer}}}"
                completions.append(
                    types.SimpleNamespace(
                        text=text,
                        token_ids=list(range(L if j in cut else 5)),
                        finish_reason="length" if j in cut else "stop",
                    )
                )
            outputs.append(
                types.SimpleNamespace(prompt_token_ids=list(range(len(prompt.split()))), outputs=completions)
            )
        return outputs


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams = FakeLLM, FakeSamplingParams
    FakeLLM.instances.clear()
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


def config(tmp_path) -> RunConfig:
    target = {
        "name": "policy",
        "model": "vllm-offline/models/qwen3-4b",
        "supports_n": True,
        "max_concurrency": 256,
        "extra": {"gpu_memory_utilization": 0.5},
    }
    other = {"name": "judge", "model": "openai/unused", "api_base": "http://127.0.0.1:9/v1"}
    return RunConfig.model_validate(
        {
            "roles": {"teachers": [other], "students": [other | {"name": "student"}], "target": target, "judge": other},
            "stages": {"N": 8, "L": L},
            "cache_path": str(tmp_path / "cache.sqlite"),
        }
    )


def problems(exprs) -> list[Problem]:
    return [Problem(id=f"p{i}", question=f"Compute {e}.", answer=str(value(e))) for i, e in enumerate(exprs)]


async def test_one_generate_call_batches_every_pending_rollout_group(tmp_path, fake_vllm):
    cfg = config(tmp_path)
    gateway = Gateway.from_config(cfg)
    annotated = await calibrate_all(Context(config=cfg, gateway=gateway), problems(SCRIPT), concurrency=16)

    [llm] = FakeLLM.instances
    assert llm.model == "models/qwen3-4b" and llm.engine_args == {"gpu_memory_utilization": 0.5}
    [(prompts, params)] = llm.calls  # four rollout groups, one generate call
    assert len(prompts) == 4 and all(p.startswith("<|user|>Solve the following problem") for p in prompts)
    assert all(p.kwargs == {"n": 8, "max_tokens": L, "temperature": 1.0} for p in params)

    reports = {p.question: DifficultyReport.model_validate(p.meta["difficulty"]) for p in annotated}
    assert [(r.band, r.k, r.in_budget, r.qualified, r.verified_hard) for r in reports.values()] == [
        ("stale", 8, True, False, False),
        ("goldilocks", 4, True, True, False),
        ("goldilocks", 1, False, False, False),  # a `length` rollout never counts as in budget
        ("hard", 0, False, False, True),
    ]
    usage = gateway.usage["target"]
    assert (usage.calls, usage.samples) == (4, 32)
    assert usage.completion_tokens == 8 * 5 + (4 * 5 + 3 * 5 + L) + (7 * 5 + L) + 8 * 5

    # asked again: all 32 samples from the cache, no new generate call
    again = await calibrate_all(Context(config=cfg, gateway=gateway), problems(SCRIPT), concurrency=16)
    assert len(llm.calls) == 1 and [p.meta for p in again] == [p.meta for p in annotated]
    assert gateway.usage["target"].cache_hits == 32
    gateway.close()


async def test_requests_arriving_during_a_batch_form_the_next_batch(tmp_path, fake_vllm):
    cfg = config(tmp_path)
    gateway = Gateway.from_config(cfg)
    target = cfg.roles.target

    async def ask(expr: str, delay: float):
        await asyncio.sleep(delay)
        return await gateway.generate(
            target,
            role="target",
            messages=[{"role": "user", "content": f"<problem>\nCompute {expr}.\n</problem>"}],
            n=2,
            max_tokens=L,
        )

    first, late, *rest = await asyncio.gather(ask("1 + 1", 0), ask("2 * 3", 0.1), ask("5 - 4", 0.1), ask("9 * 9", 0.15))
    [llm] = FakeLLM.instances
    assert [len(prompts) for prompts, _ in llm.calls] == [1, 3]
    assert [s.finish_reason for s in late] == ["length", "stop"] and late[0].completion_tokens == L
    assert all(len(samples) == 2 for samples in [first, late, *rest])
    gateway.close()


async def test_engine_failure_reaches_every_waiting_request_and_missing_vllm_is_named(tmp_path, fake_vllm, monkeypatch):
    cfg = config(tmp_path)
    gateway = Gateway.from_config(cfg)
    monkeypatch.setattr(
        FakeLLM, "generate", lambda self, *a, **k: (_ for _ in ()).throw(RuntimeError("CUDA out of memory"))
    )
    with pytest.raises(GatewayError, match="CUDA out of memory"):
        await calibrate_all(Context(config=cfg, gateway=gateway), problems(["1 + 1", "2 * 3"]))
    gateway.close()

    monkeypatch.setitem(sys.modules, "vllm", None)  # not installed
    gateway = Gateway.from_config(cfg)
    with pytest.raises(GatewayError, match=r"pip install 'finmbs\[vllm\]'"):
        await gateway.generate(cfg.roles.target, role="target", prompt="Compute 1 + 1.", n=1)
    gateway.close()
