"""The read models' tables, indexes, row-level security and grants, created into any schema.

Every table carries ``tenant_id``; every key starts with it. Row-level security is forced, so the
runtime and projector roles see and write only the tenant their transaction set
(``palimpsest.tenant``). Edges and versions reference ``nodes`` by ``(tenant_id, id)``: an edge to
another tenant's card cannot be stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql

from projections.search_ops import STOCK_CLASSES, create_search_operators, index_classes
from projections.vector_index import Kind, create_statement

TABLES = ("nodes", "slots", "cards", "card_terms", "card_versions", "card_embeddings",
          "embedding_queue", "card_relations", "arbitration_queue", "proposals", "ingestions", "erasures",
          "projection_tracking", "projection_position", "projection_failures",
          "projection_requests")
#: The tables an erasure rewrites: vacuumed after it (best effort), so that the dead tuples
#: holding the forgotten texts go sooner.
ERASED_TABLES = ("cards", "card_versions", "card_terms", "card_embeddings", "slots",
                 "arbitration_queue", "proposals", "ingestions")

#: How ``card_terms`` spells a card's label and memory type (no term starts with "=").
LABEL_WORD, TYPE_WORD = "=label:", "=type:"

_DDL = """
CREATE EXTENSION IF NOT EXISTS btree_gist;
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE EXTENSION IF NOT EXISTS vector;
CREATE SCHEMA IF NOT EXISTS {s};

CREATE TABLE IF NOT EXISTS {s}.nodes (
    tenant_id text NOT NULL,
    node_id uuid NOT NULL,
    node_kind text NOT NULL,
    PRIMARY KEY (tenant_id, node_id)
);

CREATE TABLE IF NOT EXISTS {s}.slots (
    tenant_id text NOT NULL,
    slot_id uuid NOT NULL,
    scope text NOT NULL,
    project_id text,
    group_id text,
    subject text NOT NULL,
    label text NOT NULL,
    cardinality text NOT NULL,
    slot_words text[] NOT NULL DEFAULT '{{}}',
    PRIMARY KEY (tenant_id, slot_id),
    FOREIGN KEY (tenant_id, slot_id) REFERENCES {s}.nodes (tenant_id, node_id)
);

CREATE TABLE IF NOT EXISTS {s}.cards (
    tenant_id text NOT NULL,
    card_id uuid NOT NULL,
    aggregate_id uuid NOT NULL,
    kind text NOT NULL,
    memory_type text NOT NULL,
    scope text NOT NULL,
    project_id text,
    group_id text,
    perspective text,
    subject text,
    label text,
    cardinality text,
    item_key text,
    content text NOT NULL,
    title text,
    valid_from timestamptz,
    valid_to timestamptz,
    occurred_at timestamptz,
    recorded_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    retracted_at timestamptz,
    verified_at timestamptz,
    status text,
    owner text,
    due_at timestamptz,
    merged_into uuid,
    source text NOT NULL,
    inference_confidence real,
    agent_id text,
    session_id text,
    turn_id text,
    tags text[] NOT NULL DEFAULT '{{}}',
    terms text[] NOT NULL DEFAULT '{{}}',
    bigrams text[] NOT NULL DEFAULT '{{}}',
    fuzzy_text text NOT NULL DEFAULT '',
    slot_words text[],
    version integer NOT NULL DEFAULT 1,
    valid tstzrange GENERATED ALWAYS AS (
        CASE WHEN kind = 'event' THEN tstzrange(occurred_at, occurred_at, '[]')
             ELSE tstzrange(valid_from, valid_to) END) STORED,
    PRIMARY KEY (tenant_id, card_id),
    FOREIGN KEY (tenant_id, card_id) REFERENCES {s}.nodes (tenant_id, node_id)
);

-- Schemas made before the slot's words were stored.
ALTER TABLE {s}.slots ADD COLUMN IF NOT EXISTS slot_words text[] NOT NULL DEFAULT '{{}}';
ALTER TABLE {s}.cards ADD COLUMN IF NOT EXISTS slot_words text[];

-- The words a card can be found by, one row each, kept by the database from ``cards`` (a trigger,
-- made with the indexes) in the same transaction as the card's own row: its terms, the words of
-- its slot's subject and label (the user's own subject says nothing), ``=label:<label>`` and
-- ``=type:<memory_type>``. ``live``: not retracted, superseded or merged. The tags route counts a
-- card's matching words from this index alone; the fuzzy route asks it which words are known.
CREATE TABLE IF NOT EXISTS {s}.card_terms (
    tenant_id text NOT NULL,
    term text NOT NULL,
    card_id uuid NOT NULL,
    live boolean NOT NULL,
    recorded_at timestamptz NOT NULL,
    scope text NOT NULL,
    project_id text,
    group_id text,
    PRIMARY KEY (tenant_id, term, card_id) INCLUDE (live, recorded_at, scope, project_id, group_id)
);

CREATE TABLE IF NOT EXISTS {s}.card_versions (
    tenant_id text NOT NULL,
    card_id uuid NOT NULL,
    version integer NOT NULL,
    content text NOT NULL,
    title text,
    status text,
    valid tstzrange NOT NULL,
    known tstzrange NOT NULL,
    retracted boolean NOT NULL,
    verified_at timestamptz,
    PRIMARY KEY (tenant_id, card_id, version),
    FOREIGN KEY (tenant_id, card_id) REFERENCES {s}.nodes (tenant_id, node_id)
);

-- Embeddings of card content, derived from ``cards`` by the embedding projection.
CREATE TABLE IF NOT EXISTS {s}.card_embeddings (
    tenant_id text NOT NULL,
    card_id uuid NOT NULL,
    model text NOT NULL,
    content_hash bytea NOT NULL,
    embedding vector({dims}) NOT NULL,
    PRIMARY KEY (tenant_id, card_id),
    FOREIGN KEY (tenant_id, card_id) REFERENCES {s}.nodes (tenant_id, node_id)
);
-- Kept in the row where it fits (a 512-d vector is 2 KB): ranking reads it for every candidate.
ALTER TABLE {s}.card_embeddings ALTER COLUMN embedding SET STORAGE MAIN;

-- The embedder's queue: a card written, or a version of it, whose vector is to be made or checked
-- (ids only). The projector adds to it in the card's own statement; the embedder takes from it.
CREATE TABLE IF NOT EXISTS {s}.embedding_queue (
    tenant_id text NOT NULL,
    card_id uuid NOT NULL,
    version integer NOT NULL,
    PRIMARY KEY (tenant_id, card_id)
);

CREATE TABLE IF NOT EXISTS {s}.card_relations (
    tenant_id text NOT NULL,
    src_id uuid NOT NULL,
    dst_id uuid NOT NULL,
    edge text NOT NULL,
    recorded_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, src_id, dst_id, edge),
    FOREIGN KEY (tenant_id, src_id) REFERENCES {s}.nodes (tenant_id, node_id),
    FOREIGN KEY (tenant_id, dst_id) REFERENCES {s}.nodes (tenant_id, node_id)
);

CREATE TABLE IF NOT EXISTS {s}.arbitration_queue (
    tenant_id text NOT NULL,
    case_id uuid NOT NULL,
    slot_id uuid NOT NULL,
    subject text NOT NULL,
    label text NOT NULL,
    current_values text[] NOT NULL,
    proposed_value text NOT NULL,
    proposed_card_id uuid NOT NULL,
    proposed_valid_from timestamptz NOT NULL,
    reason text NOT NULL,
    opened_at timestamptz NOT NULL,
    decision text,
    decided_by text,
    decided_at timestamptz,
    PRIMARY KEY (tenant_id, case_id),
    FOREIGN KEY (tenant_id, slot_id) REFERENCES {s}.nodes (tenant_id, node_id)
);

-- Consolidation proposals (advisory duplicate / contradiction edges awaiting review).
CREATE TABLE IF NOT EXISTS {s}.proposals (
    tenant_id text NOT NULL,
    proposal_id uuid NOT NULL,
    src_id uuid NOT NULL,
    dst_id uuid NOT NULL,
    edge text NOT NULL,
    rationale text NOT NULL,
    proposed_at timestamptz NOT NULL,
    review text,
    reviewed_at timestamptz,
    PRIMARY KEY (tenant_id, proposal_id)
);
-- kind: duplicate | contradiction; score: how sure the finder is (0-1); review: accepted |
-- rejected, by whom and why.
ALTER TABLE {s}.proposals
    ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'duplicate',
    ADD COLUMN IF NOT EXISTS score double precision NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS reviewed_by text,
    ADD COLUMN IF NOT EXISTS note text;

-- Conversation turns handed to ingest, one row per turn: its episodic event card, what became of
-- its extraction. status: received (waiting for the extraction worker) | extracted (candidates
-- recorded, commands being applied) | applied (its cards exist) | dead_letter (the model failed
-- after every retry: ``error``; re-run over REST, MCP or the CLI) | erased (an erasure took the
-- turn; its extraction writes nothing).
CREATE TABLE IF NOT EXISTS {s}.ingestions (
    tenant_id text NOT NULL,
    ingestion_id uuid NOT NULL,
    event_card_id uuid NOT NULL,
    session_id text NOT NULL,
    turn_id text NOT NULL,
    role text NOT NULL,
    agent_id text,
    said_at timestamptz NOT NULL,
    timezone text NOT NULL,
    received_at timestamptz NOT NULL,
    status text NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    error text,
    candidates integer,
    card_ids uuid[],
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, ingestion_id)
);
CREATE INDEX IF NOT EXISTS ingestions_status ON {s}.ingestions (tenant_id, status);
-- How many of the model's candidates were not written (a value the turn does not support).
ALTER TABLE {s}.ingestions ADD COLUMN IF NOT EXISTS rejected integer;

-- Erasure (DESIGN §7, decision 0012): a forgotten card is a tombstone — its text NULL, its
-- words, trigrams and embedding gone, ``erased_at`` set — in every version; a forgotten slot
-- keeps no subject, label or words. Texts erased before they were projected are NULL from the
-- start (``erased_at`` the event's time until the erasure's own event sets its time).
ALTER TABLE {s}.cards ADD COLUMN IF NOT EXISTS erased_at timestamptz;
ALTER TABLE {s}.cards ALTER COLUMN content DROP NOT NULL;
ALTER TABLE {s}.card_versions ADD COLUMN IF NOT EXISTS erased_at timestamptz;
ALTER TABLE {s}.card_versions ALTER COLUMN content DROP NOT NULL;
ALTER TABLE {s}.slots ADD COLUMN IF NOT EXISTS erased_at timestamptz;
ALTER TABLE {s}.slots ALTER COLUMN subject DROP NOT NULL;
ALTER TABLE {s}.slots ALTER COLUMN label DROP NOT NULL;
-- Which card each of ``current_values`` is (an erasure nulls the values of its cards).
ALTER TABLE {s}.arbitration_queue ADD COLUMN IF NOT EXISTS current_card_ids uuid[];
ALTER TABLE {s}.arbitration_queue ALTER COLUMN subject DROP NOT NULL;
ALTER TABLE {s}.arbitration_queue ALTER COLUMN label DROP NOT NULL;
ALTER TABLE {s}.arbitration_queue ALTER COLUMN proposed_value DROP NOT NULL;
-- Who proposed the case's (latest) value, and how sure: the proposal is no card yet.
ALTER TABLE {s}.arbitration_queue ADD COLUMN IF NOT EXISTS proposed_source text;
ALTER TABLE {s}.arbitration_queue ADD COLUMN IF NOT EXISTS proposed_agent_id text;
ALTER TABLE {s}.arbitration_queue ADD COLUMN IF NOT EXISTS proposed_session_id text;
ALTER TABLE {s}.arbitration_queue ADD COLUMN IF NOT EXISTS proposed_confidence double precision;
ALTER TABLE {s}.proposals ALTER COLUMN rationale DROP NOT NULL;
-- The card's version an embedding was made at (the embedding projection re-checks a card whose
-- version moved on); ``content_hash`` is the text's keyed hash, the embedding cache's key.
ALTER TABLE {s}.card_embeddings ADD COLUMN IF NOT EXISTS version integer NOT NULL DEFAULT 0;

-- The audit of erasures, one row each: which unit, when, on what basis, who asked, how many
-- keys and cards went (the reason is sealed in the log, never here). ``position``: its
-- notification id.
CREATE TABLE IF NOT EXISTS {s}.erasures (
    tenant_id text NOT NULL,
    erasure_id uuid NOT NULL,
    unit text NOT NULL,
    target text NOT NULL,
    basis text NOT NULL,
    requested_by text NOT NULL,
    erased_at timestamptz NOT NULL,
    keys_destroyed integer NOT NULL,
    cards integer NOT NULL,
    position bigint NOT NULL,
    PRIMARY KEY (tenant_id, erasure_id)
);

-- Idempotency by event identity: the last version of each aggregate applied by a projection.
CREATE TABLE IF NOT EXISTS {s}.projection_tracking (
    projection text NOT NULL,
    tenant_id text NOT NULL,
    originator_id uuid NOT NULL,
    version bigint NOT NULL,
    PRIMARY KEY (projection, tenant_id, originator_id)
);
-- Read-your-writes and lag: the highest notification id applied, per projection and tenant.
-- Within a tenant, events arrive in notification order, so position N means all <= N applied.
CREATE TABLE IF NOT EXISTS {s}.projection_position (
    projection text NOT NULL,
    tenant_id text NOT NULL,
    position bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projection, tenant_id)
);
-- Parked events (decision 0007): an event a projection could not decode or apply, or whose row
-- the database refused, parks its aggregate there; it and each later event of that aggregate are a
-- row here, tracking stays before them, every other aggregate goes on. The operator's handle is the
-- notification id. ``status``: parked | retried (tried again: applied, or parked again as a new
-- failure) | skipped (an operator's decision, an event in the log, so a rebuild skips it too).
-- ``reason``: undecodable | projection (the projection raised) | refused (the database refused a
-- row) | waiting (an earlier event of its aggregate is parked) | message (a Kafka message that is
-- no relayed event: notification -1, tenant '*'). ``failures``: how many times it was met.
CREATE TABLE IF NOT EXISTS {s}.projection_failures (
    projection text NOT NULL,
    tenant_id text NOT NULL,
    notification_id bigint NOT NULL,
    originator_id uuid,
    originator_version bigint,
    topic text,
    error text NOT NULL,
    failed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projection, notification_id)
);
-- Rows of an earlier release, whose projector stopped at them, are tried again (status retried).
ALTER TABLE {s}.projection_failures
    ADD COLUMN IF NOT EXISTS status text NOT NULL DEFAULT 'retried',
    ADD COLUMN IF NOT EXISTS reason text NOT NULL DEFAULT 'projection',
    ADD COLUMN IF NOT EXISTS failures integer NOT NULL DEFAULT 1,
    ADD COLUMN IF NOT EXISTS last_failed_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN IF NOT EXISTS resolved_at timestamptz,
    ADD COLUMN IF NOT EXISTS resolved_by text,
    ADD COLUMN IF NOT EXISTS resolution text;
ALTER TABLE {s}.projection_failures ALTER COLUMN status SET DEFAULT 'parked';
-- A message names the exception's type, never its text (``infra.redact``): one an earlier release
-- kept as "Type: message" (a database error quoting the row) is cut to its type.
UPDATE {s}.projection_failures SET error = split_part(error, ':', 1)
    WHERE error ~ '^[A-Za-z_][A-Za-z0-9_]*: ';
-- Read with the tracking in every batch: which of its aggregates are parked.
CREATE INDEX IF NOT EXISTS projection_failures_parked ON {s}.projection_failures
    (projection, originator_id, originator_version) WHERE status = 'parked';
-- Requests to retry or skip a parked event (decision 0018): an HTTP process, which can neither
-- write the read models nor run the projector, inserts one as the request's tenant; ``serve``'s own
-- process carries it out as the projector role and records its outcome (``projections.requests``).
-- ``status``: requested | done | refused (no such parked event of the tenant) | failed.
CREATE TABLE IF NOT EXISTS {s}.projection_requests (
    tenant_id text NOT NULL,
    request_id uuid NOT NULL,
    projection text NOT NULL,
    notification_id bigint NOT NULL,
    action text NOT NULL CHECK (action IN ('retry', 'skip')),
    reason text,
    requested_by text NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    status text NOT NULL DEFAULT 'requested',
    outcome text,
    done_at timestamptz,
    PRIMARY KEY (tenant_id, request_id)
);
CREATE INDEX IF NOT EXISTS projection_requests_open ON {s}.projection_requests (requested_at)
    WHERE status = 'requested';
"""

#: The words index's functions. Their statements name the schema: ``swap`` runs this again for
#: a rebuilt schema renamed into place. The trigger that calls them is made with the indexes.
_FUNCTIONS = """
-- The columns, not the row: a row argument would be built whole (content included) per call.
-- ``slot_words``: the terms of a state card's slot (its subject unless the user's own, its label),
-- made by the projection with the tokenizer the text's terms were made with.
CREATE OR REPLACE FUNCTION {s}.card_words(terms text[], slot_words text[], label text,
                                          cardinality text, memory_type text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(DISTINCT w), '{{}}') FROM unnest(terms
        || CASE WHEN cardinality IS NULL OR label IS NULL THEN '{{}}'::text[]
                ELSE coalesce(slot_words, '{{}}') || ({label_word} || label) END
        || ({type_word} || memory_type)) AS w
    WHERE w <> ''
$$;

-- A tombstone (``erased_at`` set) has no words at all: no search finds it.
CREATE OR REPLACE FUNCTION {s}.card_terms_sync() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    is_live boolean := NEW.retracted_at IS NULL AND NEW.valid_to IS NULL AND NEW.merged_into IS NULL;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF (OLD.terms, OLD.slot_words, OLD.label, OLD.cardinality, OLD.memory_type, OLD.scope,
            OLD.project_id, OLD.group_id, OLD.recorded_at, OLD.erased_at IS NULL)
           IS NOT DISTINCT FROM (NEW.terms, NEW.slot_words, NEW.label, NEW.cardinality,
            NEW.memory_type, NEW.scope, NEW.project_id, NEW.group_id, NEW.recorded_at,
            NEW.erased_at IS NULL) THEN
            IF (OLD.retracted_at IS NULL AND OLD.valid_to IS NULL AND OLD.merged_into IS NULL)
               IS DISTINCT FROM is_live AND NEW.erased_at IS NULL THEN
                UPDATE {s}.card_terms SET live = is_live
                WHERE tenant_id = NEW.tenant_id AND card_id = NEW.card_id
                  AND term = ANY({s}.card_words(NEW.terms, NEW.slot_words, NEW.label,
                                                NEW.cardinality, NEW.memory_type));
            END IF;
            RETURN NULL;
        END IF;
        DELETE FROM {s}.card_terms
        WHERE tenant_id = OLD.tenant_id AND card_id = OLD.card_id
          AND term = ANY({s}.card_words(OLD.terms, OLD.slot_words, OLD.label, OLD.cardinality,
                                        OLD.memory_type));
    END IF;
    IF NEW.erased_at IS NOT NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO {s}.card_terms (tenant_id, term, card_id, live, recorded_at, scope, project_id, group_id)
    SELECT NEW.tenant_id, w, NEW.card_id, is_live, NEW.recorded_at, NEW.scope, NEW.project_id, NEW.group_id
    FROM unnest({s}.card_words(NEW.terms, NEW.slot_words, NEW.label, NEW.cardinality,
                               NEW.memory_type)) AS w;
    RETURN NULL;
END
$$;

-- Made before the slot's words were the projection's: its arguments were (…, subject, label, …).
DROP FUNCTION IF EXISTS {s}.card_words(text[], text, text, text, text);
"""

#: Secondary indexes, created with the tables, or after a rebuild's bulk copy (building an index
#: over loaded rows costs less than maintaining it row by row). The costliest come first: a
#: rebuild builds them over several connections, each taking the next one left.
_INDEXES = """
CREATE INDEX IF NOT EXISTS card_versions_as_of ON {s}.card_versions
    USING gist (tenant_id, known, valid);
-- The search indexes' classes: the schema's own (projections.search_ops), or the stock ones.
CREATE INDEX IF NOT EXISTS cards_trigrams ON {s}.cards USING gin (fuzzy_text {word_trgm_ops});
CREATE INDEX IF NOT EXISTS cards_valid ON {s}.cards USING gist (tenant_id, valid);
CREATE INDEX IF NOT EXISTS cards_current ON {s}.cards (tenant_id, kind, scope)
    WHERE retracted_at IS NULL AND valid_to IS NULL;
CREATE INDEX IF NOT EXISTS cards_bigrams ON {s}.cards USING gin (bigrams {text_array_ops});
-- A slot's cards, the newest first (the slot stage reads the latest items of a named slot).
CREATE INDEX IF NOT EXISTS cards_slot_since ON {s}.cards (tenant_id, aggregate_id, valid_from DESC);
DROP INDEX IF EXISTS {s}.cards_slot;
CREATE INDEX IF NOT EXISTS cards_type ON {s}.cards (tenant_id, memory_type);
-- A subject's cards, and the subjects below a namespace (byte order: projections.predicates).
CREATE INDEX IF NOT EXISTS cards_subject ON {s}.cards (tenant_id, (subject COLLATE "C"));
-- Listing a slice of the cards, the newest recorded first (keyset pages: services.query.slicing).
CREATE INDEX IF NOT EXISTS cards_recorded ON {s}.cards (tenant_id, recorded_at DESC, card_id DESC);
-- The temporal route: what began (events: occurred) or ended inside a range.
CREATE INDEX IF NOT EXISTS cards_valid_from ON {s}.cards (tenant_id, valid_from);
CREATE INDEX IF NOT EXISTS cards_occurred ON {s}.cards (tenant_id, occurred_at)
    WHERE occurred_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS cards_valid_to ON {s}.cards (tenant_id, valid_to)
    WHERE valid_to IS NOT NULL;
CREATE INDEX IF NOT EXISTS card_relations_dst ON {s}.card_relations (tenant_id, dst_id);
CREATE INDEX IF NOT EXISTS arbitration_pending ON {s}.arbitration_queue (tenant_id)
    WHERE decision IS NULL;
-- Terms are looked up in ``card_terms``: no index on ``cards.terms``.
DROP INDEX IF EXISTS {s}.cards_terms;
-- A session's turns before one, the latest first (what ingest shows the model beside a turn).
CREATE INDEX IF NOT EXISTS ingestions_session ON {s}.ingestions
    (tenant_id, session_id, said_at DESC, turn_id DESC);
-- The low-water mark (``projections.lowwater``) checks the log's events against it, by aggregate.
CREATE INDEX IF NOT EXISTS projection_tracking_originator ON {s}.projection_tracking
    (projection, originator_id)
"""

_POLICY = """
ALTER TABLE {s}.{t} ENABLE ROW LEVEL SECURITY;
ALTER TABLE {s}.{t} FORCE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON {s}.{t};
CREATE POLICY tenant_isolation ON {s}.{t}
    USING (tenant_id = current_setting('palimpsest.tenant', true))
    WITH CHECK (tenant_id = current_setting('palimpsest.tenant', true));
DROP POLICY IF EXISTS projector_reads ON {s}.{t};
CREATE POLICY projector_reads ON {s}.{t} FOR SELECT TO {writer} USING (true);
"""


def create_read_schema(
    conn: psycopg.Connection[Any], schema: str, reader: str | Sequence[str], writer: str,
    dimensions: int = 512, vector_index: Kind = "none", indexes: bool = True,
) -> None:
    """Create the read-model tables in ``schema`` (idempotent). ``reader`` (the runtime role, the
    HTTP role) selects within its tenant; ``writer`` (the projector) reads every tenant — it
    projects them all — but inserts and updates only rows of the tenant its transaction set. With
    ``indexes=False`` only the keys are created: :func:`create_read_indexes` adds the rest."""
    names = {"s": sql.Identifier(schema)}
    queued = conn.execute("SELECT to_regclass(%s)", (f"{schema}.embedding_queue",)).fetchone()
    conn.execute(sql.SQL(_DDL).format(dims=sql.Literal(dimensions), **names))
    if queued is not None and queued[0] is None:  # a schema made before the queue: fill it once
        queue_unembedded(conn, schema)
    create_functions(conn, schema)
    create_search_operators(conn, schema)
    if indexes:
        create_read_indexes(conn, schema, vector_index)
    for table in TABLES:
        conn.execute(sql.SQL(_POLICY).format(
            t=sql.Identifier(table), writer=sql.Identifier(writer), **names))
    grants = """
        GRANT USAGE ON SCHEMA {s} TO {reader}, {writer};
        GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {reader};
        GRANT INSERT ON {s}.projection_requests TO {reader};
        GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA {s} TO {writer};
        GRANT DELETE ON {s}.projection_failures, {s}.card_terms, {s}.card_embeddings,
            {s}.embedding_queue TO {writer};
        GRANT MAINTAIN ON ALL TABLES IN SCHEMA {s} TO {writer};
    """
    readers = [reader] if isinstance(reader, str) else list(reader)
    conn.execute(sql.SQL(grants).format(
        reader=sql.SQL(", ").join(map(sql.Identifier, readers)), writer=sql.Identifier(writer),
        **names))


_QUEUE_FILL = """INSERT INTO {s}.embedding_queue (tenant_id, card_id, version)
SELECT c.tenant_id, c.card_id, c.version FROM {s}.cards c
WHERE c.erased_at IS NULL AND NOT EXISTS (SELECT 1 FROM {s}.card_embeddings e
    WHERE e.tenant_id = c.tenant_id AND e.card_id = c.card_id AND e.version >= c.version)
ON CONFLICT (tenant_id, card_id) DO UPDATE SET
    version = greatest({s}.embedding_queue.version, excluded.version)"""


def queue_unembedded(conn: psycopg.Connection[Any], schema: str) -> None:
    """Queue every card of ``schema`` without a vector of its version, in one statement: after a
    rebuild's copy (the projector queues the cards it writes itself), or once on a schema made
    before the queue."""
    conn.execute(sql.SQL(_QUEUE_FILL).format(s=sql.Identifier(schema)))


def create_functions(conn: psycopg.Connection[Any], schema: str) -> None:
    """(Re)create the words index's functions for ``schema``, as it is named now."""
    conn.execute(sql.SQL(_FUNCTIONS).format(
        s=sql.Identifier(schema), label_word=sql.Literal(LABEL_WORD), type_word=sql.Literal(TYPE_WORD)))


_WORDS_FILL = """INSERT INTO {s}.card_terms (tenant_id, term, card_id, live, recorded_at, scope,
    project_id, group_id)
SELECT c.tenant_id, w, c.card_id, c.retracted_at IS NULL AND c.valid_to IS NULL
    AND c.merged_into IS NULL, c.recorded_at, c.scope, c.project_id, c.group_id
FROM {s}.cards c,
    unnest({s}.card_words(c.terms, c.slot_words, c.label, c.cardinality, c.memory_type)) AS w
WHERE c.erased_at IS NULL AND {share}
ORDER BY 1, 2, 3"""  # in the key's order: each insert lands at the index's right edge

def in_share(column: str, share: tuple[int, int] | None) -> sql.Composable:
    """Whether the aggregate in ``column`` is in ``share`` (part, of how many): the rebuild
    process that folds it (``projections.replay.share_of``), in SQL; every row without a share."""
    if share is None:
        return sql.SQL("true")
    part, shares = share
    return sql.SQL("mod(get_byte(uuid_send({}), 15), {}) = {}").format(
        sql.SQL(column), sql.Literal(shares), sql.Literal(part))


def fill_words(cur: psycopg.Cursor[Any], schema: str, share: tuple[int, int] | None = None
               ) -> None:
    """The words of the cards in ``schema`` (of one rebuild share's aggregates, if given) written
    into ``card_terms`` in one statement: after a bulk copy, where the trigger is not armed yet."""
    cur.execute(sql.SQL(_WORDS_FILL).format(s=sql.Identifier(schema),
                                            share=in_share("c.aggregate_id", share)))

_WORDS_TRIGGER = """CREATE TRIGGER card_terms_sync AFTER INSERT OR UPDATE ON {s}.cards
    FOR EACH ROW EXECUTE FUNCTION {s}.card_terms_sync()"""


def index_statements(schema: str, vector_index: Kind = "none", vectors: int = 0,
                     classes: Mapping[str, sql.Composable] | None = None) -> list[sql.Composed]:
    """The secondary indexes of the read models in ``schema``, one statement each, the costliest
    first (idempotent); first the ``vector_index`` of the embeddings over ``vectors`` rows, when
    it has one to build (:mod:`projections.vector_index`). The search indexes are built with
    ``classes`` (:func:`projections.search_ops.index_classes`), by default the schema's own."""
    if classes is None:
        classes = {name: sql.Identifier(schema, name) for name in STOCK_CLASSES}
    names = {"s": sql.Identifier(schema), **classes}
    statements = [sql.SQL(statement.strip()).format(**names)
                  for statement in _INDEXES.split(";")]
    vector = create_statement(schema, vector_index, vectors)
    return [vector, *statements] if vector is not None else statements


def create_read_indexes(conn: psycopg.Connection[Any], schema: str, vector_index: Kind = "none",
                        words: bool = True) -> None:
    """The secondary indexes of the read models in ``schema`` (see :func:`index_statements`),
    then the words index armed (:func:`arm_words`)."""
    for statement in index_statements(schema, vector_index, classes=index_classes(conn, schema)):
        conn.execute(statement)
    arm_words(conn, schema, words)


def arm_words(conn: psycopg.Connection[Any], schema: str, words: bool = True) -> None:
    """The words index's trigger: when it is not there yet, the words of the cards already
    stored are written in one statement first (after a rebuild's copy, or on a schema made
    before the words index), unless ``words`` is false (the rebuild's processes wrote them with
    their copies)."""
    names = {"s": sql.Identifier(schema)}
    armed = conn.execute("SELECT 1 FROM pg_trigger WHERE tgname = 'card_terms_sync' AND tgrelid = "
                         "to_regclass(%s)", (f"{sql.Identifier(schema).as_string(conn)}.cards",)).fetchone()
    if not armed:
        if words:
            conn.execute(sql.SQL("DELETE FROM {s}.card_terms").format(**names))
            with conn.cursor() as cur:
                fill_words(cur, schema)
        conn.execute(sql.SQL(_WORDS_TRIGGER).format(**names))
