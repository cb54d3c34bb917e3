"""Where the projection's operations land: PostgreSQL row by row, or memory for a bulk rebuild.

Both sinks carry out the same operations with the same meaning, so an incrementally built read
model and a rebuilt one are equal row for row (tested).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.types.range import Range

from projections.ops import (
    CARD_COLUMNS,
    CASE_COLUMNS,
    CHANGEABLE,
    ERASURE_COLUMNS,
    FROM_SLOT,
    PROPOSED_PROVENANCE,
    RECORDS,
    SLOT_COLUMNS,
    TOMBSTONE,
    VERSION_COLUMNS,
    AddProposal,
    ChangeCard,
    ChangeRecord,
    DecideCase,
    Forget,
    PutCard,
    PutCase,
    PutEdge,
    PutErasure,
    PutNode,
    PutRecord,
    PutSlot,
)

#: Changes that append to an array column what it does not hold yet: change → column.
ADDED = {"added_tags": "tags", "added_terms": "terms"}
#: The text-array columns, passed as :func:`array_literal` s.
ARRAYS = frozenset({"tags", "terms", "bigrams", "current_values", "slot_words", "card_ids",
                    "current_card_ids"})


def array_literal(items: list[Any] | None) -> str | None:
    """``{"a","b"}``: a text (or uuid) array as PostgreSQL reads it; cheaper than letting psycopg
    dump the list element by element."""
    if items is None:
        return None
    quoted = ('NULL' if item is None else
              '"' + str(item).replace("\\", "\\\\").replace('"', '\\"') + '"' for item in items)
    return "{" + ",".join(quoted) + "}"


def range_literal(value: Range[datetime] | None) -> str | None:
    """``["2026-09-01T09:00:00+00:00",)``: a tstzrange literal, bounds as psycopg writes them."""
    if value is None:
        return None
    if value.isempty:
        return "empty"
    lower = "" if value.lower is None else f'"{value.lower.isoformat()}"'
    upper = "" if value.upper is None else f'"{value.upper.isoformat()}"'
    return f"{'[' if value.lower_inc else '('}{lower},{upper}{']' if value.upper_inc else ')'}"


class RowRefusedError(ValueError):
    """A row the database would refuse (its key is taken): :class:`MemorySink` says so as the
    database would, so that a rebuild parks the event the incremental projector parks."""


def _rule(rules: dict[type, Callable[..., None]], op: Any) -> Callable[..., None]:
    """The sink's rule for ``op``'s type (a dictionary look-up: cheaper than single dispatch,
    which makes a bound function per call)."""
    try:
        return rules[type(op)]
    except KeyError:
        raise TypeError(f"no sink rule for {type(op).__name__}") from None


def _merge_tags(current: list[str], added: Iterable[str]) -> list[str]:
    return [*current, *(tag for tag in added if tag not in current)]


def _insert(schema: sql.Identifier, table: str, columns: tuple[str, ...]) -> sql.Composed:
    """``INSERT INTO schema.table (columns) VALUES (%s, …)``."""
    return sql.SQL("INSERT INTO {}.{} ({}) VALUES ({})").format(
        schema, sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL(", ").join(sql.Placeholder() * len(columns)))


def _param(column: str, value: Any) -> Any:
    return array_literal(list(value)) if column in ARRAYS and value is not None else value


def _valid(row: dict[str, Any]) -> Range[datetime]:
    if row["kind"] == "event":
        return Range(row["occurred_at"], row["occurred_at"], "[]")
    return Range(row["valid_from"], row["valid_to"], "[)")


class PostgresSink:
    """Applies operations inside the caller's transaction, as the caller's role. ``cache_schema``:
    where the embedding cache is, whose entries an erasure deletes (None: not touched).
    ``position``: the notification being applied (the projector sets it)."""

    def __init__(self, schema: str, cache_schema: str | None = None) -> None:
        s = sql.Identifier(schema)
        self.position = 0
        own = tuple(c for c in CARD_COLUMNS if c not in FROM_SLOT)
        self._own = own
        self._node = sql.SQL(
            "INSERT INTO {}.nodes (tenant_id, node_id, node_kind) VALUES (%s, %s, %s) "
            "ON CONFLICT DO NOTHING").format(s)
        self._slot = _insert(s, "slots", SLOT_COLUMNS)
        ret = sql.SQL(" RETURNING tenant_id, card_id, version, content, title, status, valid, "
                      "recorded_at, retracted_at, verified_at, erased_at)")
        insert_version = sql.SQL(
            " INSERT INTO {s}.card_versions (tenant_id, card_id, version, content, title, status, "
            "valid, known, retracted, verified_at, erased_at) SELECT tenant_id, card_id, version, "
            "content, title, status, valid, {known}, retracted_at IS NOT NULL, verified_at, "
            "erased_at FROM c")
        #: The card's version on the embedder's queue (``projections.embeddings``).
        queued = sql.SQL(
            ", q AS (INSERT INTO {s}.embedding_queue (tenant_id, card_id, version) SELECT "
            "tenant_id, card_id, version FROM c WHERE erased_at IS NULL ON CONFLICT (tenant_id, "
            "card_id) DO UPDATE SET version = greatest({s}.embedding_queue.version, "
            "excluded.version))").format(s=s)
        first = sql.Composed([ret, queued, insert_version.format(
            s=s, known=sql.SQL("tstzrange(recorded_at, NULL)"))])
        card = sql.Composed([sql.SQL("c AS ("), _insert(s, "cards", CARD_COLUMNS), first])
        state_card = sql.SQL(
            "c AS (INSERT INTO {s}.cards ({cols}) SELECT {vals}, {slot_cols} FROM {s}.slots "
            "WHERE tenant_id = %s AND slot_id = %s{first}").format(
            s=s, cols=sql.SQL(", ").join(map(sql.Identifier, (*own, *FROM_SLOT))),
            vals=sql.SQL(", ").join(sql.Placeholder() * len(own)),
            slot_cols=sql.SQL(", ").join(map(sql.Identifier, FROM_SLOT)), first=first)
        self._card = sql.Composed([sql.SQL("WITH "), card])
        self._state_card = sql.Composed([sql.SQL("WITH "), state_card])
        #: A new card with its node, in one statement (the foreign keys are checked at its end):
        #: one statement for the server to run instead of two.
        with_node = sql.SQL(
            "WITH n AS (INSERT INTO {}.nodes (tenant_id, node_id, node_kind) VALUES (%s, %s, %s) "
            "ON CONFLICT DO NOTHING), ").format(s)
        self._node_card = sql.Composed([with_node, card])
        self._node_state_card = sql.Composed([with_node, state_card])
        #: After the UPDATE of ``cards``: close the open version, open the next one.
        self._then_version = sql.Composed([ret, sql.SQL(
            ", closed AS (UPDATE {s}.card_versions SET known = tstzrange(lower(known), "
            "greatest(lower(known), %s)) WHERE tenant_id = %s AND card_id = %s "
            "AND upper_inf(known))").format(s=s), queued,
            insert_version.format(s=s, known=sql.SQL("tstzrange(%s, NULL)"))])
        self._edge = sql.SQL(
            "INSERT INTO {}.card_relations (tenant_id, src_id, dst_id, edge, recorded_at) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING").format(s)
        self._case = _insert(s, "arbitration_queue", CASE_COLUMNS)
        self._decide = sql.SQL(
            "UPDATE {}.arbitration_queue SET decision = %s, decided_by = %s, decided_at = %s "
            "WHERE tenant_id = %s AND case_id = %s").format(s)
        self._propose = sql.SQL(
            "UPDATE {}.arbitration_queue SET proposed_value = %s, proposed_card_id = %s, "
            "proposed_valid_from = %s, reason = %s, " + ", ".join(
                f"{c} = %s" for c in PROPOSED_PROVENANCE)
            + " WHERE tenant_id = %s AND case_id = %s").format(s)
        self._changes: dict[tuple[str, ...], str] = {}
        self._records = {table: _insert(s, table, columns).as_string(None)
                         for table, (_, columns) in RECORDS.items()}
        self._erasure = _insert(s, "erasures", ERASURE_COLUMNS)
        self._forgets = forget_statements(schema, cache_schema)
        for name, value in list(vars(self).items()):  # render once: composing per call is slow
            if isinstance(value, sql.Composable):
                setattr(self, name, value.as_string(None))
        self._schema = s
        self._rules: dict[type, Callable[[Any, psycopg.Cursor[Any]], None]] = {
            PutNode: self._put_node, PutSlot: self._put_slot, PutCard: self._put_card,
            ChangeCard: self._change_card, PutEdge: self._put_edge, PutCase: self._put_case,
            AddProposal: self._add_proposal, DecideCase: self._decide_case,
            PutRecord: self._put_record, ChangeRecord: self._change_record,
            PutErasure: self._put_erasure, Forget: self._forget,
        }

    def apply_all(self, cur: psycopg.Cursor[Any], ops: Iterable[Any]) -> None:
        node: PutNode | None = None  # held back: it may go with its card's statement
        for op in ops:
            if node is not None:
                if (isinstance(op, PutCard) and node.node_id == op.row["card_id"]
                        and node.tenant_id == op.row["tenant_id"]):
                    self._put_card(op, cur, node)
                    node = None
                    continue
                self.apply(node, cur)
                node = None
            if isinstance(op, PutNode):
                node = op
            else:
                self.apply(op, cur)
        if node is not None:
            self.apply(node, cur)

    def apply(self, op: Any, cur: psycopg.Cursor[Any]) -> None:
        _rule(self._rules, op)(op, cur)

    def _put_node(self, op: PutNode, cur: psycopg.Cursor[Any]) -> None:
        cur.execute(self._node, (op.tenant_id, op.node_id, op.node_kind))

    def _put_slot(self, op: PutSlot, cur: psycopg.Cursor[Any]) -> None:
        cur.execute(self._slot, [_param(c, op.row.get(c)) for c in SLOT_COLUMNS])

    def _put_card(self, op: PutCard, cur: psycopg.Cursor[Any], node: PutNode | None = None
                  ) -> None:
        if op.slot_id is None:
            params = [_param(c, op.row.get(c)) for c in CARD_COLUMNS]
            statement = self._card if node is None else self._node_card
        else:
            params = [*(_param(c, op.row.get(c)) for c in self._own), op.row["tenant_id"],
                      op.slot_id]
            statement = self._state_card if node is None else self._node_state_card
        if node is not None:
            params = [node.tenant_id, node.node_id, node.node_kind, *params]
        cur.execute(statement, params)

    def _change_card(self, op: ChangeCard, cur: psycopg.Cursor[Any]) -> None:
        params: list[Any] = [op.at]
        for column, value in op.changes.items():
            if column in ADDED:
                params.append(array_literal(list(value)))
            elif column in CHANGEABLE:
                params.append(_param(column, value))
            else:
                raise ValueError(f"column {column!r} cannot change")
        key = (op.tenant_id, op.card_id)
        cur.execute(self._change_statement(tuple(op.changes)),
                    [*params, *key, op.at, *key, op.at])

    def _change_statement(self, columns: tuple[str, ...]) -> str:
        statement = self._changes.get(columns)
        if statement is None:
            assignments: list[sql.Composable] = [
                sql.SQL("version = version + 1"), sql.SQL("updated_at = %s")]
            for column in columns:
                assignments.append(sql.SQL(
                    "{c} = {c} || ARRAY(SELECT x FROM unnest(%s::text[]) WITH ORDINALITY "
                    "AS a(x, n) WHERE x <> ALL({c}) ORDER BY n)" if column in ADDED
                    else "{c} = %s").format(c=sql.Identifier(ADDED.get(column, column))))
            statement = sql.SQL(
                "WITH c AS (UPDATE {}.cards SET {} WHERE tenant_id = %s AND card_id = %s{}"
            ).format(self._schema, sql.SQL(", ").join(assignments),
                     sql.SQL(str(self._then_version))).as_string(None)
            self._changes[columns] = statement
        return statement

    def _put_edge(self, op: PutEdge, cur: psycopg.Cursor[Any]) -> None:
        cur.execute(self._edge, (op.tenant_id, op.src_id, op.dst_id, op.edge, op.recorded_at))

    def _put_case(self, op: PutCase, cur: psycopg.Cursor[Any]) -> None:
        cur.execute(self._case, [_param(c, op.row[c]) for c in CASE_COLUMNS])

    def _add_proposal(self, op: AddProposal, cur: psycopg.Cursor[Any]) -> None:
        cur.execute(self._propose, (op.proposed_value, op.proposed_card_id, op.proposed_valid_from,
                                    op.reason, *(op.provenance.get(c) for c in PROPOSED_PROVENANCE),
                                    op.tenant_id, op.case_id))

    def _decide_case(self, op: DecideCase, cur: psycopg.Cursor[Any]) -> None:
        cur.execute(self._decide, (op.decision, op.decided_by, op.decided_at, op.tenant_id,
                                   op.case_id))

    def _put_record(self, op: PutRecord, cur: psycopg.Cursor[Any]) -> None:
        _, columns = RECORDS[op.table]
        cur.execute(self._records[op.table], [_param(c, op.row.get(c)) for c in columns])

    def _change_record(self, op: ChangeRecord, cur: psycopg.Cursor[Any]) -> None:
        key, _ = RECORDS[op.table]
        statement = sql.SQL("UPDATE {}.{} SET {} WHERE tenant_id = %s AND {} = %s").format(
            self._schema, sql.Identifier(op.table),
            sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(c)) for c in op.changes),
            sql.Identifier(key))
        cur.execute(statement, [*(_param(c, v) for c, v in op.changes.items()), op.tenant_id,
                                op.record_id])

    def _put_erasure(self, op: PutErasure, cur: psycopg.Cursor[Any]) -> None:
        row = {**op.row, "position": self.position}
        cur.execute(self._erasure, [row[c] for c in ERASURE_COLUMNS])

    def _forget(self, op: Forget, cur: psycopg.Cursor[Any]) -> None:
        params = {"tenant": op.tenant_id, "at": op.at, "cards": list(op.card_ids),
                  "slots": list(op.slot_ids), "ids": list(op.aggregate_ids),
                  **{column: _param(column, value) for column, value in TOMBSTONE.items()}}
        for part, statements in self._forgets.items():
            if part == "tenant" and not op.whole_tenant or part != "tenant" and not params[part]:
                continue
            for statement in statements:
                cur.execute(statement, params)


#: What an erasure does to the read models in SQL, by what it names: its slots first (their
#: cards' copies of subject and label go), then its cards (the cache entries their texts left,
#: their embeddings, the text of the row and of every version, their values in arbitration
#: cases), the texts of its other aggregates, and for a whole tenant every cached embedding. The
#: words index forgets a card by its trigger. Mirrored by :meth:`MemorySink._forget`.
_FORGET: dict[str, tuple[str, ...]] = {
    "slots": (
        "UPDATE {s}.slots SET subject = NULL, label = NULL, slot_words = '{{}}', erased_at = %(at)s "
        "WHERE tenant_id = %(tenant)s AND slot_id = ANY(%(slots)s::uuid[])",
        "UPDATE {s}.cards SET subject = NULL, label = NULL, slot_words = CASE WHEN erased_at IS NULL "
        "THEN '{{}}'::text[] END WHERE tenant_id = %(tenant)s AND aggregate_id = ANY(%(slots)s::uuid[])",
        "UPDATE {s}.arbitration_queue SET subject = NULL, label = NULL "
        "WHERE tenant_id = %(tenant)s AND slot_id = ANY(%(slots)s::uuid[])",
    ),
    "cards": (
        # every cached entry of the tenant no embedding of a card left standing refers to: the
        # erased cards' texts, and those of their earlier versions
        "{cache_gc}",
        "DELETE FROM {s}.card_embeddings WHERE tenant_id = %(tenant)s "
        "AND card_id = ANY(%(cards)s::uuid[])",
        "UPDATE {s}.cards SET " + ", ".join(f"{column} = %({column})s" for column in TOMBSTONE)
        + ", erased_at = %(at)s WHERE tenant_id = %(tenant)s AND card_id = ANY(%(cards)s::uuid[])",
        "UPDATE {s}.card_versions SET content = NULL, title = NULL, erased_at = %(at)s "
        "WHERE tenant_id = %(tenant)s AND card_id = ANY(%(cards)s::uuid[])",
        "UPDATE {s}.arbitration_queue SET current_values = ARRAY(SELECT CASE WHEN x.id = "
        "ANY(%(cards)s::uuid[]) THEN NULL ELSE x.v END FROM unnest(current_values, "
        "current_card_ids) WITH ORDINALITY AS x(v, id, n) ORDER BY x.n) "
        "WHERE tenant_id = %(tenant)s AND current_card_ids && %(cards)s::uuid[]",
        # a case projected before its cards' ids were kept: every current value of it goes
        "UPDATE {s}.arbitration_queue SET current_values = array_fill(NULL::text, "
        "ARRAY[cardinality(current_values)]) WHERE tenant_id = %(tenant)s "
        "AND current_card_ids IS NULL AND slot_id IN (SELECT aggregate_id FROM {s}.cards "
        "WHERE tenant_id = %(tenant)s AND card_id = ANY(%(cards)s::uuid[]))",
        "UPDATE {s}.arbitration_queue SET proposed_value = NULL "
        "WHERE tenant_id = %(tenant)s AND proposed_card_id = ANY(%(cards)s::uuid[])",
    ),
    "ids": (
        "UPDATE {s}.proposals SET rationale = NULL, note = NULL "
        "WHERE tenant_id = %(tenant)s AND proposal_id = ANY(%(ids)s::uuid[])",
        "UPDATE {s}.ingestions SET status = 'erased', error = NULL, candidates = NULL, "
        "rejected = NULL WHERE tenant_id = %(tenant)s AND ingestion_id = ANY(%(ids)s::uuid[])",
    ),
    "tenant": ("DELETE FROM {cache} WHERE tenant_id = %(tenant)s",
               "UPDATE {s}.projection_requests SET reason = NULL WHERE tenant_id = %(tenant)s"),
}

_CACHE_GC = ("DELETE FROM {cache} k WHERE k.tenant_id = %(tenant)s AND NOT EXISTS (SELECT 1 "
             "FROM {s}.card_embeddings e WHERE e.tenant_id = k.tenant_id "
             "AND e.content_hash = k.content_hash AND e.card_id <> ALL(%(cards)s::uuid[]))")


def forget_statements(schema: str, cache_schema: str | None) -> dict[str, list[str]]:
    """:data:`_FORGET` rendered for ``schema`` (and the cache in ``cache_schema``, if any)."""
    from infra.embedders import CACHE_TABLE

    names: dict[str, Any] = {"s": sql.Identifier(schema)}
    if cache_schema is not None:
        names["cache"] = sql.Identifier(cache_schema, CACHE_TABLE)
    rendered: dict[str, list[str]] = {}
    for part, statements in _FORGET.items():
        rendered[part] = []
        for statement in statements:
            if statement == "{cache_gc}":
                statement = _CACHE_GC
            if "{cache}" in statement and cache_schema is None:
                continue
            rendered[part].append(sql.SQL(statement).format(**names).as_string(None))
    return rendered


class MemorySink:
    """Builds every read-model row in dictionaries; :meth:`rows` gives them table by table.

    It does what the database does with the same operations: a change of a row that is not there
    (a card, a case, a state card's slot) changes nothing, as an UPDATE of no row; a key put twice
    is refused, and an event's operations are checked before any is applied (:meth:`check`), so a
    refused event leaves nothing behind, as its savepoint would."""

    def __init__(self) -> None:
        self.nodes: dict[tuple[str, UUID], str] = {}
        self.slots: dict[tuple[str, UUID], dict[str, Any]] = {}
        self.cards: dict[tuple[str, UUID], dict[str, Any]] = {}
        self.versions: dict[tuple[str, UUID], list[dict[str, Any]]] = {}
        #: Each edge with the notification that first made it, and when.
        self.edges: dict[tuple[str, UUID, UUID, str], tuple[int, datetime]] = {}
        self.cases: dict[tuple[str, UUID], dict[str, Any]] = {}
        #: Record tables (``projections.ops.RECORDS``): table → (tenant, id) → row.
        self.records: dict[str, dict[tuple[str, UUID], dict[str, Any]]] = {t: {} for t in RECORDS}
        self.erasures: dict[tuple[str, UUID], dict[str, Any]] = {}
        #: The notification whose operations are being applied.
        self.position = 0
        self._rules: dict[type, Callable[[Any], None]] = {
            PutNode: self._put_node, PutSlot: self._put_slot, PutCard: self._put_card,
            ChangeCard: self._change_card, PutEdge: self._put_edge, PutCase: self._put_case,
            AddProposal: self._add_proposal, DecideCase: self._decide_case,
            PutRecord: self._put_record, ChangeRecord: self._change_record,
            PutErasure: self._put_erasure, Forget: self._forget,
        }

    def apply_all(self, ops: list[Any]) -> None:
        self.check(ops)
        rules = self._rules
        for op in ops:
            rules[type(op)](op)

    def check(self, ops: list[Any]) -> None:
        """Raise what would refuse ``ops`` before any of them is applied: an operation without a
        rule, a change of a column no change may touch, a card, slot or case put twice."""
        seen: list[tuple[type, tuple[str, Any]]] = []
        for op in ops:
            kind = type(op)
            if kind is PutNode or kind is PutEdge or kind is Forget:
                continue
            if kind is PutCard:
                key, table = (op.row["tenant_id"], op.row["card_id"]), self.cards
            elif kind is ChangeCard:
                for column in op.changes:
                    if column not in CHANGEABLE and column not in ADDED:
                        raise ValueError(f"column {column!r} cannot change")
                continue
            elif kind is PutSlot:
                key, table = (op.row["tenant_id"], op.row["slot_id"]), self.slots
            elif kind is PutCase:
                key, table = (op.row["tenant_id"], op.row["case_id"]), self.cases
            elif kind is PutErasure:
                key, table = (op.row["tenant_id"], op.row["erasure_id"]), self.erasures
            elif kind is PutRecord:
                column, columns = RECORDS[op.table]
                if set(op.row) != set(columns):
                    raise ValueError(f"a {op.table} row has the columns {columns}")
                key, table = (op.row["tenant_id"], op.row[column]), self.records[op.table]
            elif kind is ChangeRecord:
                unknown = set(op.changes) - set(RECORDS[op.table][1])
                if unknown:
                    raise ValueError(f"no columns {sorted(unknown)} in {op.table}")
                continue
            else:
                _rule(self._rules, op)
                continue
            if key in table or (kind, key) in seen:
                raise RowRefusedError(f"{kind.__name__}: key {key} already exists")
            seen.append((kind, key))

    def apply(self, op: Any) -> None:
        _rule(self._rules, op)(op)

    def _put_node(self, op: PutNode) -> None:
        self.nodes.setdefault((op.tenant_id, op.node_id), op.node_kind)

    def _put_slot(self, op: PutSlot) -> None:
        self.slots[(op.row["tenant_id"], op.row["slot_id"])] = {
            column: op.row.get(column) for column in SLOT_COLUMNS}

    def _put_card(self, op: PutCard) -> None:
        get = op.row.get
        row: dict[str, Any] = {column: get(column) for column in CARD_COLUMNS}
        for column in ("tags", "terms", "bigrams"):
            row[column] = list(row[column] or ())
        row["fuzzy_text"] = row["fuzzy_text"] or ""
        if op.slot_id is not None:
            slot = self.slots.get((row["tenant_id"], op.slot_id))
            if slot is None:  # the database's INSERT … SELECT from its slot inserts nothing
                return
            for column in FROM_SLOT:
                row[column] = slot[column]
        row["version"] = 1
        key = (row["tenant_id"], row["card_id"])
        self.cards[key] = row
        self.versions[key] = [self._version(row, row["recorded_at"])]

    def _change_card(self, op: ChangeCard) -> None:
        key = (op.tenant_id, op.card_id)
        row = self.cards.get(key)
        if row is None:  # an UPDATE of no row
            return
        for column, value in op.changes.items():
            if column in ADDED:
                row[ADDED[column]] = _merge_tags(row[ADDED[column]], value)
            elif column in CHANGEABLE:
                row[column] = value
            else:
                raise ValueError(f"column {column!r} cannot change")
        row["version"] += 1
        row["updated_at"] = op.at
        history = self.versions[key]
        since = history[-1]["known"].lower
        history[-1]["known"] = Range(since, max(since, op.at), "[)")
        history.append(self._version(row, op.at))

    def _put_edge(self, op: PutEdge) -> None:
        self.edges.setdefault((op.tenant_id, op.src_id, op.dst_id, op.edge),
                              (self.position, op.recorded_at))

    def _put_case(self, op: PutCase) -> None:
        self.cases[(op.row["tenant_id"], op.row["case_id"])] = {
            **{c: op.row[c] for c in CASE_COLUMNS},
            "decision": None, "decided_by": None, "decided_at": None,
        }

    def _add_proposal(self, op: AddProposal) -> None:
        self.cases.get((op.tenant_id, op.case_id), {}).update(
            proposed_value=op.proposed_value, proposed_card_id=op.proposed_card_id,
            proposed_valid_from=op.proposed_valid_from, reason=op.reason,
            **{c: op.provenance.get(c) for c in PROPOSED_PROVENANCE})

    def _decide_case(self, op: DecideCase) -> None:
        self.cases.get((op.tenant_id, op.case_id), {}).update(
            decision=op.decision, decided_by=op.decided_by, decided_at=op.decided_at)

    def _put_record(self, op: PutRecord) -> None:
        key, _ = RECORDS[op.table]
        self.records[op.table][(op.row["tenant_id"], op.row[key])] = dict(op.row)

    def _change_record(self, op: ChangeRecord) -> None:
        self.records[op.table].get((op.tenant_id, op.record_id), {}).update(op.changes)

    def _put_erasure(self, op: PutErasure) -> None:
        self.erasures[(op.row["tenant_id"], op.row["erasure_id"])] = {
            **op.row, "position": self.position}

    def _forget(self, op: Forget) -> None:
        """What :data:`_FORGET` does in SQL (embeddings and the cache aside: no fold holds them).
        A slot's cards are looked for only when slots are forgotten (rare: a card, a session or
        a retention run names cards)."""
        tenant, slots, cards = op.tenant_id, set(op.slot_ids), set(op.card_ids)
        for slot_id in op.slot_ids:
            slot = self.slots.get((tenant, slot_id))
            if slot is not None:
                slot.update(subject=None, label=None, slot_words=[], erased_at=op.at)
        for (owner, _), row in self.cards.items() if slots else ():
            if owner == tenant and row["aggregate_id"] in slots:
                row.update(subject=None, label=None,
                           slot_words=[] if row["erased_at"] is None else None)
        for card_id in op.card_ids:
            card = self.cards.get((tenant, card_id))
            if card is None:
                continue
            card.update({column: list(value) if isinstance(value, list) else value
                         for column, value in TOMBSTONE.items()}, erased_at=op.at)
            for version in self.versions[(tenant, card_id)]:
                version.update(content=None, title=None, erased_at=op.at)
        for (owner, _), case in self.cases.items() if slots or cards else ():
            if owner != tenant:
                continue
            if case["slot_id"] in slots:
                case.update(subject=None, label=None)
            if cards.intersection(case["current_card_ids"]):
                case["current_values"] = [
                    None if card_id in cards else value for value, card_id
                    in zip(case["current_values"], case["current_card_ids"], strict=True)]
            if case["proposed_card_id"] in cards:
                case["proposed_value"] = None
        for record_id in op.aggregate_ids:
            proposal = self.records["proposals"].get((tenant, record_id))
            if proposal is not None:
                proposal.update(rationale=None, note=None)
            turn = self.records["ingestions"].get((tenant, record_id))
            if turn is not None:
                turn.update(status="erased", error=None, candidates=None, rejected=None)

    @staticmethod
    def _version(row: dict[str, Any], since: datetime) -> dict[str, Any]:
        return {
            "tenant_id": row["tenant_id"], "card_id": row["card_id"], "version": row["version"],
            "content": row["content"], "title": row["title"], "status": row["status"],
            "valid": _valid(row), "known": Range(since, None, "[)"),
            "retracted": row["retracted_at"] is not None, "verified_at": row["verified_at"],
            "erased_at": row["erased_at"],
        }

    def rows(self) -> dict[str, tuple[tuple[str, ...], list[tuple[Any, ...]]]]:
        """Table name → (columns, rows), in an order that satisfies the foreign keys."""
        card_columns = (*CARD_COLUMNS, "version")
        version_columns = VERSION_COLUMNS
        case_columns = (*CASE_COLUMNS, "decision", "decided_by", "decided_at")
        return {
            "nodes": (("tenant_id", "node_id", "node_kind"),
                      [(t, n, k) for (t, n), k in self.nodes.items()]),
            "slots": (SLOT_COLUMNS, [tuple(r[c] for c in SLOT_COLUMNS) for r in self.slots.values()]),
            "cards": (card_columns,
                      [tuple(r.get(c) for c in card_columns) for r in self.cards.values()]),
            "card_versions": (version_columns, [
                tuple(v[c] for c in version_columns)
                for history in self.versions.values() for v in history]),
            "card_relations": (("tenant_id", "src_id", "dst_id", "edge", "recorded_at"),
                               [(*key, at) for key, (_, at) in self.edges.items()]),
            "arbitration_queue": (case_columns, [
                tuple(r[c] for c in case_columns) for r in self.cases.values()]),
            **{table: (columns, [tuple(r[c] for c in columns) for r in self.records[table].values()])
               for table, (_, columns) in RECORDS.items()},
            "erasures": (ERASURE_COLUMNS, [tuple(r[c] for c in ERASURE_COLUMNS)
                                           for r in self.erasures.values()]),
        }
