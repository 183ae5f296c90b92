"""Write docs/cli.md, the command reference, from the command line's own `--help` (issue 11: command references
generated from `--help`, so they cannot drift). tests/test_docs_commands.py fails when docs/cli.md differs from
what this prints; regenerate with

    python docs/make_cli_reference.py
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "cli.md"
WIDTH = 110


def help_text(args: list[str]) -> str:
    from typer.testing import CliRunner

    from ttc.cli import app

    r = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb"},
                           terminal_width=WIDTH)
    if r.exit_code != 0:
        raise SystemExit(f"ttc {' '.join(args)} --help failed: {r.output}")
    text = re.sub(r"[ \t]+\n", "\n", r.output).strip("\n")
    return text.replace(" Usage: root ", " Usage: ttc ")


def commands() -> list[str]:
    import typer.main

    from ttc.cli import app

    group = typer.main.get_command(app)
    return [name for name, cmd in group.commands.items() if not cmd.hidden]


def render() -> str:
    parts = ["# Command reference", "",
             "Generated from each command's `--help` by `python docs/make_cli_reference.py`; "
             "`tests/test_docs_commands.py` checks it is current. The README explains the commands with examples.",
             "", "```text", help_text([]), "```", ""]
    for name in commands():
        parts += [f"## `ttc {name}`", "", "```text", help_text([name]), "```", ""]
    return "\n".join(parts)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    OUT.write_text(render())
    print(f"wrote {OUT}")
