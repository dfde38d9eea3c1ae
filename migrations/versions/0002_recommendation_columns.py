"""recommended mode and speedup on analysis (indexed, for the dashboard's sorts); deregistered workers are 'stopped'

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 12:20:00

The backfill runs in SQL: the mode from the recommendation JSON, the speedup from the measurement row of
the recommended backend and mode (the rows app.analyses stored from the same MeasurementRun).
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

analysis = sa.table(
    "analysis",
    sa.column("id", sa.Integer),
    sa.column("recommendation", sa.JSON),
    sa.column("recommended_backend", sa.String),
    sa.column("recommended_mode", sa.String),
    sa.column("speedup_vs_eager", sa.Float),
)
measurement = sa.table(
    "measurement",
    sa.column("analysis_id", sa.Integer),
    sa.column("backend", sa.String),
    sa.column("mode", sa.String),
    sa.column("speedup_vs_eager", sa.Float),
)
worker = sa.table("worker", sa.column("state", sa.String))


def upgrade() -> None:
    with op.batch_alter_table("analysis", schema=None) as batch_op:
        batch_op.add_column(sa.Column("recommended_mode", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True))
        batch_op.add_column(sa.Column("speedup_vs_eager", sa.Float(), nullable=True))
        batch_op.create_index(batch_op.f("ix_analysis_recommended_mode"), ["recommended_mode"], unique=False)
        batch_op.create_index(batch_op.f("ix_analysis_speedup_vs_eager"), ["speedup_vs_eager"], unique=False)

    has_backend = analysis.c.recommended_backend.is_not(None)
    op.execute(
        analysis.update()
        .where(has_backend)
        .values(recommended_mode=sa.func.coalesce(analysis.c.recommendation["mode"].as_string(), "default"))
    )
    speedup = (
        sa.select(measurement.c.speedup_vs_eager)
        .where(
            measurement.c.analysis_id == analysis.c.id,
            measurement.c.backend == analysis.c.recommended_backend,
            sa.func.coalesce(measurement.c.mode, "default") == analysis.c.recommended_mode,
        )
        .limit(1)
        .scalar_subquery()
    )
    op.execute(analysis.update().where(has_backend).values(speedup_vs_eager=speedup))
    op.execute(worker.update().where(worker.c.state == "gone").values(state="stopped"))


def downgrade() -> None:
    op.execute(worker.update().where(worker.c.state == "stopped").values(state="gone"))
    # Plain ALTER TABLE ... DROP COLUMN (SQLite >= 3.35, PostgreSQL): a batch "move and copy" would have to drop
    # the analysis table, which SQLite's foreign-key enforcement refuses while measurement and job point at it.
    op.drop_index("ix_analysis_speedup_vs_eager", table_name="analysis")
    op.drop_index("ix_analysis_recommended_mode", table_name="analysis")
    op.drop_column("analysis", "speedup_vs_eager")
    op.drop_column("analysis", "recommended_mode")
