"""OpenAI Batch API I/O of `ttc run`: reading a Batch input file (or its lines as they come, --stream), rendering a
request's messages for a backend, counting a server's prompt tokens, and writing each result as a Batch output
line."""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..types import Query, Sampling
from .request import BATCH_SAMPLING, BATCH_URLS, RunError

if TYPE_CHECKING:
    from .plan import RunPlan


def _digest(parts) -> str:
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        h.update(p.encode("utf-8") + b"\0")
    return h.hexdigest()


def _content(value: Any, where: str) -> str:
    """A message's content: a string, or a list of parts of which the text ones are joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        texts = [p.get("text") for p in value if p.get("type") == "text"]
        if len(texts) == len(value) and all(isinstance(t, str) for t in texts):
            return "".join(texts)
    raise RunError(f"{where}: a message's content must be a string or a list of text parts")


def parse_batch_line(line: str, where: str, n: int, *, model: str, sampling: Sampling, oracle: str,
                     keep: Sequence[str] = ()) -> tuple[Query, Any, set[str]]:
    """One request of an OpenAI Batch API input file (read_batch): its query, its messages (a list) or prompt (a
    string), and the body fields ignored. keep: top-level keys that become query fields when present (--prior's,
    checked by read_prior). RunError names `where` (FILE:LINE) and what is wrong."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise RunError(f"{where}: not a JSON line ({e.msg})") from None
    if not isinstance(row, dict):
        raise RunError(f"{where}: each line must be a JSON object (a batch request)")
    cid = row.get("custom_id")
    if not isinstance(cid, str) or not cid.strip():
        raise RunError(f"{where}: no custom_id (a non-empty string naming the request)")
    if row.get("method") != "POST":
        raise RunError(f"{where}: method must be \"POST\", got {row.get('method')!r}")
    url = row.get("url")
    if url not in BATCH_URLS:
        raise RunError(f"{where}: url must be {' or '.join(BATCH_URLS)}, got {url!r}")
    body = row.get("body")
    if not isinstance(body, dict):
        raise RunError(f"{where}: no body object")
    if "model" in body and body["model"] != model:
        raise RunError(f"{where}: body.model {body['model']!r} is not --model {model!r}; a run uses one model")
    if body.get("n", 1) != 1:
        raise RunError(f"{where}: body.n is {body['n']!r}; the budget decides how many responses each query "
                       "gets, so n must be 1 or absent")
    if "seed" in body:
        raise RunError(f"{where}: body.seed is set; each response's seed is derived from --seed, the query and "
                       "the sample (as ttc harvest does), so leave it out")
    wanted = {"temperature": sampling.temperature, "top_p": sampling.top_p, "max_tokens": sampling.max_tokens}
    for key, option in BATCH_SAMPLING.items():
        if key in body and body[key] != wanted[option]:
            raise RunError(f"{where}: body.{key} is {body[key]!r} but --{option.replace('_', '-')} is "
                           f"{wanted[option]!r}; one run samples every query alike (pass --"
                           f"{option.replace('_', '-')} {body[key]})")
    ignored = set(body) - {"model", "messages", "prompt", "n", *BATCH_SAMPLING}
    if url == "/v1/chat/completions":
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            raise RunError(f"{where}: body.messages must be a non-empty list of messages")
        clean = []
        for m in msgs:
            role = m.get("role")
            if role not in ("system", "developer", "user", "assistant"):
                raise RunError(f"{where}: a message's role must be system, developer, user or assistant, got "
                               f"{role!r}")
            clean.append({"role": role, "content": _content(m.get("content"), where)})
        if clean[-1]["role"] != "user":
            raise RunError(f"{where}: the last message must be the user's (the model answers it)")
        prompt: Any = clean
        problem = clean[-1]["content"]
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise RunError(f"{where}: body.prompt must be a non-empty string")
        problem = prompt
    gold = row.get("gold")
    if gold is not None and not isinstance(gold, (str, int, float)):
        raise RunError(f"{where}: gold must be a string or a number")
    gold = None if gold is None or not str(gold).strip() else str(gold).strip()
    if oracle in ("gt", "judge") and gold is None:
        raise RunError(f"{where}: --oracle {oracle} needs a gold answer on every line (a top-level \"gold\"); "
                       "without gold answers use --oracle sc or prm")
    query = Query(query_id=cid.strip(), task="math" if oracle == "gt" else "custom", problem=problem, gold=gold,
                  fields={"batch_line": n, **{k: row[k] for k in keep if k in row and k != "batch_line"}})
    return query, prompt, ignored


def read_batch(path: Path, *, model: str, sampling: Sampling, oracle: str, keep: Sequence[str] = ()
               ) -> tuple[list[Query], list]:
    """Queries from an OpenAI Batch API input file (JSONL; one request per line: custom_id, method, url, body), as
    `vllm run-batch` reads it: custom_id is the query id; body.messages (chat completions) or body.prompt
    (completions) the prompt. A top-level "gold" is the gold answer (`--oracle gt` needs it on every line). Sampling
    fields in a body must agree with the run's options, body.model with --model, body.n be 1: one run samples every
    query alike, and the budget decides how many responses each gets. Returns the queries and, per query, its
    messages (a list) or prompt (a string)."""
    path = Path(path)
    if not path.is_file():
        raise RunError(f"--batch {path}: no such file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise RunError(f"--batch {path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    queries, messages, seen = [], [], {}
    ignored: set[str] = set()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        q, prompt, skipped = parse_batch_line(line, where, n, model=model, sampling=sampling, oracle=oracle,
                                              keep=keep)
        if q.query_id in seen:
            raise RunError(f"{where}: custom_id {q.query_id!r} is also on line {seen[q.query_id]}; custom ids must "
                           "be unique")
        seen[q.query_id] = n
        ignored |= skipped
        queries.append(q)
        messages.append(prompt)
    if not queries:
        raise RunError(f"--batch {path}: no requests")
    if ignored:
        print(f"warning: --batch {path}: ignored body fields {', '.join(sorted(ignored))}", file=sys.stderr)
    return queries, messages


# A prompt that stands for a whole conversation on a server backend: this prefix, then the messages as JSON.
# ServerUsage sends it as those messages (harvest.backends.OpenAIBackend itself sends a prompt as one user message).
MESSAGES_KEY = "\x00ttc-messages\x00"


def render_batch_prompt(prompt: Any, tokenizer: Any, *, chat: bool | None, server: bool) -> str:
    """The text a backend completes for one batch request. Messages go through the model's chat template (a
    tokenizer backend, unless --no-chat); a server backend (openai) with --chat gets them as the request's messages
    (the server applies its template): a single user message as its prompt, several (a system message, earlier
    turns) as MESSAGES_KEY + their JSON, which ServerUsage sends as they are. Several messages need a chat template,
    here or on the server."""
    if isinstance(prompt, str):
        return prompt
    from ..prompts import has_chat_template

    if not server and chat is not False and has_chat_template(tokenizer):
        return tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
    if len(prompt) == 1 and prompt[0]["role"] == "user":
        return prompt[0]["content"]
    if server and chat:
        return MESSAGES_KEY + json.dumps(prompt, ensure_ascii=False)
    why = ("--no-chat sends each prompt to the completions endpoint" if server else
           "--no-chat" if chat is False else "the model's tokenizer has no chat template")
    raise RunError(f"a request holds {len(prompt)} messages, and {why}; give one user message per request, or "
                   "use the chat endpoint (--chat) or a chat model")


def shown_prompt(prompt: str | None) -> str | None:
    """A prompt as queries.parquet shows it: a conversation's messages as JSON, without MESSAGES_KEY."""
    return prompt[len(MESSAGES_KEY):] if prompt is not None and prompt.startswith(MESSAGES_KEY) else prompt


class _Namespace:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class ServerUsage:
    """The openai backend's (harvest.backends.OpenAIBackend) prompt side, through its client: a prompt that stands for
    a conversation (MESSAGES_KEY) goes out as its messages, system message included, and each response's
    usage.prompt_tokens (the server's count, its chat template applied) is kept per prompt, which prompt_len(prompt)
    reads (None until a response to that prompt came back; harvest.live.BackendSource counts it then). The backend
    sends each prompt as one user message and keeps only usage.completion_tokens; its client is the one seam that
    changes neither. attach(backend) wraps the client of a backend that has one and returns the backend."""

    def __init__(self):
        import threading

        self.counts: dict[str, int] = {}
        self.requests = 0
        self._lock = threading.Lock()

    def attach(self, backend):
        client = getattr(backend, "_client", None)
        if client is not None and not isinstance(client, _UsageClient):
            backend._client = _UsageClient(client, self)
        return backend

    def prompt_len(self, prompt: str) -> int | None:
        return self.counts.get(prompt)

    def record(self, key: str, resp: Any):
        n = getattr(getattr(resp, "usage", None), "prompt_tokens", None)
        with self._lock:
            self.requests += 1
            if isinstance(n, int) and n >= 0:
                self.counts[key] = n


class _UsageClient:
    """An openai client whose chat.completions.create and completions.create go through ServerUsage."""

    def __init__(self, client, usage: ServerUsage):
        self._client, self._usage = client, usage
        self.chat = _Namespace(completions=_Namespace(create=self._chat))
        self.completions = _Namespace(create=self._complete)

    def __getattr__(self, name):
        return getattr(self._client, name)

    def _chat(self, *, messages, **kw):
        key = messages[-1]["content"] if messages else ""
        if len(messages) == 1 and isinstance(key, str) and key.startswith(MESSAGES_KEY):
            messages = json.loads(key[len(MESSAGES_KEY):])
        resp = self._client.chat.completions.create(messages=messages, **kw)
        self._usage.record(key, resp)
        return resp

    def _complete(self, *, prompt, **kw):
        resp = self._client.completions.create(prompt=prompt, **kw)
        self._usage.record(prompt, resp)
        return resp

def batch_line(plan: RunPlan, row: dict, created: int) -> dict:
    """One result as a line of the OpenAI Batch output file."""
    qid = row["query_id"]
    rid = hashlib.blake2b(str(qid if qid is not None else f"line {row.get('line')}").encode("utf-8"),
                          digest_size=8).hexdigest()
    error = None
    if row["status"] == "invalid":  # --stream: a request line that could not be run
        error = {"code": "invalid_request", "message": row["error"]}
    elif row["error"]:
        error = {"code": "backend_error", "message": row["error"]}
    elif row["returned"] < 0:
        error = {"code": "no_response", "message": "the budget ran out before this query got a response"}
    response = None
    if row["returned"] >= 0:
        usage = {"prompt_tokens": row["prompt_tokens"], "completion_tokens": row["completion_tokens"],
                 "total_tokens": None if row["prompt_tokens"] is None else row["prompt_tokens"]
                 + row["completion_tokens"]}
        body = {"id": f"chatcmpl-ttc-{rid}", "object": "chat.completion", "created": created,
                "model": plan.req.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": row["text"]},
                             "finish_reason": row["finish_reason"], "logprobs": None}],
                "usage": usage,
                "ttc": {k: row[k] for k in ("status", "answer", "responses", "generated", "selected", "returned",
                                            "correct", "covered", "answered", "capped", "exhausted")}
                | {"select": plan.select}}
        response = {"status_code": 200, "request_id": f"ttc-{rid}", "body": body}
    return {"id": f"batch_req_ttc_{rid}", "custom_id": qid, "response": response, "error": error}


def stream_lines(src: Path | str, idle_s: float = 0.0, poll_s: float = 0.2):
    """(line number, text) of each line of `src` as it comes: stdin ("-") until it closes; a file until its end,
    or, with idle_s > 0, until it has not grown for idle_s seconds (the time spent on a line does not count)."""
    if str(src) == "-":
        for n, line in enumerate(sys.stdin, 1):
            yield n, line.rstrip("\n")
        return
    try:
        f = open(src, encoding="utf-8")
    except OSError as e:
        raise RunError(f"--batch {src}: {e.strerror}") from None
    with f:
        n, buf = 0, ""
        last = time.monotonic()
        while True:
            chunk = f.readline()
            if chunk:
                buf += chunk
                if buf.endswith("\n"):
                    n += 1
                    yield n, buf.rstrip("\n")
                    buf, last = "", time.monotonic()
                continue
            if time.monotonic() - last >= idle_s:
                if buf:
                    yield n + 1, buf
                return
            time.sleep(poll_s)


def _append(f, row: dict):
    f.write(json.dumps(row, ensure_ascii=False) + "\n")
    f.flush()
    os.fsync(f.fileno())


def _read_rows(path: Path) -> list[dict]:
    """The complete lines of an append-only JSONL file; a torn last line (a kill while appending) is dropped."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows
