"""Process and polling helpers shared by the EPP tests (issue 55)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_until(cond: Callable[[], bool], timeout: float, what: str,
               diag: Callable[[], str] | None = None, interval: float = 0.05) -> None:
    """Poll `cond` until it is true; fail with `what` (and `diag()`) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return
        if time.monotonic() > deadline:
            extra = ""
            if diag is not None:
                try:
                    extra = "\n" + diag()
                except Exception as e:  # noqa: BLE001
                    extra = f"\n(diagnostics failed: {e})"
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}{extra}")
        time.sleep(interval)


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM the process (its own session), then SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    except PermissionError:
        proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(5)


def log_tail(path: Path, n: int = 60) -> str:
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return f"({path} not written)"
    return f"--- {path} (last {min(n, len(lines))} lines) ---\n" + "\n".join(lines[-n:])


def spawn(args: list[str], log_dir: Path, name: str, env: dict[str, str] | None = None,
          stdin: int | None = subprocess.DEVNULL) -> tuple[subprocess.Popen, Path, Path]:
    """Start `args` in its own session, stdout and stderr to `log_dir/name.out` and `.err`."""
    out, err = log_dir / f"{name}.out", log_dir / f"{name}.err"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(args, stdin=stdin, stdout=o, stderr=e, cwd=log_dir, env=env,
                                start_new_session=True)
    return proc, out, err


def wait_line(proc: subprocess.Popen, out: Path, err: Path, prefix: str, what: str, timeout: float) -> str:
    """The rest of the first line of `out` starting with `prefix`, once the process printed it."""
    found: list[str] = []

    def printed() -> bool:
        for line in out.read_text(errors="replace").splitlines():
            if line.startswith(prefix):
                found.append(line[len(prefix):].strip())
                return True
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}\n{log_tail(err)}")
        return False

    wait_until(printed, timeout, f"{what} to print {prefix!r}", diag=lambda: log_tail(err))
    return found[0]
