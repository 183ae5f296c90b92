"""Shared test setup: fixtures used by several test modules. Shared helpers (not fixtures) are in tests/support."""
import sys
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _no_inherited_terminal_size(monkeypatch):
    """Under pytest-xdist a worker's environment holds COLUMNS=80 (and LINES=24), which the commands honour when their
    output is not a terminal (replay/run.py _console): tests would see a width that depends on how they were run.
    A test that wants a width sets COLUMNS itself (tests/test_screen.py renders at 80 and 120)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


# --- fixtures several test modules use (their helpers are in tests/support) ---------------------------------------

@pytest.fixture(scope="module")
def prm_dir(tmp_path_factory):
    """A tiny random PRM on disk (tests/support/tiny_prm.py), built once per module that asks for it."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from support.tiny_prm import tiny_prm

    return tiny_prm(tmp_path_factory.mktemp("prm"))


@pytest.fixture(scope="module")
def math_pool(tmp_path_factory):
    """A pool of math responses with text (tests/support/text_run.py's TextPool)."""
    from support.text_run import TextPool

    return TextPool(tmp_path_factory.mktemp("math"), "math")


@pytest.fixture
def fake_vllm(monkeypatch, tmp_path):
    """The stand-in `vllm` module (tests/fixtures/harvest/fake_vllm) first on sys.path; the value: its engine log."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fixtures" / "harvest" / "fake_vllm"))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    log = tmp_path / "engines.jsonl"
    monkeypatch.setenv("FAKE_VLLM_LOG", str(log))
    return log
