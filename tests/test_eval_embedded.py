"""One tiny real eval: the embedded 0.5B target, FinanceBench oracle mode, 3 questions, n=2."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from finmbs.cli import app

pytest.importorskip("llama_cpp")

# three questions with short gold evidence whose PDFs are present in ../shared/data/financebench/pdfs
IDS = ("financebench_id_02119", "financebench_id_01244", "financebench_id_01482")


@pytest.mark.slow
def test_embedded_target_oracle_financebench(shared_data, tmp_path):
    source = shared_data / "financebench" / "financebench_open_source.jsonl"
    data = tmp_path / "fb.jsonl"
    data.write_text("".join(line for line in source.read_text().splitlines(True) if any(i in line for i in IDS)))
    out = tmp_path / "target.json"
    args = [
        "eval",
        "financebench",
        "--model",
        "target",
        "--mode",
        "oracle",
        "--data",
        str(data),
        "-n",
        "2",
        "--k",
        "1,2",
        "--max-tokens",
        "24",
        "--out",
        str(out),
        "--set",
        f"cache_path={tmp_path / 'cache.sqlite'}",
        "--set",
        "roles.judge.max_tokens=32",
        "--set",
        "roles.judge.model=embedded/qwen2.5-coder-0.5b-instruct",
    ]
    start = time.monotonic()
    result = CliRunner().invoke(app, args)
    elapsed = time.monotonic() - start
    assert result.exit_code == 0, result.output
    data_out = json.loads(out.read_text())
    overall = data_out["metrics"]["overall"]
    assert data_out["model"]["model"] == "embedded/qwen2.5-coder-0.5b-instruct" and data_out["mode"] == "oracle"
    assert overall["questions"] == 3 and overall["samples"] == 6 and not data_out["skipped"]
    assert 0.0 <= overall["pass_at"]["pass@1"]["value"] <= overall["pass_at"]["pass@2"]["value"] <= 1.0
    samples = [s for q in data_out["questions"] for s in q["samples"]]
    assert all(s["finish_reason"] in ("stop", "length") for s in samples)
    assert all(0 < s["completion_tokens"] <= 24 for s in samples if s["excerpt"])
    usage = data_out["usage"]["policy"]
    assert usage["calls"] == 3 and usage["samples"] == 6  # one request per question: its 2 samples drawn together
    print(
        f"\nembedded 0.5B oracle FinanceBench: {elapsed:.1f}s, pass@1={overall['pass_at']['pass@1']['value']:.3f}, "
        f"pass@2={overall['pass_at']['pass@2']['value']:.3f}, refusals={overall['refusals']}, "
        f"no_answer={overall['no_answer']}, judged={overall['judged']}, truncated={overall['truncated']}, "
        f"usage={ {r: (u['calls'], u['completion_tokens']) for r, u in data_out['usage'].items()} }"
    )
    print(result.stdout)

    again = CliRunner().invoke(app, [*args, "--overwrite"])  # the rerun is answered from the gateway cache
    assert again.exit_code == 0, again.output
    rerun = json.loads(out.read_text())
    assert rerun["usage"]["policy"]["calls"] == 0 and rerun["usage"]["policy"]["cache_hits"] == 6
    assert rerun["metrics"] == data_out["metrics"]
