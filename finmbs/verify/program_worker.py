"""The program sandbox's worker process: runs one answer program and prints one JSON result.

Started by `finmbs.verify.program.run_program` (never by hand), one process per program. It reads
the request ({"source", "passage", "functions", "limits"}) from stdin, pays every import, then closes
itself in: memory (RLIMIT_AS), CPU seconds (RLIMIT_CPU), no new file descriptors (RLIMIT_NOFILE 0:
no file, socket or pipe can be opened), no file writes (RLIMIT_FSIZE 0), no processes (RLIMIT_NPROC 0).
Inside that, the program is compiled by RestrictedPython (no names or attributes starting with "_",
no `exec`/`eval`/`open`), runs with a small set of builtins, may import only ALLOWED_MODULES, may not
reach a module through another's attribute (`fractions.sys`), and prints into a capped buffer.
The parent's wall-clock limit kills this process group whatever it does.
"""

from __future__ import annotations

import ctypes
import datetime  # noqa: F401  (the allowed modules, imported before the limits)
import decimal  # noqa: F401
import fractions  # noqa: F401
import json
import math
import os
import resource
import signal
import statistics  # noqa: F401
import sys
from decimal import Decimal
from types import ModuleType
from typing import Any

from RestrictedPython import compile_restricted, safe_builtins
from RestrictedPython.Guards import (
    full_write_guard,
    guarded_iter_unpack_sequence,
    guarded_unpack_sequence,
    safer_getattr,
)
from RestrictedPython.PrintCollector import PrintCollector

from finmbs.errors import FinmbsError
from finmbs.verify.quotes import check_quote, exact

ALLOWED_MODULES = ("math", "fractions", "decimal", "statistics", "datetime")
EXTRA_BUILTINS = (
    "sum",
    "min",
    "max",
    "sorted",
    "enumerate",
    "zip",
    "list",
    "tuple",
    "dict",
    "set",
    "frozenset",
    "map",
    "filter",
    "any",
    "all",
    "reversed",
)
UNSAFE_BUILTINS = ("setattr", "delattr", "__build_class__", "id", "hash")


class ProgramError(FinmbsError):
    """A sandbox rule the program broke (a failed quote, an oversized output)."""


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _guarded_import(
    name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
) -> ModuleType:
    if level != 0 or name not in ALLOWED_MODULES:
        raise ImportError(f"import of {name!r} is not allowed (only {', '.join(ALLOWED_MODULES)})")
    return sys.modules[name]


def _getattr(obj: Any, name: str, default: Any = None) -> Any:
    """RestrictedPython's safer getattr, and no module reached through another (`statistics.sys`)."""
    value = safer_getattr(obj, name)
    if isinstance(value, ModuleType):
        raise AttributeError(f"attribute {name!r} is a module; import it instead")
    return value


def _inplace(op: str, x: Any, y: Any) -> Any:
    ops = {
        "+=": lambda: x + y,
        "-=": lambda: x - y,
        "*=": lambda: x * y,
        "/=": lambda: x / y,
        "//=": lambda: x // y,
        "%=": lambda: x % y,
        "**=": lambda: x**y,
    }
    if op not in ops:
        raise ProgramError(f"operator {op} is not allowed")
    return ops[op]()


def _printer(limit: int) -> type:
    class CappedPrint(PrintCollector):
        """print() inside the program: collected, at most `limit` characters."""

        size = 0

        def write(self, text: str) -> None:
            CappedPrint.size += len(text)
            if CappedPrint.size > limit:
                raise ProgramError(f"printed output over {limit} characters")
            super().write(text)

    return CappedPrint


def answer_text(value: Any) -> str | None:
    """The answer as text for the domain comparer: integers plain, floats to 12 significant digits
    (0.1 + 0.2 is 0.3), exact fractions as a decimal when finite else p/q; None when not a number."""
    number = exact(value)
    if number is None:
        return None
    if number.denominator == 1:
        return str(number.numerator)
    if isinstance(value, float):
        return format(value, ".12g")
    den = number.denominator
    for p in (2, 5):
        while den % p == 0:
            den //= p
    if den == 1:  # a finite decimal
        return format(Decimal(number.numerator) / Decimal(number.denominator), "f")
    return f"{number.numerator}/{number.denominator}"


def restricted_globals(functions: dict[str, Any], quote: Any, limit: int) -> dict[str, Any]:
    builtins = {k: v for k, v in safe_builtins.items() if k not in UNSAFE_BUILTINS}
    builtins.update(
        {
            name: __builtins__[name] if isinstance(__builtins__, dict) else getattr(__builtins__, name)
            for name in EXTRA_BUILTINS
        }
    )
    builtins["__import__"] = _guarded_import
    return {
        "__builtins__": builtins,
        "__name__": "program",
        "_getattr_": _getattr,
        "_getitem_": lambda obj, key: obj[key],
        "_getiter_": iter,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
        "_write_": full_write_guard,
        "_inplacevar_": _inplace,
        "_print_": _printer(limit),
        "_apply_": lambda f, *a, **k: f(*a, **k),
        "quote": quote,
        **functions,
    }


def run(request: dict[str, Any]) -> dict[str, Any]:
    """Compile and run the program (and its helper functions' programs) under the restrictions."""
    limits = request["limits"]
    passage, quotes, failed = request.get("passage"), [], []

    def quote(text: Any, value: Any) -> Any:
        if why := check_quote(text, value, passage):
            failed.append(why)
            raise ProgramError(why)
        quotes.append({"text": text, "value": answer_text(value)})
        return value

    def compiled(source: str, name: str) -> Any:
        return compile_restricted(source, f"<{name}>", "exec")  # SyntaxError: forbidden construct

    def as_function(name: str, spec: Any) -> Any:
        """child_k(): runs child k's program (a source, or {"source", "functions"}: its own children's) and
        returns its answer."""
        source, below = (spec, {}) if isinstance(spec, str) else (spec["source"], spec.get("functions") or {})
        code, own = compiled(source, name), functions_of(below)

        def call() -> Any:
            namespace = restricted_globals(own, quote, limits["output_chars"])
            exec(code, namespace)  # noqa: S102  (restricted code, inside the limits)
            if "answer" not in namespace:
                raise ProgramError(f"{name}() did not bind answer")
            return namespace["answer"]

        return call

    def functions_of(specs: dict[str, Any]) -> dict[str, Any]:
        return {name: as_function(name, spec) for name, spec in specs.items()}

    try:
        helpers = functions_of(request.get("functions") or {})
        code = compiled(request["source"], "program")
    except SyntaxError as exc:
        said = exc.args[0] if exc.args else exc
        said = "; ".join(map(str, said)) if isinstance(said, (tuple, list)) else str(said)
        return {"ok": False, "error": f"forbidden or invalid code: {said}"[:500]}
    namespace = restricted_globals(helpers, quote, limits["output_chars"])
    _close_in(limits)
    try:
        exec(code, namespace)  # noqa: S102  (restricted code, inside the limits)
    except MemoryError:
        return {"ok": False, "error": "memory limit exceeded", "quotes": quotes}
    except RecursionError:
        return {"ok": False, "error": "recursion too deep", "quotes": quotes}
    except BaseException as exc:  # whatever the program raises is its failure, never the worker's
        return {"ok": False, "error": f"raised {type(exc).__name__}: {exc}"[:500], "quotes": quotes}
    if failed:  # a failed quote the program caught still fails it
        return {"ok": False, "error": failed[0], "quotes": quotes}
    if "answer" not in namespace:
        return {"ok": False, "error": "the program did not bind answer", "quotes": quotes}
    value = namespace["answer"]
    text = answer_text(value)
    if text is None:
        return {
            "ok": False,
            "error": f"answer is not a finite number: {type(value).__name__} {str(value)[:60]!r}",
            "quotes": quotes,
        }
    output = namespace["_print"]() if "_print" in namespace else ""
    return {
        "ok": True,
        "answer": text,
        "value": float(value) if not isinstance(value, int) else value,
        "quotes": quotes,
        "output": output,
    }


def _close_in(limits: dict[str, Any]) -> None:
    """The process limits, set after every import (so the imports themselves need no files)."""
    with open("/proc/self/statm") as handle:  # virtual size now, in pages
        used = int(handle.read().split()[0]) * resource.getpagesize()
    memory = used + limits["memory_mb"] * 2**20
    cpu = max(1, math.ceil(limits["cpu_s"]))
    for which, soft, hard in (
        (resource.RLIMIT_AS, memory, memory),
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_FSIZE, 0, 0),
        (resource.RLIMIT_NOFILE, 0, 0),
        (resource.RLIMIT_NPROC, 0, 0),
        (resource.RLIMIT_CORE, 0, 0),
    ):
        try:  # CPU: SIGXCPU at the soft limit (reported as such), SIGKILL a second later
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):  # a hard limit already lower: it holds anyway
            pass
    sys.setrecursionlimit(200)


def main() -> None:
    _die_with_parent()
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # nothing the program or a library prints can corrupt the reply
    request = json.loads(sys.stdin.read())
    result = run(request)
    replies.write(json.dumps(result, default=str))
    replies.flush()


if __name__ == "__main__":
    main()
