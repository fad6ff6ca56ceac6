"""Read what a model directory holds, without loading it: config, weight files, tokenizer files.

    read_json(path) -> (data, problem)         a JSON file, or a precise reason it cannot be read
    scan_weights(dir) -> WeightScan            safetensors (single or sharded), .bin, .gguf; headers checked
    scan_tokenizer(dir) -> TokenizerScan       tokenizer.json / tokenizer.model / vocab+merges / ..., chat template

Every finding is a `Problem` (error or warning, a message naming the file and a
hint). Safetensors headers are read (8 bytes + a JSON header, never the
tensors), which gives the exact parameter count and dtype and catches a
truncated download; a Git LFS pointer left by a clone made without git-lfs is
recognised by its first line. Pure file reads: nothing here imports an engine.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any, Literal

import orjson

Severity = Literal["error", "warning"]
LFS_MAGIC = b"version https://git-lfs"
GGUF_MAGIC = b"GGUF"
MAX_SAFETENSORS_HEADER = 100_000_000  # bytes; the format's own limit
ST_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn",
             "F8_E5M2": "float8_e5m2", "I8": "int8", "U8": "uint8", "I32": "int32", "I64": "int64"}
LFS_HINT = "the directory was cloned without git-lfs: run `git lfs install && git lfs pull` in it, or download it with `hf download NAME --local-dir DIR`"
REDOWNLOAD_HINT = "download the model again: hf download NAME --local-dir DIR resumes and repairs it"


@dataclass(frozen=True)
class Problem:
    """One thing wrong (error: the load would fail) or doubtful (warning) about a model directory."""

    severity: Severity
    code: str  # stable identifier, e.g. no_config, missing_shard, remote_code
    message: str
    hint: str | None = None


@dataclass
class WeightScan:
    """The weight files of a directory and what their headers say."""

    format: str | None = None  # safetensors, safetensors-sharded, pytorch-bin, pytorch-bin-sharded, gguf
    files: list[str] = field(default_factory=list)
    bytes: int = 0
    parameters: int | None = None  # exact, from safetensors headers
    dtype: str | None = None  # the dtype most of the weights are stored in (safetensors)
    missing_shards: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


@dataclass
class TokenizerScan:
    """The tokenizer files of a directory."""

    files: list[str] = field(default_factory=list)
    kind: str | None = None  # tokenizers-json, sentencepiece, bpe-vocab-merges, wordpiece-vocab, tiktoken
    chat_template: str | None = None  # where the chat template is: tokenizer_config.json, chat_template.jinja, ...
    config: dict[str, Any] = field(default_factory=dict)  # tokenizer_config.json
    problems: list[Problem] = field(default_factory=list)


# files ---------------------------------------------------------------------------
def is_lfs_pointer(path: Path) -> bool:
    """True for a small text file that is a Git LFS pointer instead of the real content."""
    try:
        if path.stat().st_size > 1024:
            return False
        with path.open("rb") as f:
            return f.read(len(LFS_MAGIC)) == LFS_MAGIC
    except OSError:
        return False


def read_json(path: Path) -> tuple[Any, Problem | None]:
    """(data, None) for a readable JSON file, else (None, a Problem naming the file and why)."""
    name = path.name
    if is_lfs_pointer(path):
        return None, Problem("error", "lfs_pointer", f"{name} is a Git LFS pointer, not the file itself", LFS_HINT)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return None, Problem("error", "unreadable", f"{name} cannot be read: {exc.strerror or exc}")
    if not raw.strip():
        return None, Problem("error", "bad_json", f"{name} is empty", REDOWNLOAD_HINT)
    try:
        return orjson.loads(raw), None
    except orjson.JSONDecodeError as exc:
        return None, Problem("error", "bad_json", f"{name} is not valid JSON: {exc}", REDOWNLOAD_HINT)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# weights -------------------------------------------------------------------------
@dataclass(frozen=True)
class _Header:
    parameters: int
    dtype_bytes: dict[str, float]  # safetensors dtype -> bytes of tensors in it


def read_safetensors_header(path: Path) -> tuple[_Header | None, Problem | None]:
    """The tensor count, dtypes and sizes a safetensors file declares, or why it is unusable."""
    name = path.name
    if is_lfs_pointer(path):
        return None, Problem("error", "lfs_pointer", f"{name} is a Git LFS pointer, not the weights", LFS_HINT)
    size = _size(path)
    try:
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return None, Problem("error", "bad_weights", f"{name} is {size} bytes: too short to be a safetensors file", REDOWNLOAD_HINT)
            (n,) = struct.unpack("<Q", head)
            if n > MAX_SAFETENSORS_HEADER or 8 + n > size:
                return None, Problem("error", "bad_weights", f"{name} is not a valid safetensors file (header of {n} bytes in a file of {size})", REDOWNLOAD_HINT)
            header = orjson.loads(f.read(n))
    except OSError as exc:
        return None, Problem("error", "unreadable", f"{name} cannot be read: {exc.strerror or exc}")
    except orjson.JSONDecodeError:
        return None, Problem("error", "bad_weights", f"{name} has a corrupt safetensors header", REDOWNLOAD_HINT)
    try:
        return _header_facts(path, header, 8 + n, size)
    except (TypeError, ValueError, IndexError):
        return None, Problem("error", "bad_weights", f"{name} has a corrupt safetensors header", REDOWNLOAD_HINT)


def _header_facts(path: Path, header: Any, data_start: int, size: int) -> tuple[_Header | None, Problem | None]:
    if not isinstance(header, dict):
        return None, Problem("error", "bad_weights", f"{path.name} has a corrupt safetensors header", REDOWNLOAD_HINT)
    parameters, end, by_dtype = 0, 0, Counter[str]()
    for key, tensor in header.items():
        if key == "__metadata__" or not isinstance(tensor, dict):
            continue
        shape, offsets, dtype = tensor.get("shape", []), tensor.get("data_offsets", [0, 0]), str(tensor.get("dtype"))
        count = prod(int(d) for d in shape)
        parameters += count
        by_dtype[dtype] += int(offsets[1]) - int(offsets[0])
        end = max(end, int(offsets[1]))
    if data_start + end > size:
        return None, Problem(
            "error", "truncated_weights",
            f"{path.name} is truncated: its header declares {data_start + end:,} bytes, the file has {size:,} (an interrupted download?)",
            REDOWNLOAD_HINT,
        )
    return _Header(parameters, dict(by_dtype)), None


def scan_weights(directory: Path) -> WeightScan:
    """Find the weights: a sharded index (with every shard it names), single files, or GGUF."""
    scan = WeightScan()
    for index_name, fmt in (("model.safetensors.index.json", "safetensors-sharded"), ("pytorch_model.bin.index.json", "pytorch-bin-sharded")):
        if (directory / index_name).is_file():
            _scan_index(directory, index_name, fmt, scan)
            return scan
    safetensors = sorted(p for p in directory.glob("*.safetensors") if p.is_file())
    bins = sorted(p for p in directory.glob("pytorch_model*.bin") if p.is_file())
    ggufs = sorted(p for p in directory.glob("*.gguf") if p.is_file())
    if safetensors:
        _scan_files(safetensors, "safetensors", scan)
    elif bins:
        _scan_files(bins, "pytorch-bin", scan)
    elif ggufs:
        _scan_files(ggufs, "gguf", scan)
    else:
        scan.problems.append(Problem(
            "error", "no_weights",
            f"no weight files in {directory}: no *.safetensors, pytorch_model*.bin, sharded index or *.gguf",
            "the download is incomplete or only the config was fetched: " + REDOWNLOAD_HINT,
        ))
    return scan


def _scan_index(directory: Path, index_name: str, fmt: str, scan: WeightScan) -> None:
    scan.format = fmt
    data, problem = read_json(directory / index_name)
    if problem is not None:
        scan.problems.append(problem)
        return
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        scan.problems.append(Problem("error", "bad_index", f"{index_name} has no weight_map naming the shard files", REDOWNLOAD_HINT))
        return
    shards = sorted({str(v) for v in weight_map.values()})
    present = [directory / s for s in shards if (directory / s).is_file()]
    scan.missing_shards = [s for s in shards if not (directory / s).is_file()]
    if scan.missing_shards:
        shown = ", ".join(scan.missing_shards[:5]) + (f" and {len(scan.missing_shards) - 5} more" if len(scan.missing_shards) > 5 else "")
        scan.problems.append(Problem(
            "error", "missing_shard",
            f"{index_name} names {len(shards)} shard file{'s' if len(shards) != 1 else ''}; "
            f"{len(scan.missing_shards)} {'is' if len(scan.missing_shards) == 1 else 'are'} missing: {shown}",
            REDOWNLOAD_HINT,
        ))
    _scan_files(present, fmt, scan, set_format=False)


def _scan_files(paths: list[Path], fmt: str, scan: WeightScan, *, set_format: bool = True) -> None:
    if set_format:
        scan.format = fmt
    scan.files = [p.name for p in paths]
    scan.bytes = sum(_size(p) for p in paths)
    if fmt.startswith("safetensors"):
        _read_headers(paths, scan)
        return
    for p in paths:
        problem = _check_opaque(p, fmt)
        if problem is not None:
            scan.problems.append(problem)


def _read_headers(paths: list[Path], scan: WeightScan) -> None:
    parameters, by_dtype, complete = 0, Counter[str](), True
    for p in paths:
        header, problem = read_safetensors_header(p)
        if problem is not None:
            scan.problems.append(problem)
            complete = False
            continue
        assert header is not None
        parameters += header.parameters
        by_dtype.update(header.dtype_bytes)
    if complete and paths and not scan.missing_shards:
        scan.parameters = parameters
    if by_dtype:
        top = by_dtype.most_common(1)[0][0]
        scan.dtype = ST_DTYPES.get(top, top.lower())


def _check_opaque(path: Path, fmt: str) -> Problem | None:
    """The checks possible on a .bin or .gguf without loading it: not empty, not an LFS pointer, right magic."""
    if is_lfs_pointer(path):
        return Problem("error", "lfs_pointer", f"{path.name} is a Git LFS pointer, not the weights", LFS_HINT)
    if _size(path) == 0:
        return Problem("error", "bad_weights", f"{path.name} is empty (0 bytes)", REDOWNLOAD_HINT)
    if fmt == "gguf":
        with path.open("rb") as f:
            if f.read(4) != GGUF_MAGIC:
                return Problem("error", "bad_weights", f"{path.name} does not start with the GGUF magic bytes", REDOWNLOAD_HINT)
    return None


# tokenizer -----------------------------------------------------------------------
_TOKENIZER_KINDS = (
    ("tokenizer.json", "tokenizers-json"),
    ("tokenizer.model", "sentencepiece"),
    ("vocab.json", "bpe-vocab-merges"),
    ("vocab.txt", "wordpiece-vocab"),
)
_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


def scan_tokenizer(directory: Path) -> TokenizerScan:
    """The tokenizer files present, whether they are usable, and where the chat template is."""
    scan = TokenizerScan()
    _read_tokenizer_config(directory, scan)
    for name, kind in _TOKENIZER_KINDS:
        path = directory / name
        if path.is_file():
            scan.files.append(name)
            scan.kind = scan.kind or kind
            _check_tokenizer_file(path, scan)
    tiktoken = sorted(p.name for p in directory.glob("*.tiktoken"))
    if tiktoken:
        scan.files += tiktoken
        scan.kind = scan.kind or "tiktoken"
    if "vocab.json" in scan.files and "merges.txt" not in {p.name for p in directory.iterdir()} and "tokenizer.json" not in scan.files:
        scan.problems.append(Problem("error", "no_tokenizer", "vocab.json is there but merges.txt is missing: a BPE tokenizer needs both", REDOWNLOAD_HINT))
    if scan.kind is None and not _custom_tokenizer(scan.config):
        scan.problems.append(Problem(
            "error", "no_tokenizer",
            f"no tokenizer files in {directory}: none of tokenizer.json, tokenizer.model, vocab.json + merges.txt, vocab.txt, *.tiktoken",
            "download the tokenizer files with the weights (" + REDOWNLOAD_HINT + ")",
        ))
    scan.chat_template = _find_template(directory, scan.config)
    return scan


def _read_tokenizer_config(directory: Path, scan: TokenizerScan) -> None:
    path = directory / "tokenizer_config.json"
    if not path.is_file():
        return
    scan.files.append(path.name)
    data, problem = read_json(path)
    if problem is not None:
        scan.problems.append(problem)
    elif not isinstance(data, dict):
        scan.problems.append(Problem("error", "bad_json", "tokenizer_config.json is not a JSON object", REDOWNLOAD_HINT))
    else:
        scan.config = data


def _check_tokenizer_file(path: Path, scan: TokenizerScan) -> None:
    if is_lfs_pointer(path):
        scan.problems.append(Problem("error", "lfs_pointer", f"{path.name} is a Git LFS pointer, not the tokenizer", LFS_HINT))
    elif _size(path) == 0:
        scan.problems.append(Problem("error", "bad_tokenizer", f"{path.name} is empty (0 bytes)", REDOWNLOAD_HINT))
    elif path.suffix == ".json":
        data, problem = read_json(path)
        if problem is not None:
            scan.problems.append(problem)
        elif path.name == "tokenizer.json" and not (isinstance(data, dict) and "model" in data):
            scan.problems.append(Problem("error", "bad_tokenizer", "tokenizer.json has no `model` section: not a tokenizers file", REDOWNLOAD_HINT))


def _custom_tokenizer(config: dict[str, Any]) -> bool:
    """A tokenizer the directory's own code provides (auto_map.AutoTokenizer)."""
    auto_map = config.get("auto_map")
    return isinstance(auto_map, dict) and "AutoTokenizer" in auto_map


def _find_template(directory: Path, config: dict[str, Any]) -> str | None:
    for name in _TEMPLATE_FILES:
        if (directory / name).is_file() and _size(directory / name) > 0:
            return name
    return "tokenizer_config.json" if config.get("chat_template") else None
