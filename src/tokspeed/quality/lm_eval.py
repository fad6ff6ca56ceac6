"""Reading an lm-evaluation-harness results file (`lm_eval ... --output_path DIR`) into scores.

lm-eval ≥ 0.4 writes `{"results": {task: {"acc,none": 0.65, "acc_stderr,none": 0.004,
"alias": "mmlu"}, ...}, "groups": {...}, "config": {"model": ..., "model_args": ...},
"lm_eval_version": ...}`: metric keys are "metric,filter" and each has a "metric_stderr,filter"
partner. Older versions write plain "acc" / "acc_stderr". Both are read; "groups" entries
are read like tasks (duplicates of a task in "results" are kept once).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tokspeed.errors import ConfigError
from tokspeed.quality.schema import LmEvalResult, LmEvalScore


def load_lm_eval(path: Path) -> LmEvalResult:
    """The scores in one lm-eval results JSON file; ConfigError if it is not one."""
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read lm-eval results {path}: {exc}", hint="give the results_*.json lm_eval wrote") from exc
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise ConfigError(
            f"{path} is not an lm-eval results file (no 'results' object)",
            hint="lm_eval --output_path DIR writes DIR/<model>/results_<time>.json",
        )
    config: dict[str, Any] = data["config"] if isinstance(data.get("config"), dict) else {}
    scores: dict[tuple[str, str, str | None], LmEvalScore] = {}
    for section in ("results", "groups"):
        tasks = data.get(section)
        if isinstance(tasks, dict):
            for task, metrics in tasks.items():
                if isinstance(metrics, dict):
                    for s in task_scores(str(task), metrics):
                        scores.setdefault((s.task, s.metric, s.filter), s)
    if not scores:
        raise ConfigError(f"{path} holds no numeric scores", hint="was the lm_eval run complete?")
    version = data.get("lm_eval_version") or data.get("git_hash")
    return LmEvalResult(
        source=str(path),
        model=_str(config.get("model")),
        model_args=_model_args(config.get("model_args")),
        version=_str(version),
        scores=list(scores.values()),
    )


def task_scores(task: str, metrics: dict[str, Any]) -> list[LmEvalScore]:
    """The numeric metrics of one task entry, each with its stderr when given."""
    out: list[LmEvalScore] = []
    for key, value in metrics.items():
        metric, _, filt = key.partition(",")
        if metric.endswith("_stderr") or not _is_number(value):
            continue
        stderr_key = f"{metric}_stderr,{filt}" if filt else f"{metric}_stderr"
        stderr = metrics.get(stderr_key)
        out.append(
            LmEvalScore(
                task=task,
                metric=metric,
                filter=filt or None,
                value=float(value),
                stderr=float(stderr) if isinstance(stderr, (int, float)) and not isinstance(stderr, bool) else None,
            )
        )
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _str(value: Any) -> str | None:
    return str(value) if value is not None else None


def _model_args(value: Any) -> str | None:
    """model_args as a string, with any api_key / token value removed (never stored)."""
    if value is None:
        return None
    if isinstance(value, dict):
        value = ",".join(f"{k}={v}" for k, v in value.items())
    parts = [p for p in str(value).split(",") if not _secret_arg(p)]
    return ",".join(parts)


_SECRET_WORDS = ("key", "secret", "password", "passwd", "credential", "auth")


def _secret_arg(part: str) -> bool:
    """Whether one `name=value` of model_args may hold a secret (api_key, hf_token, client_secret, ...)."""
    name = part.partition("=")[0].strip().lower()
    return name.endswith("token") or any(word in name for word in _SECRET_WORDS)
