"""Distributed load on Locust's master/worker mode (the optional `tokspeed[locust]` extra).

Only the two locustfiles here (`locustfile.py`, `locustfile_stages.py`, with a LoadTestShape) import
locust or gevent, and they run only inside locust processes (which `tokspeed locust master|worker` spawn), so
gevent's monkey-patching never reaches tokspeed's asyncio code. Here live the parts that do not
need Locust: a blocking HTTP client that fills `RequestRecord`s exactly as the asyncio backend
does (`sync_http`), the worker's record batches (`batching`) and the master's merge of those
batches into a normal results directory (`merge`).
"""
