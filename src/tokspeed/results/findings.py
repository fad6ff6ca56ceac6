"""A diagnosis finding: which rule fired, how bad it is, the numbers behind it, and what to change."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Severity = Literal["info", "warning", "critical"]


class Finding(BaseModel):
    rule: str = Field(description="stable identifier, e.g. client_bound, unstable, cold_start")
    severity: Severity
    title: str = Field(description="one line: what is wrong")
    evidence: dict[str, float | int | str | None] = Field(default_factory=dict, description="the numbers that fired it")
    advice: str = Field(description="what to change")
    benchmark: int | None = Field(None, description="the load point it is about; None = the whole run")
