"""``palimpsest proposals``: what consolidation proposes, and its review, over a running server.

    palimpsest proposals [--review pending|accepted|rejected|all]   list them
    palimpsest proposals accept ID [--note TEXT]                     the ordinary merge/link/revision runs
    palimpsest proposals reject ID [--note TEXT]                     only the rejection is recorded
"""

from __future__ import annotations

from typing import Any

import typer

from services.entrypoints.cli.remote import AsJson, Key, Url, Wide, emit, remote, table, when

proposals = typer.Typer(help="Consolidation proposals: list them, accept or reject one.")
ProposalId = typer.Argument(..., metavar="ID", help="The proposal's id.")
Note = typer.Option("", "--note", help="Why (kept with the review).")
By = typer.Option(None, "--by", help="Who decides (default: the key).")


@proposals.callback(invoke_without_command=True)
def listing(ctx: typer.Context,
            review: str = typer.Option("pending", help="pending, accepted, rejected or all."),
            limit: int = typer.Option(50, min=1, max=1_000),
            wide: bool = Wide, url: str = Url, key: str = Key, as_json: bool = AsJson) -> None:
    """The tenant's proposals, newest first, with their rationale and score; an id, printed
    whole, is what `palimpsest proposals accept|reject ID` takes."""
    if ctx.invoked_subcommand is not None:
        return
    with remote(url, key, as_json) as server:
        answer = server.proposals(review=review, limit=limit)

    def human(found: dict[str, Any]) -> None:
        typer.echo(f"{len(found['proposals'])} proposal(s) ({review})")
        table(("id", "kind", "edge", "score", "from", "to", "rationale", "proposed", "review"),
              [(p["proposal_id"], p["kind"], p["edge"], f"{p['score']:.2f}", p["src_id"],
                p["dst_id"], p["rationale"], when(p["proposed_at"]), p["review"])
               for p in found["proposals"]],
              wrap=("rationale",),
              optional=("review", "proposed", "to", "from", "score", "edge"), wide=wide)

    emit(answer, as_json, human)


def _review(decision: str, proposal_id: str, note: str, by: str | None, url: str | None,
            key: str | None, as_json: bool) -> None:
    with remote(url, key, as_json) as server:
        answer = server.review_proposals(
            [{"proposal_id": proposal_id, "decision": decision, "note": note}], reviewed_by=by)

    def human(found: dict[str, Any]) -> None:
        for result in found["results"]:
            applied = result.get("applied") or {}
            typer.echo(f"{result['review']}: proposal {result['proposal_id']} ({result['kind']}, "
                       f"{result['edge']})" + (f"; {applied['outcome']}" if applied else ""))

    emit(answer, as_json, human)


@proposals.command()
def accept(proposal_id: str = ProposalId, note: str = Note, by: str = By, url: str = Url,
           key: str = Key, as_json: bool = AsJson) -> None:
    """Accept a proposal: its merge, link or revision runs as an ordinary command."""
    _review("accept", proposal_id, note, by, url, key, as_json)


@proposals.command()
def reject(proposal_id: str = ProposalId, note: str = Note, by: str = By, url: str = Url,
           key: str = Key, as_json: bool = AsJson) -> None:
    """Reject a proposal: only the rejection is recorded."""
    _review("reject", proposal_id, note, by, url, key, as_json)


def register(cli: typer.Typer) -> None:
    cli.add_typer(proposals, name="proposals")
