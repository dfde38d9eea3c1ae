"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-12-02 11:31:41.579832
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_token",
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("role", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("last_used_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("revoked", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    op.create_table(
        "artifact",
        sa.Column("sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("format", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("entries", sa.Integer(), nullable=True),
        sa.Column("archive_name", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("custom_op_names", sa.JSON(), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("sha256"),
    )
    op.create_table(
        "analysis",
        sa.Column("model_name", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("format", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("target", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("submitted_by", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("artifact_sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("inputs_sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.Column("context", sa.JSON(), nullable=False),
        sa.Column("backends", sa.JSON(), nullable=False),
        sa.Column("dedupe_key", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("inspection", sa.JSON(), nullable=True),
        sa.Column("measurements", sa.JSON(), nullable=True),
        sa.Column("recommendation", sa.JSON(), nullable=True),
        sa.Column("recommended_backend", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.Column("engine_version", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["artifact_sha256"],
            ["artifact.sha256"],
        ),
        sa.ForeignKeyConstraint(
            ["inputs_sha256"],
            ["artifact.sha256"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("analysis", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_analysis_created_at"), ["created_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_analysis_dedupe_key"), ["dedupe_key"], unique=False)
        batch_op.create_index(batch_op.f("ix_analysis_model_name"), ["model_name"], unique=False)
        batch_op.create_index(batch_op.f("ix_analysis_recommended_backend"), ["recommended_backend"], unique=False)
        batch_op.create_index(batch_op.f("ix_analysis_submitted_by"), ["submitted_by"], unique=False)
        batch_op.create_index(batch_op.f("ix_analysis_target"), ["target"], unique=False)

    op.create_table(
        "worker",
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("device_kind", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("backends", sa.JSON(), nullable=False),
        sa.Column("environment", sa.JSON(), nullable=False),
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("registered_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("last_seen_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["token_id"],
            ["api_token.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "job",
        sa.Column("analysis_id", sa.Integer(), nullable=False),
        sa.Column("device_kind", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("backends", sa.JSON(), nullable=False),
        sa.Column("dedupe_key", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.Column("status", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("available_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("lease_token", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.Column("worker_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("lease_expires_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("heartbeat_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("stage", sqlmodel.sql.sqltypes.AutoString(length=120), nullable=True),
        sa.Column("progress", sa.Float(), nullable=True),
        sa.Column("last_error", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("started_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("finished_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["analysis_id"],
            ["analysis.id"],
        ),
        sa.ForeignKeyConstraint(
            ["worker_id"],
            ["worker.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_job_analysis_id"), ["analysis_id"], unique=False)
        batch_op.create_index("ix_job_claim", ["status", "priority", "id"], unique=False)
        batch_op.create_index("ix_job_lease", ["status", "lease_expires_at"], unique=False)
        batch_op.create_index(
            "uq_job_active_dedupe_key",
            ["dedupe_key"],
            unique=True,
            sqlite_where=sa.text("status IN ('queued', 'running')"),
            postgresql_where=sa.text("status IN ('queued', 'running')"),
        )

    op.create_table(
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
        sa.ForeignKeyConstraint(
            ["analysis_id"],
            ["analysis.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("measurement", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_measurement_analysis_id"), ["analysis_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_measurement_backend"), ["backend"], unique=False)

    op.create_table(
        "job_event",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("worker_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("type", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["job.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("job_event", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_job_event_job_id"), ["job_id"], unique=False)

    op.create_table(
        "job_requirement",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("backend", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["job.id"],
        ),
        sa.PrimaryKeyConstraint("job_id", "backend"),
    )


def downgrade() -> None:
    op.drop_table("job_requirement")
    with op.batch_alter_table("job_event", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_job_event_job_id"))

    op.drop_table("job_event")
    with op.batch_alter_table("measurement", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_measurement_backend"))
        batch_op.drop_index(batch_op.f("ix_measurement_analysis_id"))

    op.drop_table("measurement")
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_job_active_dedupe_key",
            sqlite_where=sa.text("status IN ('queued', 'running')"),
            postgresql_where=sa.text("status IN ('queued', 'running')"),
        )
        batch_op.drop_index("ix_job_lease")
        batch_op.drop_index("ix_job_claim")
        batch_op.drop_index(batch_op.f("ix_job_analysis_id"))

    op.drop_table("job")
    op.drop_table("worker")
    with op.batch_alter_table("analysis", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_analysis_target"))
        batch_op.drop_index(batch_op.f("ix_analysis_submitted_by"))
        batch_op.drop_index(batch_op.f("ix_analysis_recommended_backend"))
        batch_op.drop_index(batch_op.f("ix_analysis_model_name"))
        batch_op.drop_index(batch_op.f("ix_analysis_dedupe_key"))
        batch_op.drop_index(batch_op.f("ix_analysis_created_at"))

    op.drop_table("analysis")
    op.drop_table("artifact")
    op.drop_table("api_token")
