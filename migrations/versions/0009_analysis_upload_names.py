"""analysis upload_names: the file names the user uploaded (model, inputs, calibration), for the reproduce command

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07 05:20:00

A nullable JSON object {"model": "resnet.pt2", "calibration": "samples.npz", ...}: base names only, as the client sent
them (checked on upload). Existing analyses have none (NULL: the reproduce command falls back to the model name).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("analysis", sa.Column("upload_names", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    op.drop_column("analysis", "upload_names")
