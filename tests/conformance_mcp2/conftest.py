"""Fixtures for the MCP SDK 2.x tests: the process helpers of tests/conformance (procs.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
