"""drop table measurement: a flattened copy of each MeasurementRun row that nothing read

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04 16:40:00

Every completion wrote one row per measured option, and no page, report or API route ever read them: the
results are the analysis' `measurements` document (advisor.core.results.MeasurementRun), which the pages, the
suites and the reports read, and the list sorts on the denormalised columns of 0002. Downgrading recreates the
table and refills it from those documents, as completions wrote it.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("measurement", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_measurement_backend"))
        batch_op.drop_index(batch_op.f("ix_measurement_analysis_id"))
    op.drop_table("measurement")


def downgrade() -> None:
    measurement = op.create_table(
        "measurement",
        sa.Column("backend", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("mode", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.Column("device", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=True),
        sa.Column("status", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("median_ms", sa.Float(), nullable=True),
        sa.Column("compile_s_cold", sa.Float(), nullable=True),
        sa.Column("speedup_vs_eager", sa.Float(), nullable=True),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("analysis_id", sa.Integer(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["analysis_id"], ["analysis.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("measurement", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_measurement_analysis_id"), ["analysis_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_measurement_backend"), ["backend"], unique=False)
    analysis = sa.table("analysis", sa.column("id", sa.Integer), sa.column("measurements", sa.JSON))
    connection = op.get_bind()
    rows = []
    for analysis_id, run in connection.execute(sa.select(analysis.c.id, analysis.c.measurements)):
        if isinstance(run, str):
            run = json.loads(run)
        for row in (run or {}).get("measurements") or []:
            latency = row.get("latency") or {}
            rows.append(
                {
                    "analysis_id": analysis_id,
                    "backend": str(row.get("backend", "?")),
                    "mode": row.get("mode"),
                    "device": row.get("device"),
                    "status": str(row.get("status", "?")),
                    "median_ms": latency.get("median_ms"),
                    "compile_s_cold": row.get("compile_s_cold"),
                    "speedup_vs_eager": row.get("speedup_vs_eager"),
                    "data": row,
                }
            )
    if rows:
        op.bulk_insert(measurement, rows)
