"""Every setting Palimpsest reads, in one place (environment prefix ``PALIMPSEST_``).

Nothing here does work at import time: ``Settings()`` reads the environment when it is built.
"""

from __future__ import annotations

import base64
import os
from datetime import timedelta
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from domain.policy import Policy


class RetrievalSettings(BaseModel):
    """The read path's numbers (DESIGN §2–§3), e.g. ``PALIMPSEST_RETRIEVAL__TOP_N=8``."""

    #: Cards in a result.
    top_n: int = 5
    #: Reciprocal Rank Fusion constant.
    rrf_k: int = 60
    semantic_top_k: int = 20
    #: Cosine similarity below which a neighbour is no match (a nearest-neighbour search always
    #: returns k cards, even for a question nothing answers), and the similarity at which a hit
    #: counts fully. Unset: the embedding model's measured values
    #: (``services.query.retrieval.semantic.MODEL_CALIBRATION``; docs/benchmarks.md).
    semantic_min_similarity: float | None = None
    semantic_full_similarity: float | None = None
    #: Nearest neighbours read from the vector index before the tenant / scope / time filter.
    semantic_candidates: int = 200
    #: IVFFlat lists compared exactly for each question (``ivfflat.probes``; more when the
    #: tenant's filter leaves too few): 10 of √rows found 0.98 of the exact top 5 at 100k cards.
    semantic_probes: int = Field(default=10, ge=1)
    #: Tag hits are all kept, up to this safety cap, ranked by how many query terms they share.
    tags_limit: int = 200
    #: A query unit (a word, with the labels of a concept it names) on more of a tenant's cards
    #: than this is counted only on the cards its rarer units found, so the route reads rows in
    #: proportion to the question's rarest words (a person's name on thousands of cards is not
    #: read whole). When every unit is that common, this many rows of the rarest are read.
    tags_common: int = Field(default=1_000, ge=1)
    fuzzy_top_k: int = 20
    #: Lowest share of the query's CJK bigrams a card must hold for the fuzzy route.
    fuzzy_threshold: float = 0.3
    #: Lowest pg_trgm word similarity of the query's Latin words for the fuzzy route.
    fuzzy_trigram_threshold: float = 0.5
    temporal_limit: int = 200
    graph_seeds: int = 5
    graph_neighbours: int = 30
    graph_budget_ms: int = 200
    #: A route that has not answered by then is skipped (and counted by its breaker).
    route_timeout_ms: int = 1_000
    #: A route is quarantined when at least ``breaker_slow_samples`` of its last
    #: ``breaker_window`` calls took longer than ``breaker_p95_ms`` and the others were not
    #: slowed alike (a busy machine slows every route).
    breaker_window: int = 10
    breaker_p95_ms: float = 150.0
    breaker_slow_samples: int = 3
    #: Nor while the machine is overloaded: more runnable tasks (or a 1-minute load average)
    #: than this many times its cores — a CPU-bound route (the query's embedding) is slowed by
    #: load far more than the others, which wait on the database. 0: never counts as busy.
    breaker_busy_load: float = 1.0
    breaker_quarantine_s: float = 600.0
    breaker_probe_s: float = 30.0
    #: Fusion: how much each route's evidence weighs (a graph neighbour is weaker evidence than a
    #: match; a slot the question names leads, and a slot it may name weighs ``slots``).
    weight_semantic: float = 1.0
    weight_tags: float = 1.0
    weight_fuzzy: float = 0.6
    weight_temporal: float = 1.0
    weight_graph: float = 0.3
    weight_slots: float = 1.0
    #: Half-life decay λ per day (DESIGN rule 5), as a bounded prior: a card keeps at least
    #: ``decay_floor`` of its relevance; ``decay="unbounded"`` is the old ``e^(−λ·Δt)`` for every
    #: card, the valid value of a slot included (for comparison only).
    decay: Literal["bounded", "unbounded"] = "bounded"
    decay_floor: float = Field(default=0.5, ge=0.0, le=1.0)
    decay_single_value: float = 0.02
    decay_multi_value: float = 0.005
    decay_event: float = 0.01
    decay_knowledge: float = 0.003
    #: A question for a current value (``services.query.retrieval.asks``: "where do I live now?";
    #: not asked as of a moment, naming no earlier time) over raw
    #: conversation turns: the latest turn on the question's matter is not decayed, and each
    #: earlier one keeps ``decay_conversation_floor + (1 − floor)·e^(−decay_conversation·Δt_days)``
    #: of its relevance, Δt counted to when the latest was said (``services.query.retrieval.present``).
    #: A turn is on the matter when a route matching the question's words or meaning found it at
    #: least ``conversation_matter_share`` as strongly as the strongest turn it found.
    #: A question about what was said or done ("when did …", 什麼時候): turns are not decayed.
    #: ``conversation_recency=False``: turns decay as any event (``decay_event``). The numbers
    #: were chosen on the dev set of ``make bench-latest-first`` (docs/benchmarks.md).
    conversation_recency: bool = True
    decay_conversation: float = Field(default=0.1, ge=0.0)
    decay_conversation_floor: float = Field(default=0.25, ge=0.0, le=1.0)
    conversation_matter_share: float = Field(default=0.4, ge=0.0, le=1.0)
    #: A label named by its embedding alone: at this similarity to the question the slot leads,
    #: at ``slot_weak_similarity`` it only weighs in (``weight_slots``).
    slot_similarity: float = 0.5
    slot_weak_similarity: float = 0.35
    #: Whether questions name slots through the lexicon's concepts (``services/query/retrieval/
    #: lexicon.py``: words, phrases and example questions); off, only through a label's own words
    #: and embedding (measured by ``palimpsest bench aging --without-lexicon``, decision 0015).
    lexicon: bool = True
    #: A concept named by the example questions the question's embedding is closest to: surely
    #: at this similarity and this far ahead of the next concept; to weigh in only at the weak
    #: pair (measured for the offline USE model on ``palimpsest bench aging --phrasings heldout``).
    slot_example_similarity: float = 0.4
    slot_example_margin: float = 0.06
    slot_example_weak_similarity: float = 0.35
    slot_example_weak_margin: float = 0.03
    #: A person named and none of their labels: their slots weigh in, the more the closer the
    #: question is to the question each label answers ("what is the occupation?"): the closest
    #: at ``slot_asked``, one ``slot_asked_spread`` of similarity behind it at the base weight.
    slot_asked: float = Field(default=0.6, ge=0.0, le=1.0)
    slot_asked_spread: float = Field(default=0.1, gt=0.0)
    #: At most this many valid items of a multi-value slot the question names lead the answer.
    slot_items: int = Field(default=20, ge=1)
    boost_current_project: float = 1.2
    boost_personal: float = 1.1
    boost_group: float = 1.0
    boost_global: float = 0.9
    aging_days: int = 180
    knowledge_stale_days: int = 90
    #: Threads that run routes, shared by the searches of one process: a search runs four routes
    #: and the slot stage side by side, so 6 serve one search at a time at full speed; raise both
    #: for concurrent callers.
    route_threads: int = Field(default=6, ge=1)
    #: Connections the query side keeps to PostgreSQL (a route holds one while it runs).
    connections: int = Field(default=8, ge=1)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PALIMPSEST_", env_nested_delimiter="__",
                                      extra="ignore")

    #: How much every process of the CLI logs (``DEBUG``, ``INFO``, ``WARNING``, ``ERROR``). Log
    #: lines name ids, kinds, counts and lengths, never stored text, at every level.
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING"
    #: ``postgres`` (the default: embedded unless ``database_url`` is set) or ``memory`` (no server).
    persistence: Literal["postgres", "memory"] = "postgres"
    #: Where the embedded PostgreSQL keeps its data.
    data_dir: Path = Path(".palimpsest")
    #: An administrator DSN for an external PostgreSQL; unset = the embedded server.
    database_url: SecretStr | None = None
    #: The role the application runs as: it may read and append events, never update or delete.
    #: Create the schema, event table, runtime role and guards when the application starts.
    #: Turn off where a separate ``palimpsest init-db`` step does it.
    auto_bootstrap: bool = True
    runtime_role: str = "palimpsest_app"
    runtime_password: SecretStr | None = None
    #: The role projectors run as: reads the log, writes the read models, tenant by tenant.
    projector_role: str = "palimpsest_projector"
    projector_password: SecretStr | None = None
    #: The role the HTTP processes run as: it reads and writes only the tenant of the request's key
    #: (row-level security on every table it may read: decision 0018).
    http_role: str = "palimpsest_http"
    http_password: SecretStr | None = None
    #: Events per projector transaction (Kafka or the log): each transaction also writes every
    #: tenant's tracking and position, so larger ones cost less per event.
    projector_batch: int = Field(default=2_000, ge=1)
    #: Processes that fold the log in ``palimpsest rebuild``, each a share of the aggregates
    #: (forked: the code and tokenizer are loaded once); 1 folds it in the calling process.
    rebuild_workers: int = Field(default_factory=lambda: min(4, os.cpu_count() or 1), ge=1)
    #: Run the embedding projection inside the projector process.
    projector_embeddings: bool = True
    #: Once a projector says it applied cards, the embedder waits this long for more before it
    #: embeds them in one batch (the offline encoder does twice the texts per CPU-second at
    #: batches of 16 as one at a time); the delay a card waits to be searchable by meaning.
    embedding_window_ms: int = Field(default=100, ge=0, le=10_000)
    #: The PostgreSQL schema that holds the event store.
    event_schema: str = "palimpsest"
    pool_size: int = 5
    lock_timeout_seconds: int = 5
    #: Aggregates kept in memory between commands (fast-forwarded from the store on every load,
    #: so another process's writes are always seen); 0 turns the cache off.
    aggregate_cache_size: int = 10_000
    #: How often a command reloads and decides again after losing a race on an aggregate.
    conflict_retries: int = 3
    #: Save the decisions of concurrent commands of one process in one event-store transaction
    #: (they share its table lock and its flush to disk; ``services.command.commit``).
    group_commit: bool = True

    #: Kafka: unset = the embedded broker (tansu) on a free loopback port under ``data_dir``.
    kafka_bootstrap: str | None = None
    kafka_topic: str = "palimpsest.events"
    #: The ingest relay publishes only the turns handed to the extraction worker here
    #: (``Ingestion.Received`` and ``Ingestion.RerunRequested``), in the main topic's format.
    kafka_ingest_topic: str = "palimpsest.ingest"
    #: The extraction workers' consumer group on the ingest topic (workers share its partitions).
    ingest_group: str = "palimpsest-ingest"
    #: Turns a worker takes from the topic at once; their offsets are committed together.
    ingest_batch: int = Field(default=50, ge=1, le=1_000)
    #: Model calls a worker makes at once, shared by its two rounds side by side (a round takes
    #: the next turn of each of its sessions, in order; a round's cards are saved together).
    ingest_concurrency: int = Field(default=8, ge=1, le=64)
    #: What a turn's extraction is shown besides the turn (DESIGN rule 12): the session's last
    #: ``ingest_context_turns`` turns, and at most ``ingest_catalogue_slots`` slots (label,
    #: cardinality, current values) of the people the turn is about. Before reading them the
    #: worker waits up to ``ingest_catalogue_wait_seconds`` for the read models to hold the slots
    #: it last wrote for the tenant (a projector that is down slows extraction by this much a
    #: round, never stops it).
    ingest_context_turns: int = Field(default=4, ge=0, le=50)
    #: The roles whose turns are extracted; the others (an assistant's reply, a tool's output)
    #: are stored, searchable and shown as context to the next turn, but no card is made of them:
    #: what an assistant suggests is not what the user said.
    ingest_extract_roles: tuple[str, ...] = ("user",)
    ingest_catalogue_slots: int = Field(default=40, ge=0, le=500)
    ingest_catalogue_wait_seconds: float = Field(default=2.0, ge=0.0)
    #: Slot resolution: a candidate that sits at least ``ingest_label_reuse`` close to one of its
    #: subject's slots of no other concept (the mean of the labels' embedding similarity and that
    #: of "label: value" against the slot's current value) reuses that slot; at least
    #: ``ingest_label_near`` opens a new slot proposed as the other's twin (consolidation).
    ingest_label_reuse: float = Field(default=0.6, ge=0.0, le=1.0)
    ingest_label_near: float = Field(default=0.45, ge=0.0, le=1.0)
    #: Grounding: a candidate's value none of whose words stand in the turn (or the earlier turns
    #: shown) is written only when its embedding sits at least this close to one of them.
    ingest_grounding_floor: float = Field(default=0.25, ge=0.0, le=1.0)
    kafka_partitions: int = 4
    #: At most this many consecutive events of one tenant travel in one Kafka message.
    kafka_events_per_message: int = Field(default=100, ge=1)
    #: Short group timeouts: a consumer group's first join takes seconds, not tens of seconds.
    kafka_session_timeout_ms: int = 6_000
    kafka_rebalance_timeout_ms: int = 6_000
    kafka_max_poll_interval_ms: int = 10_000
    #: Longest a consumer's fetch waits for records: bounds the projector's delivery latency.
    kafka_fetch_max_wait_ms: int = 100
    #: Read models live in this schema; ``palimpsest rebuild`` builds a fresh one and swaps it in.
    read_schema: str = "palimpsest_read"
    #: Embeddings: ``use`` (offline Universal Sentence Encoder, 512-d) or ``openai`` (any
    #: OpenAI-compatible base URL).
    embedder: Literal["use", "openai"] = "use"
    openai_base_url: str | None = None
    openai_api_key: SecretStr | None = None
    openai_embedding_model: str = "text-embedding-3-small"
    embedding_dimensions: int = 512
    #: Threads of the BLAS library numpy uses (the offline encoder, label similarities). One:
    #: their matrices are small, and idle BLAS threads spin on the cores PostgreSQL and the other
    #: routes need (at 100k cards a search cost 38 ms of the process's CPU with two, 12 with one).
    blas_threads: int = Field(default=1, ge=1)
    #: ``ivfflat``, ``hnsw``, ``none``, or ``auto``: IVFFlat wherever vector distances work (on the
    #: embedded server, where its pgvector build runs on this CPU); see
    #: ``projections.vector_index``.
    vector_index: Literal["auto", "ivfflat", "hnsw", "none"] = "auto"
    #: How often a projector checks whether the IVFFlat index is due to be built (again).
    vector_index_interval_seconds: float = Field(default=60.0, gt=0.0)

    #: Ingest extraction (DESIGN rule 9): an OpenAI-compatible chat completions server that turns
    #: conversation turns into candidate cards. Unset = extraction is off (turns are still stored
    #: and searchable as event cards); e.g. ``http://localhost:11434/v1`` for Ollama.
    llm_base_url: str | None = None
    #: Its API key; a local server usually needs none.
    llm_api_key: SecretStr | None = None
    llm_model: str = "gpt-4o-mini"
    #: Longest one completion request may take.
    llm_timeout_seconds: float = Field(default=30.0, gt=0.0)
    #: Most tokens one answer may hold: a model that loops is cut off there (its answer then
    #: fails to parse and is retried, then dead-lettered) instead of generating until its
    #: context is full. An extraction answer takes a few hundred.
    llm_max_tokens: int = Field(default=1_024, ge=16)
    #: Attempts after the first when the model fails or answers garbage; then the turn is
    #: dead-lettered. The first pause is ``llm_backoff_seconds``, doubling each time (with
    #: jitter), never longer than ``llm_backoff_max_seconds``. A turn's ``occurred_at_hint`` may
    #: lie at most ``clock_skew_seconds`` after the turn was said.
    llm_retries: int = Field(default=3, ge=0)
    llm_backoff_seconds: float = Field(default=1.0, ge=0.0)
    llm_backoff_max_seconds: float = Field(default=30.0, ge=0.0)

    #: The zone relative time words in queries (昨天, "last week") are resolved in, and the zone
    #: ``<current_time>`` is shown in; an IANA name.
    time_zone: str = "UTC"
    #: The read path: ``PALIMPSEST_RETRIEVAL__<FIELD>`` (see ``RetrievalSettings``).
    retrieval: RetrievalSettings = RetrievalSettings()

    #: The HTTP server of ``palimpsest serve``.
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8765, ge=0, le=65_535)
    #: HTTP worker processes ``serve`` answers requests with, sharing its socket, each with its
    #: own group commit (``services.entrypoints.api_workers``). Default: one per core, at most 4.
    api_workers: int = Field(default_factory=lambda: min(4, os.cpu_count() or 1), ge=1, le=64)
    #: Whether ``serve`` runs the pipeline (broker, relay, projector, extraction worker) too; off
    #: where those run as services of their own (``docker compose``'s relay, projector, ingest).
    serve_pipeline: bool = True
    #: The key the console's session cookies are sealed with (a Fernet key: 32 bytes in URL-safe
    #: base64). Unset: ``serve`` makes one at each start and hands it to its HTTP workers (a
    #: restart signs everyone out); several ``serve`` processes behind one balancer need the same.
    console_session_key: SecretStr | None = None
    #: Largest request body the REST edge reads; larger ones are refused (413) unread.
    api_max_body_bytes: int = Field(default=1_000_000, ge=1_024)
    #: Longest a read passing ``min_position`` waits for the read models to include it.
    api_max_wait_seconds: float = Field(default=5.0, ge=0.0)
    #: A secret mixed into every stored API key hash (HMAC-SHA-256); unset = plain SHA-256.
    key_pepper: SecretStr | None = None
    #: A bearer token that may scrape ``/metrics`` besides a key holding ``memory:admin`` (what
    #: Prometheus is given); unset or blank = only such a key.
    metrics_token: SecretStr | None = None
    #: The master key that wraps the erasure keys (crypto-shredding, ``infra.keyring``): base64 of
    #: 32 bytes, or 64 hex digits. Unset = ``<data_dir>/master.key``, made (mode 0600) while the
    #: store holds no sealed key. Lose it and every sealed field is lost with it.
    master_key: SecretStr | None = None
    #: Seal the personal fields of every event under their erasure unit's key (``infra.sealing``).
    #: Off only to measure what sealing costs: a store written either way must be read the same
    #: way, and nothing written with it off can be erased.
    seal_events: bool = True
    #: How often ``serve`` applies the tenants' retention policies for raw conversation turns
    #: (``services.command.retention``; a tenant without one keeps every turn), and how many turns a
    #: tenant it erases at most a run (the rest the next run).
    retention_interval_seconds: float = Field(default=3_600.0, gt=0.0)
    retention_batch: int = Field(default=500, ge=1, le=100_000)

    #: Consolidation (DESIGN rule 10): the worker ``serve`` runs proposes duplicates and
    #: contradictions; nothing is applied until a reviewer accepts. Cosine similarity at which two
    #: cards' embeddings count as near-identical (a duplicate).
    consolidation_similarity: float = Field(default=0.92, ge=0.0, le=1.0)
    #: Similarity at which two knowledge cards, only one of them negated, read as contradicting.
    consolidation_contradiction_similarity: float = Field(default=0.8, ge=0.0, le=1.0)
    #: Seconds from the end of one scan of every tenant to the start of the next.
    consolidation_interval_seconds: float = Field(default=60.0, gt=0.0)
    #: Per tenant, how many of the newest current cards one scan compares by embedding, pairwise.
    consolidation_max_cards: int = Field(default=2_000, ge=2)
    #: Run the consolidation worker inside ``palimpsest serve``.
    consolidation_enabled: bool = True

    max_content_chars: int = 8_000
    max_tags: int = 64
    max_tag_chars: int = 64
    clock_skew_seconds: int = 300
    turn_window_seconds: int = 120
    high_frequency_changes: int = 3
    frequency_window_days: int = 30
    large_span_days: int = 30

    @field_validator("console_session_key", mode="before")
    @classmethod
    def _fernet_key(cls, value: object) -> object:
        """Blank is unset; anything else must be a Fernet key, refused at start otherwise."""
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if text is None or (isinstance(text, str) and not text.strip()):
            return None
        try:
            if len(base64.urlsafe_b64decode(str(text).encode())) == 32:
                return value
        except (ValueError, TypeError):
            pass
        raise ValueError("console_session_key must be 32 bytes in URL-safe base64 (a Fernet key)")

    def policy(self) -> Policy:
        return Policy(
            max_content_chars=self.max_content_chars,
            max_tags=self.max_tags,
            max_tag_chars=self.max_tag_chars,
            clock_skew=timedelta(seconds=self.clock_skew_seconds),
            turn_window=timedelta(seconds=self.turn_window_seconds),
            high_frequency_changes=self.high_frequency_changes,
            frequency_window=timedelta(days=self.frequency_window_days),
            large_span=timedelta(days=self.large_span_days),
        )

    def eventsourcing_env(
        self, *, host: str = "", port: int = 0, dbname: str = "", user: str = "",
        password: str | None = None,
    ) -> dict[str, str]:
        """The ``env`` mapping eventsourcing reads (``PERSISTENCE_MODULE``, ``POSTGRES_*``)."""
        cache = {"AGGREGATE_CACHE_MAXSIZE": str(self.aggregate_cache_size)} \
            if self.aggregate_cache_size else {}
        if self.persistence == "memory":
            return {"PERSISTENCE_MODULE": "eventsourcing.popo", **cache}
        return {
            **cache,
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": dbname,
            "POSTGRES_HOST": host,
            "POSTGRES_PORT": str(port),
            "POSTGRES_USER": user,
            "POSTGRES_PASSWORD": password or "",
            "POSTGRES_SCHEMA": self.event_schema,
            "POSTGRES_POOL_SIZE": str(self.pool_size),
            "POSTGRES_LOCK_TIMEOUT": str(self.lock_timeout_seconds),
            "CREATE_TABLE": "n",
            # adds the keys sealed events need in the events' own transaction (infra.sealing)
            "APPLICATION_RECORDER_TOPIC": "infra.sealing:SealedPostgresRecorder",
        }
