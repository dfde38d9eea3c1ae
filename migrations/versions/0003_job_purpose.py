"""job purpose: "measure" (every job so far) or "inspect" (an unmeasured recommendation while no worker can measure)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-09 10:00:00

Existing jobs all measure: the server default fills the new column for them (SQLite and PostgreSQL alike).
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("purpose", sqlmodel.sql.sqltypes.AutoString(length=16), server_default="measure", nullable=False)
        )


def downgrade() -> None:
    # Plain ALTER TABLE ... DROP COLUMN (SQLite >= 3.35, PostgreSQL): see 0002 on why not a batch copy.
    op.execute(sa.text("DELETE FROM job_requirement WHERE job_id IN (SELECT id FROM job WHERE purpose = 'inspect')"))
    op.execute(sa.text("DELETE FROM job_event WHERE job_id IN (SELECT id FROM job WHERE purpose = 'inspect')"))
    op.execute(sa.text("DELETE FROM job WHERE purpose = 'inspect'"))  # older code would take them for measurements
    op.drop_column("job", "purpose")
