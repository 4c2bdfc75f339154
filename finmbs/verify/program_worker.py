"""The program sandbox's worker process: runs one answer program and prints one JSON result.

Started by `finmbs.verify.program.run_program` (never by hand), one process per program. It reads
the request ({"source", "passage", "functions", "limits"}) from stdin and pays every import; then two
layers close it in, each meant to hold alone (the threat model: docs/programs.md).

The OS layer (`confine`, before anything is compiled): new user, mount, network, IPC, UTS and PID
namespaces. The worker forks twice: the first child is the PID namespace's init (a guard that waits,
never runs the program, and dies with the worker: when it dies the kernel kills everything in the
namespace, so a program that clears its own parent-death signal dies anyway), which makes every mount
read-only, no-exec, no-suid, mounts a /proc that shows the namespace alone and names the host
"sandbox"; the second child runs the program. From root it drops to a uid no other process has
(`OWN_UID_BASE` + the worker's pid) in a user namespace of its own, so it can signal, trace, re-limit
or reach the /proc root of no process outside itself; it joins a new session keyring, sets
no_new_privs and clears its capabilities; then the limits: memory (RLIMIT_AS), CPU seconds
(RLIMIT_CPU), no new file descriptors (RLIMIT_NOFILE 0: no file, socket or pipe can be opened), no
file writes (RLIMIT_FSIZE 0), no processes (RLIMIT_NPROC 0). What the machine does not allow is
reported back in `layers`, never silently assumed.

The language layer: the program is compiled by RestrictedPython (no names or attributes starting
with "_", no `exec`/`eval`/`open`), runs with a small set of builtins, and `import` hands it a
read-only `ModuleView` of an allowed module's public API (`sympy` is finmbs's linear subset,
`finmbs.verify.algebra`, never sympy), never a module object (`from statistics
import sys` finds no `sys`); item access and iteration refuse modules; print goes into a capped
buffer. The parent's wall-clock limit kills this process group whatever it does.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import datetime
import decimal
import fractions
import json
import keyword
import math
import os
import platform
import resource
import select
import signal
import statistics
import sys
from collections.abc import Callable, Iterator
from types import CodeType, FrameType, MappingProxyType, ModuleType, TracebackType
from typing import Any, NoReturn

from RestrictedPython import compile_restricted, safe_builtins
from RestrictedPython.Guards import (
    full_write_guard,
    guarded_iter_unpack_sequence,
    guarded_unpack_sequence,
    safer_getattr,
)
from RestrictedPython.PrintCollector import PrintCollector

from finmbs.errors import FinmbsError
from finmbs.verify import algebra
from finmbs.verify.quotes import check_quote, exact

START = b"started\n"  # what the worker writes on the reply pipe as the program begins: timeout_s counts from it
# objects that lead out of the program's world: never handed over by item access or iteration
UNREACHABLE = (ModuleType, FrameType, CodeType, TracebackType)
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


PR_SET_PDEATHSIG = 1  # prctl: the signal this process gets when its parent dies


class ProgramError(FinmbsError):
    """A sandbox rule the program broke (a failed quote, an oversized output)."""


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


_MISSING = object()


class ModuleView:
    """What `import M` and `from M import x` hand a program: M's public API (its `__all__`, or its
    public names where it has none), read-only, with every module-valued name left out. The real
    module never reaches the program, so neither do the modules it imported (`statistics.sys`)."""

    __slots__ = ("_api", "_label")

    def __init__(self, module: ModuleType, label: str | None = None) -> None:
        names = getattr(module, "__all__", None) or dir(module)
        values = {name: getattr(module, name, _MISSING) for name in names if not name.startswith("_")}
        api = {
            name: value
            for name, value in values.items()
            if not isinstance(value, UNREACHABLE) and value is not _MISSING
        }
        object.__setattr__(self, "_api", MappingProxyType(api))
        object.__setattr__(self, "_label", label or module.__name__)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._api[name]
        except KeyError:
            raise AttributeError(f"module {self._label!r} offers no public name {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"module {self._label!r} is read-only")

    __delattr__ = __setattr__  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<module {self._label!r}>"


VIEWS = {module.__name__: ModuleView(module) for module in (math, fractions, decimal, statistics, datetime)}
# `from sympy import symbols, Eq, solve`: finmbs's linear subset under sympy's names, never sympy itself
# (whose functions turn strings into code); see finmbs.verify.algebra
VIEWS["sympy"] = ModuleView(algebra, label="sympy")


def _guarded_import(
    name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
) -> ModuleView:
    if level != 0 or name not in VIEWS:
        raise ImportError(f"import of {name!r} is not allowed (only {', '.join(VIEWS)})")
    return VIEWS[name]


def _reachable(value: Any, what: str) -> Any:
    if isinstance(value, UNREACHABLE):
        raise ProgramError(f"{what} is a {type(value).__name__}, which a program may not hold")
    return value


def _getattr(obj: Any, name: str, default: Any = _MISSING) -> Any:
    """RestrictedPython's safer getattr (which answers a missing attribute with None: here it raises, as
    Python does), and no module or frame reached through an attribute."""
    value = safer_getattr(obj, name, default)
    if value is _MISSING:
        getattr(obj, name)  # raises the AttributeError that says why (a module view names the module)
    return _reachable(value, f"attribute {name!r}")


def _getitem(obj: Any, key: Any) -> Any:
    """`obj[key]`, refusing private keys and anything that leads out (a module, a frame)."""
    if isinstance(key, str) and key.startswith("_"):
        raise ProgramError(f"item {key!r}: names starting with '_' are not allowed")
    return _reachable(obj[key], "an item")


def _getiter(obj: Any) -> Iterator[Any]:
    """`iter(obj)` for loops and comprehensions, refusing modules and anything that leads out as items."""
    if isinstance(obj, (ModuleView, *UNREACHABLE)):
        raise ProgramError(f"a {type(obj).__name__} cannot be iterated")
    return (_reachable(item, "an item") for item in obj)


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


ANSWER_BITS = 4096  # a number whose numerator or denominator is longer is no answer a problem states


def number(value: Any) -> dict[str, Any] | None:
    """`value` as the exact rational the parent formats (`program.answer_text`), so that nothing the
    program set (a decimal context, say) decides how its result is read; None when not a finite number.
    `kind`: int, float or exact (a Fraction or a Decimal), for the parent's reading."""
    exact_value = exact(value)
    if exact_value is None:
        return None
    if max(exact_value.numerator.bit_length(), exact_value.denominator.bit_length()) > ANSWER_BITS:
        raise ProgramError(f"the number has over {ANSWER_BITS} bits")
    kind = "int" if isinstance(value, int) else "float" if isinstance(value, float) else "exact"
    return {"numerator": exact_value.numerator, "denominator": exact_value.denominator, "kind": kind}


def restricted_globals(functions: dict[str, Any], quote: Any, limit: int) -> dict[str, Any]:
    allowed = {k: v for k, v in safe_builtins.items() if k not in UNSAFE_BUILTINS}
    allowed.update({name: getattr(builtins, name) for name in EXTRA_BUILTINS})
    allowed["__import__"] = _guarded_import
    return {
        "__builtins__": allowed,
        "__name__": "program",
        "_getattr_": _getattr,
        "_getitem_": _getitem,
        "_getiter_": _getiter,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
        "_write_": full_write_guard,
        "_inplacevar_": _inplace,
        "_print_": _printer(limit),
        "_apply_": lambda f, *a, **k: f(*a, **k),
        "quote": quote,
        **functions,
    }


def plain_globals(functions: dict[str, Any], quote: Any, limit: int) -> dict[str, Any]:
    """The language layer bypassed (`"restricted": false`, the sandbox's own tests only): full Python with
    every builtin, so that the tests prove the OS layer alone holds."""
    return {"__builtins__": builtins, "__name__": "program", "quote": quote, **functions}


def run(request: dict[str, Any], started: Callable[[], None]) -> dict[str, Any]:
    """Compile and run the program (and its helper functions' programs) under the restrictions; `started`
    is called as the program's own code begins (the parent's clock for its time limit)."""
    limits = request["limits"]
    passage, quotes, failed = request.get("passage"), [], []
    restricted = request.get("restricted", True) is not False
    scope = restricted_globals if restricted else plain_globals

    def quote(text: Any, value: Any) -> Any:
        if why := check_quote(text, value, passage):
            failed.append(why)
            raise ProgramError(why)
        quotes.append({"text": text, "number": number(value)})
        return value

    def compiled(source: str, name: str) -> Any:
        if not restricted:
            return compile(source, f"<{name}>", "exec")
        return compile_restricted(source, f"<{name}>", "exec")  # SyntaxError: forbidden construct

    def as_function(name: str, spec: Any) -> Any:
        """child_k(): runs child k's program (a source, or {"source", "functions"}: its own children's) and
        returns its answer."""
        if not name.isidentifier() or name.startswith("_") or keyword.iskeyword(name):
            raise SyntaxError(f"function name {name!r} is not allowed (an identifier not starting with '_')")
        source, below = (spec, {}) if isinstance(spec, str) else (spec["source"], spec.get("functions") or {})
        code, own = compiled(source, name), functions_of(below)

        def call() -> Any:
            namespace = scope(own, quote, limits["output_chars"])
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
    except (MemoryError, RecursionError):  # the parser's or the compiler's stack: nested too deep
        return {"ok": False, "error": "the program is nested too deeply to compile"}
    namespace = scope(helpers, quote, limits["output_chars"])
    _close_in(limits)
    started()
    try:
        exec(code, namespace)  # noqa: S102  (restricted code, inside the limits)
        if failed:  # a failed quote the program caught still fails it
            return {"ok": False, "error": failed[0], "quotes": quotes}
        if "answer" not in namespace:
            return {"ok": False, "error": "the program did not bind answer", "quotes": quotes}
        value = namespace["answer"]
        answer = number(value)
    except MemoryError:
        return {"ok": False, "error": "memory limit exceeded", "quotes": quotes}
    except RecursionError:
        return {"ok": False, "error": "recursion too deep", "quotes": quotes}
    except BaseException as exc:  # whatever the program raises is its failure, never the worker's
        return {"ok": False, "error": f"raised {type(exc).__name__}: {exc}"[:500], "quotes": quotes}
    if answer is None:
        return {
            "ok": False,
            "error": f"answer is not a finite number: {type(value).__name__} {str(value)[:60]!r}",
            "quotes": quotes,
        }
    output = namespace["_print"]() if restricted and "_print" in namespace else ""  # RestrictedPython's collector
    return {"ok": True, "number": answer, "quotes": quotes, "output": output if isinstance(output, str) else ""}


CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWPID = 0x08000000, 0x04000000, 0x20000000
MS_REC, MS_PRIVATE = 0x4000, 0x40000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MOUNT_ATTR_LOCKDOWN = 0x1 | 0x2 | 0x4 | 0x8  # read-only, no setuid, no devices, no exec
AT_FDCWD, AT_RECURSIVE, SYS_MOUNT_SETATTR = -100, 0x8000, 442  # x86_64 and aarch64 share 442
PR_SET_NO_NEW_PRIVS = 38
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}.get(platform.machine())
KEYCTL_JOIN_SESSION_KEYRING = 1
# a root parent's worker runs the program as OWN_UID_BASE + the worker's pid: a pid belongs to one live
# process, so the uid to one worker (systemd's UIDS-GIDS.md leaves 0x70000000-0x7FFFFFFF unused)
OWN_UID_BASE = 0x70000000
HOSTNAME = b"sandbox"  # the host name a program sees (its own UTS namespace)


class _MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("attr_set", "attr_clr", "propagation", "userns_fd")]


def confine(reply: int) -> dict[str, bool]:
    """The OS layer, as far as this machine allows, before the program is compiled. Returns in the process
    that runs the program (the worker and the namespace's init wait for it and end as it ended; they close
    their copies of `reply`, so the parent's end reads EOF when the program's process is gone), with which
    parts hold: `namespaces` (user, mount, network, IPC, UTS and PID, a /proc of its own, the host name
    hidden), `read_only` (every mount read-only, no-exec, no-suid in this view), `unprivileged` (not root,
    no groups, no capabilities) and `own_uid` (from root: a uid no other process has)."""
    libc = ctypes.CDLL(None, use_errno=True)
    root = os.geteuid() == 0
    own_uid = OWN_UID_BASE + os.getpid()
    spaces = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID
    if libc.unshare(spaces | (0 if root else CLONE_NEWUSER)) != 0:  # no namespaces here: one process, no view
        dropped = root and _own_user(own_uid)
        _seal(libc)
        return {"namespaces": False, "read_only": False} | _privileges(dropped)
    _supervise(reply)  # from here: the PID namespace's init, a guard that never runs the program
    read_only = _read_only(libc)
    proc = libc.mount(b"proc", b"/proc", b"proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, None) == 0
    named = libc.sethostname(HOSTNAME, len(HOSTNAME)) == 0
    _supervise(reply)  # from here: the program's process, pid 2 of the namespace
    dropped = root and _own_user(own_uid)
    # from root, a user namespace of its own where its uid maps to nothing: it sees itself as nobody and can
    # take no other id (not root: the worker made one with the others)
    own_namespace = not root or (dropped and libc.unshare(CLONE_NEWUSER) == 0)
    _seal(libc)
    return {"namespaces": proc and named and own_namespace, "read_only": read_only} | _privileges(dropped)


def _supervise(reply: int) -> None:
    """Fork. The child returns (killed when this process dies, even before it could say so); this process
    waits for it and ends as it did, never returning. A lifeline pipe closes the race of a parent that dies
    before the child has set its parent-death signal."""
    lifeline, alive = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(alive)
        _die_with_parent()
        if select.select([lifeline], [], [], 0)[0]:  # EOF: the parent is gone already
            os._exit(1)
        os.close(lifeline)
        return
    os.close(lifeline)
    os.close(reply)  # the parent reads EOF when the program's process ends
    _, status = os.waitpid(child, 0)
    _end_as(status)


def _end_as(status: int) -> NoReturn:
    """End as the child with `status` ended: its exit code, or the signal that killed it (raised again here,
    so the parent reads it as the worker's; a PID namespace's init cannot be killed by its own signal, so
    it passes 128 + n up instead)."""
    code = os.waitstatus_to_exitcode(status)
    sig = -code if code < 0 else code - 128 if code > 128 else 0
    if sig and os.getpid() != 1:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGXCPU's default action dumps core
        with contextlib.suppress(OSError, ValueError):  # SIGKILL's action cannot be set; it needs none
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(128 + sig if sig else code)


def _own_user(uid: int) -> bool:
    """From root: no groups, and `uid` as every uid and gid (the kernel clears root's capabilities with it);
    whether that held."""
    try:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    except OSError:
        return False
    return True


def _seal(libc: ctypes.CDLL) -> None:
    """A new session keyring (the one inherited is the parent's: a key added there would outlive the
    program), no capabilities, no_new_privs, and the parent-death signal again (a change of user clears it)."""
    if SYS_KEYCTL is not None:
        libc.syscall(SYS_KEYCTL, KEYCTL_JOIN_SESSION_KEYRING, None)
    _drop_capabilities(libc)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _die_with_parent()


def _privileges(own_uid: bool) -> dict[str, bool]:
    return {"unprivileged": os.geteuid() != 0 and os.getegid() != 0 and not os.getgroups(), "own_uid": own_uid}


def _read_only(libc: ctypes.CDLL) -> bool:
    """Every mount in this (new) mount namespace read-only, no-exec, no-suid, no-dev, recursively."""
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False
    attr = _MountAttr(MOUNT_ATTR_LOCKDOWN, 0, 0, 0)
    return libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)) == 0


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    """No capability left in any set (those a new user namespace grants, in particular)."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    libc.capset(ctypes.byref(header), data)


LIMITS_SET: list[bool] = []  # whether every limit took hold, for the reply's `layers`


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
        except (ValueError, OSError):  # a hard limit already lower holds anyway
            held = resource.getrlimit(which)[1]
            LIMITS_SET.append(held != resource.RLIM_INFINITY and held <= hard)
    LIMITS_SET.append(True)
    sys.setrecursionlimit(200)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main() -> None:
    _die_with_parent()
    reply = os.dup(1)
    os.dup2(2, 1)  # nothing the program or a library prints can corrupt the reply
    request = json.loads(sys.stdin.read())
    layers = confine(reply) if request.get("confine", True) is not False else {}
    result = run(request, lambda: _write(reply, START))
    ran = {"limits": all(LIMITS_SET)} if LIMITS_SET else {}  # a program that did not compile set none
    result["layers"] = layers | ran
    _write(reply, json.dumps(result, default=str).encode())
    os._exit(0)  # all is written: no interpreter shutdown for the parent to wait on


if __name__ == "__main__":
    main()
