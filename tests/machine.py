"""A Hypothesis state machine over the whole write-to-read path, on the embedded PostgreSQL and
the embedded Kafka broker, neither mocked (RELIABILITY §Whole system).

Writes go through the commands (remember, revise, verify, arbitrate, commitment moves, and
erasures of a card or a slot, whose keys are destroyed: the events written before them then read
as erased wherever they are decoded — the consumer lagging behind, the fold, a rebuild); the relay
publishes the log to Kafka; a consumer hands each message's events to the incremental
:class:`~projections.projector.Projector`, the code the Faust agent runs. Faults between the
steps: a projection that crashes mid-batch, a projector and consumer restarted from nothing, the
broker SIGKILLed (its supervisor, :class:`~infra.supervision.BrokerKeeper`, starts it again on
its port with every message gone; the relay republishes), a rebuild, and a rebuild as known at a
past moment.

The model is a plain-Python fold of the log (:func:`projections.fold.fold` into a
:class:`~projections.sinks.MemorySink`). Once the projection has caught up, every table of the
read models equals the fold row for row, ``current`` and ``as_of`` answer what a Python reading of
the fold's versions says (on both timelines, at moments drawn at random), and the current values
equal the aggregates' own (an erased value as no value). The fold decodes the log as it is now,
after the erasures: the live read models, projected while the texts still opened and then
tombstoned, must equal it. A rebuild equals the live read models; one as known at a moment equals
the fold of the events recorded by then (and the tombstones of the erasures recorded since).

``SystemMachine.strict`` off (the soak): a divergence is counted and described, and the run goes
on; on (the test), it fails the example."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from psycopg import sql
from psycopg.types.range import Range

from domain.erased import is_erased
from domain.errors import CardNotFoundError, InvalidTransitionError
from domain.slot import Slot
from infra.broker import EmbeddedBroker, wait_for_kafka
from infra.broker_folder import start_in_folder
from infra.keyring import UnitErasedError
from infra.postgres import Database
from infra.relay import Relay, decode_messages
from infra.settings import Settings
from infra.supervision import BrokerKeeper, quiet_kafka_logs
from infra.topics import ensure_topic
from projections.fold import fold
from projections.projector import ProjectionError, ProjectionUnavailableError, decode
from projections.replay import make_projector, read_log, rebuild
from services.command.commands import Arbitrate, Erase, Move, Remember, Revise, Verify
from services.factory import create_app
from services.query.readmodels import ReadModels
from tests.support import Clock, new_tenant, state

LABELS = ("address", "skills", "job_title")
VALUES = ("Taipei", "Kyoto", "Kaohsiung", "Python", "Rust")
#: The tables the fold and the read models are compared on (card_terms is SQL's own, from cards).
TABLES = ("nodes", "slots", "cards", "card_versions", "card_relations", "arbitration_queue",
          "erasures")


@dataclass
class Env:
    """What one run of the machine shares across its examples."""

    settings: Settings
    admin: Database
    runtime: Database
    broker_folder: Any
    broker: EmbeddedBroker
    keeper: BrokerKeeper
    topic: str
    #: Filled by the machine as it goes (the soak prints them).
    steps: int = 0
    divergences: list[str] = field(default_factory=list)
    kills: int = 0
    rebuilds: int = 0
    #: Erasures carried out (their keys destroyed).
    erasures: int = 0
    #: Comparisons made: read models with the fold, as-of answers, rebuilds.
    checks: int = 0

    def close(self) -> None:
        self.keeper.stop()


def start_env(settings: Settings, admin: Database, runtime: Database, folder: Any) -> Env:
    """The machine's broker, supervised as ``palimpsest pipeline`` supervises its own."""
    quiet_kafka_logs()
    topic, partitions = f"machine-{uuid4().hex[:8]}", settings.kafka_partitions
    broker = start_in_folder(folder)
    ensure_topic(broker.bootstrap, topic, partitions)
    keeper = BrokerKeeper(folder, broker, on_ready=lambda b: ensure_topic(b, topic, partitions),
                          interval=0.1).start()
    return Env(settings, admin, runtime, folder, broker, keeper, topic)


def _plain(value: Any) -> Any:
    """One column's value as both sides compare it: ranges by their bounds (an empty one as
    such), arrays as tuples."""
    if isinstance(value, Range):
        if value.isempty or (value.lower is not None and value.lower == value.upper
                             and value.bounds == "[)"):
            return ("empty",)
        return ("range", value.lower, value.upper, value.bounds)
    if isinstance(value, list | tuple):
        return tuple(_plain(v) for v in value)
    return value


def _sorted(rows: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted((tuple(_plain(v) for v in row) for row in rows), key=repr)


def stored_rows(db: Database, schema: str, table: str, columns: tuple[str, ...], tenant: str
                ) -> list[tuple[Any, ...]]:
    query = sql.SQL("SELECT {} FROM {}.{} WHERE tenant_id = %s").format(
        sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(schema),
        sql.Identifier(table))
    with db.connect() as conn:
        return _sorted(conn.execute(query, (tenant,)).fetchall())


def differences(db: Database, schema: str, folded: Any, tenant: str) -> list[str]:
    """Where the tables of ``schema`` differ from the fold, for one tenant."""
    found = []
    for table, (columns, rows) in folded.sink.rows().items():
        if table not in TABLES:
            continue
        expected = _sorted(r for r in rows if r[0] == tenant)
        actual = stored_rows(db, schema, table, columns, tenant)
        if actual != expected:
            missing = [r for r in expected if r not in actual][:2]
            extra = [r for r in actual if r not in expected][:2]
            found.append(f"{schema}.{table} of {tenant}: fold only {missing}, stored only {extra}")
    tracked = _sorted((t, o, v) for (t, o), v in folded.tracking.items() if t == tenant)
    stored = stored_rows(db, schema, "projection_tracking", ("tenant_id", "originator_id",
                                                             "version"), tenant)
    if tracked != stored:
        found.append(f"{schema}.projection_tracking of {tenant} differs from the fold")
    return found


def seen_as_of(folded: Any, tenant: str, valid_at: datetime, known_at: datetime
               ) -> set[tuple[UUID, str]]:
    """The fold's versions seen as of (valid_at, known_at), read in Python: known then, not
    retracted, valid then (an event: happened by then), not merged (projections.predicates)."""
    seen = set()
    for (owner, card_id), history in folded.sink.versions.items():
        if owner != tenant:
            continue
        card = folded.sink.cards[(owner, card_id)]
        for v in history:
            known, valid = v["known"], v["valid"]
            if not _contains(known, known_at) or v["retracted"] or v["status"] == "merged":
                continue
            happened = valid.lower is None or valid.lower <= valid_at
            if happened if card["kind"] == "event" else _contains(valid, valid_at):
                seen.add((card_id, v["content"]))
    return seen


def current_in(folded: Any, tenant: str) -> set[tuple[UUID, str]]:
    """The fold's current cards: not retracted, validity open, not merged."""
    return {(card_id, row["content"]) for (owner, card_id), row in folded.sink.cards.items()
            if owner == tenant and row["retracted_at"] is None and row["valid_to"] is None
            and row["merged_into"] is None}


def _contains(r: Range, moment: datetime) -> bool:
    if r.isempty:
        return False
    if r.lower is not None and (moment < r.lower or (moment == r.lower and r.bounds[0] == "(")):
        return False
    return r.upper is None or moment < r.upper or (moment == r.upper and r.bounds[1] == "]")


class SystemMachine(RuleBasedStateMachine):
    env: Env
    strict = True
    #: How long the projection may take to catch up after a step (a broker kill included).
    catch_up_within = 120.0
    #: Steps between two rebuilds (each replays the whole log).
    rebuild_every = 40

    def __init__(self) -> None:
        super().__init__()
        env = self.env
        self.clock = Clock()
        self.app = create_app(env.settings, clock=self.clock)
        self.reads = ReadModels(env.runtime, env.settings.read_schema, pool_size=1)
        self.tenant = new_tenant()
        self.relay = Relay.from_settings(self.app.recorder, env.settings, env.keeper.bootstrap,
                                         name="machine", check_interval=0.5,
                                         request_timeout_ms=2_000, delivery_timeout_ms=5_000)
        self.relay.topic = env.topic
        self.projector: Any = None
        self.consumer: Any = None
        self.restarts = env.keeper.restarts
        #: The log before this example holds no event of its tenant.
        self.first = (self.app.recorder.max_notification_id() or 0) + 1
        self._connect()
        #: In the order written: ids are random per run, so a replayed example must not sort by them.
        self.slots: dict[UUID, None] = {}
        self.commitments: list[UUID] = []
        self.cases: list[UUID] = []
        self.projected = False
        self.started = self.clock.now

    # -- the parts --

    def _connect(self) -> None:
        env = self.env
        self.projector = make_projector(env.settings, self.app, admin=env.admin)
        # as the projector waits at its start; a port the killed broker left in TIME_WAIT can
        # keep its successor from binding for up to a minute (the keeper retries with backoff)
        wait_for_kafka(env.keeper.bootstrap, timeout=90)
        self.consumer = KafkaConsumer(
            bootstrap_servers=env.keeper.bootstrap, auto_offset_reset="earliest",
            enable_auto_commit=False, consumer_timeout_ms=200, reconnect_backoff_max_ms=500,
            request_timeout_ms=5_000)
        self._assign()

    def _assign(self) -> None:
        """Every partition of the topic, read from the start."""
        found = self.consumer.partitions_for_topic(self.env.topic) or set()
        count = max(len(found), self.env.settings.kafka_partitions)
        self.consumer.assign([TopicPartition(self.env.topic, p) for p in range(count)])
        self.consumer.seek_to_beginning()

    def _disconnect(self) -> None:
        self.consumer.close()
        self.projector.close()

    def teardown(self) -> None:
        self._disconnect()
        self.relay.close()
        self.reads.close()
        self.app.close()

    def _diverged(self, what: str) -> None:
        self.env.divergences.append(what)
        if self.strict:
            raise AssertionError(what)

    def _step(self) -> None:
        self.env.steps += 1
        self.projected = False

    # -- writes --

    @rule(label=st.sampled_from(LABELS), value=st.sampled_from(VALUES),
          back_days=st.integers(min_value=0, max_value=45), same_turn=st.booleans())
    def remember(self, label: str, value: str, back_days: int, same_turn: bool) -> None:
        turn = {"session_id": "s", "turn_id": "t"} if same_turn else {}
        result = self.app.remember(self.tenant, state(
            label, value, valid_from=self.clock.now - timedelta(days=back_days), **turn))
        self.slots[result.aggregate_id] = None  # type: ignore[index]
        if result.case_id and result.case_id not in self.cases:
            self.cases.append(result.case_id)
        self._step()

    @precondition(lambda self: bool(self.slots))
    @rule(data=st.data(), value=st.sampled_from(VALUES))
    def revise(self, data: st.DataObject, value: str) -> None:
        slot_id = data.draw(st.sampled_from(list(self.slots)))
        slot = self.app.load(self.tenant, slot_id, Slot)
        # an erased item is never revised in place (refused): only cards with a value are drawn
        revisable = [c for c in slot.current_cards if not is_erased(c.value)]
        if revisable:
            card = data.draw(st.sampled_from(revisable))
            result = self.app.revise(self.tenant, slot_id, Revise(card_id=card.card_id,
                                                                  content=value))
            if result.case_id and result.case_id not in self.cases:
                self.cases.append(result.case_id)
        self._step()

    @rule(days=st.integers(min_value=0, max_value=20))
    def time_passes(self, days: int) -> None:
        self.clock.advance(days=days, seconds=1)
        self.env.steps += 1

    @precondition(lambda self: bool(self.cases))
    @rule(decision=st.sampled_from(["keep_old", "accept_new", "both_valid"]))
    def arbitrate(self, decision: str) -> None:
        case_id = self.cases.pop(0)
        self.app.arbitrate(self.tenant, Arbitrate(case_id=case_id, decision=decision,
                                                  decided_by="tester"))
        self._step()

    @precondition(lambda self: bool(self.slots))
    @rule(data=st.data())
    def verify(self, data: st.DataObject) -> None:
        slot_id = data.draw(st.sampled_from(list(self.slots)))
        slot = self.app.load(self.tenant, slot_id, Slot)
        if slot.current_cards:
            card = data.draw(st.sampled_from(slot.current_cards))
            self.app.verify(self.tenant, slot_id, Verify(card_id=card.card_id))
        self._step()

    @rule(due_days=st.integers(min_value=-5, max_value=30))
    def promise(self, due_days: int) -> None:
        result = self.app.remember(self.tenant, Remember(
            kind="state", memory_type="commitment", content=f"send the report {len(self.commitments)}",
            owner="Ming", due_at=self.clock.now + timedelta(days=due_days)))
        self.commitments.append(result.card_id)  # type: ignore[arg-type]
        self._step()

    @precondition(lambda self: bool(self.commitments))
    @rule(data=st.data(), to=st.sampled_from(["wait", "resolve", "expire"]))
    def move(self, data: st.DataObject, to: str) -> None:
        card_id = data.draw(st.sampled_from(self.commitments))
        # a move its state does not allow; or of an erased commitment: nothing is written under it
        with contextlib.suppress(InvalidTransitionError, UnitErasedError):
            self.app.move(self.tenant, Move(card_id=card_id, to=to))
        self._step()

    @precondition(lambda self: bool(self.slots) or bool(self.commitments))
    @rule(data=st.data(), whole_slot=st.booleans())
    def erase(self, data: st.DataObject, whole_slot: bool) -> None:
        """Forget a card (of a slot, or a commitment) or a whole slot, written earlier."""
        slots = list(self.slots)
        if whole_slot and slots:
            command = Erase(unit="slot", slot_id=data.draw(st.sampled_from(slots)))
        else:
            cards = [c.card_id for slot_id in slots
                     for c in self.app.load(self.tenant, slot_id, Slot).cards.values()]
            # in the order written (ids are random: sorted by them, a replayed example would
            # draw another card)
            command = Erase(unit="card", card_id=data.draw(st.sampled_from(cards + self.commitments)))
        with contextlib.suppress(CardNotFoundError):  # a continuation of an erased card: no key
            self.app.erase(self.tenant, command.model_copy(update={"requested_by": "machine"}))
            self.env.erasures += 1
        self._step()

    # -- faults --

    @rule()
    def crash_mid_projection(self) -> None:
        """The projector dies mid-batch (its database work fails in the batch's second statement
        group, and the process with it): started again, it reads Kafka from its last committed
        offset, which is none (offsets are never committed: the tracking is the truth)."""
        real = self.projector.sink.apply_all
        calls = {"n": 0}

        def crash_on_second(cur: Any, ops: Any) -> None:
            calls["n"] += 1
            if calls["n"] == 2:
                import psycopg

                raise psycopg.OperationalError("connection lost")
            real(cur, ops)

        self.projector.sink.apply_all = crash_on_second
        try:
            self._deliver(until_head=False, retry=False)
        except ProjectionError:
            pass
        finally:
            self.projector.sink.apply_all = real
        self._disconnect()
        self._connect()
        self._step()

    @rule()
    def restart(self) -> None:
        """The projector process restarts: a new projector and a consumer from the start."""
        self._disconnect()
        self._connect()
        self._step()

    @precondition(lambda self: self.env.keeper.alive and self.env.broker.running)
    @rule()
    def kill_broker(self) -> None:
        """SIGKILL the broker (one that is up: the keeper's restart is not itself the fault under
        test); its keeper starts it again on its port, every message gone."""
        pid = self.env.broker.pid
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            self.env.kills += 1
        self._step()

    # -- projecting and comparing --

    def _deliver(self, until_head: bool = True, retry: bool = True) -> None:
        """Relay and consume until the projection has every event of the log (or, with
        ``until_head`` off, one round). As the Faust agent does, a batch the database dropped is
        applied again (``retry``), and a consumer whose broker came back empty reads it from the
        start (the agent's group is forgotten by the new broker, so it rejoins at the earliest)."""
        head = self.app.recorder.max_notification_id() or 0
        deadline = time.monotonic() + self.catch_up_within
        while True:
            self.relay.run_once(timeout=0.05)
            try:
                if self.env.keeper.restarts != self.restarts:
                    restarts = self.env.keeper.restarts
                    self._assign()
                    self.restarts = restarts
                polled = self.consumer.poll(timeout_ms=100, max_records=200)
            except KafkaError:  # the broker is down a moment: the client retries, so do we
                time.sleep(0.1)
                polled = {}
            for batch in polled.values():
                delivered = [decode(self.app.mapper, m.to_notification())
                             for record in batch for m in decode_messages(record.value)]
                for attempt in range(3):
                    try:
                        self.projector.apply_batch(delivered)
                        break
                    except ProjectionUnavailableError:
                        if not retry or attempt == 2:
                            raise
            if not until_head:
                return
            if self._caught_up(head):
                return
            if time.monotonic() > deadline:
                self._diverged(f"the projection did not reach notification {head} within "
                               f"{self.catch_up_within:.0f} s")
                return

    def _caught_up(self, head: int) -> bool:
        tracking = {o: v for (t, o), v in self._fold().tracking.items() if t == self.tenant}
        stored = dict(((o, v) for _, o, v in stored_rows(
            self.env.admin, self.env.settings.read_schema, "projection_tracking",
            ("tenant_id", "originator_id", "version"), self.tenant)))
        return stored == tracking and self.relay.position >= head

    def _fold(self, known_at: datetime | None = None) -> Any:
        head = self.app.recorder.max_notification_id() or 0
        ours = [d for d in read_log(self.app, self.first, head) if d.tenant_id == self.tenant]
        return fold(ours, head, known_at)

    @rule()
    def project(self) -> None:
        self._deliver()
        self.projected = True
        self.env.steps += 1

    @precondition(lambda self: self.projected)
    @invariant()
    def read_models_equal_the_fold(self) -> None:
        self.env.checks += 1
        folded = self._fold()
        for difference in differences(self.env.admin, self.env.settings.read_schema, folded,
                                      self.tenant):
            self._diverged(difference)
        current = {(c.card_id, c.content) for c in self.reads.current(self.tenant)}
        if current != current_in(folded, self.tenant):
            self._diverged(f"current differs from the fold: {current ^ current_in(folded, self.tenant)}")
        values = {(c.aggregate_id, c.content) for c in self.reads.current(self.tenant)
                  if c.aggregate_id in self.slots}
        expected = {(slot_id, None if is_erased(card.value) else card.value)
                    for slot_id in self.slots
                    for card in self.app.load(self.tenant, slot_id, Slot).current_cards}
        if values != expected:
            self._diverged(f"current slot values differ from the aggregates: {values ^ expected}")

    def moment(self, share: int) -> datetime:
        """A moment ``share`` thousandths of the way through the example's span: from the
        earliest valid_from it may write (45 days back) to a day after its clock."""
        first = self.started - timedelta(days=46)
        return first + (self.clock.now + timedelta(days=1) - first) * (share / 1000)

    @rule(valid=st.integers(min_value=0, max_value=1000),
          known=st.integers(min_value=0, max_value=1000))
    def ask_as_of(self, valid: int, known: int) -> None:
        """Caught up, the read models answer as of a moment on both timelines as the fold does."""
        self.project()
        valid_at, known_at = self.moment(valid), self.moment(known)
        answered = {(c.card_id, c.content)
                    for c in self.reads.as_of(self.tenant, valid_at, known_at)}
        expected = seen_as_of(self._fold(), self.tenant, valid_at, known_at)
        self.env.checks += 1
        if answered != expected:
            self._diverged(f"as of valid {valid_at:%Y-%m-%d %H:%M}, known "
                           f"{known_at:%Y-%m-%d %H:%M}: answered only {answered - expected}, "
                           f"fold only {expected - answered}")
        self.env.steps += 1

    @rule(known=st.one_of(st.none(), st.integers(min_value=0, max_value=1000)))
    def rebuild(self, known: int | None) -> None:
        """A rebuild equals the fold, as the live read models do; one as known at a moment, the
        fold of what was recorded by then."""
        if self.env.rebuilds and self.env.steps < self.env.rebuilds * self.rebuild_every:
            return  # a rebuild replays the whole log: a few per run are enough
        self.project()
        self.env.rebuilds += 1
        self.env.steps += 1
        known_at = None if known is None else self.moment(known)
        report = rebuild(self.env.settings, self.app, into="palimpsest_read_machine",
                         known_at=known_at, workers=1)
        folded = self._fold(known_at)
        self.env.checks += 1
        for difference in differences(self.env.admin, report.schema, folded, self.tenant):
            self._diverged(f"rebuild{'' if known_at is None else ' --known-at'}: {difference}")

