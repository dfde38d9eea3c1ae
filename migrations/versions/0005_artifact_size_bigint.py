"""artifact size in a 64-bit column: uploads may pass 2 GiB (the default cap is 4 GiB)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 21:10:00

PostgreSQL's INTEGER holds at most 2,147,483,647, so storing a larger upload failed there; the column becomes BIGINT.
SQLite's INTEGER already holds 8 bytes: nothing to change there.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        op.alter_column(
            "artifact", "size_bytes", type_=sa.BigInteger(), existing_type=sa.Integer(), existing_nullable=False
        )


def downgrade() -> None:
    # fails while an artifact of 2 GiB or more is stored: such a row does not fit the old column
    if op.get_bind().dialect.name != "sqlite":
        op.alter_column(
            "artifact", "size_bytes", type_=sa.Integer(), existing_type=sa.BigInteger(), existing_nullable=False
        )
