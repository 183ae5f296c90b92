"""What identifies a model's weights, tokenizer and chat template, computed before the model loads.

A resumed harvest must draw from the same distribution as the run it continues: the same weights (a local path can
be overwritten by a new checkpoint; a hub branch moves), the same tokenizer and chat template (they change the
prompt), the same generation defaults and the same dtype. pool.json's generation block records this fingerprint,
and resume and merge compare it like every other generation setting (issue 13: a resume with a changed `--dtype`
or changed weights at the same path used to be accepted and mixed two distributions in one pool).

Files are identified by content: in the Hugging Face cache a snapshot file links to a blob named by the sha256 of
its content, which is used as it is; any other file is hashed once (blake2b) and the digest kept in a small cache
keyed by path, size, modification and change times and inode, so a resume of a 15 GB checkpoint does not read it
again."""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5", ".ckpt")
# files that change what the model is given or how it samples, besides the weights
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt", "spiece.model",
                   "chat_template.json", "chat_template.jinja")
CONFIG_FILES = ("config.json", "generation_config.json")
_BLOB = re.compile(r"^[0-9a-f]{64}$")  # the HF cache's blobs/<sha256> (LFS files); git blobs use sha1 (40)


def _cache_path() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "ttc" / "file-digests.json"


def _load_cache() -> dict:
    try:
        return json.loads(_cache_path().read_text())
    except (OSError, ValueError):
        return {}


def _save_cache(cache: dict):
    """A cache: losing it costs a re-hash, never a wrong answer; so a failed write is ignored."""
    from ttc.replay.outputs import atomic_file

    try:
        with atomic_file(_cache_path()) as tmp:
            tmp.write_text(json.dumps(cache))
    except (OSError, ValueError):  # OutputError is a ValueError
        pass


def file_digest(path: Path, cache: dict | None = None) -> str:
    """The content digest of one file: the HF cache's own sha256 blob name when the file is one, else blake2b of
    its bytes (cached by path, size, mtime, ctime and inode)."""
    real = Path(path).resolve()
    if real.parent.name == "blobs" and _BLOB.match(real.name):
        return "sha256:" + real.name
    st = real.stat()
    key = f"{real}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}"  # ctime: no copy tool preserves it
    if cache is not None and key in cache:
        return cache[key]
    h = hashlib.blake2b(digest_size=20)
    with open(real, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    digest = "blake2b:" + h.hexdigest()
    if cache is not None:
        cache[key] = digest
    return digest


def _group(files: list[Path], root: Path, cache: dict) -> str | None:
    """One digest over (relative name, content digest) of each file; None when there are none."""
    if not files:
        return None
    h = hashlib.blake2b(digest_size=20)
    for f in sorted(files, key=lambda p: str(p.relative_to(root))):
        h.update(str(f.relative_to(root)).encode() + b"\0" + file_digest(f, cache).encode() + b"\0")
    return h.hexdigest()


def directory_fingerprint(root: Path) -> dict[str, Any]:
    """Digests of a model directory's weights, tokenizer files (chat template included) and config files."""
    root = Path(root)
    files = [p for p in root.rglob("*") if p.is_file() and not any(part.startswith(".") for part in
                                                                     p.relative_to(root).parts)]
    cache = _load_cache()
    before = len(cache)
    out = {
        "weights": _group([p for p in files if p.suffix in WEIGHT_SUFFIXES], root, cache),
        "tokenizer": _group([p for p in files if p.name in TOKENIZER_FILES], root, cache),
        "config": _group([p for p in files if p.name in CONFIG_FILES], root, cache),
    }
    if len(cache) != before:
        _save_cache(cache)
    return out


def model_fingerprint(model: str, revision: str | None, backend: str, dtype: str | None = None) -> dict[str, Any]:
    """The fingerprint recorded in pool.json's generation block. A local directory, or a hub model already in the
    local cache, is identified by content (and the hub commit); a hub model not downloaded yet by its name and
    revision only, which the record says; a served model (openai backend) by the name the server gives it, since
    its weights are the server's."""
    fp: dict[str, Any] = {"dtype": dtype or "default"}
    if backend == "openai":
        return {**fp, "source": "server", "note": "the server's weights are not visible; the served name is"}
    path = Path(model).expanduser()
    if path.is_dir():
        return {**fp, "source": "directory", **directory_fingerprint(path)}
    try:
        from huggingface_hub import snapshot_download

        snap = Path(snapshot_download(model, revision=revision, local_files_only=True))
    except Exception:  # not in the local cache (or no huggingface_hub): the first load downloads it
        return {**fp, "source": "hub", "commit": None,
                "note": "not in the local cache when the run started: identified by name and revision only"}
    return {**fp, "source": "hub", "commit": snap.name, **directory_fingerprint(snap)}
