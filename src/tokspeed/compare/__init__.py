"""Compare saved runs: the comparison's model, the evidence per metric, verdicts, and regression gates.

* `comparison` — what `tokspeed compare --json` writes (schema tokspeed.compare/2) and the compared metrics;
* `evidence` — runs (result + records) in, a `Comparison` out: the tests behind each row;
* `verdicts` — from the evidence on one metric to a verdict and hyperfine-style words;
* `gates` — `--fail-if` expressions judged against a run (and optionally a baseline).

Pure functions of saved results: nothing here touches the network or the runner.
"""
