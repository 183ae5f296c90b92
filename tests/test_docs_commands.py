"""Every `ttc ...` command in the README's and docs/'s fenced bash blocks parses against the real command line, so the
docs and the CLI cannot drift apart (issue 11). A command is parsed the way `ttc` parses it (every option converted
and checked, choices included) but not run; it must not use an option hidden from --help (a deprecated spelling)."""
import re
import shlex
from pathlib import Path

import pytest
import typer.main

from ttc.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "data" / "README.md"]
ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def bash_blocks(text: str) -> list[str]:
    """The lines of every ```bash block, backslash continuations joined."""
    lines, inside, cont = [], False, ""
    for raw in text.splitlines():
        if raw.strip().startswith("```"):
            inside = raw.strip() == "```bash" if not inside else False
            continue
        if not inside:
            continue
        line = cont + raw
        if line.rstrip().endswith("\\"):
            cont = line.rstrip()[:-1] + " "
            continue
        cont = ""
        lines.append(line)
    return lines


def ttc_commands(line: str) -> list[list[str]]:
    """The `ttc` invocations in one shell line: split at ; && | & and redirections, comments dropped, leading
    VAR=value assignments skipped. A command holding a `...` placeholder is left out."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    tokens, commands, current = list(lex), [], []
    for tok in tokens + [";"]:
        if tok and set(tok) <= set("();<>|&"):
            while current and ENV.match(current[0]):
                current.pop(0)
            if current and current[0] == "ttc" and "..." not in current:
                commands.append(current[1:])
            current = []
        else:
            current.append(tok)
    return commands


CASES = [(f"{doc.relative_to(ROOT)}: {line.strip()}", argv)
         for doc in DOCS for line in bash_blocks(doc.read_text()) for argv in ttc_commands(line)]


def test_the_docs_hold_commands():
    readme = [c for c in CASES if c[0].startswith("README.md")]
    assert len(readme) >= 15, readme
    assert {argv[0] for _, argv in readme if argv} >= {"replay", "import", "info", "bench", "report", "synth", "theory",
                                                       "harvest", "score", "merge"}


@pytest.mark.parametrize("where, argv", CASES, ids=[c[0][:90] for c in CASES])
def test_doc_command_parses(where, argv):
    group = typer.main.get_command(app)
    if not argv:  # plain `ttc`: the group's help
        return
    with group.make_context("ttc", [argv[0]]) as parent:
        command = group.get_command(parent, argv[0])
        assert command is not None, f"{where}: no command {argv[0]!r}"
        try:
            with command.make_context(argv[0], list(argv[1:]), parent=parent) as ctx:
                hidden = [p.opts[0] for p in command.params if getattr(p, "hidden", False)
                          and ctx.get_parameter_source(p.name).name != "DEFAULT"]
                assert not hidden, f"{where}: deprecated option {hidden} (use the new spelling)"
                if argv[0] == "harvest":  # required, but not by the parser (its old spelling --n may stand in)
                    assert ctx.params["responses"] is not None, f"{where}: no --responses"
        except typer.Exit:
            pass  # --help, --version
        except Exception as e:  # the parser's refusal: name the line
            message = e.format_message() if hasattr(e, "format_message") else str(e)
            pytest.fail(f"{where}: {type(e).__name__}: {message}")


def test_the_command_reference_is_current():
    """docs/cli.md is generated from --help (docs/make_cli_reference.py). Compared by what a reader looks up (the
    commands, and each command's options and arguments), so a new rich or typer release that only changes the
    box drawing does not fail the suite; regenerate the file when this fails."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_cli_reference", ROOT / "docs" / "make_cli_reference.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)

    def sections(text: str) -> dict[str, set[str]]:
        out, name = {}, "ttc"
        for line in text.splitlines():
            m = re.match(r"^## `ttc (\S+)`", line)
            if m:
                name = m.group(1)
            out.setdefault(name, set()).update(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line))
        return out

    current = (ROOT / "docs" / "cli.md").read_text()
    assert sections(current) == sections(ref.render()), "docs/cli.md is stale: python docs/make_cli_reference.py"


def test_the_readme_test_command_is_safe_to_paste_and_is_what_ci_runs():
    """Issue 28: `pip install -e ".[test,harvest]"` as written pulled torch with CUDA (about 3 GB); the advice to
    install a CPU torch first sat in a paragraph after the block. The pasted line itself installs a pinned torch
    with PyTorch's CPU index beside PyPI (where +cpu is the newest build of the pin), then the extras, with ray for
    the Ray tests, then pytest; .ci/run runs that line as it stands."""
    import re

    block = (ROOT / "README.md").read_text().split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert len(block) == 2 and block[0].startswith("pip install -e . && ttc replay")
    test = block[1]
    pin = re.match(r'pip install "torch==[\d.]+" --extra-index-url https://download\.pytorch\.org/whl/cpu && ', test)
    assert pin, test
    assert test.endswith('pip install -e ".[test,harvest,ray]" && python -m pytest'), test
    ci = (ROOT / ".ci" / "run").read_text()
    grep = re.search(r"readme_test=\"\$\(grep -m1 -E '(.+?)' README.md\)\"", ci)
    assert grep and re.search(grep.group(1), test) and 'eval "$readme_test"' in ci
    assert [ln for ln in (ROOT / "README.md").read_text().splitlines() if re.search(grep.group(1), ln)][0] == test
    assert "pytest" not in ci.split('eval "$readme_test"')[1].split("# --- the non-editable")[0].replace(
        "tests/test_sandbox_isolation.py", "")  # pytest runs once, in the README's line
