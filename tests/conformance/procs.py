"""Running the real `switchyard` binary as subprocesses for the Python tests: start it, wait for
its one `listening on URL` line (the only readiness signal, read under a timeout), stop it.

The binary is `$SWITCHYARD_BIN` if set, else `target/debug/switchyard`; a relative path is taken
from the repository root. Shared by tests/conformance and tests/conformance_mcp2 (whose
virtualenv has other packages), so it imports nothing beyond the standard library and pytest.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Optional

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = float(os.environ.get("SWITCHYARD_STARTUP_TIMEOUT", "20"))
STOP_TIMEOUT_S = 10.0


def switchyard_bin() -> Path:
    path = Path(os.environ.get("SWITCHYARD_BIN", "target/debug/switchyard"))
    if not path.is_absolute():
        path = REPO_ROOT / path
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(f"switchyard binary not found or not executable at {path} (run `cargo build` or set SWITCHYARD_BIN)")
    return path


@dataclass
class Proc:
    """A running switchyard subprocess and the URL it announced."""

    name: str
    popen: subprocess.Popen
    url: str
    log_path: Path
    _log: IO[bytes] = field(repr=False)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, sig: int = signal.SIGTERM) -> Optional[int]:
        """Signal the process and wait for it; SIGKILL if it does not exit in time. Returns its exit code."""
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(sig)
                self.popen.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=STOP_TIMEOUT_S)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        self._log.close()
        return self.popen.returncode


def _read_line(stream: IO[bytes], timeout: float) -> Optional[bytes]:
    """First line of `stream`, or None if none arrived within `timeout` seconds."""
    box: "queue.Queue[bytes]" = queue.Queue(maxsize=1)
    reader = threading.Thread(target=lambda: box.put(stream.readline()), daemon=True)
    reader.start()
    try:
        return box.get(timeout=timeout)
    except queue.Empty:
        return None


def start(name: str, args: list[str], log_dir: Path) -> Proc:
    """Start `switchyard ARGS`, wait for its `listening on` line, return it as a Proc."""
    log_path = log_dir / f"{name}.log"
    log = open(log_path, "wb")
    env = dict(os.environ, NO_COLOR="1")
    env.setdefault("SWITCHYARD_LOG", "info")
    popen = subprocess.Popen(
        [str(switchyard_bin()), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=log,
        cwd=log_dir,
        env=env,
    )
    proc = Proc(name=name, popen=popen, url="", log_path=log_path, _log=log)
    assert popen.stdout is not None
    line = _read_line(popen.stdout, STARTUP_TIMEOUT_S)
    text = (line or b"").decode(errors="replace").strip()
    prefix = "listening on "
    if not text.startswith(prefix):
        proc.stop(signal.SIGKILL)
        why = "no `listening on` line within %.0fs" % STARTUP_TIMEOUT_S if line is None else f"first stdout line was {text!r}"
        pytest.fail(f"{name} did not start: {why} (exit code {popen.returncode})\n--- {log_path} ---\n{proc.log_tail()}")
    proc.url = text[len(prefix):]
    return proc


def start_mcp_gateway(name: str, log_dir: Path, master_key: str, servers: list[str], code_mode: str = "") -> Proc:
    """`switchyard serve` with keys on (`master_key`) and `servers` (YAML flow mappings) under
    `mcp.servers`, its database and journal in `log_dir`; `code_mode`, when given, is `mcp.code_mode`
    (a YAML flow mapping)."""
    data = log_dir / f"{name}-data"
    data.mkdir()
    config = log_dir / f"{name}.yaml"
    config.write_text(
        "listen: 127.0.0.1:0\n"
        f"storage: {{url: 'sqlite://{data}/switchyard.db', usage_journal_dir: '{data}/usage'}}\n"
        f"auth: {{master_key: {master_key}}}\n"
        "mcp:\n  servers:\n" + "".join(f"    - {s}\n" for s in servers)
        + (f"  code_mode: {code_mode}\n" if code_mode else "")
    )
    return start(name, ["serve", "--config", str(config)], log_dir)
