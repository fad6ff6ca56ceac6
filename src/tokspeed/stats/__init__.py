"""Statistics that know nothing of requests or servers: samples in, figures and intervals out.

`distribution` (the `Distribution` every metric is reported as, percentile intervals from order
statistics), `sketch` (bounded samples a load point is summarised into one value at a time),
`median` (a running median over them), `bootstrap` (intervals that resample requests, not tokens),
`significance` (the tests compare uses: scipy.stats where scipy has them, the request-resampling
bootstrap where it does not). Depends on numpy, scipy and pydantic only.
"""
