"""`ttc run` as a function (run_command): the backend built from the request's options, the tokenizer that counts
and renders prompts, a server's key checked before anything is written, the plan executed, the backend released.
The command line (cli.py run_cmd) and the Python API (ttc.run) both call it, so they run the same path."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Collection, Sequence

from ..backends import release_backend
from .execute import execute
from .output import RunOutcome
from .plan import backend_kwargs, effective_chat, load_tokenizer, plan_run
from .request import RunRequest


def run_command(req: RunRequest, *, given: Collection[str] = (), argv: Sequence[str] | None = None,
                echo: Callable[..., None] | None = None, quiet: bool = False) -> RunOutcome:
    """Run `req` as `ttc run` does. given: the backend options the user named (backend_kwargs refuses one the
    backend does not take; the others may be left at their defaults); echo(text, err=False): where the command's
    own lines go (None: nowhere; the printed report is report_lines(outcome)); quiet: the model library's own
    progress bars off while the model loads (ttc.run prints nothing unless asked)."""
    say = echo if echo is not None else (lambda *a, **k: None)
    req = dataclasses.replace(req, chat=effective_chat(req.backend, req.chat, req.batch))
    kw = backend_kwargs(req.backend, req.model, req.revision, req.chat, req.backend_options,
                        {p for p in req.backend_options if p in given})
    plan = plan_run(req)
    tok = load_tokenizer(req.backend, req.model, req.revision, kw)
    gen, prompt_len = _generator(req.backend, kw, tok, quiet)
    if req.stream:
        say(f"{req.out}: requests from {req.batch} as they come, {plan.config.label()} with --oracle {req.oracle}, a "
            f"budget rate of {req.budget:g} {req.unit}/query, {req.backend} {req.model}", err=True)
    else:
        say(f"{req.out}: {len(plan.queries):,} queries, {plan.config.label()} with --oracle {req.oracle}, budget "
            f"{req.budget:g} {req.unit}/query ({plan.budget_total:,} in all), {req.backend} {req.model}")
    try:
        return execute(plan, gen, tok, prompt_len=prompt_len, argv=argv, echo=say)
    finally:
        release_backend(gen)


def _generator(backend: str, kw: dict, tok: Any, quiet: bool) -> tuple[Any, Callable[[str], int] | None]:
    """The backend, built when the first response is needed (a harvest.live.LazyBackend), and how a prompt's tokens
    are counted: by the tokenizer, or for a server backend by the server (ServerUsage), whose key is checked now,
    before --out is created or a request sent."""
    from ..backends import encode_prompt, make_backend
    from ..live import LazyBackend
    from ..registry import BACKENDS
    from .batch import ServerUsage
    from .request import check_access

    prompt_len = None
    if tok is not None:
        prompt_len = lambda p: len(encode_prompt(tok, p))  # noqa: E731
    if BACKENDS[backend].chat == "server":  # a batch request's system message is sent as given
        usage = ServerUsage()
        prompt_len = usage.prompt_len
        server = usage.attach(make_backend(backend, **kw))  # a client, no model: built now to ask about the key
        check_access(server)
        return LazyBackend(lambda: server), prompt_len
    build = (lambda: _quietly(make_backend, backend, kw)) if quiet else (lambda: make_backend(backend, **kw))
    return LazyBackend(build), prompt_len


def _quietly(make: Callable, backend: str, kw: dict):
    """make(backend, **kw) with transformers' progress bars (its "Loading weights") off, and back as they were."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return make(backend, **kw)
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return make(backend, **kw)
    finally:
        if was:
            hf_logging.enable_progress_bar()
