"""analysis source_report: the source-side report uploaded with the program by `analyze FILE.py:factory --server`

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 17:00:00

A nullable JSON column (advisor.core.source_report.SourceReport, validated on upload): from the submitting machine,
not measured by a worker. Existing analyses have none (NULL) and their dedupe keys are unchanged (a key without a
source-side report is computed as before).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("analysis", schema=None) as batch_op:
        batch_op.add_column(sa.Column("source_report", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    # Plain ALTER TABLE ... DROP COLUMN (SQLite >= 3.35, PostgreSQL): see 0002 on why not a batch copy.
    op.drop_column("analysis", "source_report")
