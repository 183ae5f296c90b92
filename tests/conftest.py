"""Shared test setup."""
import pytest


@pytest.fixture(autouse=True)
def _no_inherited_terminal_size(monkeypatch):
    """Under pytest-xdist a worker's environment holds COLUMNS=80 (and LINES=24), which the commands honour when their
    output is not a terminal (replay/run.py _console): tests would see a width that depends on how they were run.
    A test that wants a width sets COLUMNS itself (tests/test_screen.py renders at 80 and 120)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
