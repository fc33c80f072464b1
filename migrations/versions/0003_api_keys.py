"""API keys: several per tenant, each revocable, with its last use

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 15:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The display prefix of a key whose clear text was never stored (every key made before this
# migration): only the scheme's own prefix is known.
MIGRATED_PREFIX = "sk_"


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("tenant_id", sa.UUID(), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_api_keys_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    op.create_index(op.f("ix_api_keys_tenant_id"), "api_keys", ["tenant_id"])
    op.execute(
        sa.text(
            "INSERT INTO api_keys (id, tenant_id, key_hash, prefix, created_at) "
            "SELECT gen_random_uuid(), id, api_key_hash, :prefix, created_at FROM tenants"
        ).bindparams(prefix=MIGRATED_PREFIX)
    )
    op.drop_constraint(op.f("uq_tenants_api_key_hash"), "tenants", type_="unique")
    op.drop_column("tenants", "api_key_hash")


def downgrade() -> None:
    # One key per tenant again: its oldest key still in force (or its oldest key at all).
    op.add_column("tenants", sa.Column("api_key_hash", sa.String(length=64), nullable=True))
    op.execute(
        """
        UPDATE tenants SET api_key_hash = (
            SELECT key_hash FROM api_keys WHERE api_keys.tenant_id = tenants.id
            ORDER BY revoked_at IS NOT NULL, created_at LIMIT 1
        )
        """
    )
    op.alter_column("tenants", "api_key_hash", nullable=False)
    op.create_unique_constraint(op.f("uq_tenants_api_key_hash"), "tenants", ["api_key_hash"])
    op.drop_index(op.f("ix_api_keys_tenant_id"), table_name="api_keys")
    op.drop_table("api_keys")
