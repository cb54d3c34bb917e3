"""A card's neighbourhood of typed edges (1 or 2 hops), for the graph page and a card's page.

Edges are read as ``card_relations`` holds them: from a card to a card, or to a state card's
*slot* (an event ``affects`` it, knowledge links to it), which stands for each card of that slot.
:func:`neighbourhood` is pure: the cards and the edges read, out a bounded graph whose every edge
joins two of its cards. :func:`gather` reads them through the query-side operations (``history``
for a card's edges, ``list_cards`` with ``related_to`` for the cards at their ends, a slot's
included, ``get_memories`` for the card itself), so a page sees what REST would, for the signed-in
key's tenant only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

#: The most cards one graph shows (the card itself included).
LIMIT = 60
#: The longest a node's label is drawn.
LABEL_CHARS = 48


@dataclass(frozen=True)
class Node:
    card_id: UUID
    #: The card's slot for a state card (an edge to the slot reaches it), else its own id.
    aggregate_id: UUID | None
    kind: str
    memory_type: str
    #: Its value or title; None for a tombstone (erased).
    text: str | None
    subject: str | None = None
    label: str | None = None
    #: current, superseded, retracted or erased.
    status: str = "current"

    @property
    def caption(self) -> str:
        text = "erased" if self.text is None else " ".join(self.text.split())
        return text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"


@dataclass(frozen=True)
class Link:
    src: UUID
    dst: UUID
    edge: str


@dataclass(frozen=True)
class Placed:
    node: Node
    #: How many edges from the card in the middle (0 for that card).
    hop: int


@dataclass(frozen=True)
class Graph:
    center: UUID
    nodes: tuple[Placed, ...]
    links: tuple[Link, ...]
    #: More cards were in reach than :data:`LIMIT` allows.
    truncated: bool

    def elements(self, href: Callable[[UUID], str]) -> list[dict[str, Any]]:
        """The graph as Cytoscape.js elements; ``href`` gives a card's page."""
        nodes = [{"data": {"id": str(p.node.card_id), "label": p.node.caption, "kind": p.node.kind,
                           "status": p.node.status, "hop": p.hop, "href": href(p.node.card_id)},
                  "classes": "center" if p.hop == 0 else p.node.kind} for p in self.nodes]
        edges = [{"data": {"id": f"{link.src}-{link.edge}-{link.dst}", "source": str(link.src),
                           "target": str(link.dst), "label": link.edge}} for link in self.links]
        return nodes + edges

    def edges_of(self, card_id: UUID) -> list[tuple[str, str, Node]]:
        """The card's own edges: (edge, ``out`` or ``in``, the card at the other end)."""
        by_id = {p.node.card_id: p.node for p in self.nodes}
        found = [(link.edge, "out", by_id[link.dst]) for link in self.links if link.src == card_id]
        return found + [(link.edge, "in", by_id[link.src]) for link in self.links
                        if link.dst == card_id]


def neighbourhood(center: UUID, nodes: Mapping[UUID, Node], links: Iterable[Link],
                  hops: int = 1, limit: int = LIMIT) -> Graph:
    """The cards within ``hops`` edges of ``center`` (nearest first, at most ``limit``) and the
    edges between them. An edge's end that is a slot stands for each of the slot's cards."""
    resolved = _resolve(nodes, links)
    around: dict[UUID, list[UUID]] = {}
    for link in resolved:
        around.setdefault(link.src, []).append(link.dst)
        around.setdefault(link.dst, []).append(link.src)
    placed: dict[UUID, int] = {center: 0}
    ring, truncated = [center], False
    for hop in range(1, hops + 1):
        found = sorted({n for card in ring for n in around.get(card, ()) if n not in placed}, key=str)
        room = max(limit - len(placed), 0)
        truncated = truncated or len(found) > room
        ring = found[:room]
        placed.update((card_id, hop) for card_id in ring)
    kept = tuple(Placed(nodes[c], hop) for c, hop in placed.items() if c in nodes)
    ids = {p.node.card_id for p in kept}
    edges = tuple(link for link in resolved if link.src in ids and link.dst in ids)
    return Graph(center=center, nodes=kept, links=edges, truncated=truncated)


def _resolve(nodes: Mapping[UUID, Node], links: Iterable[Link]) -> list[Link]:
    """Each edge between two known cards, a slot's edge once per card of the slot; once each."""
    slots: dict[UUID, list[UUID]] = {}
    for node in nodes.values():
        if node.kind == "state" and node.aggregate_id is not None:
            slots.setdefault(node.aggregate_id, []).append(node.card_id)

    def ends(end: UUID) -> list[UUID]:
        return [end] if end in nodes else slots.get(end, [])

    found = {Link(src, dst, link.edge): None for link in links
             for src in ends(link.src) for dst in ends(link.dst) if src != dst}
    return list(found)


# ---- reading it through the operations ---------------------------------------------------------

Run = Callable[[str, dict[str, Any]], Any]


def gather(run: Run, center: UUID, hops: int = 1,
           limit: int = LIMIT) -> tuple[dict[UUID, Node], list[Link]]:
    """The cards and edges around ``center`` as far as ``hops``: ``run(name, payload)`` runs an
    operation as the signed-in key (``CardNotFoundError`` when the card is not the tenant's)."""
    nodes: dict[UUID, Node] = {}
    links: list[Link] = []
    for card in run("get_memories", {"card_ids": [center]}).cards:
        nodes[card.card_id] = _from_card(card)
    ring, seen = [center], {center}
    for _ in range(hops):
        nearer: list[UUID] = []
        for card_id in ring:
            _read_edges(run, card_id, nodes, links)
            page = run("list_cards", {"related_to": card_id, "include_superseded": True,
                                      "limit": limit})
            for card in page.cards:
                nodes.setdefault(card.card_id, _from_card(card))
                if card.card_id not in seen and len(seen) < limit:
                    seen.add(card.card_id)
                    nearer.append(card.card_id)
        ring = nearer
    for card_id in ring:  # the outer ring's edges: their type, where they reach a slot
        _read_edges(run, card_id, nodes, links)
    return nodes, links


def _read_edges(run: Run, card_id: UUID, nodes: dict[UUID, Node], links: list[Link]) -> None:
    for card in run("history", {"ref": str(card_id)}).cards:
        if card.card_id not in nodes:
            latest = card.versions[-1] if card.versions else None
            nodes[card.card_id] = Node(
                card.card_id, None, card.kind, card.memory_type,
                None if latest is None or card.erased else (latest.title or latest.value),
                card.subject, card.label, "erased" if card.erased else "current")
        links.extend(Link(e["src_id"], e["dst_id"], e["edge"]) for e in card.edges)


def _from_card(card: Any) -> Node:
    """A node of a card as ``get_memories`` or ``list_cards`` answers it."""
    erased = getattr(card, "erased_at", None) is not None
    text = card.title or getattr(card, "value", None) or getattr(card, "content", None)
    status = ("erased" if erased else "retracted" if getattr(card, "retracted_at", None)
              else "superseded" if card.superseded else "current")
    return Node(card.card_id, card.aggregate_id, card.kind, card.memory_type,
                None if erased else text, card.subject, card.label, status)
