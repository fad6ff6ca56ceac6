"""`tokspeed check-model`: check a local model directory before an engine loads it."""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated

import orjson
import typer

HELP = """Check a local model directory and say precisely what would stop an engine from loading it.

Checks config.json (present, valid JSON, model_type, architectures), the
weights (safetensors single or sharded with every shard the index names,
truncated files, Git LFS pointers left by a clone without git-lfs, .bin,
GGUF), the tokenizer files and chat template, custom code (auto_map: whether
--trust-remote-code is needed and its .py files are there), whether the engine
has the architecture (the installed transformers' AutoModelForCausalLM, or
vLLM's model registry when vLLM imports), the stored dtype and the parameter
count. Nothing is loaded. `tokspeed run --target hf:PATH` / `vllm:PATH` runs the
same checks first and stops on an error. Exit code 2 when it will not load, else 0: it
looks loadable, or its files look right but the engine's support could not be checked
here (the verdict and the JSON's "verdict": "unchecked" say so).

  tokspeed check-model ./Qwen2-7B-Instruct

  tokspeed check-model vllm:./my-model --trust-remote-code --json
"""


class Engine(str, Enum):
    hf = "hf"
    vllm = "vllm"


class Api(str, Enum):
    chat = "chat"
    completions = "completions"


def check_model(
    path: Annotated[str, typer.Argument(metavar="PATH", help="The model directory (hf:PATH or vllm:PATH also accepted, and choose the engine).")],
    engine: Annotated[Engine | None, typer.Option("--engine", help="The engine to check against: hf (transformers, the default) or vllm. [default: from PATH's prefix, else hf]")] = None,
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code", help="Check as if --trust-remote-code were given to the run.")] = False,
    api: Annotated[Api | None, typer.Option("--api", help="With chat, a missing chat template is an error (it is a warning otherwise). [default: none: a missing chat template is a warning]")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    from tokspeed.backends.local_target import engine_kind
    from tokspeed.backends.model_dir import inspect_model_dir, render_report

    kind = engine_kind(path)
    if kind is not None:
        path = path.partition(":")[2]
    chosen = engine.value if engine is not None else (kind or "hf")
    report = inspect_model_dir(path, chosen, trust_remote_code=trust_remote_code, api=api.value if api else None)
    if as_json:
        sys.stdout.write(orjson.dumps(report.as_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print("\n".join(render_report(report)))
    raise typer.Exit(0 if report.ok else 2)
