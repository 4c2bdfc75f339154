"""Answer programs in a sandbox that holds (`verify.programs`, finmbs's layer, not in the paper).

A candidate's program is a small pure Python computation that ends by binding `answer`; finance
programs bind document figures with `quote("verbatim text of the passage", value)`
(`finmbs.verify.quotes`). `run_program` executes one in a separate process
(`finmbs.verify.program_worker`): a fresh interpreter of this Python, in its own process group,
closed in by two layers that each hold alone: the OS layer (its own user, mount, network, IPC, UTS
and PID namespaces under a guard that dies with the worker; a read-only, no-exec view of the file
system; from root a uid no other process has; CPU-time, memory, file-descriptor, file-size and
process limits) and the language layer (RestrictedPython's compile-time restrictions; imports
limited to read-only views of math, fractions, decimal, statistics, datetime and `sympy`, finmbs's
linear subset `finmbs.verify.algebra`), and a wall-clock limit here, counted from the program's
start, that kills the group. Whatever the program does (loops, allocates, forks, opens, imports,
raises, prints too much, binds a string) comes back as a `ProgramResult` with `ok=False` and a
one-line `error`; input that is no program is `refused`; nothing is raised to the caller and nothing
hangs. Parts of the OS layer this machine does not allow are warned about once per process and
shown by `finmbs doctor` (`sandbox_layers`); the threat model is in docs/programs.md.

    FINMBS_PROGRAM_TIMEOUT_S   wall-clock limit per program, seconds (default 10; CPU limit the same)
"""

from __future__ import annotations

import ast
import asyncio
import io
import json
import keyword
import os
import re
import selectors
import signal
import subprocess
import sys
import textwrap
import time
import tokenize
import warnings
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from finmbs.verify import algebra
from finmbs.verify.program_worker import START

PROGRAM_TIMEOUT_S = float(os.environ.get("FINMBS_PROGRAM_TIMEOUT_S", "10"))
START_S = 20.0  # the worker's start on a loaded machine (imports, layers, compile), before the program runs
GRACE_S = 0.5  # past timeout_s (counted from the program's start) before the parent kills the worker's group
MEMORY_MB = 256  # address space the program may add to the worker's own
OUTPUT_CHARS = 65_536  # print() output one program may write
REPLY_BYTES = 1_048_576  # what is read back from the worker at most: reading stops there
PROGRAM_CHARS = 20_000  # a longer "program" is no small computation
# operators and opening brackets in one statement: each can nest the syntax tree one level deeper, and
# Python's parser and compiler fail (MemoryError, RecursionError) a few thousand levels down
PROGRAM_DEPTH = 200
FUNCTIONS = 64  # functions one program may be given, its children's children included
FUNCTION_LEVELS = 8  # children of children ... at most this deep
OS_LAYERS = {
    "namespaces": "own user, mount, network, IPC, UTS and PID namespaces; a /proc of its own; the host name hidden",
    "read_only": "a read-only, no-exec view of the file system",
    "unprivileged": "an unprivileged user (no groups, no capabilities)",
    "own_uid": "a uid no other process has (from a root parent), so no other process can be signalled or traced",
    "limits": "CPU, memory, file-size and process limits; no new file descriptors",
}
# what each layer leaves open (`finmbs doctor`, docs/programs.md)
NOT_COVERED = {
    "language": "a bug in RestrictedPython or CPython (the OS layer is there for that)",
    "namespaces": "the kernel itself; without them a program sees this machine's processes and network",
    "read_only": "reading what its user may read through a descriptor the worker already holds (stdin, the reply)",
    "unprivileged": "reading files any user may read (it cannot open one: no new file descriptors)",
    "own_uid": "a non-root parent: the worker keeps that user, and could renice its processes (setpriority)",
    "limits": "memory the kernel spends for it (kernel buffers); a program blocked in a call uses no CPU "
    "(the parent's wall clock stops it)",
}
_warned: set[str] = set()  # OS layers already warned about as missing in this process
_NESTS = {"not", "and", "or", "if", "else", "lambda", "await", "in", "is"}  # keywords that nest an expression
_FLAT = {",", ";", ":", ")", "]", "}", "=", "->", "..."}  # operator tokens that nest nothing


class Quote(BaseModel):
    """One document figure a program bound with quote(): the verbatim text and the value it took."""

    text: str
    value: str | None = None


class ProgramResult(BaseModel):
    """What one program run gave: `ok` with `value` (the number) and `answer` (its text for the domain
    comparer), or `error`, one line saying why it failed; `quotes` the figures it took from the passage;
    `refused` when the input was no program the sandbox takes (`refusal`) and nothing was run."""

    ok: bool
    value: float | int | None = None
    answer: str | None = None
    error: str | None = None
    quotes: list[Quote] = Field(default_factory=list)
    output: str = ""
    refused: bool = False
    layers: dict[str, bool] = Field(default_factory=dict, exclude=True)  # the OS layers that held (not stored)
    ran_s: float | None = Field(default=None, exclude=True)  # from the program's start to its end or its stop

    def brief(self) -> str:
        return f"program gives {self.answer}" if self.ok else f"program failed: {self.error}"


@dataclass(frozen=True)
class _Exchange:
    """What came back from one worker: the reply (after the start mark), how long the program ran, and why
    the parent stopped the worker (None: it ended by itself)."""

    reply: bytes
    ran_s: float | None
    stopped: str | None


def refusal(source: object, functions: object = None) -> str | None:
    """Why `source` (with its `functions`, as `run_program` takes them) cannot be run at all: not text, too
    long, nested too deeply to parse, or a function that is not a program under a plain name; None when it
    can be tried (no program at all is no refusal: a teacher may write one)."""
    if source is not None and not isinstance(source, str):
        return f"the program is not text but {type(source).__name__}"
    if isinstance(source, str) and (why := _oversized(source)):
        return why
    return _functions_refusal(functions)


def _oversized(source: str) -> str | None:
    if len(source) > PROGRAM_CHARS:
        return f"program longer than {PROGRAM_CHARS} characters"
    if (depth := _nesting(source)) > PROGRAM_DEPTH:
        return f"program nested too deeply to parse ({depth} operators in one statement, at most {PROGRAM_DEPTH})"
    return None


def _nesting(source: str) -> int:
    """The most operators, opening brackets and nesting keywords in one statement: a bound on how deep its
    syntax tree goes, counted on tokens (which never recurse) before anything is parsed."""
    most = count = 0
    for token in _tokens(source):
        if token.type == tokenize.NEWLINE:
            count = 0
        elif (token.type == tokenize.OP and token.string not in _FLAT) or (
            token.type == tokenize.NAME and token.string in _NESTS
        ):
            count += 1
            most = max(most, count)
    return most


def _functions_refusal(functions: object) -> str | None:
    """Why `functions` (name -> a source, or {"source", "functions"}) cannot be handed to a program."""
    pending, seen = [(functions, 1)], 0
    while pending:
        specs, level = pending.pop()
        if specs is None:
            continue
        if not isinstance(specs, dict):
            return f"functions are not a mapping of names to programs but {type(specs).__name__}"
        if level > FUNCTION_LEVELS and specs:
            return f"functions nested more than {FUNCTION_LEVELS} levels deep"
        for name, spec in specs.items():
            seen += 1
            if seen > FUNCTIONS:
                return f"more than {FUNCTIONS} functions"
            if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
                return f"function name {name!r} is not an identifier"
            if name.startswith("_"):
                return f"function name {name!r} starts with '_'"
            source, below = (spec, None) if not isinstance(spec, dict) else (spec.get("source"), spec.get("functions"))
            if not isinstance(source, str):
                return f"function {name}: the program is not text but {type(source).__name__}"
            if why := _oversized(source):
                return f"function {name}: {why}"
            pending.append((below, level + 1))
    return None


def parse_program(source: object) -> ast.Module | None:
    """`source`'s syntax tree, or None when it is not text, does not parse, or is too long or too deeply
    nested to parse safely (`refusal`): what every reading of a program's text in this process goes
    through, so that no program can make the parent raise."""
    if not isinstance(source, str) or _oversized(source):
        return None
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None


def _worker_env() -> dict[str, str]:
    """This process's import path (a worktree's finmbs wins as here), nothing else that could matter."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        "PYTHONDONTWRITEBYTECODE": "1",
        "LANG": "C.UTF-8",
    }


def run_program(
    source: str,
    passage: str | None = None,
    timeout_s: float | None = None,
    functions: dict[str, Any] | None = None,
    *,
    restricted: bool = True,
    confined: bool = True,
) -> ProgramResult:
    """Run `source` in the sandbox; `passage`: the text quote() checks against (finance d');
    `functions`: name -> program of a function the program may call (a composed parent's children:
    `child_1()` runs child 1's program and returns its answer), a source or {"source", "functions"}
    for a child with children of its own. Never raises: input that is no program is `refused`.
    `restricted=False` bypasses the language layer (only the sandbox's own tests, to prove that the OS
    layer alone holds); `confined=False` skips the namespaces and the privilege drop (only
    bench/bench_sandbox.py, to measure what they cost). `timeout_s`: default PROGRAM_TIMEOUT_S, read when
    called."""
    timeout_s = PROGRAM_TIMEOUT_S if timeout_s is None else timeout_s
    if source is None or (isinstance(source, str) and not source.strip()):
        return ProgramResult(ok=False, error="no program")
    if why := refusal(source, functions):
        return ProgramResult(ok=False, refused=True, error=f"refused: {why}")
    request = {
        "source": source,
        "passage": passage if isinstance(passage, str) else None,
        "functions": functions or {},
        "limits": {"cpu_s": timeout_s, "memory_mb": MEMORY_MB, "output_chars": OUTPUT_CHARS},
        "restricted": restricted,
        "confine": confined,
    }
    try:
        proc = subprocess.Popen(
            [sys.executable, "-B", "-m", "finmbs.verify.program_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=_worker_env(),
            cwd="/",
        )
    except OSError as exc:
        return ProgramResult(ok=False, error=f"sandbox did not start: {exc}")
    try:
        exchange = _exchange(proc, json.dumps(request).encode(), timeout_s)
    finally:
        _kill(proc)
    if exchange.stopped:
        return ProgramResult(ok=False, error=exchange.stopped, ran_s=exchange.ran_s)
    return _result(exchange.reply, proc.returncode, timeout_s).model_copy(update={"ran_s": exchange.ran_s})


def _exchange(proc: subprocess.Popen, request: bytes, timeout_s: float) -> _Exchange:
    """Send the request and read the reply as it comes, against its cap and two clocks: START_S for the
    worker to reach the program (its imports, the layers, the compile), then timeout_s + GRACE_S from the
    start mark the worker writes as the program's code begins. Reading stops at REPLY_BYTES."""
    assert proc.stdin is not None and proc.stdout is not None
    selector = selectors.DefaultSelector()
    for stream, event in ((proc.stdin, selectors.EVENT_WRITE), (proc.stdout, selectors.EVENT_READ)):
        os.set_blocking(stream.fileno(), False)
        selector.register(stream, event)
    pending, received = memoryview(request), bytearray()
    deadline, started = time.monotonic() + START_S, None
    try:
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return _Exchange(bytes(received), _since(started), _overtime(started, timeout_s))
            for key, _ in selector.select(left):
                if key.fileobj is proc.stdin:
                    try:
                        pending = pending[os.write(proc.stdin.fileno(), pending[: 1 << 16]) :]
                    except BlockingIOError:  # the pipe filled between the select and the write
                        continue
                    except BrokenPipeError:  # the worker is gone; its status says why
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                chunk = os.read(proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    selector.unregister(proc.stdout)
                    continue
                received += chunk
                if started is None and received.startswith(START):
                    del received[: len(START)]
                    started = time.monotonic()
                    deadline = started + timeout_s + GRACE_S
                if len(received) > REPLY_BYTES:
                    return _Exchange(b"", _since(started), f"output over {REPLY_BYTES} bytes")
        while proc.poll() is None:  # EOF: the program's process is gone, its supervisors end at once
            if time.monotonic() > deadline:
                return _Exchange(bytes(received), _since(started), _overtime(started, timeout_s))
            time.sleep(0.005)
    finally:
        selector.close()
    return _Exchange(bytes(received), _since(started), None)


def _since(started: float | None) -> float | None:
    return None if started is None else round(time.monotonic() - started, 3)


def _overtime(started: float | None, timeout_s: float) -> str:
    if started is None:
        return f"the sandbox did not start the program within {START_S:g} s"
    return f"the program was stopped: wall-time limit ({timeout_s:g} s)"


def _kill(proc: subprocess.Popen) -> None:
    """Kill the worker's process group (anything it started dies with it: the program's process by its
    PID namespace's init) and reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    for stream in (proc.stdin, proc.stdout):
        if stream is not None and not stream.closed:
            stream.close()


def _result(out: bytes, returncode: int | None, timeout_s: float) -> ProgramResult:
    if returncode and returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else -returncode
        why = f"CPU time limit ({timeout_s:g} s)" if name == "SIGXCPU" else f"killed by {name}"
        return ProgramResult(ok=False, error=f"the program was stopped: {why}")
    try:
        data: dict[str, Any] = json.loads(out.decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not an object")
    except (UnicodeDecodeError, ValueError, RecursionError):
        return ProgramResult(ok=False, error=f"the sandbox gave no result (exit status {returncode})")
    _warn_missing(data.get("layers") or {})
    try:
        return _read(data)
    except (ValidationError, ValueError, TypeError, OverflowError, ZeroDivisionError, KeyError) as exc:
        return ProgramResult(ok=False, error=f"the sandbox gave a malformed result ({type(exc).__name__})")


def _read(data: dict[str, Any]) -> ProgramResult:
    """The worker's reply as a result: its numbers (exact rationals) formatted here, under no context the
    program could have set."""
    quotes = [Quote(text=q["text"], value=_formatted(q.get("number"))[1]) for q in data.get("quotes") or []]
    layers = data.get("layers") or {}
    if not data.get("ok"):
        error = " ".join(str(data.get("error") or "failed").split())[:300]
        return ProgramResult(ok=False, error=error, quotes=quotes, layers=layers)
    value, answer = _formatted(data["number"])
    if answer is None:
        return ProgramResult(ok=False, error="the sandbox gave no number", quotes=quotes, layers=layers)
    output = data.get("output") or ""
    return ProgramResult(ok=True, value=value, answer=answer, quotes=quotes, output=output, layers=layers)


def _formatted(number: dict[str, Any] | None) -> tuple[float | int | None, str | None]:
    """(value, answer text) of a number the worker sent as {numerator, denominator, kind}."""
    if not number:
        return None, None
    numerator, denominator = number["numerator"], number["denominator"]
    if not isinstance(numerator, int) or not isinstance(denominator, int) or denominator <= 0:
        raise ValueError("not a rational")
    exact_value = Fraction(numerator, denominator)
    is_int = number["kind"] == "int" and denominator == 1
    return (numerator if is_int else float(exact_value)), answer_text(exact_value, number["kind"] == "float")


def answer_text(number: Fraction, is_float: bool = False) -> str:
    """The answer as text for the domain comparer: integers plain, floats to 12 significant digits
    (0.1 + 0.2 is 0.3), other exact values as a decimal when finite (written out exactly, in integers)
    else p/q."""
    if number.denominator == 1:
        return str(number.numerator)
    if is_float:
        return format(float(number), ".12g")
    rest, twos, fives = number.denominator, 0, 0
    while rest % 2 == 0:
        rest, twos = rest // 2, twos + 1
    while rest % 5 == 0:
        rest, fives = rest // 5, fives + 1
    if rest != 1:
        return f"{number.numerator}/{number.denominator}"
    places = max(twos, fives)
    digits = str(abs(number.numerator) * 10**places // number.denominator).rjust(places + 1, "0")
    return ("-" if number < 0 else "") + f"{digits[:-places]}.{digits[-places:]}"


def _warn_missing(layers: dict[str, bool]) -> None:
    """Warn once per process for each part of the OS layer this machine did not allow (the language
    layer and the limits still hold; the run goes on)."""
    missing = [name for name in OS_LAYERS if name in layers and not layers[name] and name not in _warned]
    if missing:
        _warned.update(missing)
        warnings.warn(
            "program sandbox: this machine does not allow "
            + "; ".join(OS_LAYERS[name] for name in missing)
            + " (the other layers hold; `finmbs doctor` lists them)",
            RuntimeWarning,
            stacklevel=3,
        )


@cache
def sandbox_layers() -> dict[str, bool]:
    """Which layers of the sandbox hold on this machine, probed by running one program that tries to
    leave (`finmbs doctor`): each OS layer as the worker reports it, and `language` (the probe's escape,
    `from statistics import sys`, refused)."""
    probe = run_program("from statistics import sys\nanswer = 1", timeout_s=5)
    layers = {name: bool(probe.layers.get(name)) for name in OS_LAYERS}
    return layers | {"language": not probe.ok and "sys" in str(probe.error)}


async def run_program_async(
    source: str, passage: str | None = None, timeout_s: float | None = None, functions: dict[str, Any] | None = None
) -> ProgramResult:
    """`run_program` off the event loop (the engine's stages are coroutines)."""
    return await asyncio.to_thread(run_program, source, passage, timeout_s, functions)


def computes_nothing(source: str) -> bool:
    """True for a program that only binds literals (`answer = 0`, `x = 3; answer = x`), or whose last
    statement binding `answer` binds a number literal whatever came before (`answer = 12 - 5 * 1.5; answer =
    4.5`): its result proves nothing about the answer. A program that does not parse is the sandbox's to
    reject."""
    tree = parse_program(source)
    if tree is None:
        return False
    if _binds_a_number_last(tree):
        return True
    work = (
        ast.BinOp,
        ast.Call,
        ast.AugAssign,
        ast.BoolOp,
        ast.Compare,
        ast.Subscript,
        ast.IfExp,
        ast.While,
        ast.For,
        ast.Import,
        ast.ImportFrom,
    )
    nodes = list(ast.walk(tree))
    numbers = [n for n in nodes if isinstance(n, ast.Constant)]
    return not any(isinstance(n, work) for n in nodes) and all(
        isinstance(n.value, (int, float)) and not isinstance(n.value, bool) for n in numbers
    )


def _binds_a_number_last(tree: ast.Module) -> bool:
    """Whether the last top-level statement that binds `answer` is `answer = <number>` (or `-<number>`)."""
    binding = [statement for statement in tree.body if _binds_answer(statement)]
    if not binding or not isinstance(last := binding[-1], ast.Assign) or len(last.targets) != 1:
        return False
    target, value = last.targets[0], last.value
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, (ast.USub, ast.UAdd)):
        value = value.operand
    number = (
        isinstance(value, ast.Constant) and isinstance(value.value, (int, float)) and not isinstance(value.value, bool)
    )
    return isinstance(target, ast.Name) and target.id == "answer" and number


# what ends an expression, so that a name right after it (at bracket depth 0) starts a new statement
_ENDS = {tokenize.NAME, tokenize.NUMBER, tokenize.STRING}
_CLOSERS = {")", "]", "}"}
_ASSIGN = {"=", "+=", "-=", "*=", "/=", "//=", "%=", "**="}
# code a comment swallowed: a name and an assignment, `answer = rate + 0.02` in `# the rate answer = ...`
_ANSWER_IN_COMMENT = re.compile(r"#[^\n]*(?<![\w.])answer\s*=(?!=)")
_CODE_IN_COMMENT = re.compile(r"(?<![\w.])[A-Za-z_]\w*\s*(?:\+|-|\*|/|//|%|\*\*)?=(?!=)")


def line_breaks(source: str) -> str | None:
    """`source` with the line breaks a model left out, when it does not parse (or binds no `answer` but a
    comment holds one) and the breaks make it whole; None otherwise. A small model writing a program
    inside a JSON string puts statements on one line: `total = 5 * 15 answer = total - 40`, `rate =
    quote(...): answer = rate * 2`, or a `# comment` that swallows the statements after it. A break goes
    before a name assigned (or `print`) right after a complete expression at bracket depth 0, in place of
    a `:` or `;` between such statements, and before an assignment a comment swallowed. Only breaks are
    added: every token stays as written, so the program computes what it says or fails to run (it is
    still executed and compared with the stated answer and the traces like any other)."""
    if refusal(source):  # not text, or too long or too deep to read safely: nothing to mend
        return None
    tree = parse_program(source)
    swallowed = tree is not None and not _binds_answer(tree) and _ANSWER_IN_COMMENT.search(source)
    if tree is not None and not swallowed:
        return None
    fixed = source
    for _ in range(8):  # a comment may swallow a statement that itself holds a comment
        step = _break_comments(_break_statements(fixed))
        if step == fixed:
            break
        fixed = step
    mended = parse_program(fixed)
    whole = mended is not None and (not swallowed or _binds_answer(mended))
    return fixed if fixed != source and whole else None


def printed_answer(source: str) -> str | None:
    """`source` with its last statement `print(value)` made `answer = value`, when it parses, binds no
    `answer` anywhere and ends by printing one value that is not text; None otherwise. A small model told
    to bind `answer` often prints its result instead (`print(total_earnings)`): what the program shows as
    its result is the value it computed, so it is taken as such. A print of a label (`print('Total:', x)`,
    an f-string) or of several values says nothing about which is the answer and is left alone; the
    program still runs and is compared with the stated answer and the traces like any other."""
    tree = parse_program(source)
    if tree is None:
        return None
    if not tree.body or _binds_answer(tree):
        return None
    last = tree.body[-1]
    call = last.value if isinstance(last, ast.Expr) else None
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "print"
        and len(call.args) == 1
        and not call.keywords
        and not isinstance(call.args[0], (ast.Constant, ast.JoinedStr, ast.Starred))
    ):
        return None
    lines = source.splitlines()
    value = ast.get_source_segment(source, call.args[0])
    after = [line.strip() for line in lines[last.end_lineno or 0 :]]
    if value is None or any(line and not line.startswith("#") for line in after):
        return None
    start = lines[last.lineno - 1][: last.col_offset]
    if start.strip():  # `x = 1; print(x)`: the print shares its line
        return None
    head = lines[: last.lineno - 1]
    return "\n".join([*head, f"answer = {value}"]) if "\n" not in value else None


def bindings(tree: ast.AST) -> Counter[str]:
    """How often `tree` binds each name: an assignment or deletion target, a loop or comprehension variable,
    an argument, a function or class, an import."""
    bound: Counter[str] = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound[node.id] += 1
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound[node.name] += 1
        elif isinstance(node, ast.arg):
            bound[node.arg] += 1
    return bound


def called_names(tree: ast.AST) -> set[str]:
    """The names `tree` calls as functions (`f(...)`)."""
    return {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}


def equation_imports(source: str) -> str | None:
    """`source` with `from sympy import ...` added first for the names of the sandbox's linear subset
    (`finmbs.verify.algebra`: symbols, Eq, solve ...) it calls and never binds; None when it does not parse
    or needs none. Offered equations, the 1.5B often writes `x = symbols('x')` ... `solve(...)` and no
    import, a NameError: the names can only mean the subset's, and nothing else is changed."""
    tree = parse_program(source)
    if tree is None:
        return None
    missing = sorted((called_names(tree) & set(algebra.__all__)) - set(bindings(tree)))
    return f"from sympy import {', '.join(missing)}\n{source}" if missing else None


def _binds_answer(node: ast.AST) -> bool:
    """Whether `node` (a module or one statement) assigns `answer` anywhere inside it."""
    return any(isinstance(n, ast.Name) and n.id == "answer" and isinstance(n.ctx, ast.Store) for n in ast.walk(node))


def _parses(source: str) -> bool:
    return parse_program(source) is not None


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    found: list[tokenize.TokenInfo] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            found.append(token)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # an unclosed bracket or string at the end: what was read so far
    return found


def _offsets(source: str) -> list[int]:
    starts, total = [], 0
    for line in source.splitlines(keepends=True) or [""]:
        starts.append(total)
        total += len(line)
    return starts + [total]


def _break_statements(source: str) -> str:
    skipped = (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)
    tokens = [t for t in _tokens(source) if t.type not in skipped]
    starts = _offsets(source)
    at = lambda pos: starts[pos[0] - 1] + pos[1]  # noqa: E731
    cuts: list[tuple[int, int, int]] = []  # (start, end) of the text a line break replaces, the indent after it
    depth, indent, new_line = 0, 0, True
    for i, token in enumerate(tokens):
        if new_line and token.type != tokenize.NEWLINE:
            indent, new_line = token.start[1], False  # the logical line's own indentation
        if token.type == tokenize.NEWLINE:
            new_line = True
            continue
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in _CLOSERS:
            depth = max(0, depth - 1)
        if depth or i < 1 or token.type != tokenize.NAME or keyword.iskeyword(token.string):
            continue
        after = tokens[i + 1] if i + 1 < len(tokens) else None
        starts_statement = after is not None and (
            (after.type == tokenize.OP and after.string in _ASSIGN) or (token.string == "print" and after.string == "(")
        )
        before = tokens[i - 1]
        if not starts_statement or before.type == tokenize.NEWLINE:
            continue
        if _ended(before):
            cuts.append((at(before.end), at(token.start), indent))
        elif before.string in (":", ";") and i >= 2 and _ended(tokens[i - 2]):
            cuts.append((at(before.start), at(token.start), indent))
    for start, end, width in reversed(cuts):
        source = source[:start] + "\n" + " " * width + source[end:]
    return source


def _ended(token: tokenize.TokenInfo) -> bool:
    """Whether an expression can end with `token` (a name, number, string or closing bracket)."""
    return (token.type in _ENDS and not keyword.iskeyword(token.string)) or token.string in _CLOSERS


def _break_comments(source: str) -> str:
    """`source` with the first statement a comment swallowed on a line of its own (the comment's line's
    indentation)."""
    for token in _tokens(source):
        if token.type != tokenize.COMMENT:
            continue
        match = _CODE_IN_COMMENT.search(token.string, 1)
        if match:
            starts = _offsets(source)
            line = source[starts[token.start[0] - 1] :]
            cut = starts[token.start[0] - 1] + token.start[1] + match.start()
            return source[:cut].rstrip() + "\n" + re.match(r"[ \t]*", line).group(0) + source[cut:]
    return source


_CODE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


_OPEN = re.compile(r"```(?:python|py)?[ \t]*\n(.*)\Z", re.DOTALL)  # a fence the reply never closed (cut off)
_BINDS = re.compile(r"^\s*answer\s*=")
MAX_REPLY_LINES = 400  # lines of a reply searched for a program without a fence (a program is far shorter)


def _code_ending_in_answer(text: str) -> str | None:
    """The longest run of lines that parses as Python and ends at the last line binding `answer`: prose
    before a program written without a fence ("Here is the code:") and after it is left out."""
    lines = text.splitlines()[:MAX_REPLY_LINES]
    ends = [i for i, line in enumerate(lines) if _BINDS.match(line)]
    if not ends:
        return None
    end = ends[-1]
    for start in range(end + 1):
        if _parses(block := textwrap.dedent("\n".join(lines[start : end + 1]))):
            return block.strip("\n")
    return None


def program_in(reply: str | None) -> str | None:
    """The last ```python block of a plain-text reply (or the code after a fence left open); without a
    fence, the lines that parse as Python and end by binding `answer`; None when it holds no program."""
    blocks = _CODE.findall(reply or "")
    if blocks:
        return textwrap.dedent(blocks[-1]).strip("\n")
    if opened := _OPEN.search(reply or ""):
        return _code_ending_in_answer(opened.group(1))
    return _code_ending_in_answer(reply or "")


def program_text(meta: dict[str, Any]) -> str | None:
    """A problem's program as shown beside it (export rows, the report): the source from its meta, and the
    children's functions it calls, if any; None without one."""
    source = meta.get("program")
    if not source:
        return None
    functions = meta.get("program_functions")
    return source if not functions else f"{source}\n# functions it calls: {json.dumps(functions)}"
