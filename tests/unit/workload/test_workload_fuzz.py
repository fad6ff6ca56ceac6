"""Dataset loaders fed arbitrary bytes: they load or raise WorkloadError, never anything else."""

from __future__ import annotations

import tempfile
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokspeed.errors import WorkloadError
from tokspeed.workload import load_workload
from tokspeed.workload.files import read_prompt_file

SUFFIXES = [".json", ".jsonl", ".csv", ".tsv", ".txt", ".dat", ""]

# bytes that look like the formats, mutated, as well as noise
_fragments = st.sampled_from(
    [b"[", b"]", b"{", b"}", b'"prompt"', b'"messages"', b'"max_tokens"', b'"conversations"', b":", b",",
     b"\n", b"\r\n", b'"', b"prompt,max_tokens\n", b"\t", b"null", b"-1", b"0", b"1e999", b"\xff", b"\x00",
     b'"from": "human"', b'"value": "hi"', b'"role": "user"', b'"content": ', b"\xef\xbb\xbf", b"hello"]
)
contents = st.one_of(st.binary(max_size=300), st.lists(_fragments, max_size=40).map(b"".join))


def _check(data: bytes, suffix: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"prompts{suffix}"
        path.write_bytes(data)
        try:
            prompts = read_prompt_file(path)
        except WorkloadError as exc:
            assert "\n" not in str(exc)  # one line for the CLI's Error:
            return
        assert prompts.items
        workload = load_workload(str(path), output_tokens="8")
        spec = workload.request(0)
        assert spec.max_tokens is not None and spec.max_tokens >= 1


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=contents, suffix=st.sampled_from(SUFFIXES))
def test_arbitrary_bytes_load_or_raise_workload_error(data: bytes, suffix: str) -> None:
    _check(data, suffix)


@pytest.mark.parametrize(
    "data,suffix",
    [
        (b"[" * 100_000, ".json"),  # nested past the parser's recursion limit
        (b'{"prompt": ' + b"[" * 100_000 + b"\n", ".jsonl"),
        (b"[" + b"9" * 5000 + b"]", ".json"),  # an integer longer than Python converts
        (b'{"prompt": "x", "max_tokens": ' + b"9" * 5000 + b"}\n", ".jsonl"),
        (b"p" * 300_000 + b"\nx\n", ".csv"),  # a header past the csv field limit
        (b"prompt\n" + b"x" * 300_000 + b"\n", ".csv"),
        (orjson.dumps([{"prompt": "x", "max_tokens": 1e300}]), ".json"),
        (b"\x00" * 1000, ".txt"),
        (bytes(range(256)) * 4, ".bin"),
    ],
)
def test_pathological_files(data: bytes, suffix: str) -> None:
    _check(data, suffix)
