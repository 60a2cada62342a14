"""What the coordinator answers: an outcome, never a status code (only the HTTP layer
maps one to a code)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Status(enum.Enum):
    FOUND = "found"
    NOT_FOUND = "not found"
    STORED = "stored"
    DELETED = "deleted"
    NOT_ENOUGH_REPLICAS = "not enough replicas"
    INSUFFICIENT_STORAGE = "insufficient storage"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class Outcome:
    status: Status
    value: bytes = b""
    retry_after: float = 0.0
