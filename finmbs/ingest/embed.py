"""Sentence embeddings from a model shipped inside a Python package (all-MiniLM-L6-v2), offline."""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from finmbs.config import ConfigError


@functools.cache
def model_dir(name: str) -> Path:
    """Folder of a sentence-transformers model: a pip package exposing `get_model_path()`, or a local path."""
    path = Path(name)
    if path.is_dir():
        return path
    try:
        module = importlib.import_module(name.replace("-", "_"))
    except ImportError:
        raise ConfigError(f"embedding model '{name}' is neither an installed package nor a folder", key="index.embedding_model") from None
    return Path(module.get_model_path())


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
        from sentence_transformers import SentenceTransformer

        self.name = name
        self.model = SentenceTransformer(str(model_dir(name)), device="cpu")
        dimension = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(dimension())

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> list[list[float]]:
        if not texts:
            return []
        vectors = self.model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)
        return vectors.tolist()


@functools.cache
def embedder(name: str) -> Embedder:
    """One loaded model per process."""
    return Embedder(name)
