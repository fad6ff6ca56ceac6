"""The quality probe: does a (quantized, tuned, faster) deployment still answer correctly?

A bilingual builtin probe set (probes.py, data/probes.jsonl) with mechanical checks
(checkers.py), sent to OpenAI-compatible targets (client.py), scored per category with
Wilson intervals and compared pairwise with McNemar's exact test (score.py, stats.py),
written to quality.json / quality.jsonl (session.py); lm-eval scores can be attached (lm_eval.py).
"""

from tokspeed.quality.checkers import Check
from tokspeed.quality.client import ProbeSettings, ProbeTarget
from tokspeed.quality.probes import (
    BUILTIN,
    ProbeItem,
    ProbeSet,
    load_probes,
    parse_probes,
)
from tokspeed.quality.schema import QualityResult

__all__ = [
    "BUILTIN",
    "Check",
    "ProbeItem",
    "ProbeSet",
    "ProbeSettings",
    "ProbeTarget",
    "QualityResult",
    "load_probes",
    "parse_probes",
]
