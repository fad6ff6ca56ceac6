"""Build the run's collaborators (workload, backend) from a validated config."""

from __future__ import annotations

from tokspeed.backends.openai_http import OpenAIHTTPBackend
from tokspeed.config import SAMPLE_OUTPUTS, RunConfig
from tokspeed.workload import Workload, load_workload
from tokspeed.workload.tokens import load_counter


def build_workload(cfg: RunConfig) -> Workload:
    return load_workload(
        cfg.dataset,
        api=cfg.api.value,
        input_tokens=cfg.input_tokens,
        output_tokens=cfg.output_tokens,
        tokenizer=cfg.tokenizer,
        seed=cfg.seed,
    )


def build_backend(cfg: RunConfig, workload: Workload) -> OpenAIHTTPBackend:
    assert cfg.target is not None
    return OpenAIHTTPBackend(
        cfg.target,
        api=cfg.api.value,
        stream=cfg.stream,
        model=cfg.model,
        api_key=cfg.api_key.get_secret_value() if cfg.api_key else None,
        headers=cfg.headers,
        extra_body=cfg.extra_body,
        sampling={"temperature": cfg.temperature, "top_p": cfg.top_p, "stop": cfg.stop},
        include_usage=cfg.include_usage,
        timeout_s=cfg.timeout_s,
        pool_size=cfg.streams,
        counter=load_counter(cfg.tokenizer) if cfg.tokenizer else None,
        keep_text_for=SAMPLE_OUTPUTS,
    )
