"""Re-grounding step 1 with a real teacher: which passage of each new document d' becomes, when the
teacher chooses among the excerpts (`stages.extract: select`) and when the most relevant excerpt is
taken (`stages.extract: retrieve`), side by side for every (seed, other document) pair.

It prints the opening of each pick; whether it is the provision analogous to the seed passage is for
the reader to judge (the shipped default-rate seeds have one in every shipped agreement: Alphatec
Section 10.5, AvidXchange "Default Rate", Realty Income "Post-Default Rate", Brown-Forman Section
2.13(c)). The teacher is the config's first teacher, through the gateway, with no response cache.

    finmbs ingest corpora/finance/docs --index-path /tmp/fidx
    python bench/bench_reground_select.py --index-path /tmp/fidx [--seeds corpora/finance/seeds-quickstart-default-rate.jsonl]
    python bench/bench_reground_select.py --index-path /tmp/fidx --retrieve-only   # no model call, seconds
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from finmbs.config import load_config
from finmbs.ingest import open_index
from finmbs.llm import Gateway
from finmbs.mbs.context import Context
from finmbs.mbs.reground import EXCERPT_CHUNKS, ask_ground, document_chunks, selected
from finmbs.records import Problem
from finmbs.seeds import SeedsError, load_seeds

ROOT = Path(__file__).resolve().parents[1]


def opening(text: str | None, n: int = 90) -> str:
    return " ".join((text or "-").split())[:n]


def bench_context(args: argparse.Namespace, **stages: object) -> tuple[Context, list[Problem]]:
    """The config's roles with no response cache, the index at --index-path and `stages` set; the seeds."""
    config = load_config(args.config)
    config = config.model_copy(
        update={
            "cache_path": None,
            "index": config.index.model_copy(update={"path": args.index_path}),
            "stages": config.stages.model_copy(update=stages),
        }
    )
    try:
        seeds: list[Problem] = load_seeds(args.seeds)
    except (SeedsError, FileNotFoundError) as exc:
        raise SystemExit(str(exc)) from None
    return Context(config=config, gateway=Gateway.from_config(config)), seeds


async def main(args: argparse.Namespace) -> None:
    ctx, seeds = bench_context(args, extract="select")
    config, gateway = ctx.config, ctx.gateway
    try:
        with open_index(config.index) as index:
            if not index.documents():
                raise SystemExit(f"no documents in the index at {args.index_path}: run `finmbs ingest` into it first")
            for seed in seeds:
                for doc in index.documents():
                    if seed.snippet is None or doc.doc_id == seed.snippet.doc_id:
                        continue
                    chunks = document_chunks(index, doc.doc_id, seed.snippet.text, EXCERPT_CHUNKS)
                    print(f"{seed.id} -> {doc.doc_id}")
                    if not args.retrieve_only:
                        reply = await ask_ground(ctx, seed, 0, doc, chunks)
                        chosen = selected(index, doc, chunks, reply.excerpts) if reply else None
                        print(
                            f"  select   {reply.excerpts if reply else None}: {opening(chosen.text if chosen else None)}"
                        )
                    head = (
                        f"[{chunks[0].section_path.rsplit(' > ', 1)[-1]}] " if chunks and chunks[0].section_path else ""
                    )
                    print(f"  retrieve [1]: {head}{opening(chunks[0].text if chunks else None)}", flush=True)
    finally:
        gateway.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index-path", required=True)
    parser.add_argument(
        "--seeds", type=Path, default=ROOT / "corpora" / "finance" / "seeds-quickstart-default-rate.jsonl"
    )
    parser.add_argument("--config", default=None)
    parser.add_argument(
        "--retrieve-only", action="store_true", help="no teacher call: only the retrieved first excerpt"
    )
    asyncio.run(main(parser.parse_args()))
