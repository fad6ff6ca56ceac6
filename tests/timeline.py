"""Where a test run's time went: `python tests/timeline.py FILE` for a run made with $TOKSPEED_TEST_TIMELINE=FILE.

Prints per worker its busy time, the time it waited for the machine lock, and the time it had no test
(idle: its queue was empty, or between tests); the timing tests' exclusive time; and the files that held
the machine longest. A tool for cutting CI's time, not a test.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def main(path: str) -> None:
    rows = [json.loads(line) for line in open(path)]
    start = min(r["asked"] for r in rows)
    end = max(r["done"] for r in rows)
    print(f"{len(rows)} tests, {end - start:.0f} s from the first test to the last")
    by_worker: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_worker[r["worker"]].append(r)
    for worker, rs in sorted(by_worker.items()):
        busy = sum(r["done"] - r["held"] for r in rs)
        waited = sum(r["held"] - r["asked"] for r in rs)
        last = max(r["done"] for r in rs)
        print(f"{worker}: busy {busy:.0f} s, waited for the lock {waited:.0f} s, "
              f"otherwise idle {end - start - busy - waited:.0f} s, last test ended at {last - start:.0f} s")
    alone = sum(r["done"] - r["held"] for r in rows if r["alone"])
    print(f"timing tests (exclusive): {alone:.0f} s")
    per_file: dict[str, float] = defaultdict(float)
    for r in rows:
        per_file[r["test"].split("::")[0] + (" (alone)" if r["alone"] else "")] += r["done"] - r["held"]
    for f, t in sorted(per_file.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {t:6.0f} s  {f}")


if __name__ == "__main__":
    main(sys.argv[1])
