"""The server's one clock and its one kind of timestamp: timezone-aware UTC (app.models says so of every column)."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def aware(moment: datetime | str) -> datetime:
    """A stored timestamp as an aware UTC datetime: SQLite returns columns naive, and aggregates (min/max), which
    bypass the column type, naive or as text."""
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
