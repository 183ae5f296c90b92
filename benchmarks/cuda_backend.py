"""The transformers backend's CUDA path, checked on a GPU machine (no network: a tiny random model built in-process).

What the CPU test suite checks on the CPU (tests/test_confidence_stop.py, tests/test_harvest_generation.py), here on
`--device cuda` in float32 and in the model's own dtype on CUDA ("auto", bf16 where the weights are): sampling is
reproducible (the same seeds give the same responses, and the same tokens whatever the batch size), DeepConf online's
stop cuts a trace exactly where its recorded group lows say (conf_stop), a stopped trace is the unstopped one's prefix
and the other rows do not move. It also reports how many sampled responses CUDA and CPU agree on with float32 weights
(not expected to be all: kernels differ in the last bits, and a sampler turns a bit into a different token).

    python benchmarks/cuda_backend.py [--device cuda] [--out result.json]

Needs torch and transformers (and numpy), and polars for the depth checks (ttc.harvest.scoring reads the probes'
answers); it imports ttc.harvest and tests/support/tiny_model.py only. Prints one JSON object; exit status 1 if a
check fails."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

WINDOW = 4
PROMPTS = ["the sum of", "what is the answer ?", "find the value of x", "so we get"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    import torch

    from ttc.harvest.backends import TransformersBackend
    from ttc.harvest.confidence import ConfidenceSpec
    from ttc.harvest.types import Sampling

    from support.tiny_model import make_tiny_model

    spec = ConfidenceSpec(("group-lows", "mean-logprob"), window=WINDOW, top_k=5)
    sampling = Sampling(n=8, temperature=1.0, max_tokens=48)
    seeds = [40, 9000, 7, 123]
    result = {"device": args.device, "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "checks": {}}
    failed = []

    def check(name, ok, **detail):
        result["checks"][name] = {"ok": bool(ok), **detail}
        if not ok:
            failed.append(name)

    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny_model(Path(tmp) / "tiny", eos_logit=0.0)
        for dtype in ("float32", "bfloat16", None):  # None: the backend default on CUDA ("auto", the weights)
            tag = dtype or "auto"
            b1 = TransformersBackend(str(model), device=args.device, dtype=dtype, batch_size=1)
            b8 = TransformersBackend(str(model), device=args.device, dtype=dtype, batch_size=8)
            t0 = time.perf_counter()
            full = b1.generate(PROMPTS, sampling, seeds, confidence=spec)
            dt = time.perf_counter() - t0
            again = b1.generate(PROMPTS, sampling, seeds, confidence=spec)
            batched = b8.generate(PROMPTS, sampling, seeds, confidence=spec)
            tokens = sum(r.n_tokens for rows in full for r in rows)
            check(f"{tag}: same seeds, same responses", full == again, dtype=b1.info()["dtype"],
                  tokens=tokens, seconds=round(dt, 3))
            # the sampled tokens do not depend on the batch; the confidences computed from the batched logits may
            # differ in the last bits (seen on the CPU too: 1e-8 in a group confidence), reported here
            drift = max((abs(a.signals[k] - b.signals[k]) if not isinstance(a.signals[k], list) else
                         max((abs(x - y) for x, y in zip(a.signals[k], b.signals[k])), default=0.0))
                        for ra, rb in zip(full, batched) for a, b in zip(ra, rb) for k in a.signals)
            check(f"{tag}: batch size 1 and 8 give the same tokens", all(
                (a.text, a.n_tokens, a.finish_reason) == (b.text, b.n_tokens, b.finish_reason)
                for ra, rb in zip(full, batched) for a, b in zip(ra, rb)), largest_signal_difference=drift)
            # a threshold between two record lows of the trace with the most of them stops it at the later one
            rows = full[0]
            j = max(range(len(rows)), key=lambda r: len(rows[r].signals["conf_lows"]))
            pos, val = rows[j].signals["conf_lows_pos"], rows[j].signals["conf_lows"]
            if len(val) < 3:
                check(f"{tag}: a trace with three record lows to stop at", False, lows=len(val))
                continue
            i = len(val) // 2
            s = (val[i] + val[i - 1]) / 2
            got = b1.generate(PROMPTS, sampling, seeds, confidence=spec, conf_stop=[s, None, None, None])
            check(f"{tag}: the other prompts do not move", got[1:] == full[1:])
            bad = []
            for f, g in zip(rows, got[0]):
                below = [k for k, v in enumerate(f.signals["conf_lows"]) if v < s]
                if f.n_tokens < WINDOW or not below:
                    if g != f:
                        bad.append("a trace with no low below the threshold changed")
                    continue
                p = f.signals["conf_lows_pos"][below[0]]
                if not (g.finish_reason == "confidence" and g.n_tokens == p + 1
                        and g.signals["conf_lows_pos"] == f.signals["conf_lows_pos"][:below[0] + 1]):
                    bad.append(f"stopped at {g.n_tokens} ({g.finish_reason}), expected {p + 1}")
                ids = b1.tokenizer(g.text, add_special_tokens=False)["input_ids"]
                whole = b1.tokenizer(f.text, add_special_tokens=False)["input_ids"]
                if ids != whole[:len(ids)]:
                    bad.append("a stopped trace is not the whole trace's prefix")
            check(f"{tag}: conf_stop cuts each trace at its first record low below the threshold", not bad,
                  problems=bad[:3], stopped=sum(g.finish_reason == "confidence" for g in got[0]),
                  expected_at=pos[i] + 1, got=got[0][j].n_tokens)
            depth_checks(tag, b1, b8, sampling, seeds, check)
            if dtype == "float32" and args.device != "cpu":
                cpu = TransformersBackend(str(model), device="cpu", dtype="float32", batch_size=1)
                ref = cpu.generate(PROMPTS, sampling, seeds, confidence=spec)
                same = sum(a.text == b.text for ra, rb in zip(full, ref) for a, b in zip(ra, rb))
                result["cuda_vs_cpu_float32_same_text"] = f"{same}/{sum(len(r) for r in ref)}"
    result["failed"] = failed
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 1 if failed else 0


def depth_checks(tag, b1, b8, sampling, seeds, check):
    """--trace-cap and the stability depth rule (issue 30, live), on this device as tests/test_run_e2e.py checks them
    through `ttc run` on the CPU: a capped or stopped trace is the whole trace's prefix (probing draws nothing from its
    generator), stops where the rule says, holds PROBE_PROMPT and a probe of at most PROBE_TOKENS tokens, and the
    batch size changes none of it."""
    from ttc.harvest.backends import PROBE_PROMPT, PROBE_TOKENS, probe_value

    tok = b1.tokenizer
    whole = b1.generate(PROMPTS, sampling, seeds)

    def ids(text):
        return tok(text, add_special_tokens=False)["input_ids"]

    def prefix(w, n):
        return tok.decode(ids(w.text)[:n], skip_special_tokens=True)

    cap = 12
    capped = b1.generate(PROMPTS, sampling, seeds, trace_cap=cap)
    bad, n_capped = [], 0
    for rw, rc in zip(whole, capped):
        for w, c in zip(rw, rc):
            if w.n_tokens <= cap:
                if (c.text, c.n_tokens, c.finish_reason) != (w.text, w.n_tokens, w.finish_reason):
                    bad.append("a trace shorter than the cap changed")
                continue
            n_capped += 1
            trace, _, probe = c.text.partition(PROBE_PROMPT)
            if not (c.finish_reason == "cap" and c.n_tokens == cap and trace == prefix(w, cap)
                    and len(ids(probe)) <= PROBE_TOKENS):
                bad.append(f"capped at {c.n_tokens} ({c.finish_reason}), prefix {trace == prefix(w, cap)}")
    check(f"{tag}: --trace-cap {cap} stops each longer trace there, as its prefix, and probes it",
          not bad and n_capped > 0, problems=bad[:3], capped=n_capped,
          probes_with_answer=sum(probe_value(c.text.partition(PROBE_PROMPT)[2]) is not None
                                 for rc in capped for c in rc if c.finish_reason == "cap"))
    check(f"{tag}: --trace-cap, batch size 1 and 8 give the same traces and probes",
          b8.generate(PROMPTS, sampling, seeds, trace_cap=cap) == capped)
    # The tiny model's greedy probes never close their box (no answer), so for the stability rule each probe's forward
    # pass runs on the device and its continuation is then replaced by a closed box holding the parity of the trace's
    # word count (probes every 2 words agree, every 3 alternate), as tests/test_run_e2e.py does on the CPU.
    for b in (b1, b8):
        b.probe_answer = (lambda real: lambda ids, trace: (real(ids, trace), f"{len(trace.split()) % 2}}}")[1])(
            b.probe_answer)
    for every, m in ((3, 1), (2, 2)):
        got = b1.generate(PROMPTS, sampling, seeds, probe_every=every, depth_m=m)
        bad, stopped = [], 0
        for rw, rs in zip(whole, got):
            for w, s in zip(rw, rs):
                if s.finish_reason != "stable":
                    if (s.text, s.n_tokens, s.finish_reason) != (w.text, w.n_tokens, w.finish_reason):
                        bad.append("a trace no probe stopped changed")
                    continue
                stopped += 1
                n = s.n_tokens
                trace, _, probe = s.text.partition(PROBE_PROMPT)
                if not (n % every == 0 and every * m <= n < w.n_tokens and trace == prefix(w, n)
                        and probe_value(probe) is not None):
                    bad.append(f"stopped at {n} of {w.n_tokens}, prefix {trace == prefix(w, n)}")
        check(f"{tag}: stability (every {every}, m {m}) stops traces at a valid probe, as their prefix",
              not bad and stopped > 0, problems=bad[:3], stopped=stopped, traces=sum(len(r) for r in got))
        check(f"{tag}: stability (every {every}, m {m}), batch size 1 and 8 agree",
              b8.generate(PROMPTS, sampling, seeds, probe_every=every, depth_m=m) == got)
    for b in (b1, b8):
        del b.probe_answer  # (the real probes again)
    # parallel-probe and cmc live (TransformersBackend.trace): a trace decoded a segment at a time, probed after each,
    # is the sample generate draws with the same seed, and a trace taken up again at n tokens (advance_to, a resumed
    # run) goes on with the same tokens
    every, bad, segments, probes = 5, [], 0, 0
    for i, prompt in enumerate(PROMPTS):
        for j in range(3):
            w = whole[i][j]
            st = b1.trace(prompt, seeds[i] + j, sampling)
            while True:
                r, probe = st.segment(every)
                segments += 1
                if probe is None:
                    if r != w:
                        bad.append(f"prompt {i} sample {j}: segments end at {r.n_tokens} ({r.finish_reason}), "
                                   f"whole {w.n_tokens} ({w.finish_reason})")
                    break
                probes += 1
                trace, _, got = r.text.partition(PROBE_PROMPT)
                if not (r.n_tokens % every == 0 and trace == prefix(w, r.n_tokens) and got == probe):
                    bad.append(f"prompt {i} sample {j}: a probe at {r.n_tokens} is not on the whole trace's prefix")
            if w.n_tokens > 2 * every:
                again = b1.trace(prompt, seeds[i] + j, sampling)
                again.advance_to(every)
                while True:
                    r, probe = again.segment(every)
                    if probe is None:
                        break
                if r != w:
                    bad.append(f"prompt {i} sample {j}: taken up at {every} tokens, it ends otherwise")
    check(f"{tag}: a trace in segments of {every} with probes is generate's sample, also taken up again",
          not bad and probes > 0, problems=bad[:3], segments=segments, probes=probes)


if __name__ == "__main__":
    sys.exit(main())
