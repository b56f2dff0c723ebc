"""Running the official Node SDKs (tests/conformance/node, installed by scripts/test with Node 22
from the npm registry) from the Python conformance tests: `SWITCHYARD_TEST_NODE` names the
directory holding `node`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).parent / "node"


def run_node(script: str, *args: str, timeout: float = 60) -> dict:
    node_bin = os.environ.get("SWITCHYARD_TEST_NODE")
    if not node_bin:
        pytest.skip("SWITCHYARD_TEST_NODE is not set (scripts/test sets it)")
    done = subprocess.run(
        [str(Path(node_bin) / "node"), str(NODE_DIR / script), *args],
        cwd=NODE_DIR, capture_output=True, text=True, timeout=timeout,
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])
