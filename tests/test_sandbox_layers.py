"""The program sandbox's two layers, each proven on its own (finmbs/verify/program_worker.py).

The language layer: no module object ever reaches a program (`from statistics import sys` was an escape:
`from M import x` read the attribute off the real module), and the published RestrictedPython escapes
stay closed. The OS layer: with the language layer bypassed (`restricted=False`, full Python), the
worker's namespaces, read-only view, unprivileged user and limits still stop every hostile effect,
checked on a canary file in a world-writable folder and a canary process that must survive."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from finmbs.verify import program
from finmbs.verify.program import OS_LAYERS, run_program, sandbox_layers


def _namespaces_possible() -> bool:
    """Whether this machine lets a process make the worker's namespaces (user, mount, network, IPC, UTS,
    PID with a /proc of its own), asked of util-linux `unshare` (independent of the worker, so a broken
    worker cannot excuse itself)."""
    if not shutil.which("unshare"):
        return False
    flags = ["--net", "--mount", "--ipc", "--uts", "--pid", "--fork", "--mount-proc"]
    return (
        subprocess.run(
            ["unshare", "--user", *flags, "true"] if os.geteuid() else ["unshare", *flags, "true"],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )


NAMESPACES = _namespaces_possible()
needs_os_layer = pytest.mark.skipif(
    not (NAMESPACES and os.geteuid() == 0),
    reason="the OS layer in full needs root and namespaces on this machine (CI has both)",
)


def test_every_layer_holds_where_the_machine_allows_it() -> None:
    layers = sandbox_layers()
    assert layers["language"], layers
    assert layers["namespaces"] == layers["read_only"] == NAMESPACES, layers
    assert layers["unprivileged"], layers  # a root parent's worker has a uid of its own; another user's is not root
    assert layers["own_uid"] == (os.geteuid() == 0), layers  # only root can hand out a uid


# -- the language layer: module escapes and the published RestrictedPython escapes ---------------------------------
ESCAPES = {
    "from statistics import sys": ("from statistics import sys\nos = sys.modules['os']\nanswer = os.getpid()", "sys"),
    "from datetime import sys": ("from datetime import sys\nanswer = 1", "sys"),
    "from fractions import math, sys": ("from fractions import math, sys\nanswer = 1", "math"),
    "from statistics import random": ("from statistics import random\nanswer = random.random()", "random"),
    "from statistics import numbers": ("from statistics import numbers\nanswer = 1", "numbers"),
    "a module behind a module": ("import fractions\nanswer = fractions.sys.modules['os'].getpid()", "sys"),
    "a module's private name": ("import math\nanswer = math.__loader__", "invalid attribute name"),
    "assign into a module": ("import math\nmath.pi = 3\nanswer = math.pi", "raised"),
    "iterate a module": ("import math\nanswer = len([x for x in math])", "cannot be iterated"),
    # CVE-2023-37271: a generator's frame leads to the caller's globals
    "generator frame": ("g = (x for x in [1])\nf = g.gi_frame\nanswer = 1", "gi_frame"),
    # CVE-2023-41039: format strings reach attributes without the attribute guard
    "format_map dunder": ("answer = '{a.__class__}'.format_map({'a': 1})", "format"),
    # CVE-2026-76825: string.Formatter resolving fields past the guards
    "string.Formatter": ("import string\nanswer = string.Formatter().format('{0.__class__}', 1)", "not allowed"),
    # CVE-2026-55830: a positional-only parameter named like a guard hook shadows it
    "guard hook shadowed": ("def f(_getitem_, /):\n    return 1\nanswer = f(0)", "forbidden or invalid code"),
    "private key": ("answer = {'_x': 1}['_x']", "names starting with '_'"),
    # the sandbox's `sympy` is finmbs's linear subset: real sympy turns strings into code
    "sympify a string": ("from sympy import sympify\nanswer = sympify('1')", "sympify"),
    "lambdify": ("import sympy\nanswer = sympy.lambdify", "lambdify"),
    "the subset's module": ("import sympy\nanswer = sympy.Fraction(1)", "Fraction"),
    "a function's globals": ("from sympy import solve\nanswer = solve.__globals__", "invalid attribute name"),
}


@pytest.mark.parametrize("name", list(ESCAPES))
def test_language_escapes_are_one_line_rejections(name: str) -> None:
    source, why = ESCAPES[name]
    result = run_program(source, timeout_s=2)
    assert not result.ok and result.answer is None, result
    assert why in result.error and "\n" not in result.error, result.error


def test_allowed_modules_keep_their_public_api() -> None:
    good = {
        "import math\nanswer = math.floor(math.sqrt(50))": "7",
        "from fractions import Fraction\nanswer = Fraction(1, 3) + Fraction(1, 6)": "0.5",
        "from decimal import Decimal, ROUND_HALF_UP\n"
        "answer = Decimal('2.675').quantize(Decimal('0.01'), rounding=ROUND_HALF_UP)": "2.68",
        "import statistics\nanswer = statistics.median([3, 1, 2])": "2",
        "from datetime import date\nanswer = (date(2024, 3, 1) - date(2024, 1, 1)).days": "60",
        "import datetime\nanswer = (datetime.date(2024, 7, 15) - datetime.timedelta(days=14)).day": "1",
    }
    for source, expected in good.items():
        result = run_program(source)
        assert result.ok and result.answer == expected, (source, result)


# -- the OS layer alone: full Python inside the worker, every effect stopped ----------------------------------------
@pytest.fixture
def canary() -> Iterator[dict[str, str]]:
    """A file in a world-writable, non-sticky folder under /tmp (any user could delete it, were the file
    system writable) and a root process: what a hostile program would harm."""
    folder = Path(tempfile.mkdtemp(prefix="finmbs-canary-", dir="/tmp"))
    folder.chmod(0o777)
    target = folder / "canary.txt"
    target.write_text("alive")
    target.chmod(0o666)
    sleeper = subprocess.Popen(["sleep", "120"])
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    yield {"DIR": str(folder), "FILE": str(target), "PID": str(sleeper.pid), "PORT": str(listener.getsockname()[1])}
    try:
        listener.accept()
        connected = True
    except OSError:
        connected = False
    listener.close()
    alive = sleeper.poll() is None
    sleeper.kill()
    sleeper.wait()
    after = sorted(p.name for p in folder.iterdir())
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else None
    content = target.read_text() if target.exists() else None
    shutil.rmtree(folder)
    assert alive, "the canary process was killed"
    assert not connected, "a program reached a socket on this machine"
    assert after == ["canary.txt"] and content == "alive" and mode == 0o666, (after, content, mode)


HOSTILE = {
    "create a file": "open('DIR/new.txt', 'w').write('x')\nanswer = 1",
    "write the canary": "open('FILE', 'w').write('pwned')\nanswer = 1",
    "unlink": "import os\nos.unlink('FILE')\nanswer = 1",
    "rename": "import os\nos.rename('FILE', 'DIR/moved.txt')\nanswer = 1",
    "chmod": "import os\nos.chmod('FILE', 0o600)\nanswer = 1",
    "mkdir": "import os\nos.mkdir('DIR/sub')\nanswer = 1",
    "kill a process": "import os, signal\nos.kill(PID, signal.SIGKILL)\nanswer = 1",
    "fork": "import os\npid = os.fork()\nif pid == 0:\n    os._exit(0)\nanswer = 1",
    "socket": "import socket\ns = socket.create_connection(('127.0.0.1', PORT), timeout=2)\nanswer = 1",
    "exec": "import os\nos.execv('/bin/sh', ['sh', '-c', 'touch DIR/exec.txt'])\nanswer = 1",
    "system": "import os\nassert os.system('touch DIR/system.txt') == 0\nanswer = 1",
    "subprocess": "import subprocess\nsubprocess.run(['touch', 'DIR/sub.txt'])\nanswer = 1",
    "setuid back to root": "import os\nos.setuid(0)\nopen('DIR/root.txt', 'w')\nanswer = 1",
    "remount writable": "import ctypes\nlibc = ctypes.CDLL(None)\n"
    "assert libc.mount(None, b'/', None, 32 | 16384, None) == 0\nopen('DIR/x', 'w')\nanswer = 1",
}


def _filled(source: str, canary: dict[str, str]) -> str:
    for key, value in canary.items():
        source = source.replace(key, value)
    return source


@needs_os_layer
@pytest.mark.parametrize("name", list(HOSTILE))
def test_os_layer_alone_stops_every_effect(name: str, canary: dict[str, str]) -> None:
    result = run_program(_filled(HOSTILE[name], canary), timeout_s=3, restricted=False)
    assert not result.ok and result.error and "\n" not in result.error, result


@pytest.mark.parametrize("name", list(HOSTILE))
def test_both_layers_stop_every_effect(name: str, canary: dict[str, str]) -> None:
    result = run_program(_filled(HOSTILE[name], canary), timeout_s=3)
    assert not result.ok and result.error and "\n" not in result.error, result


@needs_os_layer
def test_os_layer_alone_cannot_kill_the_parent(tmp_path: Path) -> None:
    # the parent is a Python process of its own here, so that the test survives a failure to prove it
    script = (
        "from finmbs.verify.program import run_program\n"
        "r = run_program('import os, signal\\nos.kill(os.getppid(), signal.SIGKILL)\\nanswer = 1', restricted=False)\n"
        "print('RESULT', r.ok, r.error)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "RESULT False" in done.stdout, (done.returncode, done.stdout, done.stderr)


def test_a_missing_os_layer_is_warned_once_and_the_run_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(program, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program._warn_missing({"namespaces": False, "read_only": False, "unprivileged": True})
        program._warn_missing({"namespaces": False, "read_only": False, "unprivileged": True})
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and OS_LAYERS["namespaces"] in said[0] and OS_LAYERS["read_only"] in said[0]
    assert OS_LAYERS["unprivileged"] not in said[0]


def test_doctor_names_the_sandbox_layers() -> None:
    from finmbs.cli import app

    result = CliRunner().invoke(app, ["doctor"])
    assert "program sandbox" in result.output and "does not cover" in result.output, result.output
    for what in ("language", *OS_LAYERS):
        assert what in result.output, result.output
    assert set(program.NOT_COVERED) == {"language", *OS_LAYERS}  # every layer says what it leaves open


def test_verify_a_file_of_hostile_programs_touches_nothing(tmp_path: Path, canary: dict[str, str], openai_server):
    """`finmbs verify` on a dataset whose programs are hostile: every line is reported (a rejection by
    program), the run finishes, and nothing outside --out changes."""
    from test_programs_engine import write_config

    from finmbs.cli import app
    from finmbs.runs import read_jsonl
    from finmbs.testing.world import World

    rows = [
        {"id": name.replace(" ", "-"), "question": "Compute 3 * 4.", "answer": "12", "meta": {"program": source}}
        for name, source in [
            *((n, _filled(s, canary).replace("answer = 1", "answer = 12")) for n, s in HOSTILE.items()),
            ("escape", ESCAPES["from statistics import sys"][0]),
        ]
    ]
    problems = tmp_path / "hostile.jsonl"
    problems.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = write_config(openai_server, tmp_path, World(agents={}))
    out = tmp_path / "out" / "verdicts.jsonl"
    out.parent.mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    result = CliRunner().invoke(app, ["verify", str(problems), "--config", config, "--out", str(out)])
    assert result.exit_code == 0, result.output
    verdicts = {v["id"]: v for v in read_jsonl(out)}
    assert set(verdicts) == {r["id"] for r in rows}
    assert all(v["outcome"] == "rejected" and v["check"] == "program" for v in verdicts.values()), verdicts
    after = sorted(p.name for p in tmp_path.iterdir())
    assert [name for name in after if name not in before] == ["cache.sqlite"] or after == before, (before, after)


# -- the OS layer alone from a root parent, beside a process of nobody (uid 65534) ----------------------------------
# Every worker once ran as nobody in the host's PID, IPC and user namespaces: a program could reach the root of
# any nobody process (/proc/PID/root), signal, trace or re-limit it, leave SysV objects and keys behind, flood
# the parent's memory, outlive its parent, overstay its time limit and read the host name (issue 61).
NOBODY = 65534
needs_root_beside_nobody = pytest.mark.skipif(
    not (NAMESPACES and os.geteuid() == 0 and shutil.which("setpriv")),
    reason="a root parent with namespaces and util-linux setpriv (to start a process of nobody); CI has all three",
)


def _proc_field(pid: int, name: str) -> str:
    """One field of /proc/PID/status ("State", "TracerPid")."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return line.split(":", 1)[1].strip()
    raise KeyError(name)


def _nobody_state(pid: int) -> dict[str, str]:
    """What a program must not change in the nobody process: stopped or not (running and sleeping are one
    here), its tracer, nice value and limits."""
    return {
        "stopped": str(_proc_field(pid, "State")[0] in "Tt"),
        "tracer": _proc_field(pid, "TracerPid"),
        "nice": Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16],
        "limits": Path(f"/proc/{pid}/limits").read_text(),
    }


@pytest.fixture
def nobody() -> Iterator[dict[str, str]]:
    """A process of nobody and a canary file (0666) in a world-writable folder (0777) in this machine's /tmp:
    reached through /proc/PID/root, the folder is what a program running as nobody could change."""
    folder = Path(tempfile.mkdtemp(prefix="finmbs-nobody-", dir="/tmp"))
    folder.chmod(0o777)
    target = folder / "canary.txt"
    target.write_text("alive")
    target.chmod(0o666)
    sleeper = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "sleep", "300"])
    deadline = time.monotonic() + 10
    while _proc_field(sleeper.pid, "Uid").split()[0] != str(NOBODY):  # setpriv has dropped to nobody
        assert time.monotonic() < deadline, "setpriv did not drop to nobody"
        time.sleep(0.01)
    root = f"/proc/{sleeper.pid}/root"
    yield {"ROOT": root, "DIR": str(folder), "FILE": str(target), "PID": str(sleeper.pid), "KEY": "0x6a1b2c61"}
    sleeper.kill()
    sleeper.wait()
    shutil.rmtree(folder)


def _nobody_intact(nobody: dict[str, str], before: dict[str, str]) -> list[str]:
    """What a program changed of the nobody process and the canary folder (empty: nothing)."""
    pid, folder, target = int(nobody["PID"]), Path(nobody["DIR"]), Path(nobody["FILE"])
    changed = []
    if not Path(f"/proc/{pid}").exists() or _proc_field(pid, "State")[0] == "Z":
        changed.append("the nobody process was killed")
    elif (now := _nobody_state(pid)) != before:
        changed += [f"{key}: {before[key]!r} -> {now[key]!r}" for key in before if now[key] != before[key]]
    if sorted(p.name for p in folder.iterdir()) != ["canary.txt"]:
        changed.append(f"the folder holds {sorted(p.name for p in folder.iterdir())}")
    if target.exists() and (target.read_text(), stat.S_IMODE(target.stat().st_mode)) != ("alive", 0o666):
        changed.append("the canary file changed")
    return changed


# every process of nobody this machine shows, found without a file descriptor (the worker may open none) and
# killed: how a program once found and killed a concurrently running sandbox worker
PID_MAX = int(Path("/proc/sys/kernel/pid_max").read_text())
SCAN = (
    "import os\nkilled = 0\n"
    # from this process's pid up first: pids are handed out upwards, so the workers started since come soon
    f"for pid in [*range({os.getpid()}, {PID_MAX}), *range(1, {os.getpid()})]:\n"
    "    try:\n"
    "        if pid != os.getpid() and os.stat(f'/proc/{pid}').st_uid == 65534:\n"
    "            os.kill(pid, 9)\n"
    "            killed += 1\n"
    "    except OSError:\n"
    "        pass\n"
    "assert killed, 'no process of nobody in view'\nanswer = killed"
)
BESIDE_NOBODY = {
    "unlink through its root": "import os\nos.unlink('ROOTFILE')\nanswer = 1",
    "rename through its root": "import os\nos.rename('ROOTFILE', 'ROOTDIR/moved')\nanswer = 1",
    "mkdir through its root": "import os\nos.mkdir('ROOTDIR/sub')\nanswer = 1",
    "mknod through its root": "import os, stat\nos.mknod('ROOTDIR/fifo', 0o666 | stat.S_IFIFO)\nanswer = 1",
    "truncate through its root": "import os\nos.truncate('ROOTFILE', 0)\nanswer = 1",
    "symlink through its root": "import os\nos.symlink('/etc/passwd', 'ROOTDIR/link')\nanswer = 1",
    "kill it": "import os\nos.kill(PID, 9)\nanswer = 1",
    "kill every process of nobody": "SCAN",
    "ptrace it": "import ctypes\nlibc = ctypes.CDLL(None)\nassert libc.ptrace(16, PID, 0, 0) == 0\nanswer = 1",
    "renice nobody": "import os\nos.setpriority(os.PRIO_USER, 65534, 19)\nanswer = 1",
    "re-limit it": "import resource\nresource.prlimit(PID, resource.RLIMIT_NOFILE, (1, 1))\nanswer = 1",
}


@needs_root_beside_nobody
@pytest.mark.parametrize("name", list(BESIDE_NOBODY))
def test_os_layer_alone_cannot_reach_another_process(name: str, nobody: dict[str, str]) -> None:
    before = _nobody_state(int(nobody["PID"]))
    through = {"ROOTFILE": nobody["ROOT"] + nobody["FILE"], "ROOTDIR": nobody["ROOT"] + nobody["DIR"]}
    source = _filled(_filled(BESIDE_NOBODY[name], through), {"PID": nobody["PID"]})
    result = run_program(SCAN if source == "SCAN" else source, timeout_s=30, restricted=False)
    assert _nobody_intact(nobody, before) == [], result
    assert not result.ok and result.error and "\n" not in result.error, result


@needs_root_beside_nobody
def test_os_layer_alone_leaves_no_sysv_object(nobody: dict[str, str]) -> None:
    """Shared memory, a message queue and a semaphore set made by a program end with it (its own IPC
    namespace)."""
    key = int(nobody["KEY"], 16)
    source = (
        "import ctypes\nlibc = ctypes.CDLL(None)\n"
        f"made = [libc.shmget({key}, 4096, 0o1666), libc.msgget({key}, 0o1666), libc.semget({key}, 1, 0o1666)]\n"
        "assert min(made) >= 0, made\nanswer = 1"
    )
    result = run_program(source, timeout_s=3, restricted=False)
    assert result.ok, result  # made in the program's own IPC namespace: allowed, and gone with it
    left = [kind for kind in ("shm", "msg", "sem") if _sysv_keys(kind) & {key}]
    for kind in left:  # clean up what a failing run left on this machine
        subprocess.run(["ipcrm", {"shm": "-M", "msg": "-Q", "sem": "-S"}[kind], str(key)], check=False)
    assert left == [], f"SysV {left} with key {key:#x} outlived the program"


# keyctl(2) on x86_64: a parent with a session keyring of its own runs a program that adds a key to its
# session keyring (which it inherits from the parent unless it joins one of its own) and its user keyring
KEYS_PARENT = """
import ctypes, sys, time
from finmbs.verify.program import run_program
libc = ctypes.CDLL(None, use_errno=True)
ring = libc.syscall(250, 1, b"finmbs-test-session")  # KEYCTL_JOIN_SESSION_KEYRING
program = (
    "import ctypes\\nlibc = ctypes.CDLL(None)\\n"
    "serials = [libc.syscall(248, b'user', b'finmbs-canary', b'x', 1, ring) for ring in (-3, -4)]\\n"
    "answer = max(serials)"
)
result = run_program(program, timeout_s=3, restricted=False)
linked = libc.syscall(250, 11, ring, None, 0)  # KEYCTL_READ: bytes of key serials linked in our session keyring
serial, gone = int(result.answer or 0), False
for _ in range(300):  # the kernel collects an unreferenced key soon, not at once
    if libc.syscall(250, 6, serial, None, 0) < 0 and ctypes.get_errno() == 126:  # KEYCTL_DESCRIBE: ENOKEY
        gone = True
        break
    time.sleep(0.01)
print("RESULT", result.ok, serial, linked, gone)
"""


@needs_root_beside_nobody
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the keyctl and add_key numbers written here are x86_64's")
def test_os_layer_alone_leaves_no_key() -> None:
    done = subprocess.run([sys.executable, "-c", KEYS_PARENT], capture_output=True, text=True, timeout=60, check=False)
    said = done.stdout.split()
    assert "RESULT" in said, (done.stdout, done.stderr)
    ok, serial, linked, gone = said[said.index("RESULT") + 1 : said.index("RESULT") + 5]
    assert ok == "True" and int(serial) > 0, done.stdout  # the program could add a key: to a keyring of its own
    assert linked == "0", f"the program linked keys into its parent's session keyring ({linked} bytes of serials)"
    assert gone == "True", "the program's key outlived it"


def _sysv_keys(kind: str) -> set[int]:
    lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
    return {int(line.split()[0]) for line in lines if line.strip()}


@needs_root_beside_nobody
def test_one_worker_cannot_kill_another() -> None:
    """A program that kills every process of nobody it can find while another sandboxed program runs: the
    other one's result stands (each worker has a uid and a PID namespace of its own)."""
    import threading

    results: list[program.ProgramResult] = []
    sleeper = threading.Thread(
        target=lambda: results.append(
            run_program("import time\ntime.sleep(8)\nanswer = 7", timeout_s=15, restricted=False)
        )
    )
    sleeper.start()
    time.sleep(2)  # the first worker is running its program
    run_program(SCAN, timeout_s=30, restricted=False)  # as nobody once, it killed the first worker
    sleeper.join(30)
    assert results and results[0].ok and results[0].answer == "7", results


@needs_root_beside_nobody
def test_a_pipe_flood_stops_at_the_cap() -> None:
    """A program writing 200 MiB at the reply pipe: the parent stops reading at REPLY_BYTES, so its memory
    does not grow with what the program writes (measured in a parent of its own)."""
    flood = (
        "import os\nchunk = b'x' * (1 << 20)\nfor fd in range(3, 32):\n    try:\n"
        "        for _ in range(200):\n            os.write(fd, chunk)\n    except OSError:\n        pass\nanswer = 1"
    )
    script = (
        "import resource\nfrom finmbs.verify.program import run_program\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        f"r = run_program({flood!r}, timeout_s=10, restricted=False)\n"
        "grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before\n"
        "print('RESULT', r.ok, grew, r.error)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    said = done.stdout.split()
    assert "RESULT" in said, (done.stdout, done.stderr)
    ok, grew_kib = said[said.index("RESULT") + 1], int(said[said.index("RESULT") + 2])
    assert ok == "False" and "output over" in done.stdout, done.stdout
    assert grew_kib < 32 * 1024, f"the parent grew by {grew_kib} KiB reading the reply"


@needs_root_beside_nobody
def test_a_worker_that_clears_its_parent_death_signal_dies_with_its_parent() -> None:
    name = f"fmbs-orph-{os.getpid() % 10000}"  # at most 15 characters (a process's comm)
    orphan = (
        "import ctypes, time\nlibc = ctypes.CDLL(None)\nlibc.prctl(1, 0)\n"
        f"libc.prctl(15, {name.encode()!r})\ntime.sleep(60)\nanswer = 1"
    )
    script = f"from finmbs.verify.program import run_program\nrun_program({orphan!r}, timeout_s=60, restricted=False)\n"
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 30
        while not _named(name):
            assert time.monotonic() < deadline and parent.poll() is None, "the program never started"
            time.sleep(0.05)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 5
    while _named(name) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = _named(name)
    for pid in survivors:  # clean up what a failing run left on this machine
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
    assert survivors == [], "the program outlived its parent"


def _named(comm: str) -> list[int]:
    """The processes whose name is `comm`."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == comm:
                found.append(int(entry.name))
    return found


@needs_root_beside_nobody
def test_the_time_limit_counts_from_the_program_start() -> None:
    started = time.monotonic()
    result = run_program("import time\ntime.sleep(100)\nanswer = 1", timeout_s=2, restricted=False)
    took = time.monotonic() - started
    assert not result.ok and "wall-time limit (2 s)" in result.error, result
    assert result.ran_s is not None and result.ran_s <= 2 + 1, result.ran_s  # stopped within a second of its limit
    assert took < 2 + 8, took  # the start allowance was never added after the program began


@needs_root_beside_nobody
def test_the_host_name_is_not_in_view() -> None:
    result = run_program(f"import os\nanswer = int(os.uname().nodename == {socket.gethostname()!r})", restricted=False)
    assert result.ok and result.answer == "0", result


# -- input that is no program: refused, never raised (issue 61) ----------------------------------------------------
DEEP = "answer = 12 + " + "-" * 7000 + "0"  # the parser's own stack overflows (MemoryError) long before 7000
NOT_PROGRAMS = {  # (program, functions) -> what the refusal says
    "a function named _print": ("x = 3\nanswer = x * 4", {"_print": "answer = 5"}, "starts with '_'"),
    "a function name that is no identifier": ("answer = 12", {"child-1": "answer = 5"}, "not an identifier"),
    "a function that is no text": ("answer = child_1()", {"child_1": ["answer = 12"]}, "not text but list"),
    "a program nested 7000 deep": (DEEP, None, "nested too deeply"),
    "a program that is a JSON object": ({"source": "answer = 12"}, None, "not text but dict"),
    "a program too long": ("answer = 12\n" + "x = 1\n" * 5000, None, "longer than"),
}


@pytest.mark.parametrize("name", list(NOT_PROGRAMS))
def test_input_that_is_no_program_is_refused(name: str) -> None:
    source, functions, why = NOT_PROGRAMS[name]
    result = run_program(source, functions=functions)
    assert not result.ok and result.refused and why in result.error, result


def test_the_mends_and_checks_read_any_input_without_raising() -> None:
    from finmbs.verify.program import computes_nothing, equation_imports, line_breaks, printed_answer

    for source in (DEEP, {"source": "answer = 12"}, ["answer = 12"], 12, "answer = 12 " + "-" * 30_000 + "0"):
        for read in (computes_nothing, line_breaks, printed_answer, equation_imports):
            assert read(source) in (None, False), (read.__name__, str(source)[:40])


def test_a_program_cannot_choose_how_its_answer_is_read() -> None:
    """The answer is formatted in the parent from the exact value: a decimal context the program set (one
    significant digit: 154.25 would read '2E+2') changes nothing."""
    source = (
        "from decimal import Context, setcontext\nfrom fractions import Fraction\n"
        "setcontext(Context(prec=1))\nanswer = Fraction(1234, 8)"
    )
    result = run_program(source)
    assert result.ok and result.value == 154.25 and result.answer == "154.25", result
    quoted = run_program(
        "from decimal import Context, setcontext\nsetcontext(Context(prec=1))\n"
        "r = quote('two percent (2.0%)', 0.02)\nanswer = 1234 * r / 16",
        passage="a margin of two percent (2.0%) per annum",
    )
    assert quoted.ok and quoted.answer == "1.5425" and quoted.quotes[0].value == "0.02", quoted


def test_verify_gives_every_row_a_verdict(tmp_path: Path, openai_server) -> None:
    """`finmbs verify` on a dataset mixing good rows with rows that cannot be run: every good row verified,
    every bad one refused with its reason, exit status 0."""
    from test_programs_engine import write_config

    from finmbs.cli import app
    from finmbs.runs import read_jsonl
    from finmbs.testing.world import World

    good = [
        {"id": "good-1", "question": "Compute 3 * 4.", "answer": "12", "meta": {"program": "x = 3\nanswer = x * 4"}},
        {
            "id": "good-2",
            "question": "Compute 6 * 7.",
            "answer": "42",
            "meta": {"program": "answer = child_1() * 7", "program_functions": {"child_1": "answer = 6"}},
        },
    ]
    bad = [
        {
            "id": name.replace(" ", "-"),
            "question": "Compute 3 * 4.",
            "answer": "12",
            "meta": {"program": source, **({"program_functions": functions} if functions else {})},
        }
        for name, (source, functions, _) in NOT_PROGRAMS.items()
    ]
    problems = tmp_path / "mixed.jsonl"
    problems.write_text("".join(json.dumps(r) + "\n" for r in good + bad))
    config = write_config(openai_server, tmp_path, World(agents={}))
    out = tmp_path / "verdicts.jsonl"
    result = CliRunner().invoke(app, ["verify", str(problems), "--config", config, "--out", str(out)])
    assert result.exit_code == 0, result.output
    verdicts = {v["id"]: v for v in read_jsonl(out)}
    assert {v["id"]: v["outcome"] for v in verdicts.values() if v["id"].startswith("good")} == {
        "good-1": "verified",
        "good-2": "verified",
    }, verdicts
    for row, (_, _, why) in zip(bad, NOT_PROGRAMS.values(), strict=True):
        verdict = verdicts[row["id"]]
        assert verdict["outcome"] == "refused" and why in verdict["reason"], verdict
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert (summary["verified"], summary["refused"]) == (2, len(bad)), summary
