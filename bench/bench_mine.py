"""What a `finmbs seeds mine` run found, for the closing note: candidates and kept seeds per document and
per type, rejections per check, the hard share for the target, tokens and wall time per kept seed; with
`--show`, every kept seed (question, answer, type, measured accuracy, evidence, the passage opening) for
the reader to judge: correct? answerable from the cited passage alone? worth asking?

    finmbs seeds mine --index-path IDX --out mined.jsonl --run-dir RUN --per-document 2
    python bench/bench_mine.py RUN [--show] [--rejected]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="the mining run folder (--run-dir)")
    parser.add_argument("--show", action="store_true", help="print every kept seed")
    parser.add_argument("--rejected", action="store_true", help="print every rejected candidate with its reason")
    args = parser.parse_args()
    metrics = json.loads((args.run / "metrics.json").read_text(encoding="utf-8"))
    outcomes = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((args.run / "documents").glob("*.json"))]
    print(
        f"documents finished {metrics['documents_done']} of {metrics['documents']}; "
        f"without a usable passage {metrics['documents_without_passage']}"
    )
    print(f"candidates {metrics['candidates']} {metrics['candidates_by_type']}")
    print(f"kept {metrics['kept']} {metrics['kept_by_type']}")
    print(f"rejected by check {metrics['rejected_by_check']}")
    print(
        f"hard for {metrics['target']}: {metrics['hard']} of {metrics['calibrated']} calibrated ({metrics['hard_share']:.0%})"
    )
    kept = metrics["kept"] or None
    print(
        f"tokens {metrics['tokens']} (construction {metrics['construction_tokens']}); wall {metrics['wall_time_s']:.0f} s; "
        f"per kept seed: {metrics['tokens'] / kept if kept else 0:.0f} tokens, "
        f"{metrics['wall_time_s'] / kept if kept else 0:.0f} s"
    )
    print("\nper document: candidates, kept, rejections, seconds")
    for o in outcomes:
        checks = Counter(r["data"].get("check") for r in o["rejected"])
        print(f"  {o['doc_id'][:48]:48} {len(o['candidates'])} {len(o['kept'])} {dict(checks)} {o['seconds']:.0f}")
    if args.show:
        for o in outcomes:
            for p in o["kept"]:
                m = p["meta"]
                print(
                    f"\n[{p['id']}] {m['type']} measured {m['measured']['k']}/{m['measured']['n']} entity {p['entity']}"
                )
                print(f"Q: {p['question']}\nA: {p['answer']}")
                print(f"solution: {m.get('teacher_solution', '')[:600]}")
                print(f"evidence: {[q['text'] for q in m['evidence']]}")
                print(f"passage: {p['snippet']['text'][:900]}")
    if args.rejected:
        for o in outcomes:
            for r in o["rejected"]:
                print(f"\n[{r['problem']['id']}] {r['data'].get('check')}: {r['reason'][:400]}")
                print(f"Q: {r['problem']['question']}\nA: {r['problem']['answer']}")


if __name__ == "__main__":
    main()
