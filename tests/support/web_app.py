"""The page tests' helpers: their app settings (no reaper running during a test) and short-lived database
sessions for test code."""

from __future__ import annotations

from pathlib import Path

from sqlmodel import Session

from app.settings import Settings
from tests.support.service_db import migrated_settings


def make_settings(tmp_path: Path, **overrides: object) -> Settings:
    """Settings on `tmp_path/data`, whose SQLite database starts migrated (tests/support/service_db.py)."""
    return migrated_settings(Settings(data_dir=tmp_path / "data", reaper_interval_s=3600, **overrides))


class Db:
    """Short-lived sessions for test code. On SQLite every transaction here is BEGIN IMMEDIATE (app.db),
    so a test must not keep one open while the app serves a request: each call commits and closes."""

    def __init__(self, engine) -> None:  # noqa: ANN001
        self.engine = engine

    def session(self) -> Session:
        return Session(self.engine, expire_on_commit=False)

    def get(self, model, key):  # noqa: ANN001, ANN201
        with self.session() as session:
            return session.get(model, key)

    def all(self, query) -> list:  # noqa: ANN001
        with self.session() as session:
            return list(session.scalars(query))

    def first(self, query):  # noqa: ANN001, ANN201
        rows = self.all(query.limit(1))
        return rows[0] if rows else None

    def update(self, model, key, **values) -> None:  # noqa: ANN001, ANN003
        with self.session() as session:
            row = session.get(model, key)
            for name, value in values.items():
                setattr(row, name, value)
            session.add(row)
            session.commit()
