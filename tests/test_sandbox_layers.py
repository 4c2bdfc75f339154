"""The program sandbox's two layers, each proven on its own (finmbs/verify/program_worker.py).

The language layer: no module object ever reaches a program (`from statistics import sys` was an escape:
`from M import x` read the attribute off the real module), and the published RestrictedPython escapes
stay closed. The OS layer: with the language layer bypassed (`restricted=False`, full Python), the
worker's namespaces, read-only view, unprivileged user and limits still stop every hostile effect,
checked on a canary file in a world-writable folder and a canary process that must survive."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from finmbs.verify import program
from finmbs.verify.program import OS_LAYERS, run_program, sandbox_layers


def _namespaces_possible() -> bool:
    """Whether this machine lets a process make mount and network namespaces, asked of util-linux
    `unshare` (independent of the worker, so a broken worker cannot excuse itself)."""
    if not shutil.which("unshare"):
        return False
    flags = ["--net", "--mount"] if os.geteuid() == 0 else ["--user", "--net", "--mount"]
    return subprocess.run(["unshare", *flags, "true"], capture_output=True, check=False).returncode == 0


NAMESPACES = _namespaces_possible()
needs_os_layer = pytest.mark.skipif(
    not (NAMESPACES and os.geteuid() == 0),
    reason="the OS layer in full needs root and namespaces on this machine (CI has both)",
)


def test_every_layer_holds_where_the_machine_allows_it() -> None:
    layers = sandbox_layers()
    assert layers["language"], layers
    assert layers["namespaces"] == layers["read_only"] == NAMESPACES, layers
    assert layers["unprivileged"], layers  # a root parent's worker is nobody; another user's is not root


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
    assert "program sandbox" in result.output
    for what in ("language", *OS_LAYERS):
        assert what in result.output, result.output


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
