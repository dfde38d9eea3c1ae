"""Alembic migrations of the service database (`npu-advisor db upgrade`; `alembic upgrade head` from the
repository root). A package so an installed npu-advisor finds them (app.db.MIGRATIONS_DIR)."""
