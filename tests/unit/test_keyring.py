"""The key ring (``infra.keyring``): wrapping, subject refs and the master key, and what every ring
does (``KeyRingBehaviour``) — run here on the memory ring, on PostgreSQL by
``tests/integration/test_keyring_pg.py``."""

from __future__ import annotations

import base64
import stat
from collections.abc import Callable
from pathlib import Path
from uuid import UUID, uuid4

import pytest

from domain.errors import InvalidTenantError
from infra.keyring import (
    Found,
    KeyRing,
    MasterKeyError,
    MemoryKeyRing,
    MissingKeyError,
    Unit,
    UnitErasedError,
    load_master_key,
    open_keyring,
    parse_master_key,
    subject_ref,
    subject_ref_key,
    tenant_unit,
    unwrap_key,
    wrap_key,
)
from infra.settings import Settings

MASTER = bytes(range(32))
OTHER_MASTER = bytes(range(1, 33))


def new_tenant() -> str:
    return f"t-{uuid4().hex[:12]}"


def units(found: list[Found]) -> set[tuple[str, UUID]]:
    return {(f.kind, f.unit_id) for f in found}


class World:
    """One tenant's keys: slot S of "Alice Smith" with cards A (said in session s-1) and B and an
    arbitration case; a proposal quoting A and X, a card of Bob's slot; a turn of s-1 and its
    event card E; the tenant's own key."""

    def __init__(self, ring: KeyRing, tenant: str) -> None:
        self.ring, self.tenant = ring, tenant
        self.S, self.A, self.B, self.K, self.P = uuid4(), uuid4(), uuid4(), uuid4(), uuid4()
        self.S2, self.X, self.T, self.E = uuid4(), uuid4(), uuid4(), uuid4()
        for unit in (Unit("slot", self.S, subject="Alice Smith"), Unit("slot", self.S2, subject="Bob"),
                     Unit("card", self.A, slot_id=self.S, session="s-1"),
                     Unit("card", self.B, slot_id=self.S), Unit("case", self.K, slot_id=self.S),
                     Unit("card", self.X, slot_id=self.S2),
                     Unit("proposal", self.P, cards=(self.A, self.X)),
                     Unit("turn", self.T, session="s-1", cards=(self.E,)),
                     Unit("card", self.E, session="s-1"), Unit("tenant", tenant_unit(tenant))):
            ring.data_key(tenant, unit)

    def find(self, **selectors: object) -> set[tuple[str, UUID]]:
        return units(self.ring.find(self.tenant, **selectors))  # type: ignore[arg-type]

    @property
    def of_slot_s(self) -> set[tuple[str, UUID]]:
        return {("slot", self.S), ("card", self.A), ("card", self.B), ("case", self.K),
                ("proposal", self.P)}


class KeyRingBehaviour:
    """What every ring does. A subclass provides the fixtures ``ring`` (a ring under ``MASTER``)
    and ``reopen`` (a master key → a new ring over the same rows, as a restarted process)."""

    def test_a_unit_keeps_one_key(self, ring: KeyRing) -> None:
        tenant, card = new_tenant(), uuid4()
        key_id, raw = ring.data_key(tenant, Unit("card", card))
        assert len(raw) == 32
        assert ring.data_key(tenant, Unit("card", card)) == (key_id, raw)
        assert ring.open_key(tenant, key_id) == raw

    def test_units_and_tenants_have_keys_of_their_own(self, ring: KeyRing) -> None:
        tenant, other, unit_id = new_tenant(), new_tenant(), uuid4()
        made = [ring.data_key(tenant, Unit("card", unit_id)), ring.data_key(tenant, Unit("slot", unit_id)),
                ring.data_key(other, Unit("card", unit_id)), ring.data_key(tenant, Unit("card", uuid4()))]
        assert len({key_id for key_id, _ in made}) == len({raw for _, raw in made}) == 4

    def test_a_destroyed_key_opens_as_none_and_the_unit_gets_no_new_one(self, ring: KeyRing) -> None:
        tenant, card = new_tenant(), uuid4()
        key_id, raw = ring.data_key(tenant, Unit("card", card))
        assert ring.destroy(tenant, [key_id], uuid4()) == 1
        assert ring.open_key(tenant, key_id) is None
        with pytest.raises(UnitErasedError):  # more: tests/unit/test_keyring_erased.py
            ring.data_key(tenant, Unit("card", card))
        assert ring.open_key(tenant, key_id) is None

    def test_a_key_id_never_made_is_missing(self, ring: KeyRing) -> None:
        tenant, key_id = new_tenant(), uuid4()
        with pytest.raises(MissingKeyError) as missing:
            ring.open_key(tenant, key_id)
        assert str(key_id) in str(missing.value) and tenant in str(missing.value)

    def test_another_tenants_key_is_missing_and_out_of_reach(self, ring: KeyRing) -> None:
        tenant, other, card = new_tenant(), new_tenant(), uuid4()
        key_id, raw = ring.data_key(tenant, Unit("card", card, session="s"))
        with pytest.raises(MissingKeyError):
            ring.open_key(other, key_id)
        assert ring.find(other, cards=[card], sessions=["s"], whole=True) == []
        assert ring.destroy(other, [key_id], uuid4()) == 0
        assert ring.open_key(tenant, key_id) == raw

    def test_refs_learned_late_are_filled_in_and_never_replaced(self, ring: KeyRing) -> None:
        tenant, card, slot, quoted = new_tenant(), uuid4(), uuid4(), uuid4()
        key_id, raw = ring.data_key(tenant, Unit("card", card))
        assert ring.find(tenant, slots=[slot]) == []
        assert ring.data_key(tenant, Unit("card", card, slot_id=slot, session="s-9",
                                          cards=(quoted,))) == (key_id, raw)
        for selector in ({"slots": [slot]}, {"sessions": ["s-9"]}, {"cards": [quoted]}):
            assert [f.key_id for f in ring.find(tenant, **selector)] == [key_id]  # type: ignore[arg-type]
        ring.data_key(tenant, Unit("card", card, slot_id=uuid4(), session="s-10"))
        assert ring.find(tenant, slots=[slot])[0].slot_id == slot
        assert ring.find(tenant, sessions=["s-10"]) == []

    def test_a_subject_learned_late_finds_its_slot(self, ring: KeyRing) -> None:
        tenant, slot = new_tenant(), uuid4()
        ring.data_key(tenant, Unit("slot", slot))
        assert ring.find(tenant, subjects=["Carol"]) == []
        ring.data_key(tenant, Unit("slot", slot, subject="Carol"))
        assert units(ring.find(tenant, subjects=["carol"])) == {("slot", slot)}

    def test_find_by_card(self, ring: KeyRing) -> None:
        world = World(ring, new_tenant())
        assert world.find(cards=[world.A]) == {("card", world.A), ("proposal", world.P)}
        assert world.find(cards=[world.E]) == {("card", world.E), ("turn", world.T)}

    def test_find_by_slot_brings_what_quotes_its_cards(self, ring: KeyRing) -> None:
        world = World(ring, new_tenant())
        assert world.find(slots=[world.S]) == world.of_slot_s
        found = {f.unit_id: f for f in ring.find(world.tenant, slots=[world.S])}
        assert found[world.A].slot_id == world.S and found[world.P].slot_id is None

    def test_find_by_subject_finds_its_slots_folded(self, ring: KeyRing) -> None:
        world = World(ring, new_tenant())
        assert world.find(subjects=["  ａlice   SMITH "]) == world.of_slot_s
        assert world.find(subjects=["Alice"]) == set()

    def test_find_by_session(self, ring: KeyRing) -> None:
        world = World(ring, new_tenant())
        assert world.find(sessions=["s-1"]) == {("card", world.A), ("turn", world.T), ("card", world.E),
                                               ("proposal", world.P)}

    def test_find_the_whole_tenant(self, ring: KeyRing) -> None:
        world = World(ring, new_tenant())
        found = world.find(whole=True)
        assert len(found) == 10 and ("tenant", tenant_unit(world.tenant)) in found

    def test_destroyed_keys_are_found_no_more(self, ring: KeyRing) -> None:
        world = World(ring, new_tenant())
        doomed = ring.find(world.tenant, subjects=["Alice Smith"])
        assert ring.destroy(world.tenant, [f.key_id for f in doomed], uuid4()) == len(doomed) == 5
        assert world.find(subjects=["Alice Smith"]) == set()
        assert world.find(sessions=["s-1"]) == {("turn", world.T), ("card", world.E)}
        assert len(world.find(whole=True)) == 5

    def test_destroy_is_idempotent(self, ring: KeyRing) -> None:
        tenant = new_tenant()
        a, _ = ring.data_key(tenant, Unit("card", uuid4()))
        b, _ = ring.data_key(tenant, Unit("card", uuid4()))
        erasure = uuid4()
        assert ring.destroy(tenant, [a, b, a], erasure) == 2
        assert ring.destroy(tenant, [a, b], erasure) == 0
        assert ring.destroy(tenant, [], erasure) == 0

    def test_a_restart_with_the_same_master_opens_the_keys(
        self, ring: KeyRing, reopen: Callable[[bytes], KeyRing]
    ) -> None:
        tenant, card = new_tenant(), uuid4()
        key_id, raw = ring.data_key(tenant, Unit("card", card))
        ring.flush()
        again = reopen(MASTER)
        assert again.open_key(tenant, key_id) == raw
        assert again.data_key(tenant, Unit("card", card)) == (key_id, raw)

    def test_a_restart_with_another_master_is_refused(
        self, ring: KeyRing, reopen: Callable[[bytes], KeyRing]
    ) -> None:
        ring.data_key(new_tenant(), Unit("card", uuid4()))
        with pytest.raises(MasterKeyError, match="set PALIMPSEST_MASTER_KEY to the key it was made with"):
            reopen(OTHER_MASTER)

    def test_a_unit_of_no_known_kind_or_tenant_is_refused(self, ring: KeyRing) -> None:
        with pytest.raises(ValueError, match="kind"):
            ring.data_key(new_tenant(), Unit("person", uuid4()))  # type: ignore[arg-type]
        with pytest.raises(InvalidTenantError):
            ring.data_key("", Unit("card", uuid4()))


class TestMemoryKeyRing(KeyRingBehaviour):
    @pytest.fixture
    def ring(self) -> MemoryKeyRing:
        return MemoryKeyRing(MASTER)

    @pytest.fixture
    def reopen(self, ring: MemoryKeyRing) -> Callable[[bytes], KeyRing]:
        return ring.reopened


# ---- wrapping, subject refs, the master key ----------------------------------------------------


def test_a_wrapped_key_opens_only_under_its_master_tenant_and_id() -> None:
    key_id, raw = uuid4(), bytes(range(100, 132))
    wrapped = wrap_key(MASTER, "acme", key_id, raw)
    assert len(wrapped) == 12 + 32 + 16 and raw not in wrapped
    assert wrap_key(MASTER, "acme", key_id, raw) != wrapped  # a fresh nonce each time
    assert unwrap_key(MASTER, "acme", key_id, wrapped) == raw
    for master, tenant, other_id in ((OTHER_MASTER, "acme", key_id), (MASTER, "acme2", key_id),
                                     (MASTER, "acme", uuid4())):
        with pytest.raises(MasterKeyError):
            unwrap_key(master, tenant, other_id, wrapped)


def test_a_subject_ref_is_keyed_by_master_and_tenant_and_folds_the_subject() -> None:
    key = subject_ref_key(MASTER)
    ref = subject_ref(key, "acme", "Alice Smith")
    assert subject_ref(key, "acme", " ＡLICE \t smith") == ref
    assert ref not in {subject_ref(key, "acme2", "Alice Smith"),
                       subject_ref(subject_ref_key(OTHER_MASTER), "acme", "Alice Smith"),
                       subject_ref(key, "acme", "Alice Smyth")}
    assert len(ref) == 32 and b"Alice" not in ref


def test_tenant_units_are_fixed_and_distinct() -> None:
    assert tenant_unit("acme") == tenant_unit("acme") != tenant_unit("acme2")


@pytest.mark.parametrize("text", [MASTER.hex(), MASTER.hex().upper(), base64.b64encode(MASTER).decode(),
                                  base64.urlsafe_b64encode(MASTER).decode().rstrip("=") + "\n"])
def test_a_master_key_is_base64_or_hex(text: str) -> None:
    assert parse_master_key(text, "PALIMPSEST_MASTER_KEY") == MASTER


@pytest.mark.parametrize("text", ["", "secret-passphrase", base64.b64encode(bytes(16)).decode(), "ab" * 31])
def test_a_malformed_master_key_is_refused_unshown(text: str) -> None:
    with pytest.raises(MasterKeyError, match="PALIMPSEST_MASTER_KEY must be a 32-byte key") as refused:
        parse_master_key(text, "PALIMPSEST_MASTER_KEY")
    assert not text or text not in str(refused.value)


def test_the_master_key_setting_comes_first(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, master_key=MASTER.hex())  # type: ignore[arg-type]
    assert load_master_key(settings, keys_exist=lambda: True) == MASTER
    assert not (tmp_path / "master.key").exists()


def test_a_master_key_file_is_made_private_while_nothing_is_sealed(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    made = load_master_key(settings, keys_exist=lambda: False)
    path = tmp_path / "data" / "master.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(made) == 32 and load_master_key(settings, keys_exist=lambda: True) == made
    assert [p.name for p in path.parent.iterdir()] == ["master.key"]


def test_no_master_key_is_made_over_sealed_keys(tmp_path: Path) -> None:
    with pytest.raises(MasterKeyError, match="PALIMPSEST_MASTER_KEY") as refused:
        load_master_key(Settings(data_dir=tmp_path), keys_exist=lambda: True)
    assert str(tmp_path / "master.key") in str(refused.value)
    assert not (tmp_path / "master.key").exists()


def test_a_malformed_master_key_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "master.key").write_text("not a key\n")
    with pytest.raises(MasterKeyError, match="master.key must be a 32-byte key"):
        load_master_key(Settings(data_dir=tmp_path), keys_exist=lambda: False)


def test_memory_persistence_opens_a_memory_ring(tmp_path: Path) -> None:
    ring = open_keyring(Settings(persistence="memory", data_dir=tmp_path))
    assert isinstance(ring, MemoryKeyRing)
    tenant = new_tenant()
    key_id, raw = ring.data_key(tenant, Unit("tenant", tenant_unit(tenant)))
    assert ring.open_key(tenant, key_id) == raw
    assert not (tmp_path / "master.key").exists()
