"""The read path's numbers in one value, made once from ``RetrievalSettings``: what every stage is
handed besides the question."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from infra.settings import RetrievalSettings
from services.query.retrieval.present import ConversationPrior
from services.query.retrieval.routes import ROUTES
from services.query.retrieval.scoring import DecayPolicy, ScopeBoost


@dataclass(frozen=True)
class Tuning:
    decay: DecayPolicy = DecayPolicy()
    boosts: ScopeBoost = ScopeBoost()
    rrf_k: int = 60
    top_n: int = 5
    aging_days: int = 180
    knowledge_stale_days: int = 90
    #: Each route's weight in the fusion (a route not named weighs 1).
    weights: Mapping[str, float] = field(default_factory=dict)
    #: Most cards of named slots that lead an answer (every item of a multi-value slot, up to this).
    slot_items: int = 20
    conversation: ConversationPrior = ConversationPrior()

    @classmethod
    def from_settings(cls, settings: RetrievalSettings) -> Tuning:
        return cls(
            decay=DecayPolicy(settings.decay_single_value, settings.decay_multi_value,
                              settings.decay_event, settings.decay_knowledge,
                              floor=settings.decay_floor, bounded=settings.decay == "bounded"),
            boosts=ScopeBoost(settings.boost_current_project, settings.boost_personal,
                              settings.boost_group, settings.boost_global),
            rrf_k=settings.rrf_k, top_n=settings.top_n, aging_days=settings.aging_days,
            knowledge_stale_days=settings.knowledge_stale_days, weights=weights(settings),
            slot_items=settings.slot_items,
            conversation=ConversationPrior(settings.decay_conversation,
                                           settings.decay_conversation_floor,
                                           settings.conversation_matter_share,
                                           enabled=settings.conversation_recency))


def weights(settings: RetrievalSettings) -> dict[str, float]:
    """Each route's weight in the fusion, the slot stage's included."""
    return {name: getattr(settings, f"weight_{name}") for name in (*ROUTES, "slots")}
