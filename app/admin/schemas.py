"""The admin API's request bodies, validated on the way in and described in OpenAPI.

Its answers are built by `views.py` and `delivery_views.py`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ResolveIn(BaseModel):
    """An operator's resolution of a flagged operation."""

    model_config = ConfigDict(extra="forbid")

    outcome: Literal["charged", "not_charged"]
    reason: str = Field(
        min_length=1,
        max_length=500,
        description="Recorded in the history (trimmed); no control characters but tabs and"
        " line breaks",
    )
