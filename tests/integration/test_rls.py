"""Tenants apart in the database (decision 0018): the HTTP role, with tenant A's setting, finds no
row of tenant B in any table or view of any schema the project makes, the event log included;
its writes of B's rows are refused by the database; with no setting it reads nothing. The HTTP
edge itself runs as that role and still serves both tenants, each its own."""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg import sql

from infra.postgres import EVENTS_TABLE, Database, http_database
from infra.settings import Settings
from infra.tenancy import acting_for
from infra.tenant_policies import tenant_tables
from services.bootstrap import Services, build_services
from services.entrypoints.api import create_api
from tests.integration.api_support import address, ok, project
from tests.support import new_tenant

pytestmark = pytest.mark.integration

#: The schemas PostgreSQL and its extensions own: none of the project's rows are there.
SYSTEM_SCHEMAS = ("pg_catalog", "information_schema", "pg_toast")


@pytest.fixture(scope="module")
def backend(pg_settings: Settings, admin_db: Database) -> Iterator[Services]:
    """The cross-tenant side (the key store that makes keys, the projector's log)."""
    made = build_services(pg_settings)
    yield made
    made.close()


@pytest.fixture(scope="module")
def edge(pg_settings: Settings, admin_db: Database) -> Iterator[Services]:
    """What an HTTP process builds: every connection as the HTTP role (no request under way)."""
    with acting_for(None):
        made = build_services(pg_settings, http=True)
    yield made
    made.close()


@pytest.fixture(scope="module")
def two_tenants(backend: Services, edge: Services, admin_db: Database,
                pg_settings: Settings) -> dict[str, str]:
    """Tenants A and B, each with a fact written over REST (as the HTTP role), projected, a key,
    an embedding cache entry and a console session ended: a row of each in every table."""
    tenants = {"a": new_tenant(), "b": new_tenant()}
    with TestClient(create_api(edge)) as client:
        for name, tenant in tenants.items():
            _, secret = backend.keys.create(tenant, ("memory:admin",), "rls")
            ok(client.post("/v1/memories", json=address(f"canary-{name}-{tenant}"),
                           headers={"Authorization": f"Bearer {secret}"}))
    project(backend, admin_db)
    with admin_db.connect(autocommit=True) as conn:
        schema = sql.Identifier(pg_settings.event_schema)
        for tenant in tenants.values():
            conn.execute(sql.SQL("INSERT INTO {}.embedding_cache (tenant_id, model, content_hash, "
                                 "embedding) VALUES (%s, 'rls', %s, %s::vector)").format(schema),
                         (tenant, uuid.uuid4().bytes, _vector(pg_settings)))
            conn.execute(sql.SQL("INSERT INTO {}.console_sessions_ended (session_id, tenant_id, "
                                 "expires_at) VALUES (%s, %s, now() + interval '1 hour')").format(schema),
                         (uuid.uuid4().hex, tenant))
    return tenants


def _vector(settings: Settings) -> str:
    return "[" + ",".join(["0.5"] * settings.embedding_dimensions) + "]"


def relations(conn: psycopg.Connection[Any]) -> list[tuple[str, str, bool]]:
    """Every table and view outside the system's schemas: (schema, name, has tenant_id)."""
    return [(schema, name, bool(tenanted)) for schema, name, tenanted in conn.execute(
        "SELECT n.nspname, c.relname, EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid "
        "AND a.attname = 'tenant_id' AND NOT a.attisdropped) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p', 'v', 'm') "
        "AND n.nspname <> ALL(%s) AND n.nspname NOT LIKE 'pg_temp%%' ORDER BY 1, 2",
        (list(SYSTEM_SCHEMAS),)).fetchall()]


def readable(conn: psycopg.Connection[Any], schema: str, name: str) -> bool:
    """Whether the role may read it (a schema it may not use, another test's, is not)."""
    found = conn.execute("SELECT CASE WHEN has_schema_privilege(current_user, %s, 'USAGE') "
                         "THEN has_table_privilege(current_user, %s, 'SELECT') ELSE false END",
                         (schema, sql.Identifier(schema, name).as_string(conn))).fetchone()
    return bool(found and found[0])


def http_connection(admin: Database, settings: Settings, tenant: str | None) -> psycopg.Connection[Any]:
    conn = http_database(admin, settings).connect(autocommit=True)
    if tenant is not None:
        conn.execute("SELECT set_config('palimpsest.tenant', %s, false)", (tenant,))
    return conn


def test_tenant_a_finds_no_row_of_tenant_b_anywhere(two_tenants: dict[str, str], admin_db: Database,
                                                     pg_settings: Settings) -> None:
    a, b = two_tenants["a"], two_tenants["b"]
    seen: dict[str, int] = {}
    with http_connection(admin_db, pg_settings, a) as conn:
        listed = relations(conn)
        assert {(pg_settings.event_schema, t) for t in tenant_tables()} <= {(s, n) for s, n, _ in listed}
        for schema, name, tenanted in listed:
            if not readable(conn, schema, name):
                continue
            table = sql.Identifier(schema, name)
            rows = conn.execute(sql.SQL("SELECT t::text FROM {} t").format(table)).fetchall()
            text = "\n".join(row[0] for row in rows)
            assert b not in text and b.encode().hex() not in text, f"{schema}.{name} shows tenant B"
            if tenanted:
                others = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE tenant_id IS DISTINCT "
                                              "FROM %s AND tenant_id <> ''").format(table),  # '': no tenant's
                                      (a,)).fetchone()
                assert others == (0,), f"{schema}.{name} shows another tenant's rows"
            seen[f"{schema}.{name}"] = len(rows)
    # A's own rows are there: the test reads what it claims to
    for own in (EVENTS_TABLE, "erasure_keys", "api_keys", "embedding_cache", "console_sessions_ended"):
        assert seen[f"{pg_settings.event_schema}.{own}"] > 0, own
    for own in ("cards", "slots", "card_terms"):
        assert seen[f"{pg_settings.read_schema}.{own}"] > 0, own


def test_the_http_role_reads_nothing_without_a_tenant(two_tenants: dict[str, str], admin_db: Database,
                                                      pg_settings: Settings) -> None:
    with http_connection(admin_db, pg_settings, None) as conn:
        for schema, name, tenanted in relations(conn):
            if readable(conn, schema, name):  # a row of no tenant ('': the master key's check) aside
                found = conn.execute(sql.SQL("SELECT count(*) FROM {}" + (
                    " WHERE tenant_id <> ''" if tenanted else "")).format(
                    sql.Identifier(schema, name))).fetchone()
                assert found == (0,), f"{schema}.{name} is readable without a tenant"


@pytest.mark.parametrize("table, row", [
    (EVENTS_TABLE, {"originator_id": uuid.uuid4(), "originator_version": 1, "topic": "rls:Forged",
                    "state": b'{"tenant_id": "%(b)s"}'}),
    ("erasure_keys", {"key_id": uuid.uuid4(), "kind": "tenant", "unit_id": uuid.uuid4(),
                      "material": b"x" * 40}),
    ("api_keys", {"key_id": "key_forged", "scopes": ["memory:admin"], "secret_hash": b"forged",
                  "created_at": "2026-01-01T00:00:00Z"}),
    ("embedding_cache", {"model": "rls", "content_hash": b"forged"}),
])
def test_writes_of_tenant_b_as_tenant_a_are_refused(two_tenants: dict[str, str], admin_db: Database,
                                                    pg_settings: Settings, table: str,
                                                    row: dict[str, Any]) -> None:
    b = two_tenants["b"]
    values = {k: (v.replace(b"%(b)s", b.encode()) if isinstance(v, bytes) else v) for k, v in row.items()}
    if table != EVENTS_TABLE:
        values["tenant_id"] = b
    if table == "embedding_cache":
        values["embedding"] = _vector(pg_settings)
    with http_connection(admin_db, pg_settings, two_tenants["a"]) as conn, \
            pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
        conn.execute(sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
            sql.Identifier(pg_settings.event_schema, table), sql.SQL(", ").join(map(sql.Identifier, values)),
            sql.SQL(", ").join(sql.Placeholder() * len(values))), list(values.values()))


def test_the_command_side_of_an_http_process_cannot_write_another_tenant(
        two_tenants: dict[str, str], edge: Services) -> None:
    """A write for B made while A's request is under way (a bug above the database) is refused."""
    from services.command.commands import Remember

    forged = Remember(kind="state", memory_type="fact", subject="user", label="address",
                      content="forged")
    with acting_for(two_tenants["a"]), pytest.raises(Exception, match="row-level security"):
        edge.app.remember(two_tenants["b"], forged)


def test_an_http_process_holds_no_cross_tenant_role(edge: Services, pg_settings: Settings) -> None:
    assert edge.monitor is None
    assert edge.settings.runtime_role == pg_settings.http_role
    with edge.app.recorder.datastore.get_connection() as conn:  # type: ignore[attr-defined]
        assert conn.execute("SELECT current_user").fetchone() == {"current_user": pg_settings.http_role}


def test_concurrent_writes_of_two_tenants_are_each_saved_as_their_own(
        backend: Services, edge: Services) -> None:
    """Group commit saves one tenant per transaction: concurrent requests of two tenants both land."""
    tenants = [new_tenant() for _ in range(4)]
    secrets = [backend.keys.create(tenant, ("memory:write",), "rls")[1] for tenant in tenants]
    errors: list[BaseException] = []

    def write(secret: str, n: int) -> None:
        try:
            with TestClient(create_api(edge)) as client:
                for i in range(n):
                    ok(client.post("/v1/memories", json=address(f"street {i}"),
                                   headers={"Authorization": f"Bearer {secret}"}))
        except BaseException as error:  # handed to the test
            errors.append(error)

    threads = [threading.Thread(target=write, args=(secret, 5)) for secret in secrets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


@pytest.fixture(scope="module")
def many_cards(admin_db: Database, pg_settings: Settings) -> Iterator[str]:
    """A tenant of 3,000 cards, each with its own term, bigrams and word: a rare one is best found
    by the words, GIN or trigram index, if the planner may use it. Removed after (no event wrote
    them: a rebuild would not make them again)."""
    tenant = new_tenant()
    s = sql.Identifier(pg_settings.read_schema)
    with admin_db.connect(autocommit=True) as conn:
        conn.execute(sql.SQL(
            "WITH made AS (SELECT gen_random_uuid() AS id, n FROM generate_series(1, 3000) n), "
            "nodes AS (INSERT INTO {s}.nodes (tenant_id, node_id, node_kind) "
            "SELECT %(t)s, id, 'card' FROM made) "
            "INSERT INTO {s}.cards (tenant_id, card_id, aggregate_id, kind, memory_type, scope, "
            "content, recorded_at, updated_at, source, valid_from, terms, bigrams, fuzzy_text) "
            "SELECT %(t)s, id, gen_random_uuid(), 'state', 'fact', 'personal', 'x', now(), now(), "
            "'user_stated', now(), ARRAY['term' || n], ARRAY['word' || n, 'other' || n], "
            "'street ' || md5(n::text) FROM made").format(s=s), {"t": tenant})
        for table in ("cards", "card_terms"):  # the GIN indexes' pending rows moved in, as in use
            conn.execute(sql.SQL("VACUUM ANALYZE {}.{}").format(s, sql.Identifier(table)))
    yield tenant
    with admin_db.connect(autocommit=True) as conn:
        for table in ("card_terms", "cards", "nodes"):
            conn.execute(sql.SQL("DELETE FROM {}.{} WHERE tenant_id = %s").format(
                s, sql.Identifier(table)), (tenant,))


#: What a route's condition is, as a route writes it: (route, index it should use, statement, parameters).
Condition = tuple[str, str, sql.Composed, dict[str, Any]]


def route_conditions(s: sql.Composable) -> list[Condition]:
    """Each search route's index condition, with the parameters that find card 1234 of
    :func:`many_cards`."""
    from services.query.retrieval import tags
    from services.query.retrieval.fuzzy import bigram_match, trigram_match

    cards = sql.SQL("SELECT c.card_id FROM {}.cards c WHERE ").format(s)
    word = hashlib.md5(b"1234").hexdigest()[:8]
    return [
        ("tags: words", "card_terms_pkey", sql.SQL(tags._TERM_COUNTS).format(s=s), {"terms": ["term1234"]}),
        ("tags: a name's bigrams", "cards_bigrams", sql.SQL(tags._NAME_COUNT).format(s=s),
         {"pairs": ["word1234"]}),
        ("fuzzy: bigrams", "cards_bigrams", cards + bigram_match(2, s),
         {"b0": "word1234", "b1": "other1234"}),
        ("fuzzy: trigrams", "cards_trigrams", cards + trigram_match(s), {"latin": word}),
    ]


def explain(conn: psycopg.Connection[Any], statement: sql.Composed, params: dict[str, Any]) -> str:
    """The plan, asked whether the index may drive the scan: with sequential scans off (a few
    thousand short rows cost less to read whole), a condition the policy must check first still
    plans as one."""
    conn.execute("SET pg_trgm.word_similarity_threshold = 0.6")  # the fuzzy route sets its bar
    conn.execute("SET enable_seqscan = off")
    return "\n".join(row[0] for row in conn.execute(sql.SQL("EXPLAIN ") + statement, params))


def test_each_search_route_drives_its_index_under_row_level_security(
        many_cards: str, admin_db: Database, pg_settings: Settings) -> None:
    """The HTTP role's search conditions — the words, the CJK bigrams (fuzzy and a subject's
    name), the trigrams — each use their index under the tenant policy, through the read
    schema's own LEAKPROOF operators (decision 0018), and find what the stock operators find."""
    s = sql.Identifier(pg_settings.read_schema)
    for route, index, statement, params in route_conditions(s):
        with http_connection(admin_db, pg_settings, many_cards) as conn:
            plan = explain(conn, statement, params)
            found = conn.execute(statement, params).fetchall()
        assert index in plan, (route, plan)
        with admin_db.connect(autocommit=True) as conn:  # the administrator: no policy applies
            conn.execute("SET pg_trgm.word_similarity_threshold = 0.6")
            # the same condition with the stock operators (the words are this tenant's alone)
            schemas = statement.as_string(conn)
            stock = schemas.replace(f"OPERATOR({s.as_string(conn)}.<%%)", "<%%").replace(
                f"OPERATOR({s.as_string(conn)}.", "OPERATOR(pg_catalog.")
            everywhere = conn.execute(stock.encode(), params).fetchall()
        assert sorted(found) == sorted(everywhere) and found, (route, found, everywhere)


def test_no_function_is_leakproof_for_the_whole_database(admin_db: Database,
                                                         pg_settings: Settings) -> None:
    """The stock array and pg_trgm operator functions are as PostgreSQL ships them; only the read
    schema's own are LEAKPROOF."""
    with admin_db.connect() as conn:
        rows = conn.execute(
            "SELECT n.nspname, p.proname, p.proleakproof FROM pg_proc p JOIN pg_namespace n ON "
            "n.oid = p.pronamespace WHERE p.proname IN ('arrayoverlap', 'arraycontains', "
            "'word_similarity_op', 'word_similarity_commutator_op', 'terms_overlap', "
            "'terms_contain', 'terms_contained', 'word_similar', 'word_similar_commutator')"
        ).fetchall()
    own = ("terms_overlap", "terms_contain", "terms_contained", "word_similar", "word_similar_commutator")
    marked = {(schema, name) for schema, name, leakproof in rows if leakproof}
    assert {name for _, name in marked} <= set(own), "no stock function is marked"
    assert {(pg_settings.read_schema, name) for name in own} <= marked  # (other tests' read schemas too)


def test_init_db_replaces_an_earlier_database_wide_marking(
        many_cards: str, admin_db: Database, pg_settings: Settings) -> None:
    """A data folder of the earlier release — search indexes of the stock classes, the stock
    functions marked LEAKPROOF for the whole database — is upgraded by ``init-db``: the marking
    reverted, the indexes built again with the schema's classes. A marking an administrator makes
    after that is theirs: the next ``init-db`` leaves it."""
    from infra.postgres import EARLIER_MARKING, bootstrap

    s = sql.Identifier(pg_settings.read_schema)
    functions = [f.format(trgm="public") for f in EARLIER_MARKING]
    with admin_db.connect(autocommit=True) as conn:
        for family in ("text_array_ops", "word_trgm_ops"):  # their indexes go with them
            conn.execute(sql.SQL("DROP OPERATOR FAMILY {} USING gin CASCADE").format(
                sql.Identifier(pg_settings.read_schema, family)))
        conn.execute(sql.SQL("CREATE INDEX cards_bigrams ON {}.cards USING gin (bigrams)").format(s))
        conn.execute(sql.SQL("CREATE INDEX cards_trigrams ON {}.cards USING gin "
                             "(fuzzy_text gin_trgm_ops)").format(s))
        for function in functions:
            conn.execute(f"ALTER FUNCTION {function} LEAKPROOF")
    try:
        bootstrap(admin_db, pg_settings)
        assert _leakproof(admin_db, functions) == [False] * 4
        with admin_db.connect() as conn:
            classes = conn.execute(
                "SELECT i.indexrelid::regclass::text, c.opcname FROM pg_index i JOIN pg_opclass c "
                "ON c.oid = i.indclass[0] WHERE i.indexrelid = ANY(ARRAY[to_regclass(%s), "
                "to_regclass(%s)]) ORDER BY 1", [f"{pg_settings.read_schema}.{index}" for index in
                                                  ("cards_bigrams", "cards_trigrams")]).fetchall()
        assert [name for _, name in classes] == ["text_array_ops", "word_trgm_ops"]
        _, _, statement, params = route_conditions(s)[-1]
        with http_connection(admin_db, pg_settings, many_cards) as conn:
            assert "cards_trigrams" in explain(conn, statement, params)
        with admin_db.connect(autocommit=True) as conn:
            conn.execute(f"ALTER FUNCTION {functions[0]} LEAKPROOF")
        bootstrap(admin_db, pg_settings)
        assert _leakproof(admin_db, functions) == [True, False, False, False]
    finally:
        with admin_db.connect(autocommit=True) as conn:
            for function in functions:
                conn.execute(f"ALTER FUNCTION {function} NOT LEAKPROOF")


def _leakproof(admin: Database, functions: list[str]) -> list[bool]:
    with admin.connect() as conn:
        return [bool(conn.execute("SELECT proleakproof FROM pg_proc WHERE oid = %s::regprocedure",
                                  (function,)).fetchone()[0]) for function in functions]  # type: ignore[index]


def test_the_bootstrap_upgrades_a_store_made_before_tenants_were_apart(
        two_tenants: dict[str, str], admin_db: Database, pg_settings: Settings) -> None:
    """A store of an earlier release (no tenant column on the log, no policies there) is made
    tenant-apart by ``init-db``: its events' tenants read from what they hold."""
    from infra.postgres import bootstrap

    events = sql.Identifier(pg_settings.event_schema, EVENTS_TABLE)
    with admin_db.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN tenant_id CASCADE").format(events))
        conn.execute(sql.SQL("ALTER TABLE {} NO FORCE ROW LEVEL SECURITY").format(events))
        conn.execute(sql.SQL("ALTER TABLE {} DISABLE ROW LEVEL SECURITY").format(events))
    bootstrap(admin_db, pg_settings)
    bootstrap(admin_db, pg_settings)  # and again: nothing changes
    a, b = two_tenants["a"], two_tenants["b"]
    with http_connection(admin_db, pg_settings, a) as conn:
        tenants = conn.execute(sql.SQL("SELECT DISTINCT tenant_id FROM {}").format(events)).fetchall()
    assert tenants == [(a,)]
    with admin_db.connect() as conn:
        found = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE tenant_id = %s").format(events),
                             (b,)).fetchone()
    assert found is not None and found[0] > 0


def test_one_transaction_saves_several_tenants_each_as_its_own(edge: Services, admin_db: Database,
                                                              pg_settings: Settings) -> None:
    """Group commit's batch of two tenants' writes: one transaction, a run per tenant, each row
    written under its request's tenant (and readable by that tenant alone)."""
    from tests.support import state

    commit = edge.app.group_commit
    assert commit is not None
    record, gate = commit._record, threading.Event()
    saved: list[Any] = []

    def held(decision: Any) -> Any:  # the first save waits until the others queued behind it
        if not saved:
            saved.append(None)
            gate.wait(10)
        saved.append(decision.saved_kwargs.get("tenant_runs"))
        return record(decision)

    first, a, b = new_tenant(), new_tenant(), new_tenant()
    results: dict[str, Any] = {}

    def write(tenant: str) -> None:
        with acting_for(tenant):
            results[tenant] = edge.app.remember(tenant, state("address", f"lives at {tenant}"))

    commit._record = held  # type: ignore[method-assign]
    try:
        threads = [threading.Thread(target=write, args=(t,)) for t in (first, a, b)]
        threads[0].start()
        while not saved:
            threading.Event().wait(0.01)
        for thread in threads[1:]:
            thread.start()
        while len(commit._queue) < 2:
            threading.Event().wait(0.01)
        gate.set()
        for thread in threads:
            thread.join(10)
    finally:
        commit._record = record  # type: ignore[method-assign]
    assert set(results) == {first, a, b}
    mixed = [{tenant for tenant, _ in runs} for runs in saved if runs]
    assert mixed == [{a, b}], saved
    events = sql.Identifier(pg_settings.event_schema, EVENTS_TABLE)
    for tenant in (a, b):
        with http_connection(admin_db, pg_settings, tenant) as conn:
            found = conn.execute(sql.SQL("SELECT DISTINCT tenant_id FROM {} WHERE originator_id = %s")
                                 .format(events), (results[tenant].aggregate_id,)).fetchall()
        assert found == [(tenant,)]
