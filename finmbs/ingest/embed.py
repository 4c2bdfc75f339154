"""Sentence embeddings from a model shipped inside a Python package (all-MiniLM-L6-v2), offline.

`static:NAME` (the `static` extra) names a static embedder distilled from NAME with model2vec: each
word piece's vector is what NAME gives that piece alone, reduced by PCA and weighted by frequency, and
a text's vector is the mean of its pieces' vectors. No transformer runs per chunk, so it embeds far
faster than NAME and reads a text of any length, but ranks worse
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
        raise ConfigError(
            f"embedding model '{name}' is neither an installed package nor a folder", key="index.embedding_model"
        ) from None
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
        raise ConfigError(
            "a static: embedder needs model2vec: pip install 'finmbs[static]'", key="index.embedding_model"
        ) from None
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


Device = str  # "auto" | "cpu" | "cuda" (index.device)


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def resolve_device(device: Device = "auto", *, cuda: Callable[[], bool] = cuda_available) -> str:
    """Where a transformer embedder runs: `cuda` when asked for (an error when there is none), `auto`: CUDA
    when torch sees a GPU, else the CPU."""
    if device not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"index.device must be auto, cpu or cuda, not {device!r}", key="index.device")
    if device == "cuda" and not cuda():
        raise ConfigError("index.device is cuda, but torch sees no CUDA device (use auto or cpu)", key="index.device")
    if device == "auto":
        return "cuda" if cuda() else "cpu"
    return device


def batch_size_for(device: str, name: str, *, free_bytes: Callable[[], int] | None = None) -> int:
    """Texts per forward pass: 32 on the CPU (more only adds padding work); on a GPU as many as a slice of its
    free memory holds (a 256-token MiniLM batch of 256 texts needs well under 1 GiB), from 64 to 512; a
    static embedder (a lookup and a mean per text) 1024 anywhere."""
    if name.startswith(STATIC):
        return 1024
    if device != "cuda":
        return 32
    if free_bytes is None:
        import torch

        free_bytes = lambda: torch.cuda.mem_get_info()[0]  # noqa: E731
    per_text = 4 * 2**20  # activations of one 256-token text through a small BERT, generously
    return int(max(64, min(512, free_bytes() // 8 // per_text)))


class Embedder:
    """Normalized sentence vectors (cosine = dot product), on the CPU or a CUDA device (`index.device`)."""

    def __init__(self, name: str, device: Device = "cpu"):
        SentenceTransformer = integration("sentence_transformers").SentenceTransformer

        self.name = name
        # a static embedder is a table lookup: the CPU is as fast and keeps the vectors bit-identical
        self.device = "cpu" if name.startswith(STATIC) else resolve_device(device)
        self.model = SentenceTransformer(str(model_dir(name)), device=self.device)
        dimension = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(dimension())
        self.batch_size = batch_size_for(self.device, name)

    def encode(self, texts: Sequence[str], batch_size: int | None = None) -> list[list[float]]:
        if not texts:
            return []
        size = max(batch_size or 0, self.batch_size)
        vectors = self.model.encode(
            list(texts), batch_size=size, normalize_embeddings=True, show_progress_bar=False, convert_to_numpy=True
        )
        return vectors.astype("float32").tolist()


@functools.cache
def embedder(name: str, device: Device = "cpu") -> Embedder:
    """One loaded model per process and device."""
    return Embedder(name, device)


HEADER_TOKENS = 32  # document title + section path in front of each embedded chunk, at most


def clipper(model: str) -> Callable[[str, int], str]:
    """Cut a text after `n` word pieces of the model's tokenizer."""
    offsets = token_offsets(model)

    def clip(text: str, n: int) -> str:
        pieces = offsets(text)
        return text if len(pieces) <= n else text[: pieces[n - 1][1]]

    return clip


def embedding_header(document, chunk, clip: Callable[[str, int], str] | None = None) -> str:
    """The passage context embedded with a chunk: its document title and section path, clipped to
    HEADER_TOKENS word pieces so header and chunk fit the embedder's window together."""
    header = f"{document.title}\n{chunk.section_path}"
    return clip(header, HEADER_TOKENS) if clip else header


def embedding_text(document, chunk, clip: Callable[[str, int], str] | None = None) -> str:
    """What gets embedded (and BM25-indexed) for a chunk: header, then the chunk text. The same function
    serves ingest and the cascade's query-time embedding, so both embed exactly the same text."""
    return f"{embedding_header(document, chunk, clip)}\n{chunk.text}"
