"""Every pool load checks the checksum its writer embedded (issue 27, item 1): a flipped bit, a truncated copy or a
file that makes the Parquet reader panic is one `error:` line naming the file, never a different number."""
from __future__ import annotations

import shutil

import numpy as np
import polars as pl
import pytest

from ttc.replay.pool import DEFAULT_POOL, PoolError, load_pool, write_parquet_file

LASTLETTERS = DEFAULT_POOL.parent / "lastletters-gpt35-40"


def _arrays(p):
    return (p.query_ids, p.off.tolist(), p.correct.tolist(), p.score.tolist(), p.ans.tolist(), p.tok.tolist())


def _flip(src: bytes, rng) -> bytes:
    b = bytearray(src)
    i = int(rng.integers(len(b)))
    b[i] ^= 1 << int(rng.integers(8))
    return bytes(b)


@pytest.mark.parametrize("pool", [LASTLETTERS, DEFAULT_POOL.parent / "math500-llama3.1-8b-48"])
def test_every_embedded_pool_carries_its_checksum(pool):
    from ttc.replay.pool import COLUMNS_KEY, DIGEST_KEY, verify_file

    for f in (pool / "samples.parquet", pool / "queries.parquet"):
        meta = pl.read_parquet_metadata(f)
        assert DIGEST_KEY in meta and COLUMNS_KEY in meta, f
        verify_file(f)


@pytest.mark.parametrize("seed", range(4))
def test_random_bit_flips_never_load_as_other_data(tmp_path, seed, capfd):
    """200 single-bit flips of samples.parquet (50 per seed): each loads to the very same arrays or is refused with
    a PoolError naming the file; a panic of the reader is one of those refusals too."""
    pool = tmp_path / "p"
    shutil.copytree(LASTLETTERS, pool)
    want = _arrays(load_pool(pool))
    src = (LASTLETTERS / "samples.parquet").read_bytes()
    rng = np.random.default_rng(seed)
    refused = same = 0
    for _ in range(50):
        (pool / "samples.parquet").write_bytes(_flip(src, rng))
        try:
            got = _arrays(load_pool(pool))
        except PoolError as e:
            assert "samples.parquet" in str(e) and "\n" not in str(e)
            refused += 1
            continue
        assert got == want
        same += 1
    assert refused + same == 50 and refused > 0


def test_a_truncated_or_flipped_pool_is_one_line_in_every_reading_command(tmp_path):
    from typer.testing import CliRunner

    from ttc import cli

    pool = tmp_path / "p"
    shutil.copytree(LASTLETTERS, pool)
    data = (LASTLETTERS / "samples.parquet").read_bytes()
    runner = CliRunner()
    for broken in (data[: len(data) // 2], data[:-7]):
        (pool / "samples.parquet").write_bytes(broken)
        for args in (["info", str(pool)], ["signals", str(pool)], ["compare", str(pool)],
                     ["replay", str(pool), "--seeds", "2"]):
            r = runner.invoke(cli.app, args)
            lines = [x for x in r.output.splitlines() if x.strip()]
            assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), (args, r.output)
            assert "samples.parquet" in lines[0]


def test_a_checksum_mismatch_in_a_column_read_is_refused(tmp_path):
    """A file whose values differ from what its checksum says (the value was rewritten, metadata kept)."""
    from ttc.replay.pool import COLUMNS_KEY, DIGEST_KEY

    pool = tmp_path / "p"
    shutil.copytree(LASTLETTERS, pool)
    f = pool / "samples.parquet"
    meta = pl.read_parquet_metadata(f)
    df = pl.read_parquet(f)
    df = df.with_columns(pl.when(pl.int_range(pl.len()) == 3).then(~pl.col("correct")).otherwise(pl.col("correct"))
                         .alias("correct"))
    df.write_parquet(f, metadata={DIGEST_KEY: meta[DIGEST_KEY], COLUMNS_KEY: meta[COLUMNS_KEY]})
    with pytest.raises(PoolError, match="samples.parquet.*checksum"):
        load_pool(pool)


def test_a_pool_without_checksum_loads_with_one_note(tmp_path, capfd):
    pool = tmp_path / "p"
    pool.mkdir()
    df = pl.read_parquet(LASTLETTERS / "samples.parquet")
    df.write_parquet(pool / "samples.parquet")  # imported elsewhere: no ttc metadata
    a = load_pool(pool)
    b = load_pool(pool)
    assert _arrays(a) == _arrays(b) == _arrays(load_pool(LASTLETTERS))
    err = capfd.readouterr().err
    assert err.count("note:") == 1 and "checksum" in err and str(pool) in err


def test_a_pool_with_only_the_whole_file_checksum_is_checked_whole(tmp_path):
    """Pools written before per-column checksums: the whole-file checksum is checked (all columns read)."""
    from ttc.replay.pool import DIGEST_KEY, frame_digest

    pool = tmp_path / "p"
    pool.mkdir()
    df = pl.read_parquet(LASTLETTERS / "samples.parquet")
    df.write_parquet(pool / "samples.parquet", metadata={DIGEST_KEY: frame_digest(df)})
    assert _arrays(load_pool(pool)) == _arrays(load_pool(LASTLETTERS))
    bad = df.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("zz")).otherwise(pl.col("answer"))
                          .alias("answer"))
    bad.write_parquet(pool / "samples.parquet", metadata={DIGEST_KEY: frame_digest(df)})
    with pytest.raises(PoolError, match="checksum"):
        load_pool(pool)


def test_written_files_carry_column_checksums(tmp_path):
    from ttc.replay.pool import COLUMNS_KEY, DIGEST_KEY, column_digests, frame_digest

    df = pl.DataFrame({"query_id": ["a", "b"], "sample_idx": [0, 1], "correct": [True, None]})
    write_parquet_file(df, tmp_path / "x.parquet")
    import json

    meta = pl.read_parquet_metadata(tmp_path / "x.parquet")
    assert meta[DIGEST_KEY] == frame_digest(df)
    assert json.loads(meta[COLUMNS_KEY]) == column_digests(df)
    assert len(set(column_digests(df).values())) == 3


def test_the_note_comes_once_from_a_command_and_not_with_an_error(tmp_path):
    from typer.testing import CliRunner

    from ttc import cli

    pool = tmp_path / "p"
    pool.mkdir()
    pl.read_parquet(LASTLETTERS / "samples.parquet").write_parquet(pool / "samples.parquet")
    r = CliRunner().invoke(cli.app, ["info", str(pool)])
    assert r.exit_code == 0 and r.stderr.count("note:") == 1 and "checksum" in r.stderr
    r = CliRunner().invoke(cli.app, ["info", str(pool), "--plot", str(tmp_path / "x.txt")])
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), r.stderr


def test_bit_flips_through_the_command_line_never_print_other_numbers(tmp_path):
    """The issue's probe, through `ttc info`: each flipped pool prints exactly the clean pool's report or one
    error line (exit 2)."""
    from typer.testing import CliRunner

    from ttc import cli

    pool = tmp_path / "p"
    shutil.copytree(LASTLETTERS, pool)
    runner = CliRunner()
    clean = runner.invoke(cli.app, ["info", str(pool)])
    assert clean.exit_code == 0
    src = (LASTLETTERS / "samples.parquet").read_bytes()
    rng = np.random.default_rng(7)
    for _ in range(25):
        (pool / "samples.parquet").write_bytes(_flip(src, rng))
        r = runner.invoke(cli.app, ["info", str(pool)])
        if r.exit_code == 0:
            assert r.stdout == clean.stdout
        else:
            lines = [x for x in r.output.splitlines() if x.strip()]
            assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), r.output


def test_a_renamed_column_is_refused(tmp_path):
    """A flip found by the probe: one bit of the schema renamed 'answer' to 'a.swer', and the pool loaded as one
    without answers. The per-column checksums list every column written, so a name they do not list is damage."""
    pool = tmp_path / "p"
    shutil.copytree(LASTLETTERS, pool)
    data = (LASTLETTERS / "samples.parquet").read_bytes()
    f = pool / "samples.parquet"
    for at in [i for i in range(len(data)) if data.startswith(b"answer", i)]:
        f.write_bytes(data[:at + 1] + b"." + data[at + 2:])
        try:
            if "a.swer" in pl.read_parquet_schema(f):
                break
        except Exception:
            pass
    assert "a.swer" in pl.read_parquet_schema(f)
    with pytest.raises(PoolError, match="samples.parquet is damaged"):
        load_pool(pool)


def test_a_panic_of_the_reader_is_one_line_on_stderr(tmp_path):
    """Bit 5 of byte 458 makes polars panic while decoding (found by the probe); Rust's panic hook writes its
    message and backtrace to descriptor 2 before Python sees the panic, which the loader silences: stderr holds the
    one error line."""
    import os
    import subprocess
    import sys

    pool = tmp_path / "p"
    shutil.copytree(LASTLETTERS, pool)
    b = bytearray((LASTLETTERS / "samples.parquet").read_bytes())
    b[458] ^= 1 << 5
    (pool / "samples.parquet").write_bytes(bytes(b))
    with pytest.raises(PoolError, match="Panic|panic|assertion"):
        load_pool(pool)
    r = subprocess.run([sys.executable, "-m", "ttc.cli", "info", str(pool)], capture_output=True, text=True,
                       env={**os.environ, "RUST_BACKTRACE": "1"}, timeout=300)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), r.stderr[-3000:]
    assert "samples.parquet is damaged" in lines[0]
