"""Bad input, as distinct from the project's own bugs.

A `UserError` is something the user can fix: a missing file, a malformed pool, an unknown name, a value out of range,
a missing optional dependency, a server that keeps failing. The command line prints it as one `error: ...` line and
exits with `exit_code` (2, or 1 for failures of the environment rather than of the input). Any other exception
escaping a command is a bug in ttc: the command line prints its traceback and asks for a report (cli.py).

`InputError` is the UserError that is also a ValueError, so that library callers who catch ValueError keep working;
the project's named errors (PoolError, SynthError, MissingExtra, harvest's HarvestError and SourceError) derive from
it. Raise InputError (or one of those) for every refusal of the user's input; never a plain ValueError, which the
command line reports as a bug.

This module imports nothing, so that harvest/ and replay/ can both use it (replay never imports harvest)."""
from __future__ import annotations


class UserError(Exception):
    """Bad input or a failing environment, reported as `error: <message>` and exit status `exit_code`."""

    exit_code = 2
    show_type = False  # prefix the message with the exception's class name (e.g. "BackendError: ...")


class InputError(UserError, ValueError):
    """A UserError that is also a ValueError: the refusal of an argument, an option, a file or a pool."""


class _Notes(list):
    """Notes for the user that are not errors (e.g. a pool read without a checksum to check). Under the command line
    (`deferred`), they are held and printed when the command ends, and dropped when it ends in an `error:` line, so
    that a refusal stays one line; elsewhere they go to stderr at once."""

    deferred = False


NOTES = _Notes()


def note(line: str):
    """One line on stderr for the user (_Notes says when)."""
    if NOTES.deferred:
        NOTES.append(line)
    else:
        import sys

        print(line, file=sys.stderr)


def available_memory() -> int | None:
    """Bytes of memory the machine can give a new allocation (Linux MemAvailable); None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_memory(need: float, what: str, advice: str):
    """Refuse, before allocating, work whose estimated peak memory (`need` bytes) exceeds 80% of what the machine
    has available: `ttc synth --wrong-answers 1000000000` once reached 24 GB and set off the kernel's out-of-memory
    killer for the whole machine. The estimate is in the message, so the user can size the work."""
    have = available_memory()
    if have is not None and need > 0.8 * have:
        raise InputError(f"{what} would need about {need / 2**30:,.1f} GiB of memory and this machine has "
                         f"{have / 2**30:,.1f} GiB available; {advice}")
