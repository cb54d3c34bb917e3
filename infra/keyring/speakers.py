"""A card key's speaker (``said_by``): the subject ref of the ingested turn the card was written
from. A subject's erasure finds the card by it — that card alone, never its slot — even once the
turn's key is destroyed (retention erases a turn's event card, which destroys the turn's key, and
keeps the cards made of it). The statement that stores a card's key copies it from the turn's
live key (:func:`speaker_of`); destroying the key nulls it, like the subject ref."""

from __future__ import annotations


def speaker_of(tenant: str, cards: str) -> str:
    """An SQL expression (``{table}`` left to format): the subject ref of a live key of a turn
    among ``cards`` (an ``uuid[]`` expression) of ``tenant``, or NULL. One indexed lookup."""
    return (f"(SELECT s.subject_ref FROM {{table}} s WHERE s.tenant_id = {tenant} "
            f"AND s.kind = 'turn' AND s.unit_id = ANY({cards}) AND s.material IS NOT NULL "
            "AND s.subject_ref IS NOT NULL LIMIT 1)")


#: The column added to a key table made before it had one, filled once for the live card keys
#: whose turn's key is live (a turn destroyed before is not known any more); and its index.
#: Idempotent: the fill runs only with the column's creation.
SAID_BY_DDL = f"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM information_schema.columns WHERE table_schema = {{schema_name}}
                   AND table_name = {{table_name}} AND column_name = 'said_by') THEN
        ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS said_by bytea;
        UPDATE {{table}} AS k SET said_by = {speaker_of('k.tenant_id', 'k.cards')}
        WHERE k.kind = 'card' AND k.material IS NOT NULL AND cardinality(k.cards) > 0;
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS erasure_keys_said_by ON {{table}} (tenant_id, said_by)
    WHERE material IS NOT NULL AND said_by IS NOT NULL;
"""
