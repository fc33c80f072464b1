"""The provider a reconciliation item concerns, and items unique per provider

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_UNIQUE = "uq_reconciliation_items_record_type_provider_key_kind"
NEW_UNIQUE = "uq_reconciliation_items_record_type_provider_provider_key_kind"


def upgrade() -> None:
    # Every item so far compared the one provider, which the registry calls `primary` when
    # PAYMENTS_PROVIDERS is unset (as 0014 took for refunds). A constant default is kept in
    # the catalogue, not written into each row; the settlement run writes the provider from
    # now on, so the default is dropped after.
    op.execute(
        "ALTER TABLE reconciliation_items ADD COLUMN provider text NOT NULL DEFAULT 'primary'"
    )
    op.execute("ALTER TABLE reconciliation_items ALTER COLUMN provider DROP DEFAULT")
    # One provider's record is not another's: a key of ours found at a provider it was never
    # sent to differs there, whatever the provider it was sent to holds under it. The table
    # holds differences only (never a row per payment), so rebuilding its unique index is
    # quick.
    op.execute(f"ALTER TABLE reconciliation_items DROP CONSTRAINT {OLD_UNIQUE}")
    op.execute(
        f"ALTER TABLE reconciliation_items ADD CONSTRAINT {NEW_UNIQUE}"
        " UNIQUE (record_type, provider, provider_key, kind)"
    )


def downgrade() -> None:
    # Fails, changing nothing, while one key has items of one kind at two providers: which
    # to keep is an operator's call.
    op.execute(f"ALTER TABLE reconciliation_items DROP CONSTRAINT IF EXISTS {NEW_UNIQUE}")
    op.execute(
        f"ALTER TABLE reconciliation_items ADD CONSTRAINT {OLD_UNIQUE}"
        " UNIQUE (record_type, provider_key, kind)"
    )
    op.execute("ALTER TABLE reconciliation_items DROP COLUMN IF EXISTS provider")
