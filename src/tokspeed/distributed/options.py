"""The tokspeed settings a Locust run carries, as Locust custom arguments (`--tokspeed-*`).

Locust sends a master's custom arguments to every worker with each spawn message, so a worker
started with only `--master HOST` still builds the same workload and request bodies. The API
key is the exception: it is never an argument (Locust would ship it to every worker and show
it in its web UI); each worker reads it from its own `OPENAI_API_KEY`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tokspeed.config import DEFAULT_OUTPUT_TOKENS, DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from tokspeed.backends.http_policy import HttpPolicy
    from tokspeed.workload import Workload

API_KEY_ENV = "OPENAI_API_KEY"
SYNTHETIC_INPUT_TOKENS = "128"
INDEX_STRIDE = 1024  # request i of worker w has index i × STRIDE + w: unique across up to 1024 workers


@dataclass(frozen=True)
class LocustOptions:
    """What a tokspeed Locust user needs besides Locust's own options (host, users, run time)."""

    out: str | None = None
    overwrite: bool = False
    api: str = "chat"
    model: str | None = None
    dataset: str = "synthetic"
    input_tokens: str | None = None  # synthetic prompts: SYNTHETIC_INPUT_TOKENS when not given
    output_tokens: str = DEFAULT_OUTPUT_TOKENS
    seed: int = 0
    rate: float = 0.0  # requests per second over all users; 0: closed loop (each user back to back)
    arrival: str = "constant"  # the arrivals of --rate and rate stages: constant or poisson
    timeout_s: float = DEFAULT_TIMEOUT_S
    include_usage: bool = True
    users: int = 0  # the master's user count, so each worker can pace its users for `rate`
    warmup_s: float | None = None  # requests started this long after a worker's start are warm-up (None: the master decides)
    requests: int = 0  # measured requests over all workers (0: no limit)
    workers: int = 0  # set by the master at the start: how many workers share `requests`
    stages: str | None = None  # concurrency stages (the staged locustfile's LoadTestShape)
    ramp: str | None = None  # a stepped concurrency ramp, the same way (or a rate ramp)
    start_epoch_ns: int = 0  # set by the master at the start: when the arrival schedule starts (Unix-epoch ns)
    duration_s: float = 0.0  # set by the master: how long the arrival schedule runs (its run time)
    ca_cert: str | None = None  # TLS (backends/http_policy.py): paths on every worker host
    insecure: bool = False
    client_cert: str | None = None
    client_key: str | None = None

    # Locust's argument names: dest -> (flag, help)
    @staticmethod
    def arguments() -> dict[str, tuple[str, Any, str]]:
        d = LocustOptions()
        return {
            "tokspeed_out": ("--tokspeed-out", d.out, "master: results directory (run.json + requests.jsonl)"),
            "tokspeed_overwrite": ("--tokspeed-overwrite", d.overwrite, "master: replace an existing results directory"),
            "tokspeed_api": ("--tokspeed-api", d.api, "chat or completions"),
            "tokspeed_model": ("--tokspeed-model", d.model, "model name (default: the first one /models lists)"),
            "tokspeed_dataset": ("--tokspeed-dataset", d.dataset, "builtin, synthetic, or a prompt file on every worker"),
            "tokspeed_input_tokens": ("--tokspeed-input-tokens", d.input_tokens, f"synthetic prompt length spec (default {SYNTHETIC_INPUT_TOKENS})"),
            "tokspeed_output_tokens": ("--tokspeed-output-tokens", d.output_tokens, "max_tokens spec per request"),
            "tokspeed_seed": ("--tokspeed-seed", d.seed, "seed of the prompts"),
            "tokspeed_rate": ("--tokspeed-rate", d.rate, "requests/s over all users (0: closed loop); the users cap the requests in flight"),
            "tokspeed_arrival": ("--tokspeed-arrival", d.arrival, "arrivals of --tokspeed-rate and rate stages: constant or poisson"),
            "tokspeed_timeout": ("--tokspeed-timeout", d.timeout_s, "per-request timeout, seconds"),
            "tokspeed_no_usage": ("--tokspeed-no-usage", not d.include_usage, "do not ask for stream_options.include_usage"),
            "tokspeed_users": ("--tokspeed-users", d.users, "set by the master: its --users"),
            "tokspeed_warmup_s": ("--tokspeed-warmup-s", d.warmup_s, "seconds from the start whose requests are warm-up, not measured (default: users/spawn-rate, the ramp; 0 with stages)"),
            "tokspeed_requests": ("--tokspeed-requests", d.requests, "stop after this many measured requests over all workers (0: no limit)"),
            "tokspeed_workers": ("--tokspeed-workers", d.workers, "set by the master: workers sharing --tokspeed-requests and the arrivals"),
            "tokspeed_stages": ("--tokspeed-stages", d.stages, "rate stages, e.g. 'warm:rate=5:30s,peak:rate=10:30s' (--run-time their total), or concurrency stages, e.g. 'warm:concurrency=4:10s,peak:concurrency=16:20s' (locustfile tokspeed/distributed/locustfile_stages.py)"),
            "tokspeed_ramp": ("--tokspeed-ramp", d.ramp, "a rate ramp, e.g. rate=1..20:60s, or a stepped concurrency ramp, e.g. concurrency=1..16:40s:steps=4 (locustfile tokspeed/distributed/locustfile_stages.py)"),
            "tokspeed_start_epoch_ns": ("--tokspeed-start-epoch-ns", d.start_epoch_ns, "set by the master: when the arrival schedule starts (Unix-epoch ns)"),
            "tokspeed_duration_s": ("--tokspeed-duration-s", d.duration_s, "set by the master: how long the arrival schedule runs"),
            "tokspeed_ca_cert": ("--tokspeed-ca-cert", d.ca_cert, "https: PEM file of the CA(s) to trust instead of the system's (the same path on every worker)"),
            "tokspeed_insecure": ("--tokspeed-insecure", d.insecure, "https: check neither the certificate nor the host name"),
            "tokspeed_client_cert": ("--tokspeed-client-cert", d.client_cert, "https: PEM client certificate (mutual TLS; the same path on every worker)"),
            "tokspeed_client_key": ("--tokspeed-client-key", d.client_key, "https: PEM key of --tokspeed-client-cert, when not in its file"),
        }

    @classmethod
    def from_namespace(cls, ns: Any) -> LocustOptions:
        """From Locust's parsed options (attributes named like `arguments()`'s keys)."""
        d = cls()

        def get(name: str, default: Any) -> Any:
            value = getattr(ns, name, None)
            return default if value is None or value == "" else value

        return cls(
            out=get("tokspeed_out", d.out),
            overwrite=_flag(get("tokspeed_overwrite", d.overwrite)),
            api=str(get("tokspeed_api", d.api)),
            model=get("tokspeed_model", d.model),
            dataset=str(get("tokspeed_dataset", d.dataset)),
            input_tokens=get("tokspeed_input_tokens", d.input_tokens),
            output_tokens=str(get("tokspeed_output_tokens", d.output_tokens)),
            seed=int(get("tokspeed_seed", d.seed)),
            rate=float(get("tokspeed_rate", d.rate)),
            arrival=str(get("tokspeed_arrival", d.arrival)),
            timeout_s=float(get("tokspeed_timeout", d.timeout_s)),
            include_usage=not _flag(get("tokspeed_no_usage", not d.include_usage)),
            users=int(get("tokspeed_users", d.users)),
            warmup_s=_optional_float(get("tokspeed_warmup_s", d.warmup_s)),
            requests=int(get("tokspeed_requests", d.requests)),
            workers=int(get("tokspeed_workers", d.workers)),
            stages=get("tokspeed_stages", d.stages),
            ramp=get("tokspeed_ramp", d.ramp),
            start_epoch_ns=int(get("tokspeed_start_epoch_ns", d.start_epoch_ns)),
            duration_s=float(get("tokspeed_duration_s", d.duration_s)),
            ca_cert=get("tokspeed_ca_cert", d.ca_cert),
            insecure=_flag(get("tokspeed_insecure", d.insecure)),
            client_cert=get("tokspeed_client_cert", d.client_cert),
            client_key=get("tokspeed_client_key", d.client_key),
        )

    def locust_args(self) -> list[str]:
        """This object as `--tokspeed-*` command-line arguments for `locust` (defaults left out)."""
        values = {
            "tokspeed_out": self.out, "tokspeed_overwrite": self.overwrite, "tokspeed_api": self.api,
            "tokspeed_model": self.model, "tokspeed_dataset": self.dataset, "tokspeed_input_tokens": self.input_tokens,
            "tokspeed_output_tokens": self.output_tokens, "tokspeed_seed": self.seed, "tokspeed_rate": self.rate, "tokspeed_arrival": self.arrival,
            "tokspeed_timeout": self.timeout_s, "tokspeed_no_usage": not self.include_usage,
            "tokspeed_users": self.users, "tokspeed_warmup_s": self.warmup_s, "tokspeed_requests": self.requests,
            "tokspeed_workers": self.workers, "tokspeed_stages": self.stages, "tokspeed_ramp": self.ramp,
            "tokspeed_start_epoch_ns": self.start_epoch_ns, "tokspeed_duration_s": self.duration_s,
            "tokspeed_ca_cert": self.ca_cert, "tokspeed_insecure": self.insecure,
            "tokspeed_client_cert": self.client_cert, "tokspeed_client_key": self.client_key,
        }
        out: list[str] = []
        for dest, (flag, default, _) in self.arguments().items():
            value = values[dest]
            if value is None or value == default:
                continue
            if isinstance(value, bool):
                out.append(flag)
            else:
                out += [flag, str(value)]
        return out

    def policy(self) -> HttpPolicy:
        """The TLS of this run's clients (the same policy `tokspeed run` builds from its flags)."""
        from tokspeed.backends.http_policy import HttpPolicy

        return HttpPolicy(ca_cert=self.ca_cert, insecure=self.insecure, client_cert=self.client_cert,
                          client_key=self.client_key)

    def workload(self) -> Workload:
        """The workload every worker builds alike (request i is the same on every host)."""
        from tokspeed.workload import load_workload

        synthetic = self.dataset.strip().lower() == "synthetic"
        input_tokens = self.input_tokens or (SYNTHETIC_INPUT_TOKENS if synthetic else None)
        return load_workload(self.dataset, api=self.api, input_tokens=input_tokens,
                             output_tokens=self.output_tokens, seed=self.seed)


def api_key() -> str | None:
    return os.environ.get(API_KEY_ENV) or None


def request_index(local: int, worker_index: int) -> int:
    """A run-wide unique request index from a worker's own counter (prompts differ across workers)."""
    return local * INDEX_STRIDE + (worker_index % INDEX_STRIDE)


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)
