"""The results history: every run's results directory registered in a catalogue, its trends, its regressions.

A results directory stays the source of truth: the catalogue holds only what `run.json` says
(target redacted, model, server version, deployment commit, tags, each point's figures), so
deleting it loses nothing that `tokspeed history import DIR` cannot rebuild.

    location.py    where the catalogue is: --catalog, TOKSPEED_CATALOG, the user data dir; off
    entry.py       run.json -> RunEntry / PointEntry (what one run adds to the catalogue)
    schema.py      the tables and their versioned migrations (SQLAlchemy Core)
    store.py       Catalogue: open (migrating), upsert a run, query runs and points
    register.py    the hook at the end of run/sweep/capacity: never raises, one warning line at most
    importer.py    find run.json under directories and catalogue each
    trend.py       a metric's series over comparable runs
    check.py       is the newest run a regression against the spread of its history?

Nothing here runs on the load path: the CLI imports it after a run has finished.
"""
