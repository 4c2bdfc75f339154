"""Sentence embeddings from a model shipped inside a Python package (all-MiniLM-L6-v2), offline.

`static:NAME` (the `static` extra) names a static embedder distilled from NAME with model2vec: each
word piece's vector is what NAME gives that piece alone, reduced by PCA and weighted by frequency, and
a text's vector is the mean of its pieces' vectors. No transformer runs per chunk, so it embeds some
hundreds of times faster than NAME and reads a text of any length, but ranks worse
(`bench/bench_retrieval.py quality --embedding-model static:...`). It is distilled once (seconds)
from NAME's local files into the model cache.
"""

from __future__ import annotations

import fcntl
import functools
import importlib
import json
import os
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from finmbs.config import ConfigError
from finmbs.deps import integration
from finmbs.llm.embedded import cache_dir

STATIC = "static:"
STATIC_DIMS = 256  # PCA components kept by the distillation


@functools.cache
def model_dir(name: str) -> Path:
    """Folder of a sentence-transformers model: a pip package exposing `get_model_path()`, a local
    path, or `static:NAME` (distilled from NAME on first use)."""
    if name.startswith(STATIC):
        return static_dir(name.removeprefix(STATIC))
    path = Path(name)
    if path.is_dir():
        return path
    try:
        module = importlib.import_module(name.replace("-", "_"))
    except ImportError:
        raise ConfigError(f"embedding model '{name}' is neither an installed package nor a folder", key="index.embedding_model") from None
    return Path(module.get_model_path())


def static_dir(base: str) -> Path:
    """The model2vec distillation of `base`, built once into the model cache (a lock keeps two
    processes from building it at once; the folder appears complete or not at all)."""
    source = model_dir(base)
    stem = re.sub(r"[^\w.-]+", "_", Path(base).name)
    target = cache_dir() / f"static-{stem}-pca{STATIC_DIMS}"
    if (target / "modules.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "modules.json").is_file():
            _distill(source, target)
    return target


def _distill(source: Path, target: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the source is local files; never the hub
    SentenceTransformer = integration("sentence_transformers").SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    except ImportError:  # sentence-transformers before 6
        from sentence_transformers.models import StaticEmbedding
    try:
        static = StaticEmbedding.from_distillation(str(source), device="cpu", pca_dims=STATIC_DIMS)
    except ImportError:
        raise ConfigError("a static: embedder needs model2vec: pip install 'finmbs[static]'", key="index.embedding_model") from None
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    SentenceTransformer(modules=[static], device="cpu").save(str(partial))
    partial.rename(target)


@functools.cache
def _tokenizer(name: str):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir(name) / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


@functools.cache
def token_counter(name: str) -> Callable[[str], list[int]]:
    """The embedding model's own tokenizer (word pieces, no special tokens), for chunk sizes."""
    tokenizer = _tokenizer(name)
    return lambda text: tokenizer.encode(text, add_special_tokens=False).ids


@functools.cache
def token_offsets(name: str) -> Callable[[str], list[tuple[int, int]]]:
    """(start, end) character offsets of each word piece of a text (no special tokens)."""
    tokenizer = _tokenizer(name)
    return lambda text: tokenizer.encode(text, add_special_tokens=False).offsets


@functools.cache
def window(name: str) -> int:
    """How many tokens the model reads, special tokens included (MiniLM: 256); the rest is cut off."""
    config = model_dir(name) / "sentence_bert_config.json"
    if config.is_file():
        return int(json.loads(config.read_text()).get("max_seq_length") or 512)
    return 512


@functools.cache
def special_tokens(name: str) -> int:
    """Special tokens the tokenizer adds around one text ([CLS] and [SEP] for MiniLM)."""
    tokenizer = _tokenizer(name)
    return len(tokenizer.encode("x").ids) - len(tokenizer.encode("x", add_special_tokens=False).ids)


def over_window(name: str, texts: Sequence[str]) -> int:
    """How many texts the model would truncate (its tokenizer's count, special tokens included)."""
    limit, tokenizer = window(name), _tokenizer(name)
    return sum(len(e.ids) > limit for e in tokenizer.encode_batch(list(texts)))


class Embedder:
    """Normalized sentence vectors (cosine = dot product) on the CPU."""

    def __init__(self, name: str):
        SentenceTransformer = integration("sentence_transformers").SentenceTransformer

        self.name = name
        self.model = SentenceTransformer(str(model_dir(name)), device="cpu")
        dimension = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(dimension())

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> list[list[float]]:
        if not texts:
            return []
        if self.name.startswith(STATIC):
            batch_size = max(batch_size, 1024)  # a lookup and a mean per text: large batches cost nothing
        vectors = self.model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)
        return vectors.tolist()


@functools.cache
def embedder(name: str) -> Embedder:
    """One loaded model per process."""
    return Embedder(name)
