"""Run any Flower app project the current Flower way: ``flwr run APP sim --stream`` against a
local simulation SuperLink (``flower-superlink --simulation``) that is started for the run on a
free port and stopped afterwards (Flower 1.41; no network, no deprecated ``run_simulation``).

Used by the example app (:mod:`ldp_audit.training.flower.digits`) and the tests; any app
project with a ``pyproject.toml`` runs the same way (docs/flower.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ldp_audit.errors import InvalidParameterError, LdpAuditError
from ldp_audit.interrupts import Terminated, interrupted
from ldp_audit.rundir import RunDir, check_new_dir, read_manifest
from ldp_audit.validation import check_int

__all__ = ["flwr_run", "app_pyproject", "write_app_project", "run_app_project", "run_command"]

_PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{name}"
version = "1.0.0"
description = "{description}"
license = "MIT"
dependencies = []  # ldp-audit[flower] is installed beforehand

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "ldp-audit"

[tool.flwr.app.components]
serverapp = "{module}:server_app"
clientapp = "{module}:client_app"

[tool.flwr.app.config]
"""


def app_pyproject(name: str, description: str, module: str, config: str) -> str:
    """The ``pyproject.toml`` of a Flower app project whose module ``module`` defines
    ``server_app`` and ``client_app``; ``config``: the ``[tool.flwr.app.config]`` lines."""
    return _PYPROJECT.format(name=name, description=description, module=module) + config


def write_app_project(path: str | Path, pyproject: str, module: str, text: str) -> Path:
    """Write a Flower app project (``pyproject.toml`` + ``<module>.py``) into a new folder."""

    p = check_new_dir(path, name="app project folder")
    p.mkdir(parents=True, exist_ok=True)
    (p / "pyproject.toml").write_text(pyproject)
    (p / f"{module}.py").write_text(text)
    return p


def run_app_project(
    write: Any, run_dir: Path, *, run_config: Mapping[str, Any], clients: int, **kw: Any
) -> list[dict[str, Any]]:
    """``write(folder)`` an app project into a temporary folder and :func:`flwr_run` it
    (``kw``: ``timeout``, ``log``); returns the replies the server refused (``metrics.json``'s
    ``rejected``).

    Raises:
        InvalidParameterError: the run wrote no finished run directory, or one whose status is
            not ``complete`` (the message quotes the first refused reply).
    """

    with tempfile.TemporaryDirectory(prefix="ldp-flwr-app-") as tmp:
        app = write(Path(tmp) / "app")
        code = flwr_run(app, run_config=run_config, num_supernodes=clients, **kw)
    status, rejected = _outcome(run_dir)
    if status is None:
        raise InvalidParameterError(
            f"the Flower run (flwr run exit {code}) wrote no finished run directory in "
            f"{str(run_dir)!r}; pass log= (CLI: --log FILE) to see Flower's output"
        )
    if status != "complete":
        first = rejected[0]["reason"][:500] if rejected else "unknown"
        raise InvalidParameterError(
            f"the Flower run in {str(run_dir)!r} ended with status {status!r} "
            f"(flwr run exit {code}); {len(rejected)} replies refused, the first: {first}"
        )
    return rejected


def _outcome(run_dir: Path) -> tuple[str | None, list[dict[str, Any]]]:
    """A Flower run's run directory: its manifest's status (None while it has no manifest or no
    metrics.json: not finished) and the replies its server refused (``rejected``)."""
    man = read_manifest(run_dir) if run_dir.exists() else None
    if not man or not (run_dir / "metrics.json").exists():
        return None, []
    return man.get("status"), RunDir(run_dir).metrics().get("rejected", [])


# ==============================================================================================
# Running an app: `flwr run` against a local simulation SuperLink that we start and stop
# ==============================================================================================


def run_command(prog: str, body: Callable[[], int]) -> int:
    """An app's ``python -m`` command: ``body()``'s exit code; an ``LdpAuditError`` is one line
    and exit 2; Ctrl-C and SIGTERM (which unwinds like Ctrl-C, so that the SuperLink
    :func:`flwr_run` started in its own session is stopped and its temporary folder removed;
    by default SIGTERM killed the command and left them behind) one line and exit 130 / 143."""
    import threading

    def _terminate(signum: int, frame: object) -> None:
        raise Terminated()

    main_thread = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        return body()
    except LdpAuditError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        return interrupted(prog, exc)
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string
    raise InvalidParameterError(f"run config values must be str, int, float or bool, got {v!r}")


def flwr_run(
    app_dir: str | Path,
    *,
    run_config: Mapping[str, Any],
    num_supernodes: int,
    timeout: float = 600.0,
    log: Any = None,
) -> int:
    """Run a Flower app project with ``flwr run APP sim --stream`` on a local simulation
    SuperLink (``flower-superlink --simulation``) started for this run on a free port and
    stopped afterwards; ``FLWR_HOME`` is a temporary folder. No network is needed.

    Args:
        app_dir: the app project (its ``pyproject.toml`` names the ServerApp and ClientApp).
        run_config: ``--run-config`` overrides (paths must be absolute).
        num_supernodes: simulated SuperNodes (``--federation-config num-supernodes=N``).
        timeout: seconds for the whole run.
        log: where Flower's output goes: a path (its folder is created) or an open file
            (default: discarded).

    Returns:
        ``flwr run``'s exit status when it is not 0; else 1 when the run did not end
        ``finished:completed`` on the SuperLink (``flwr ls``: a ServerApp that raised ends
        ``finished:failed``, Flower's exit code 700, while ``flwr run --stream`` exits 0), or
        when ``run_config`` names a ``run-dir`` whose manifest is missing or not ``complete``
        (every reply refused: ``failed``); else 0. Each status read is a log line
        ``ldp-audit: ...``.
    """

    from ldp_audit.training.flower.protocol import require_flwr

    require_flwr()
    n = check_int(num_supernodes, "num_supernodes", minimum=1)
    app = Path(app_dir).resolve()
    if not (app / "pyproject.toml").is_file():
        raise InvalidParameterError(f"app_dir {str(app_dir)!r} has no pyproject.toml")
    overrides = "".join(f"{k} = {_toml_value(v)}\n" for k, v in run_config.items())
    bindir = str(Path(sys.executable).parent)
    if isinstance(log, (str, Path)):
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as f:
            return flwr_run(app, run_config=run_config, num_supernodes=n, timeout=timeout, log=f)
    out = log if log is not None else subprocess.DEVNULL
    with tempfile.TemporaryDirectory(prefix="ldp-flwr-") as home:
        with socket.socket() as s:  # a free port for the SuperLink
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        Path(home, "config.toml").write_text(
            f'[superlink]\ndefault = "sim"\n\n[superlink.sim]\naddress = "127.0.0.1:{port}"\n'
            "insecure = true\n"
        )
        env = {
            **os.environ,
            "FLWR_HOME": home,
            "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
            "FLWR_DISABLE_UPDATE_CHECK": "1",
        }
        link = subprocess.Popen(
            [
                os.path.join(bindir, "flower-superlink"),
                "--insecure",
                "--simulation",
                "--isolation",
                "subprocess",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--database",
                str(Path(home, "state.db")),
                "--disable-runtime-dependency-installation",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            _wait_http(port, link, deadline=time.monotonic() + 60.0)
            cmd = [
                os.path.join(bindir, "flwr"),
                "run",
                str(app),
                "sim",
                "--stream",
                "--federation-config",
                f"num-supernodes={num_supernodes}",
            ]
            if overrides:  # a TOML file: values may hold spaces and quotes (JSON)
                Path(home, "run.toml").write_text(overrides)
                cmd += ["--run-config", str(Path(home, "run.toml"))]
            code = subprocess.run(
                cmd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False
            ).returncode
            return code or _run_failed(bindir, env, out) or _run_dir_failed(run_config, out)
        finally:
            _stop(link)


def _run_dir_failed(run_config: Mapping[str, Any], out: Any) -> int:
    """1 when the run config names a ``run-dir`` that did not finish ``complete`` (a run whose
    every reply was refused ends ``failed`` while Flower's run completes), else 0; the reason
    goes to the log in one line."""

    if "run-dir" not in run_config:
        return 0
    run_dir = Path(str(run_config["run-dir"]))
    status, rejected = _outcome(run_dir)
    if status == "complete":
        return 0
    status = status or "not finished (no manifest)"
    if rejected:
        status += f"; the first of {len(rejected)} refused replies: {rejected[0]['reason']}"
    if out is not subprocess.DEVNULL:
        print(f"ldp-audit: run directory {str(run_dir)!r} {status}", file=out)
        out.flush()
    return 1


def _run_failed(bindir: str, env: dict[str, str], out: Any) -> int:
    """1 when the run on our SuperLink did not end ``finished:completed`` (a ServerApp that
    raised ends ``finished:failed``, Flower's exit code 700, yet ``flwr run --stream`` exits 0),
    else 0; the status read goes to the log."""

    cmd = [os.path.join(bindir, "flwr"), "ls", "sim", "--format", "json"]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
    try:
        statuses = [str(r["status"]) for r in json.loads(res.stdout)["runs"]]
    except (ValueError, KeyError, TypeError):
        statuses = []
    if out is not subprocess.DEVNULL:
        print(f"ldp-audit: Flower run status {statuses or res.stdout[-500:]!r}", file=out)
        out.flush()
    return int(not statuses or any(s != "finished:completed" for s in statuses))


def _wait_http(port: int, proc: Any, deadline: float) -> None:

    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise InvalidParameterError(
                f"flower-superlink exited with status {proc.returncode} before it was ready"
            )
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=0.5):
                return
        except OSError:
            time.sleep(0.3)
    raise InvalidParameterError("flower-superlink was not ready within 60 s")


_HAS_PROC = Path("/proc/self/stat").exists()  # _stop walks the process tree there


def _started(pid: int) -> bytes | None:
    """Process ``pid``'s start time (field 22 of ``/proc/<pid>/stat``; None once it has ended
    or is a zombie), so that an id reused by another process is never signalled."""

    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    return None if fields[0] == b"Z" else fields[19]


def _tree(pid: int) -> dict[int, bytes]:
    """``pid`` and every process below it (``/proc/<pid>/task/*/children``, walked now), each
    with its start time (:func:`_started`)."""

    found: dict[int, bytes] = {}
    todo = [pid]
    while todo:
        p = todo.pop()
        start = _started(p)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(k) for k in Path(task, "children").read_text().split()]
        if start is not None:
            found.setdefault(p, start)
    return found


def _stop_group(proc: Any, grace: float) -> None:
    """Where there is no ``/proc`` to walk: SIGTERM to the SuperLink's process group, SIGKILL
    after ``grace`` seconds (processes that made their own groups are not reached)."""

    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _stop(proc: Any, grace: float = 20.0) -> None:
    """Stop the SuperLink we started and every process below it, in all the process groups
    and sessions they made (``flower-superexec`` and ``flwr-simulation``, which runs the
    ServerApp, start their own: stopping the SuperLink's group alone left them running after
    the command had exited), and wait until all have ended: SIGTERM once to each (to the
    groups they lead as a whole), then SIGKILL after ``grace`` seconds, or at once on a second
    Ctrl-C / SIGTERM (which is then re-raised). Only processes found below ``proc`` (by id and
    start time) are signalled, never this command's own group."""

    if not _HAS_PROC:  # no /proc (not Linux): the SuperLink's group
        _stop_group(proc, grace)
        return
    own, procs = os.getpgrp(), _tree(proc.pid)

    def end(sig: int, wait: float) -> None:
        signalled: set[int] = set()
        deadline = time.monotonic() + wait
        while procs and time.monotonic() < deadline:
            for p in list(procs):  # and the children they started meanwhile
                for q, start in _tree(p).items():
                    procs.setdefault(q, start)
            for p in [p for p, start in procs.items() if _started(p) != start]:
                del procs[p]
            for p in procs.keys() - signalled:
                with contextlib.suppress(OSError):
                    if os.getpgid(p) == p != own:
                        os.killpg(p, sig)
                    else:
                        os.kill(p, sig)
            signalled.update(procs)
            time.sleep(0.05)
            proc.poll()  # reap the SuperLink

    try:
        end(signal.SIGTERM, grace)
    except KeyboardInterrupt:  # a second signal: what is left is killed before it goes on
        end(signal.SIGKILL, 10.0)
        raise
    end(signal.SIGKILL, 10.0)
    proc.poll()
