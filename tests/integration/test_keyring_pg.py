"""The key ring on the embedded PostgreSQL: every ring's behaviour (``KeyRingBehaviour``) in a
scratch schema, plus what only a shared table shows — racing makers, restarts, forks, the
process cache, the grants and guards the bootstrap sets, and that no raw key is ever stored."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pydantic import SecretStr

from infra.keyring import (
    DESTROYED_SEQUENCE,
    ERASURE_LOCK,
    KEY_TABLE,
    KeyRing,
    MasterKeyError,
    PostgresKeyRing,
    Unit,
    UnitErasedError,
    ensure_key_table,
    erased_refusal,
    insert_made_keys,
    load_master_key,
    open_keyring,
    tenant_unit,
)
from infra.postgres import Database
from infra.settings import Settings
from tests.unit.test_keyring import MASTER, OTHER_MASTER, KeyRingBehaviour, new_tenant
from tests.unit.test_keyring_erased import ErasedUnitBehaviour

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def scratch_schema(admin_db: Database, pg_settings: Settings) -> Iterator[str]:
    """A schema holding only an empty key table, dropped afterwards."""
    name = f"keyring_{uuid.uuid4().hex[:10]}"
    with admin_db.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {schema}; GRANT USAGE ON SCHEMA {schema} TO {role}").format(
            schema=sql.Identifier(name), role=sql.Identifier(pg_settings.runtime_role)))
        ensure_key_table(conn, name, pg_settings.runtime_role)
    yield name
    with admin_db.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def rings(runtime_db: Database, scratch_schema: str) -> Iterator[Callable[..., PostgresKeyRing]]:
    """Makes rings on the scratch schema as the runtime role; closes them afterwards."""
    made: list[PostgresKeyRing] = []

    def make(master: bytes = MASTER, **options: Any) -> PostgresKeyRing:
        ring = PostgresKeyRing(lambda: runtime_db.connect(), master, schema=scratch_schema, **options)
        made.append(ring)
        return ring

    yield make
    for ring in made:
        ring.close()


class TestPostgresKeyRing(KeyRingBehaviour):
    @pytest.fixture
    def ring(self, rings: Callable[..., PostgresKeyRing]) -> KeyRing:
        return rings()

    @pytest.fixture
    def reopen(self, rings: Callable[..., PostgresKeyRing]) -> Callable[[bytes], KeyRing]:
        return rings


class TestPostgresErasedUnits(ErasedUnitBehaviour):
    @pytest.fixture
    def ring(self, rings: Callable[..., PostgresKeyRing]) -> KeyRing:
        return rings()

    @pytest.fixture
    def reopen(self, rings: Callable[..., PostgresKeyRing]) -> Callable[[bytes], KeyRing]:
        return rings


def test_a_key_made_before_an_erasure_and_stored_after_it_is_refused_by_the_table(
        rings: Callable[..., PostgresKeyRing], runtime_db: Database, scratch_schema: str) -> None:
    eraser, late = rings(), rings()
    tenant, turn = new_tenant(), uuid.uuid4()
    key_id, _ = eraser.data_key(tenant, Unit("turn", turn, session="s-1"))
    eraser.flush()
    late.data_key(tenant, Unit("turn", turn), new=True)  # made, not stored yet
    made = late.take_made()
    assert eraser.destroy(tenant, [key_id], uuid.uuid4()) == 1
    with runtime_db.connect() as conn, pytest.raises(psycopg.Error) as refused, conn.cursor() as cursor:
        insert_made_keys(cursor, scratch_schema, made)  # in the events' transaction: it fails whole
    erased = erased_refusal(refused.value)
    assert erased is not None and erased.unit == (tenant, "turn", turn)
    late.restore_made(made, erased)
    late.flush()  # nothing left to store
    with runtime_db.connect() as conn:
        live = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE unit_id = %s AND material IS NOT NULL")
                            .format(sql.Identifier(scratch_schema, KEY_TABLE)), (turn,)).fetchone()
    assert live == (0,)


def test_a_transaction_sealed_under_a_key_destroyed_since_is_refused(
        rings: Callable[..., PostgresKeyRing], runtime_db: Database, scratch_schema: str) -> None:
    ring = rings()
    tenant, slot = new_tenant(), uuid.uuid4()
    with ring.sealing() as used:
        ring.data_key(tenant, Unit("slot", slot))
    ring.flush()
    with ring.sealing() as used:  # a write decided under the stored key...
        ring.data_key(tenant, Unit("slot", slot))
    new_card, _ = ring.data_key(tenant, Unit("card", uuid.uuid4(), slot_id=slot), new=True)
    made = ring.take_made()
    ring.destroy(tenant, [k for k in used], uuid.uuid4())  # ...and an erasure before it is stored
    with runtime_db.connect() as conn, pytest.raises(psycopg.Error) as refused, conn.cursor() as cursor:
        insert_made_keys(cursor, scratch_schema, made, used)
    assert isinstance(erased_refusal(refused.value), UnitErasedError)
    with runtime_db.connect() as conn:  # the transaction stored nothing: not the new card's key
        stored = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE key_id = %s")
                              .format(sql.Identifier(scratch_schema, KEY_TABLE)), (new_card,)).fetchone()
    assert stored == (0,)


@pytest.mark.parametrize("write", ["a key of the unit", "events sealed under its key"])
def test_a_write_waits_for_an_erasure_under_way_then_is_refused(
        rings: Callable[..., PostgresKeyRing], runtime_db: Database, scratch_schema: str,
        write: str) -> None:
    ring = rings()
    tenant, card = new_tenant(), uuid.uuid4()
    key_id, _ = ring.data_key(tenant, Unit("card", card))
    ring.flush()
    late = rings()
    late.data_key(tenant, Unit("card", card), new=True)
    made = late.take_made()
    table = sql.Identifier(scratch_schema, KEY_TABLE)
    with runtime_db.connect() as eraser:  # destroying, as the ring does, not committed yet
        eraser.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (ERASURE_LOCK, tenant))
        eraser.execute(sql.SQL("UPDATE {} SET material = NULL, destroyed_at = now() WHERE key_id = %s")
                       .format(table), (key_id,))
        outcome: list[BaseException | None] = []

        def insert() -> None:
            try:
                with runtime_db.connect() as conn, conn.cursor() as cursor:
                    if write == "a key of the unit":
                        insert_made_keys(cursor, scratch_schema, made)
                    else:
                        insert_made_keys(cursor, scratch_schema, [], [key_id])
                outcome.append(None)
            except psycopg.Error as error:
                outcome.append(error)

        inserting = threading.Thread(target=insert)
        inserting.start()
        inserting.join(0.5)
        assert inserting.is_alive()  # waits for the erasure's transaction
        eraser.commit()
    inserting.join(10)
    assert outcome and outcome[0] is not None and erased_refusal(outcome[0]) is not None


def race(makers: list[PostgresKeyRing], tenant: str, unit: Unit) -> list[tuple[uuid.UUID, bytes]]:
    """What each maker's ``data_key`` of ``unit`` gives, all started at once."""
    start, got = threading.Barrier(len(makers)), []

    def make(ring: PostgresKeyRing) -> None:
        start.wait()
        got.append(ring.data_key(tenant, unit))
        ring.flush()

    threads = [threading.Thread(target=make, args=(ring,)) for ring in makers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return got


def test_racing_makers_of_one_unit_each_get_a_key_every_ring_opens_and_an_erasure_finds(
    rings: Callable[..., PostgresKeyRing],
) -> None:
    tenant, shared, reader = new_tenant(), rings(), rings()
    makers = [rings(), rings(), shared, shared]  # two processes' rings, and one ring's threads
    for _ in range(10):
        unit = Unit("card", uuid.uuid4())
        got = race(makers, tenant, unit)
        assert len(got) == len(makers)
        assert all(reader.open_key(tenant, key_id) == raw for key_id, raw in got)
        found = {f.key_id for f in reader.find(tenant, cards=[unit.id])}
        assert found == {key_id for key_id, _ in got}, "every key of the unit, however many"
        reader.destroy(tenant, found, uuid.uuid4())
        assert not reader.find(tenant, cards=[unit.id])


def test_racing_makers_of_a_tenants_key_all_get_one_key_the_oldest_live(
    rings: Callable[..., PostgresKeyRing],
) -> None:
    """Keyed ids (slot ids) are derived from the tenant's key: every process must hold the same
    one, however many ask for it at once, and after the tenant's erasure, again one new one."""
    makers = [rings(), rings(), rings(), rings(cache_seconds=0)]
    for _ in range(5):
        tenant = new_tenant()
        unit = Unit("tenant", tenant_unit(tenant))
        got = race(makers, tenant, unit)
        assert len(set(got)) == 1, "one key, whoever made it"
        later = rings(cache_seconds=0)
        assert later.data_key(tenant, unit) == got[0], "and the one a later process finds"
        later.destroy(tenant, [got[0][0]], uuid.uuid4())
        again = race([rings(cache_seconds=0) for _ in range(3)], tenant, unit)
        assert len(set(again)) == 1 and again[0] != got[0], "a tenant used again: one new key"


_CHILD = """
import json, os, sys, uuid
from infra.keyring import MasterKeyError, PostgresKeyRing
from infra.postgres import Database
a = json.loads(os.environ["KEYRING_TEST"])
try:
    ring = PostgresKeyRing(Database(**a["db"]).connect, bytes.fromhex(a["master"]), schema=a["schema"])
    print(ring.open_key(a["tenant"], uuid.UUID(a["key_id"])).hex())
except MasterKeyError as error:
    print("MasterKeyError:", error)
"""


def test_a_new_process_opens_the_keys_with_the_same_master_and_refuses_another(
    rings: Callable[..., PostgresKeyRing], runtime_db: Database, scratch_schema: str
) -> None:
    tenant = new_tenant()
    maker = rings()
    key_id, raw = maker.data_key(tenant, Unit("card", uuid.uuid4()))
    maker.flush()

    def child(master: bytes) -> str:
        given = {"db": asdict(runtime_db), "master": master.hex(), "schema": scratch_schema,
                 "tenant": tenant, "key_id": str(key_id)}
        done = subprocess.run([sys.executable, "-c", _CHILD], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "KEYRING_TEST": json.dumps(given)}, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert child(MASTER) == raw.hex()
    assert child(OTHER_MASTER) == ("MasterKeyError: the master key does not open this store's keys: "
                                   "set PALIMPSEST_MASTER_KEY to the key it was made with")


def test_a_forked_child_reads_afresh_and_leaves_the_parents_connection(
    rings: Callable[..., PostgresKeyRing],
) -> None:
    tenant, cached, eraser = new_tenant(), rings(), rings()
    key_id, raw = cached.data_key(tenant, Unit("card", uuid.uuid4()))
    cached.flush()
    eraser.destroy(tenant, [key_id], uuid.uuid4())
    assert cached.open_key(tenant, key_id) == raw  # still in this process's cache
    pid = os.fork()
    if pid == 0:  # the child: its own cache and connection
        try:
            os._exit(0 if cached.open_key(tenant, key_id) is None else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    other_id, other_raw = cached.data_key(tenant, Unit("card", uuid.uuid4()))  # the parent's connection
    cached.flush()
    assert cached.open_key(tenant, other_id) == other_raw


def test_keys_destroyed_elsewhere_stay_cached_a_few_seconds_or_until_forgotten(
    rings: Callable[..., PostgresKeyRing],
) -> None:
    tenant, eraser = new_tenant(), rings()
    cached, brief = rings(), rings(cache_seconds=0.05)
    key_id, raw = cached.data_key(tenant, Unit("card", uuid.uuid4()))
    cached.flush()
    assert brief.open_key(tenant, key_id) == raw
    eraser.destroy(tenant, [key_id], uuid.uuid4())
    assert cached.open_key(tenant, key_id) == raw
    cached.forget_cached([key_id])
    assert cached.open_key(tenant, key_id) is None
    threading.Event().wait(0.1)
    assert brief.open_key(tenant, key_id) is None


def test_every_destruction_moves_the_count_the_locks_read_and_a_store_without_it_still_erases(
    rings: Callable[..., PostgresKeyRing], runtime_db: Database, admin_db: Database,
    scratch_schema: str, caplog: pytest.LogCaptureFixture,
) -> None:
    from services.command.locks import PostgresLocks

    tenant, ring = new_tenant(), rings()
    key_id, _ = ring.data_key(tenant, Unit("card", uuid.uuid4()))
    ring.flush()

    def read() -> int | None:
        locks = PostgresLocks({"host": runtime_db.host, "port": runtime_db.port, "dbname": runtime_db.dbname,
                               "user": runtime_db.user, "password": runtime_db.password},
                              1, schema=scratch_schema)
        try:
            held = locks.acquire([7])
            assert held is not None
            locks.release(held.token)
            return held.destroyed
        finally:
            locks.close()

    assert read() == 0
    assert ring.destroy(tenant, [key_id], uuid.uuid4()) == 1
    assert read() == 1
    assert ring.destroy(tenant, [key_id], uuid.uuid4()) == 0  # nothing left: it moves all the same
    assert read() == 2

    with admin_db.connect(autocommit=True) as conn:  # as an older release bootstrapped it
        conn.execute(sql.SQL("DROP SEQUENCE {}").format(sql.Identifier(scratch_schema, DESTROYED_SEQUENCE)))
    other, _ = ring.data_key(tenant, Unit("card", uuid.uuid4()))
    ring.flush()
    assert ring.destroy(tenant, [other], uuid.uuid4()) == 1
    assert ring.open_key(tenant, other) is None
    assert DESTROYED_SEQUENCE in caplog.text
    assert read() is None  # the locks work, without the count


def test_a_lost_connection_is_made_again(rings: Callable[..., PostgresKeyRing], admin_db: Database) -> None:
    tenant, ring = new_tenant(), rings(cache_seconds=0)
    key_id, raw = ring.data_key(tenant, Unit("card", uuid.uuid4()))
    ring.flush()
    backend = ring._table._run("SELECT pg_backend_pid()", {})[0][0]  # type: ignore[attr-defined]
    with admin_db.connect(autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (backend,))
    assert ring.open_key(tenant, key_id) == raw


def test_no_raw_key_nor_subject_is_stored(
    rings: Callable[..., PostgresKeyRing], admin_db: Database, scratch_schema: str
) -> None:
    ring, tenant = rings(), new_tenant()
    subject = f"Zelda Quux {uuid.uuid4().hex}"
    made = [ring.data_key(tenant, Unit("slot", uuid.uuid4(), subject=subject, session="sess-x"))]
    made += [ring.data_key(tenant, Unit("card", uuid.uuid4(), session="sess-x")) for _ in range(20)]
    ring.destroy(tenant, [made[0][0], made[1][0]], uuid.uuid4())
    secrets = [raw for _, raw in made] + [subject.encode(), subject.casefold().encode()]
    table = sql.Identifier(scratch_schema, KEY_TABLE)
    with admin_db.connect(autocommit=True) as conn:
        rows = conn.execute(sql.SQL("SELECT t::text, material, subject_ref, session, destroyed_at "
                                    "FROM {} AS t WHERE tenant_id = %s").format(table), (tenant,)).fetchall()
        conn.execute("CHECKPOINT")
        data_dir = conn.execute("SHOW data_directory").fetchone()[0]  # type: ignore[index]
        heap = conn.execute("SELECT pg_relation_filepath(%s::regclass)",
                            (f"{scratch_schema}.{KEY_TABLE}",)).fetchone()[0]  # type: ignore[index]
    stored = b"".join(text.encode() + bytes(material or b"") + bytes(ref or b"") for text, material, ref, *_
                      in rows)
    stored += (Path(data_dir) / heap).read_bytes()
    assert len(rows) == 21 and all(secret not in stored for secret in secrets)
    assert all(raw.hex() not in stored.decode("latin-1") for _, raw in made)
    destroyed = [row for row in rows if row[4] is not None]
    assert len(destroyed) == 2 and all(row[1:4] == (None, None, None) for row in destroyed)


def test_the_bootstrap_makes_the_table_the_runtime_role_cannot_empty_nor_restore(
    pg_settings: Settings, runtime_db: Database,
) -> None:
    ring, tenant = open_keyring(pg_settings), new_tenant()
    assert isinstance(ring, PostgresKeyRing)
    path = Path(pg_settings.data_dir) / "master.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key_id, raw = ring.data_key(tenant, Unit("tenant", tenant_unit(tenant)))
    gone, _ = ring.data_key(tenant, Unit("card", uuid.uuid4()))
    ring.destroy(tenant, [gone], uuid.uuid4())
    table = sql.Identifier(pg_settings.event_schema, KEY_TABLE)
    refused = [
        (sql.SQL("DELETE FROM {} WHERE key_id = %s"), key_id),
        (sql.SQL("UPDATE {} SET tenant_id = 'thief' WHERE key_id = %s"), key_id),
        (sql.SQL("UPDATE {} SET material = '\\x00', destroyed_at = NULL WHERE key_id = %s"), gone),
        (sql.SQL("UPDATE {} SET material = '\\x00' WHERE key_id = %s"), key_id),
    ]
    with runtime_db.connect(autocommit=True) as conn:
        for statement, target in refused:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement.format(table), (target,))
    assert open_keyring(pg_settings).open_key(tenant, key_id) == raw
    assert ring.open_key(tenant, gone) is None


def external(admin_db: Database, data_dir: Path, schema: str) -> Settings:
    """Settings for the session's server as an external database, keys in ``schema``."""
    dsn = f"host={admin_db.host} port={admin_db.port} dbname={admin_db.dbname} user={admin_db.user}"
    return Settings(database_url=dsn, data_dir=data_dir, event_schema=schema,  # type: ignore[arg-type]
                    auto_bootstrap=False)


def test_an_external_store_makes_its_master_key_file_only_while_nothing_is_sealed(
    admin_db: Database, scratch_schema: str, tmp_path: Path
) -> None:
    settings = external(admin_db, tmp_path, scratch_schema)
    ring, tenant = open_keyring(settings), new_tenant()
    key_id, raw = ring.data_key(tenant, Unit("card", uuid.uuid4()))
    ring.flush()
    assert stat.S_IMODE((tmp_path / "master.key").stat().st_mode) == 0o600
    assert open_keyring(settings).open_key(tenant, key_id) == raw
    (tmp_path / "master.key").rename(tmp_path / "elsewhere")
    with pytest.raises(MasterKeyError, match="PALIMPSEST_MASTER_KEY"):
        load_master_key(settings)
    assert not (tmp_path / "master.key").exists()
    (tmp_path / "elsewhere").rename(tmp_path / "master.key")
    wrong = settings.model_copy(update={"master_key": SecretStr(OTHER_MASTER.hex())})
    with pytest.raises(MasterKeyError, match="does not open this store's keys"):
        open_keyring(wrong)


def test_a_store_not_bootstrapped_yet_holds_nothing_sealed(admin_db: Database, tmp_path: Path) -> None:
    assert len(load_master_key(external(admin_db, tmp_path, "no_such_schema"))) == 32
    assert (tmp_path / "master.key").exists()
