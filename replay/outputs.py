"""Where a command's results go: checked before the work starts, written atomically, and never over something the
user did not ask to replace (issue 13).

The rules every command follows:
- `check_output` runs before any work: the destination is refused if it lies in (or holds) a pool the command
  reads, if it exists and was not written by the same command (unless `--force`), or if its directory cannot be
  written (read-only file system, permissions); so a six-minute run never ends in a refusal to write.
- `atomic_file` / `atomic_dir` write to a hidden temporary name beside the destination, flush it to disk and rename
  it into place: a reader, or a killed run, sees the old output or the whole new one, never a torn file. A failed
  write (disk full, the file system turned read-only) removes the temporary, leaves the old output as it was, and
  ends as one `error:` line (OutputError, exit status 2).
- Each output says which command wrote it: parquet files in their key-value metadata (`ttc.command`), PNG figures
  in their `Software` text chunk, directories in a `.ttc-output.json` marker. That is how "the same command's
  output" is recognised; anything else is replaced only with `--force`.
- Only a regular file or a directory is ever replaced: a device, a FIFO, a socket or a link to one is refused with
  or without `--force` (check_replaceable).
- A command with several outputs writes them as one set (write_set): all written under temporary names first, then
  put in place together; a failure leaves every earlier output as it was, and a run killed while putting them in
  place is finished by the next run (roll_forward). Temporaries of killed runs are removed by the next writer of
  the same output (clear_stale).

Pool directories have their own writer (replay/pool.py: write_pool, new_pool_dir), which only ever creates a new
pool; it uses `write_errors` below for the same one-line errors.

This module imports only the standard library at load time (polars when writing parquet), so the command line can
check destinations before it imports the engine."""
from __future__ import annotations

import json
import os
import shutil
import stat
import struct
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from .errors import InputError

MARK = "ttc.command"  # parquet key-value metadata: the command that wrote the file
DIR_MARK = ".ttc-output.json"  # in a directory a command wrote (report, theory)
# what matplotlib writes with its own dependencies (no LaTeX), by the file name's suffix; none: PNG
FIGURE_FORMATS = ("png", "", "pdf", "svg", "svgz", "eps", "ps", "jpg", "jpeg", "tif", "tiff", "webp", "gif")


class OutputError(InputError):
    """A destination that cannot or must not be written: one `error:` line, exit status 2."""


def tmp_name(path: Path) -> Path:
    """The hidden name an output is written under, beside its destination, before the rename (a killed writer's
    leftovers are recognisable by it: replay/pool.py remove_stale_temps)."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def fsync_path(path: Path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path):
    """Makes a rename in `path` durable; skipped where directories cannot be opened (not on POSIX)."""
    try:
        fsync_path(path)
    except OSError:
        pass


def _reason(e: BaseException) -> str:
    if isinstance(e, OSError):
        return e.strerror or str(e)
    msg = str(e)  # polars reports its I/O errors as ComputeError("... underlying IO error: <strerror> (os error N)")
    tail = msg.rsplit("IO error:", 1)[-1].strip()
    return tail or msg


def _is_io_error(e: BaseException) -> bool:
    return isinstance(e, OSError) or (type(e).__name__ in ("ComputeError", "PolarsError") and "os error" in str(e))


@contextmanager
def write_errors(path: Path, what: str = "") -> Iterator[None]:
    """Turn a failure of the file system while writing `path` (disk full, read-only, no permission) into one
    OutputError line; anything else is not the file system's and propagates as it is."""
    try:
        yield
    except Exception as e:
        if _is_io_error(e):
            raise OutputError(f"cannot write {what + ' ' if what else ''}{path}: {_reason(e)}; nothing was written "
                              f"there") from None
        raise


# ---------------------------------------------------------------------------------------------------------------
# Which command wrote an existing output


def _png_software(path: Path) -> str | None:
    """The `Software` tEXt chunk of a PNG (matplotlib writes it from savefig's metadata), without an imaging
    library."""
    try:
        with open(path, "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                return None
            while True:
                head = f.read(8)
                if len(head) < 8:
                    return None
                size, kind = struct.unpack(">I4s", head)
                if kind == b"tEXt" and size < 1 << 16:
                    key, _, value = f.read(size).partition(b"\0")
                    if key == b"Software":
                        return value.decode("latin-1")
                    f.seek(4, os.SEEK_CUR)
                elif kind in (b"IDAT", b"IEND"):
                    return None  # text chunks written by matplotlib come before the image data
                else:
                    f.seek(size + 4, os.SEEK_CUR)
    except OSError:
        return None


def written_by(path: Path) -> str | None:
    """The ttc command that wrote `path` (e.g. "replay"), or None when it was not written by ttc (or by a version
    before outputs were marked)."""
    path = Path(path)
    try:
        if path.is_dir():
            mark = path / DIR_MARK
            return json.loads(mark.read_text()).get("command") if mark.is_file() else None
        if path.suffix == ".parquet":
            import polars as pl

            return pl.read_parquet_metadata(path).get(MARK)
        if path.suffix == ".png":
            software = _png_software(path) or ""
            return software[4:] if software.startswith("ttc ") else None
    except Exception:  # unreadable, or not what its name says: certainly not a ttc output
        return None
    return None


# ---------------------------------------------------------------------------------------------------------------
# Before the work


def _inside(child: Path, parent: Path) -> bool:
    return child == parent or parent in child.parents


def _probe_writable(directory: Path, flag: str, path: Path):
    """Create and remove a file where the output will go (in the nearest directory that exists): the only test that
    also holds for root on a read-only file system and for ACLs."""
    d = directory
    while not d.exists():
        d = d.parent
    if not d.is_dir():
        raise OutputError(f"{flag} {path}: {d} is a file, so nothing can be written under it")
    probe = d / f".ttc-probe-{os.getpid()}"
    try:
        probe.touch()
        probe.unlink()
    except OSError as e:
        raise OutputError(f"cannot write {flag} {path}: {d}: {_reason(e)}") from None


def check_replaceable(path: Path, flag: str):
    """Only a regular file or a directory is ever replaced: a device, a FIFO, a socket, or a link to one is refused
    with or without --force (`--out /dev/full --force` once replaced the system's /dev/full with a Parquet file;
    reading a FIFO to see who wrote it would block forever)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode  # follows a symlink: what it points to is what a reader would get
    except (FileNotFoundError, NotADirectoryError):
        return  # nothing there (or a dangling link, which the rename replaces); a file above it: refused later
    except OSError as e:
        raise OutputError(f"{flag} {path}: {_reason(e)}") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        what = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else
                "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file")
        via = f" (a link to {os.path.realpath(path)})" if path.is_symlink() else ""
        raise OutputError(f"{flag} {path} is {what}{via}, not a regular file or directory; ttc replaces only "
                          "those, even with --force: give another path")


def check_output(path: Path, *, flag: str, command: str, reads: Sequence[Path] = (), force: bool = False,
                 kind: str = "file") -> Path:
    """Refuse, before any work, a destination the command must not or cannot write (the module docstring's rules).
    `kind` is "file", "dir" or "figure" (a file whose suffix names a format FIGURE_FORMATS holds); `reads` are the
    pools (or files) the command reads."""
    path = Path(path)
    check_replaceable(path, flag)
    if kind == "figure":
        suffix = path.suffix.lower().lstrip(".")
        if suffix not in FIGURE_FORMATS:
            raise OutputError(f"{flag} {path}: a figure is written as {', '.join('.' + f for f in FIGURE_FORMATS if f)}"
                              f" (by its name's suffix), not .{suffix}")
        kind = "file"
    here = path.resolve()
    if kind == "file" and path.is_dir():
        raise OutputError(f"{flag} {path} is a directory; give a file name (e.g. {path / 'out.parquet'})")
    if kind == "dir" and path.exists() and not path.is_dir():
        raise OutputError(f"{flag} {path} is a file; give a directory")
    for r in reads:
        r = Path(r).resolve()
        if _inside(here, r):
            raise OutputError(f"{flag} {path} is inside {r}, which this command reads; write somewhere else")
        if kind == "dir" and _inside(r, here):
            raise OutputError(f"{flag} {path} holds {r}, which this command reads; write somewhere else")
    if path.exists() and not force:
        empty_dir = path.is_dir() and not any(path.iterdir())
        owner = written_by(path)
        if not empty_dir and owner != command:
            who = f"was written by `ttc {owner}`, not" if owner else "was not written by"
            raise OutputError(f"{flag} {path} exists and {who} `ttc {command}`; pass --force to replace it")
    _probe_writable(path.parent, flag, path)
    return path


def check_new_pool(path: Path, *, flag: str = "--out", reads: Sequence[Path] = ()) -> Path:
    """A pool is only ever written to a new (or empty) directory, outside what the command reads; refused before
    the work, like check_output."""
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise OutputError(f"{flag} {path} exists and is not an empty directory; a pool is written only to a new one")
    for r in reads:
        r = Path(r).resolve()
        if _inside(path.resolve(), r):
            raise OutputError(f"{flag} {path} is inside {r}, which this command reads; write somewhere else")
    _probe_writable(path.parent, flag, path)
    return path


# ---------------------------------------------------------------------------------------------------------------
# Writing


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def _remove(p: Path):
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def _stale(path: Path, kind: str) -> list[Path]:
    """`path`'s hidden `.NAME.tmp-PID` (kind "tmp") or `.NAME.old-PID` ("old") siblings whose writer is gone."""
    out = []
    for t in Path(path).parent.glob(f".{Path(path).name}.{kind}-*"):
        pid = t.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            out.append(t)
    return out


def clear_stale(path: Path) -> int:
    """Clean up after writers of `path` that were killed (their process is gone; a live writer's files are left
    alone): their temporaries (files or directories) are removed, and an old output they had set aside is put back
    where the destination went missing (a kill between the two renames of a directory replaced without an atomic
    exchange), else removed."""
    path = Path(path)
    if not path.parent.is_dir():
        return 0
    n = 0
    for old in _stale(path, "old"):
        if not path.exists() and not path.is_symlink():
            os.replace(old, path)
        else:
            _remove(old)
        n += 1
    for t in _stale(path, "tmp"):
        _remove(t)
        n += 1
    return n


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE), so a directory is replaced with no moment
    where its name is missing; False where the system cannot (the caller then renames twice)."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: not on this file system
        return False
    raise OSError(err, os.strerror(err), str(b))


def _fsync_tree(p: Path):
    if p.is_dir():
        for f in sorted(p.rglob("*"), reverse=True):  # contents before the directories that hold them
            fsync_path(f)
    fsync_path(p)


def _swap_in(tmp: Path, path: Path, old: Path) -> bool:
    """Put the finished `tmp` at `path`, the previous `path` (if any) kept at `old` for a rollback: files by a hard
    link and one rename, directories by an atomic exchange; `path` always names the old or the new output. Returns
    whether there was a previous output."""
    had = path.exists() or path.is_symlink()
    if not had:
        os.replace(tmp, path)
        return False
    if tmp.is_dir():
        if _exchange(tmp, path):
            os.replace(tmp, old)  # (tmp now holds the previous output)
        else:
            os.replace(path, old)  # the window a kill can leave: clear_stale puts `old` back on the next run
            os.replace(tmp, path)
        return True
    try:
        os.link(path, old)
    except OSError:  # no hard links here: the rename, whose window clear_stale covers
        os.replace(path, old)
    os.replace(tmp, path)
    return True


def _swap_back(path: Path, old: Path, had: bool):
    """Undo _swap_in: the previous output back at `path` (or nothing, where there was none)."""
    if not had:
        _remove(path)
    elif old.is_dir() and not old.is_symlink():
        if _exchange(old, path):
            _remove(old)
        else:
            _remove(path)
            os.replace(old, path)
    else:
        os.replace(old, path)


def write_set(outputs: Sequence[tuple[Path, Callable[[Path], None]]]):
    """Write a command's outputs as one set: each writer gets a temporary path beside its destination (a file or
    a directory it creates) and writes there; only when every one is written and flushed are they put in place, in
    one tight loop, the previous outputs kept aside until the last is in place and put back if any step fails. So
    a run that fails (a full disk on the second file), or is killed while writing, leaves every earlier output as it
    was, and the error says so. Stale temporaries of killed runs are cleaned first (clear_stale)."""
    outputs = [(Path(p), fn) for p, fn in outputs]
    names = ", ".join(str(p) for p, _ in outputs)
    unchanged = (f"none of this command's outputs ({names}) was changed" if len(outputs) > 1 else
                 "nothing was written there")
    for d in {p.parent for p, _ in outputs}:
        roll_forward(d)
    for p, _ in outputs:
        clear_stale(p)
    tmps = [tmp_name(p) for p, _ in outputs]
    olds = [p.with_name(f".{p.name}.old-{os.getpid()}") for p, _ in outputs]
    done: list[tuple[Path, Path, bool]] = []
    try:
        for (p, fn), t in zip(outputs, tmps):
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
                fn(t)
                _fsync_tree(t)
            except Exception as e:
                if _is_io_error(e):
                    raise OutputError(f"cannot write {p}: {_reason(e)}; {unchanged}") from None
                raise
        # the journal: every temporary is whole and flushed, so from here a killed run is completed, not undone
        journal = outputs[0][0].with_name(f".{outputs[0][0].name}.set-{os.getpid()}")
        if len(outputs) > 1:
            journal.write_text(json.dumps([[str(p), str(t), str(o)] for (p, _), t, o in zip(outputs, tmps, olds)]))
            fsync_path(journal)
        try:
            for p, t, o in zip([p for p, _ in outputs], tmps, olds):
                done.append((p, o, _swap_in(t, p, o)))
        except OSError as e:
            journal.unlink(missing_ok=True)
            for p, o, had in reversed(done):
                _swap_back(p, o, had)
            done.clear()
            raise OutputError(f"cannot replace {p}: {_reason(e)}; {unchanged}") from None
    finally:
        for t in tmps:
            _remove(t)
    for d in {p.parent for p, _ in outputs}:
        fsync_dir(d)
    journal.unlink(missing_ok=True)
    for _, o, had in done:
        if had:
            _remove(o)


def roll_forward(directory: Path) -> int:
    """Finish the sets of outputs (write_set) whose writer was killed while putting them in place: its journal
    lists each destination, its whole temporary and where the previous output was kept; every temporary still there
    is moved into place, so the set is all new, as if the run had not been killed."""
    n = 0
    for journal in Path(directory).glob(".*.set-*"):
        pid = journal.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            entries = json.loads(journal.read_text())
        except (OSError, ValueError):
            entries = []
        for path, tmp, old in entries:
            path, tmp, old = Path(path), Path(tmp), Path(old)
            if tmp.exists():
                if tmp.is_dir() and path.is_dir():
                    if _exchange(tmp, path):
                        _remove(tmp)  # (it now holds the previous output)
                    else:
                        _remove(path)
                        os.replace(tmp, path)
                else:
                    os.replace(tmp, path)
            _remove(old)
            n += 1
        journal.unlink(missing_ok=True)
    return n


@contextmanager
def atomic_file(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path` for the block to write; on success flush it and rename it over `path`.
    On any failure the temporary is removed and `path` keeps its old content."""
    path = Path(path)
    tmp = tmp_name(path)
    if path.parent.is_dir():
        clear_stale(path)
    try:
        with write_errors(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            yield tmp
            fsync_path(tmp)
            os.replace(tmp, path)
            fsync_dir(path.parent)
    finally:
        if tmp.exists():
            tmp.unlink()


def parquet_writer(df, command: str) -> Callable[[Path], None]:
    """A writer for write_set: `df` as Parquet, marked as `command`'s output."""
    return lambda tmp: df.write_parquet(tmp, compression="zstd", statistics=True, metadata={MARK: command})


def write_parquet(df, path: Path, command: str):
    """A data frame to `path`, atomically, marked as `command`'s output."""
    with atomic_file(path) as tmp:
        parquet_writer(df, command)(tmp)


def save_figure(fig, path: Path, command: str):
    """A matplotlib figure to `path`, atomically, marked as `command`'s output (PNG text chunk)."""
    path = Path(path)
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".") or "png",
                    metadata={"Software": f"ttc {command}"} if path.suffix in ("", ".png") else None)


@contextmanager
def atomic_dir(path: Path, command: str | None) -> Iterator[Path]:
    """Build a whole output directory (a report, a pool) in a hidden temporary directory beside `path`; on success
    it takes the place of `path` in one atomic exchange where the system has one (Linux), else in two renames whose
    gap a kill could leave open, which clear_stale closes on the next run by putting the old one back; so `path`
    holds the old output or the whole new one. Killed runs' temporaries are cleaned first. check_output decides
    beforehand whether `path` may be replaced. `command` is written in the directory's marker; None writes none (a
    pool's files are its format's)."""
    path = Path(path)
    tmp = tmp_name(path)
    old = path.with_name(f".{path.name}.old-{os.getpid()}")
    with write_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        clear_stale(path)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
    try:
        with write_errors(path):  # the block's own writes too: a full disk there is one line, `path` untouched
            yield tmp
        with write_errors(path):
            if command is not None:
                (tmp / DIR_MARK).write_text(json.dumps({"command": command}) + "\n")
            _fsync_tree(tmp)
            had = _swap_in(tmp, path, old)
            fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if had:
        _remove(old)
