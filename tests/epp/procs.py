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
