"""A resumed harvest draws from the same model as the run it continues (issue 13): the weights, tokenizer, chat
template, config and dtype are fingerprinted before the model loads, recorded in pool.json, and a resume or merge
with any of them changed is refused, naming what changed."""
import json
import os
import time

import pytest

from ttc.harvest.fingerprint import directory_fingerprint, file_digest, model_fingerprint
from ttc.harvest.pipeline import HarvestError, HarvestSpec, plan_harvest, read_meta, run_harvest
from ttc.harvest.types import Sampling

from support.fake_harvest import FakeBackend, make_queries, prompt


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _model_dir(root, weights=b"\x01" * 4096, template="{{ messages }}", config='{"hidden": 8}'):
    root.mkdir(parents=True, exist_ok=True)
    (root / "model.safetensors").write_bytes(weights)
    (root / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    (root / "tokenizer.json").write_text('{"vocab": {"a": 0}}')
    (root / "config.json").write_text(config)
    return root


def test_each_part_of_the_fingerprint_follows_its_files(tmp_path):
    base = directory_fingerprint(_model_dir(tmp_path / "m"))
    assert base == directory_fingerprint(tmp_path / "m")  # stable
    same_size = b"\x01" * 4095 + b"\x02"  # one byte differs, same size
    changed = directory_fingerprint(_model_dir(tmp_path / "w", weights=same_size))
    assert changed["weights"] != base["weights"] and changed["tokenizer"] == base["tokenizer"]
    changed = directory_fingerprint(_model_dir(tmp_path / "t", template="{{ other }}"))
    assert changed["tokenizer"] != base["tokenizer"] and changed["weights"] == base["weights"]
    changed = directory_fingerprint(_model_dir(tmp_path / "c", config='{"hidden": 16}'))
    assert changed["config"] != base["config"] and changed["weights"] == base["weights"]


def test_weights_overwritten_in_place_are_noticed(tmp_path):
    d = _model_dir(tmp_path / "m")
    before = directory_fingerprint(d)
    st = (d / "model.safetensors").stat()
    time.sleep(0.05)  # file systems stamp ctime with a coarse clock (a few ms); a checkpoint is never that quick
    (d / "model.safetensors").write_bytes(b"\x07" * 4096)  # a new checkpoint at the same path, same size,
    os.utime(d / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns))  # its mtime kept (as cp -p does)
    assert directory_fingerprint(d)["weights"] != before["weights"]


def test_digests_are_cached_and_hf_blobs_are_not_read(tmp_path):
    d = _model_dir(tmp_path / "m")
    directory_fingerprint(d)
    cache = json.loads((tmp_path / "cache" / "ttc" / "file-digests.json").read_text())
    assert any(k.startswith(str((d / "model.safetensors").resolve())) for k in cache)
    # the HF cache layout: snapshots/<commit>/file -> ../../blobs/<sha256 of the content>
    blob = tmp_path / "hub" / "blobs" / ("ab" * 32)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"not even read")
    link = tmp_path / "hub" / "snapshots" / "c0ffee" / "model.safetensors"
    link.parent.mkdir(parents=True)
    link.symlink_to(blob)
    assert file_digest(link) == "sha256:" + "ab" * 32


def _spec(weights):
    return HarvestSpec(model="m", backend="transformers", sampling=Sampling(n=2, max_tokens=8),
                       template={"name": "plain"}, dataset={"source": "fixture", "task": "math", "limit": None},
                       weights=weights)


def _harvest(out, weights):
    plan = plan_harvest(out, make_queries(4), _spec(weights))
    run_harvest(plan, FakeBackend(), prompt, shard_size=2, progress=False, argv=["test"])


def test_resume_with_another_dtype_or_other_weights_is_refused(tmp_path):
    d = _model_dir(tmp_path / "m")
    fp = model_fingerprint(str(d), None, "transformers", dtype="bfloat16")
    out = tmp_path / "pool"
    _harvest(out, fp)
    assert read_meta(out)["generation"]["weights"] == fp
    plan_harvest(out, make_queries(4), _spec(model_fingerprint(str(d), None, "transformers", dtype="bfloat16")))
    with pytest.raises(HarvestError, match=r"weights\.dtype: \"bfloat16\" vs \"float32\""):
        plan_harvest(out, make_queries(4), _spec(model_fingerprint(str(d), None, "transformers", dtype="float32")))
    (d / "model.safetensors").write_bytes(b"\x09" * 4096)
    with pytest.raises(HarvestError, match=r"weights\.weights: "):
        plan_harvest(out, make_queries(4), _spec(model_fingerprint(str(d), None, "transformers", dtype="bfloat16")))
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": "changed"}))
    with pytest.raises(HarvestError, match=r"weights\.tokenizer: "):
        plan_harvest(out, make_queries(4), _spec(model_fingerprint(str(d), None, "transformers", dtype="bfloat16")))


def test_pools_without_a_fingerprint_and_uncached_hub_models_still_resume(tmp_path):
    out = tmp_path / "old"
    _harvest(out, None)  # written before fingerprints existed
    plan_harvest(out, make_queries(4), _spec({"dtype": "default", "source": "directory", "weights": "x"}))
    hub_unknown = {"dtype": "default", "source": "hub", "commit": None}
    out = tmp_path / "hub"
    _harvest(out, hub_unknown)
    # the resume finds the model cached now: known by content, the same dtype, accepted
    plan_harvest(out, make_queries(4), _spec({"dtype": "default", "source": "hub", "commit": "abc", "weights": "w"}))
    with pytest.raises(HarvestError, match="weights.dtype"):
        plan_harvest(out, make_queries(4), _spec({"dtype": "float16", "source": "hub", "commit": "abc"}))


def test_a_served_model_is_identified_by_name_only(tmp_path):
    fp = model_fingerprint("my-served-model", None, "openai")
    assert fp["source"] == "server" and "weights" not in fp


def test_a_hub_model_not_in_the_cache_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    fp = model_fingerprint("some-org/not-downloaded", None, "vllm", dtype=None)
    assert fp["source"] == "hub" and fp["commit"] is None and fp["dtype"] == "default"
