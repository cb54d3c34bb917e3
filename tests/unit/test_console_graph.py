"""A card's neighbourhood (services.console.graph), without a server: typed edges resolved to
cards (a slot's edge to each of its cards), the cards within 1 or 2 hops, bounded, and what
``gather`` asks the operations for."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from uuid import UUID, uuid4

from services.console.graph import Link, Node, gather, neighbourhood


def node(kind: str = "knowledge", text: str | None = "a note", slot: UUID | None = None,
         **extra: Any) -> Node:
    card_id = uuid4()
    return Node(card_id, slot or card_id, kind, "note" if kind == "knowledge" else "fact", text, **extra)


def ids(graph: Any) -> dict[UUID, int]:
    return {p.node.card_id: p.hop for p in graph.nodes}


def test_one_hop_keeps_the_cards_linked_to_the_card_and_their_edges() -> None:
    a, b, c, far = node(), node(), node(), node()
    links = [Link(a.card_id, b.card_id, "related_to"), Link(c.card_id, a.card_id, "contradicts"),
             Link(b.card_id, far.card_id, "derives")]
    nodes = {n.card_id: n for n in (a, b, c, far)}
    graph = neighbourhood(a.card_id, nodes, links, hops=1)
    assert ids(graph) == {a.card_id: 0, b.card_id: 1, c.card_id: 1}
    assert set(graph.links) == {links[0], links[1]}, "only edges between kept cards"
    assert not graph.truncated
    two = neighbourhood(a.card_id, nodes, links, hops=2)
    assert ids(two)[far.card_id] == 2 and set(two.links) == set(links)


def test_an_edge_to_a_slot_reaches_each_card_of_the_slot() -> None:
    slot = uuid4()
    old = node("state", "Taipei", slot, status="superseded")
    new = node("state", "Kyoto", slot)
    moved = node("event", "Moved to Kyoto")
    links = [Link(moved.card_id, slot, "affects"), Link(new.card_id, old.card_id, "supersedes")]
    nodes = {n.card_id: n for n in (old, new, moved)}
    graph = neighbourhood(moved.card_id, nodes, links)
    assert ids(graph) == {moved.card_id: 0, old.card_id: 1, new.card_id: 1}
    assert {(x.src, x.dst, x.edge) for x in graph.links} == {
        (moved.card_id, old.card_id, "affects"), (moved.card_id, new.card_id, "affects"),
        (new.card_id, old.card_id, "supersedes")}
    assert graph.edges_of(new.card_id) == [("supersedes", "out", old), ("affects", "in", moved)]


def test_the_count_of_cards_is_bounded_nearest_first() -> None:
    center = node()
    ring = [node() for _ in range(10)]
    further = [node() for _ in range(10)]
    links = [Link(center.card_id, n.card_id, "related_to") for n in ring]
    links += [Link(n.card_id, m.card_id, "related_to") for n, m in zip(ring, further, strict=True)]
    nodes = {n.card_id: n for n in (center, *ring, *further)}
    graph = neighbourhood(center.card_id, nodes, links, hops=2, limit=15)
    hops = list(ids(graph).values())
    assert len(hops) == 15 and graph.truncated
    assert hops.count(1) == 10 and hops.count(2) == 4
    assert all(x.src in ids(graph) and x.dst in ids(graph) for x in graph.links)


def test_a_lone_card_and_duplicate_edges() -> None:
    a, b = node(), node()
    nodes = {a.card_id: a, b.card_id: b}
    assert ids(neighbourhood(a.card_id, nodes, [])) == {a.card_id: 0}
    twice = [Link(a.card_id, b.card_id, "related_to")] * 2 + [Link(a.card_id, uuid4(), "derives")]
    graph = neighbourhood(a.card_id, nodes, twice)
    assert graph.links == (Link(a.card_id, b.card_id, "related_to"),), "unknown ends are dropped"


def test_elements_for_cytoscape_name_each_cards_page() -> None:
    a, b = node(text="記憶體 " + "x" * 80), node(text=None, status="erased")
    graph = neighbourhood(a.card_id, {a.card_id: a, b.card_id: b},
                          [Link(a.card_id, b.card_id, "evidenced_by")])
    elements = graph.elements(lambda card_id: f"/console/cards/{card_id}")
    first, second, edge = elements
    assert first["classes"] == "center" and first["data"]["href"] == f"/console/cards/{a.card_id}"
    assert first["data"]["label"].startswith("記憶體 ") and len(first["data"]["label"]) == 48
    assert second["data"]["label"] == "erased" and second["data"]["status"] == "erased"
    assert edge["data"] == {"id": f"{a.card_id}-evidenced_by-{b.card_id}", "source": str(a.card_id),
                            "target": str(b.card_id), "label": "evidenced_by"}


class Operations:
    """``run(name, payload)`` over a little graph: what each operation would answer."""

    def __init__(self, cards: dict[UUID, SimpleNamespace], links: list[Link]) -> None:
        self.cards, self.links, self.calls = cards, links, []  # type: ignore[var-annotated]

    def __call__(self, name: str, payload: dict[str, Any]) -> Any:
        self.calls.append((name, payload))
        if name == "get_memories":
            return SimpleNamespace(cards=[self.cards[c] for c in payload["card_ids"] if c in self.cards])
        if name == "history":
            card = self.cards[UUID(payload["ref"])]
            edges = [{"src_id": x.src, "dst_id": x.dst, "edge": x.edge} for x in self.links
                     if card.card_id in (x.src, x.dst)]
            return SimpleNamespace(cards=[SimpleNamespace(
                card_id=card.card_id, kind=card.kind, memory_type=card.memory_type,
                subject=card.subject, label=card.label, erased=False, edges=edges,
                versions=[SimpleNamespace(value=card.value, title=None)])])
        assert name == "list_cards" and payload["include_superseded"]
        anchor = self.cards[payload["related_to"]]
        near = {anchor.card_id, anchor.aggregate_id}
        ends = {x.dst for x in self.links if x.src in near} | {x.src for x in self.links if x.dst in near}
        found = [c for c in self.cards.values() if c.card_id != anchor.card_id
                 and (c.card_id in ends or c.aggregate_id in ends)]
        return SimpleNamespace(cards=found)


def stored(kind: str, value: str, slot: UUID | None = None) -> SimpleNamespace:
    card_id = uuid4()
    return SimpleNamespace(card_id=card_id, aggregate_id=slot or card_id, kind=kind,
                           memory_type="fact", value=value, title=None, subject="user",
                           label="address" if kind == "state" else None, superseded=False)


def test_gather_reads_the_edges_and_the_cards_at_their_ends() -> None:
    slot = uuid4()
    home, event, note, far = (stored("state", "Kyoto", slot), stored("event", "Moved"),
                              stored("knowledge", "Moving checklist"), stored("knowledge", "Boxes"))
    links = [Link(event.card_id, slot, "affects"), Link(note.card_id, event.card_id, "evidenced_by"),
             Link(far.card_id, note.card_id, "related_to")]
    run = Operations({c.card_id: c for c in (home, event, note, far)}, links)
    nodes, found = gather(run, home.card_id, hops=1)
    assert set(nodes) == {home.card_id, event.card_id}
    graph = neighbourhood(home.card_id, nodes, found)
    assert {(x.src, x.dst, x.edge) for x in graph.links} == {(event.card_id, home.card_id, "affects")}, \
        "an edge to the slot is typed from the far card's history"
    nodes, found = gather(run, home.card_id, hops=2)
    graph = neighbourhood(home.card_id, nodes, found, hops=2)
    assert ids(graph) == {home.card_id: 0, event.card_id: 1, note.card_id: 2}
    assert {name for name, _ in run.calls} == {"get_memories", "history", "list_cards"}
