"""Where the unit tests' files are, named once whatever a test's folder: the repository, its docs, the test data."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
DATA = ROOT / "tests" / "data"
RUN_V1 = DATA / "run-v1"  # a run saved under the first results schema, kept as written
MODEL_CONFIGS = DATA / "model_configs"  # published model configs (SOURCES.md says where each is from)
NATIVE = DATA / "native"  # recorded native-protocol streams and server scrapes
FAKES = ROOT / "tests" / "fakes"  # stand-ins for GPU libraries (pynvml)
