"""How fast a BoundedSample is beyond its exact limit: ns per value added, ms per distribution(). Prints figures.

    python bench/sketch.py                      # 10^7 values in chunks of 10^5
    python bench/sketch.py --values 100000000   # 10^8 values (memory stays the same)

Values are log-uniform in [1e3, 1e10] (ns: 1 µs to 10 s), the widest range a latency
metric spans, so the histogram holds the most buckets it will hold for such a metric.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tokspeed.stats.sketch import BoundedSample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--values", type=int, default=10**7, help="values added in all")
    parser.add_argument("--chunk", type=int, default=10**5, help="values per add() call")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    chunks = [10 ** rng.uniform(3, 10, args.chunk) for _ in range(min(100, args.values // args.chunk))]
    sample = BoundedSample()
    rounds = args.values // args.chunk
    start = time.perf_counter()
    for i in range(rounds):
        sample.add(chunks[i % len(chunks)])
    add_s = time.perf_counter() - start
    start = time.perf_counter()
    sample.distribution(1e-6)
    dist_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    sample.distribution_with_ci(1e-6)
    ci_ms = (time.perf_counter() - start) * 1e3
    print(f"values: {sample.count:,} in chunks of {args.chunk:,} (exact: {sample.exact})")
    print(f"add: {add_s * 1e9 / sample.count:.1f} ns/value ({add_s:.2f} s in all)")
    print(f"distribution(): {dist_ms:.2f} ms; distribution_with_ci(): {ci_ms:.2f} ms")
    print(f"histogram: {sample.buckets:,} buckets = {sample.buckets * 8 / 1e6:.3f} MB")


if __name__ == "__main__":
    main()
