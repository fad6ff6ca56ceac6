"""The results layer: the versioned results directory, `run.json` (schema tokspeed.run/1) and `requests.jsonl`.

* `run_json` — the run.json models and the JSON Schema shipped in the package;
* `findings` — a diagnosis finding, as run.json stores it;
* `benchmark`, `groups` — one load point's records summarised into a `Benchmark`
  (pooled, per iteration, across iterations; per stage and per workload class);
* `writer` — `ResultsWriter`: the directory written while a run goes;
* `reader` — `load_run`, `read_records`: the directory read back (rebuilt when run.json is missing);
* `records` — which saved records belong to which load point.

Metrics are computed from records alone (`tokspeed.metrics`); this layer stores and reads them, so
every analysis can be re-run offline from a results directory.
"""

from tokspeed.results.benchmark import PARTIAL_SHARE, build_benchmark, mark_partial
from tokspeed.results.reader import (
    StoredRecords,
    iter_records,
    load_run,
    load_run_file,
    missing_benchmarks,
    read_records,
)
from tokspeed.results.run_json import (
    METRIC_SPEC,
    REQUESTS_FILE,
    RUN_FILE,
    SCHEMA,
    SCHEMA_FILE,
    Benchmark,
    CapacityProbe,
    CapacityResult,
    GroupResult,
    IterationResult,
    RunResult,
    RunStatus,
    Sample,
    SweepInfo,
    now_iso,
    run_json_schema,
    write_schema_file,
)
from tokspeed.results.writer import ResultsWriter

__all__ = [
    "METRIC_SPEC",
    "PARTIAL_SHARE",
    "REQUESTS_FILE",
    "RUN_FILE",
    "SCHEMA",
    "SCHEMA_FILE",
    "Benchmark",
    "CapacityProbe",
    "CapacityResult",
    "GroupResult",
    "IterationResult",
    "ResultsWriter",
    "RunResult",
    "RunStatus",
    "Sample",
    "StoredRecords",
    "SweepInfo",
    "build_benchmark",
    "iter_records",
    "load_run",
    "load_run_file",
    "mark_partial",
    "missing_benchmarks",
    "now_iso",
    "read_records",
    "run_json_schema",
    "write_schema_file",
]
