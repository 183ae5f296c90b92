"""OpenAIBackend (the official `openai` client) against a real HTTP server process on loopback
(tests/fixtures/harvest/fake_openai_server.py): retries and backoff, authorization, the concurrency limit, seeds per
request, extra_body, token counting and the chat endpoint."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("openai")

from ttc.harvest.backends import AccessRefused, BackendError, OpenAIBackend, make_backend  # noqa: E402
from ttc.harvest.types import Sampling  # noqa: E402
from ttc.replay.extras import MissingExtra  # noqa: E402

SERVER = Path(__file__).parent / "fixtures" / "harvest" / "fake_openai_server.py"
KEY = "sk-test-0123456789abcdef"
ENV = "TTC_TEST_OPENAI_KEY"
S = Sampling(n=3, temperature=0.7, top_p=0.9, max_tokens=6)


@pytest.fixture
def start_server():
    procs = []

    def start(*args: str) -> str:
        proc = subprocess.Popen([sys.executable, str(SERVER), "--key", KEY, *args], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        line = proc.stdout.readline()
        if not line.strip():
            pytest.fail(f"fake server did not start (exit code {proc.poll()})")
        return f"http://127.0.0.1:{int(line)}"

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(ENV, KEY)


def stats(url: str) -> dict:
    with urllib.request.urlopen(url + "/stats", timeout=10) as r:
        return json.load(r)


def backend(url: str, **kw) -> OpenAIBackend:
    return OpenAIBackend(url + "/v1", "tiny", api_key_env=ENV, **kw)


def test_retries_a_503_then_returns_every_sample(start_server, key):
    url = start_server("--fail-first", "1")
    rows = backend(url).generate(["p one", "p two"], S, [100, 200])
    st = stats(url)
    assert st["failed"] == 1 and st["requests"] == 2 * 3 + 1 and st["served"] == 6
    assert [len(r) for r in rows] == [3, 3]
    for r in (x for prompt_rows in rows for x in prompt_rows):
        words = r.text.split()
        assert 1 <= len(words) <= S.max_tokens and r.finish_reason in ("stop", "length")
        assert r.finish_reason == ("length" if len(words) == S.max_tokens else "stop")
        assert r.n_tokens == len(words) + (r.finish_reason == "stop")      # usage.completion_tokens, EOS included
    # one request per sample, sample j of prompt i carrying seed s_i + j, with the sampling parameters
    bodies = sorted(st["bodies"], key=lambda b: (b["prompt"], b["seed"]))
    assert [(b["prompt"], b["seed"], b["n"]) for b in bodies] == [("p one", 100 + j, 1) for j in range(3)] + [
        ("p two", 200 + j, 1) for j in range(3)]
    assert all(b["temperature"] == 0.7 and b["top_p"] == 0.9 and b["max_tokens"] == 6 and b["model"] == "tiny"
               for b in bodies)


def test_rate_limits_are_retried_after_the_servers_retry_after(start_server, key):
    """429 is retried, after the server's Retry-After rather than the client's shorter first backoff (0.5 s)."""
    url = start_server("--fail-first", "2", "--fail-status", "429", "--retry-after", "1")
    t = time.perf_counter()
    rows = backend(url, max_retries=2).generate(["alpha"], Sampling(n=1, max_tokens=4), [3])
    st = stats(url)
    assert st["failed"] == 2 and st["served"] == 1 and len(rows[0]) == 1
    gap = st["failed_at"][1] - st["failed_at"][0]
    assert gap >= 0.95 and time.perf_counter() - t >= 2 * 0.95


def test_concurrency_limit_holds(start_server, key):
    url = start_server("--delay", "0.2")
    t = time.perf_counter()
    prompts, seeds = [f"p{i}" for i in range(9)], list(range(0, 90, 10))
    backend(url, concurrency=3).generate(prompts, Sampling(n=1, max_tokens=4), seeds)
    elapsed = time.perf_counter() - t
    st = stats(url)
    assert st["served"] == 9
    assert 2 <= st["max_in_flight"] <= 3                            # parallel, never above the limit
    assert elapsed >= 3 * 0.2                                       # 9 requests of 0.2 s, at most 3 at a time


def test_seeds_split_over_requests_match_one_request_with_n(start_server, key):
    url = start_server()
    prompts, seeds = ["alpha", "beta"], [5, 500]
    per_sample = backend(url).generate(prompts, Sampling(n=4, max_tokens=5), seeds)
    pairs = backend(url, n_per_request=2).generate(prompts, Sampling(n=4, max_tokens=5), seeds)
    whole = backend(url, n_per_request=None).generate(prompts, Sampling(n=4, max_tokens=5), seeds)
    text = [[r.text for r in rows] for rows in per_sample]
    assert [[r.text for r in rows] for rows in pairs] == text == [[r.text for r in rows] for rows in whole]
    assert [b["seed"] for b in stats(url)["bodies"] if b["n"] == 2 and b["prompt"] == "alpha"] in ([5, 7], [7, 5])
    # several choices per request: usage is a sum, so each text is counted without it (whitespace words here)
    assert all(r.n_tokens == len(r.text.split()) for rows in whole for r in rows)
    assert backend(url, n_per_request=None).info()["token_count"] == "whitespace"

    class WordTokenizer:
        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": text.split()}

    counting = backend(url, n_per_request=None, tokenizer=WordTokenizer())
    counted = counting.generate(prompts, Sampling(n=4, max_tokens=5), seeds)
    assert counted == per_sample                                    # re-tokenized + EOS equals the server's usage


def test_extra_body_reaches_the_server_and_never_replaces_the_seed(start_server, key):
    url = start_server()
    backend(url, extra_body={"top_k": 20, "repetition_penalty": 1.1}).generate(["alpha"], Sampling(n=2), [40])
    bodies = sorted(stats(url)["bodies"], key=lambda b: b["seed"])
    assert [(b["seed"], b["top_k"], b["repetition_penalty"]) for b in bodies] == [(40, 20, 1.1), (41, 20, 1.1)]
    with pytest.raises(ValueError, match="extra_body may not set seed"):
        backend(url, extra_body={"seed": 1})


def test_chat_endpoint(start_server, key):
    url = start_server()
    chat = backend(url, chat=True).generate(["alpha"], S, [9])
    plain = backend(url).generate(["alpha"], S, [9])
    assert chat == plain                                            # the fake answers the same text either way
    bodies = stats(url)["bodies"]
    assert sum("messages" in b for b in bodies) == 3
    assert all(b["messages"] == [{"role": "user", "content": "alpha"}] for b in bodies if "messages" in b)


def test_stop_strings_are_sent(start_server, key):
    url = start_server()
    backend(url).generate(["alpha"], Sampling(n=1, max_tokens=3), [1], stop=["\nProblem:"])
    assert stats(url)["bodies"][0]["stop"] == ["\nProblem:"]


def test_wrong_or_missing_key_fails_at_once_without_leaking_it(start_server, monkeypatch):
    url = start_server()
    monkeypatch.setenv(ENV, "sk-wrong-secret-value")
    # a refused key is the user's to fix (AccessRefused: an InputError, exit 2; issue 28), not a backend fault
    with pytest.raises(AccessRefused, match="refused access.*HTTP 401") as err:
        backend(url, max_retries=3, concurrency=1).generate(["a", "b", "c"], Sampling(n=1, max_tokens=3), [1, 2, 3])
    assert "sk-wrong-secret-value" not in str(err.value)
    assert stats(url)["requests"] == 1                              # not retried, and the queued requests dropped
    # unset: a placeholder goes, never the key in OPENAI_API_KEY (which the client would fall back to)
    monkeypatch.delenv(ENV)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    b = backend(url)
    assert b.info()["api_key_set"] is False
    with pytest.raises(AccessRefused, match=f"HTTP 401.*{ENV} is not set"):
        b.generate(["alpha"], Sampling(n=1, max_tokens=3), [1])
    assert stats(url)["unauthorized"] == 2


def test_gives_up_after_max_retries(start_server, key):
    url = start_server("--fail-first", "100")
    with pytest.raises(BackendError, match="no answer after 3 attempts.*HTTP 503"):
        backend(url, max_retries=2).generate(["alpha"], Sampling(n=1, max_tokens=3), [1])
    st = stats(url)
    assert st["requests"] == 3
    # the client's backoff: 0.5 s then 1 s, each less up to 25 % jitter, so the waits grow and last >= 1.1 s in all
    first, second = (b - a for a, b in zip(st["failed_at"], st["failed_at"][1:]))
    assert first >= 0.35 and second >= 0.7 and first + second >= 1.1


def test_connection_errors_are_retried_with_backoff(key):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]                                   # nothing listens there once closed
    t = time.perf_counter()
    with pytest.raises(BackendError, match="no answer after 3 attempts.*ConnectionError"):
        backend(f"http://127.0.0.1:{port}", max_retries=2).generate(["a"], Sampling(n=1), [1])
    assert time.perf_counter() - t >= 0.375 + 0.75                  # backoff 0.5 s then 1 s, less up to 25 % jitter
    t = time.perf_counter()
    with pytest.raises(BackendError, match="no answer after 1 attempt "):
        backend(f"http://127.0.0.1:{port}", max_retries=0).generate(["a"], Sampling(n=1), [1])
    assert time.perf_counter() - t < 0.35                           # no retry, no wait


def test_info_records_settings_but_never_the_key(key):
    b = make_backend("openai", base_url="http://127.0.0.1:1/v1/", model="tiny", api_key_env=ENV, concurrency=4,
                     max_retries=7, timeout_s=30)
    info = b.info()
    assert info["backend"] == "openai" and info["endpoint"] == "http://127.0.0.1:1/v1/completions"
    assert info["concurrency"] == 4 and info["token_count"] == "usage" and info["api_key_set"] is True
    assert info["max_retries"] == 7 and info["timeout_s"] == 30
    assert b._client.max_retries == 7 and b._client.timeout == 30           # the client's own retries and timeout
    assert info["versions"]["openai"] and b.tokenizer is None
    assert KEY not in json.dumps(info)
    for bad in ({"concurrency": 0}, {"max_retries": -1}, {"timeout_s": 0}):
        with pytest.raises(ValueError, match=next(iter(bad)).split("_")[0]):
            OpenAIBackend("http://x/v1", "m", **bad)


def test_without_the_openai_package_it_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)             # as if not installed
    with pytest.raises(MissingExtra, match=r"pip install 'ttc\[openai\]'"):
        make_backend("openai", base_url="http://127.0.0.1:1/v1", model="tiny")


class _Timed:
    """A stderr that keeps each write with the time it was made."""

    def __init__(self):
        self.lines: list[tuple[float, str]] = []

    def write(self, s):
        if s.strip():
            self.lines.append((time.perf_counter(), s))
        return len(s)

    def flush(self):
        pass


def test_a_request_in_flight_past_its_time_limit_is_reported_as_it_happens(key, monkeypatch):
    """Issue 27: a server that accepts and never answers left `ttc run` silent for as long as the client retried
    (--request-timeout 600 s x 6 attempts by default). Each time a request passes another time limit of an attempt
    without an answer, one line on stderr says so, while the request is still in flight."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes the connections; nobody ever reads or answers
    err = _Timed()
    monkeypatch.setattr(sys, "stderr", err)
    b = backend(f"http://127.0.0.1:{silent.getsockname()[1]}", max_retries=1, timeout_s=1.0)
    t0 = time.perf_counter()
    try:
        with pytest.raises(BackendError, match="no answer after 2 attempts"):
            b.generate(["a"], Sampling(n=1), [1])
    finally:
        silent.close()
    t1 = time.perf_counter()
    warned = [(t, s) for t, s in err.lines if "no answer" in s]
    assert warned, err.lines
    t, first = warned[0]
    assert first.startswith(f"warning: {b.url}: ")
    assert "1 request has had no answer for 1 s" in first and "time limit of an attempt (1 s)" in first, first
    assert "retries each up to 1 time" in first, first
    assert 1.0 <= t - t0 < 2.5 and t < t1 - 0.3  # reported when the limit passed, well before the end
