"""The read models' shared predicates, written once: which cards are current, which version of a
card is the one seen *as of* a moment on both timelines, and which scopes a question sees. Every
retrieval route, the candidates loader, ``facts`` and the briefing use these, so a
card valid in one answer is valid in all of them.

In SQL over a card ``c`` (a row of ``cards``) and, for as-of, a version ``v`` (``card_versions``).
Parameters: ``%(valid_at)s``, ``%(known_at)s``; for the scope, ``%(project_id)s``,
``%(group_ids)s``, ``%(include_global)s``.

- **current**: not retracted, validity still open, not merged into another card (events are
  always current: their validity is the instant they occurred, never closed);
- **as of (valid_at, known_at)**: the card has a version known at ``known_at``, not retracted then,
  valid at ``valid_at`` (an event: one that had happened by ``valid_at``), and not merged;
- **superseded** (as of): the version's validity was closed (not for events), or it was merged;
- **scope**: personal always; a project card of the current project; a group card of one of the
  question's groups; global cards when asked for;
- **not erased**: a tombstone (``erased_at`` set: its text was forgotten, DESIGN §7) answers no
  question. Listings (``current``, as-of, history, slicing) still show it, marked erased; every
  search route, the candidates loader and the briefing leave it out (:func:`visible`).
"""

from __future__ import annotations

from psycopg import sql

CURRENT = "c.retracted_at IS NULL AND c.valid_to IS NULL AND c.merged_into IS NULL"

#: The card ``c`` still holds its text: no tombstone.
NOT_ERASED = "c.erased_at IS NULL"

#: The version ``v`` of the card ``c`` that is seen as of (valid_at, known_at).
VERSION_AS_OF = """v.tenant_id = c.tenant_id AND v.card_id = c.card_id
      AND v.known @> %(known_at)s::timestamptz AND NOT v.retracted
      AND CASE WHEN c.kind = 'event' THEN lower(v.valid) <= %(valid_at)s::timestamptz
               ELSE v.valid @> %(valid_at)s::timestamptz END
      AND v.status IS DISTINCT FROM 'merged'"""

#: Whether the version ``v`` seen then had since been replaced, as it was known then.
SUPERSEDED_AS_OF = ("((c.kind <> 'event' AND NOT upper_inf(v.valid)) "
                    "OR v.status IS NOT DISTINCT FROM 'merged')")

#: The row ``{a}`` is of the subject ``%(subject_prefix)s`` or of one below it (the prefix, ``:``
#: and more): namespaces nest by whole segments, so ``a`` never matches ``ab``. Compared byte by
#: byte (``C``), the strings that begin with ``p:`` are exactly those from ``p:`` up to ``p;``
#: (``;`` follows ``:``), a range the ``cards_subject`` index reads.
SUBJECT_UNDER = """({a}.subject COLLATE "C" = %(subject_prefix)s::text
    OR ({a}.subject COLLATE "C" >= %(subject_prefix)s::text || ':'
        AND {a}.subject COLLATE "C" < %(subject_prefix)s::text || ';'))"""

_SCOPE_OF = """({a}.scope = 'personal'
    OR ({a}.scope = 'project' AND {a}.project_id = %(project_id)s)
    OR ({a}.scope = 'group' AND {a}.group_id = ANY(%(group_ids)s::text[]))
    OR ({a}.scope = 'global' AND %(include_global)s))"""


def scope_of(alias: str) -> sql.SQL:
    """The scope condition on any row ``alias`` with the card's scope columns."""
    return sql.SQL(_SCOPE_OF.format(a=alias))


def current() -> sql.SQL:
    return sql.SQL(CURRENT)


def as_of(schema: str) -> sql.Composed:
    """The card ``c`` has a version seen as of (valid_at, known_at)."""
    return sql.SQL("EXISTS (SELECT 1 FROM {}.card_versions v WHERE " + VERSION_AS_OF + ")").format(
        sql.Identifier(schema))


def not_erased() -> sql.SQL:
    return sql.SQL(NOT_ERASED)


#: A question narrowed to some subjects, a namespace, some agents or sessions: the condition of
#: each on the card ``{a}``, by the name of its parameter.
NARROWING: dict[str, str] = {
    "subjects": '{a}.subject COLLATE "C" = ANY(%(subjects)s::text[])',
    "subject_prefix": SUBJECT_UNDER,
    "agent_ids": "{a}.agent_id = ANY(%(agent_ids)s::text[])",
    "session_ids": "{a}.session_id = ANY(%(session_ids)s::text[])",
}


def narrowed(alias: str, names: tuple[str, ...]) -> sql.SQL:
    """`` AND`` the conditions of the narrowing filters ``names`` on the row ``alias``."""
    return sql.SQL("".join(" AND " + NARROWING[name].format(a=alias) for name in names))


def visible(schema: str, as_of_query: bool, scoped: bool = True) -> sql.Composable:
    """May a question see the card ``c``: no tombstone, current (or seen as of the moment), in
    its scope."""
    seen: sql.Composable = not_erased() + sql.SQL(" AND ") + (
        as_of(schema) if as_of_query else current())
    return seen + sql.SQL(" AND ") + scope_of("c") if scoped else seen
