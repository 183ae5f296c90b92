"""What decoding a trace in segments costs (ttc run --policy parallel-probe | cmc: TransformersBackend.trace): one
trace of the tiny test model decoded whole (generate), as one segment, and in segments with a probe after each,
CPU time per trace (time.process_time, one torch thread), medians over seeds and repeats. Each way gives the same
tokens (checked here too).

    python benchmarks/trace_segments.py --tokens 200 --every 50 --seeds 4 --repeats 5
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    from ttc.harvest.backends import TransformersBackend
    from ttc.harvest.types import Sampling

    from support.tiny_model import make_tiny_model, single_thread_torch

    # EOS far below the other tokens: every trace runs to --tokens
    b = TransformersBackend(str(make_tiny_model(Path(tempfile.mkdtemp()) / "m", eos_logit=-5.0)), device="cpu")
    s = Sampling(n=1, temperature=1.0, max_tokens=a.tokens)
    prompt = "what is the sum of 2 and 3 ?"

    def segments(seed, every):
        st, probes = b.trace(prompt, seed, s), 0
        while True:
            r, p = st.segment(every)
            if p is None:
                return r, probes
            probes += 1

    times: dict[str, list[float]] = {"whole": [], "one segment": [], f"segments of {a.every} + probes": []}
    with single_thread_torch():
        for _ in range(a.repeats):
            for seed in range(a.seeds):
                t = time.process_time()
                whole = b.generate([prompt], s, [seed])[0][0]
                times["whole"].append(time.process_time() - t)
                t = time.process_time()
                one, _ = segments(seed, a.tokens)
                times["one segment"].append(time.process_time() - t)
                t = time.process_time()
                cut, probes = segments(seed, a.every)
                times[f"segments of {a.every} + probes"].append(time.process_time() - t)
                assert one == whole == cut, seed
    print(f"{whole.n_tokens} tokens, {probes} probes; CPU ms per trace (median of {len(times['whole'])}):")
    for k, v in times.items():
        print(f"  {k}: {statistics.median(v) * 1000:.1f}")


if __name__ == "__main__":
    main()
