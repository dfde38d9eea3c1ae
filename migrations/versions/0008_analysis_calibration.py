"""analysis calibration_sha256: the int8 options' calibration file uploaded with the model (an artifact)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 17:30:00

A nullable reference to the artifact row of the checked calibration .npz (advisor.core.calibration). Existing
analyses have none (NULL: calibrated on the example inputs) and their dedupe keys are unchanged (a key without a
calibration file is computed as before).
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    column = sa.Column("calibration_sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True)
    if op.get_bind().dialect.name == "sqlite":
        # The reference inline in a plain ALTER TABLE ... ADD COLUMN (SQLite allows it for a NULL default and cannot
        # add a constraint later): a batch "move and copy" would have to drop the analysis table, which SQLite's
        # foreign-key enforcement refuses while job points at it (see 0002).
        op.execute("ALTER TABLE analysis ADD COLUMN calibration_sha256 VARCHAR(64) REFERENCES artifact (sha256)")
        return
    op.add_column("analysis", column)
    op.create_foreign_key(None, "analysis", "artifact", ["calibration_sha256"], ["sha256"])


def downgrade() -> None:
    op.drop_column("analysis", "calibration_sha256")
