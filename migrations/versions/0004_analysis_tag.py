"""analysis tag: the model suite an analysis belongs to (summarised at /suites/TAG)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 11:30:00

Existing analyses have no tag (NULL); their dedupe keys are unchanged (an untagged key is computed as before).
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("analysis", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tag", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True))
        batch_op.create_index(batch_op.f("ix_analysis_tag"), ["tag"], unique=False)


def downgrade() -> None:
    # Plain DROP INDEX / ALTER TABLE ... DROP COLUMN (SQLite >= 3.35, PostgreSQL): see 0002 on why not a batch copy.
    op.drop_index("ix_analysis_tag", table_name="analysis")
    op.drop_column("analysis", "tag")
