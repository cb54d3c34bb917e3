"""How the domain's value objects travel inside stored events."""

from __future__ import annotations

from eventsourcing.persistence import JSONTranscoder

from domain.values import Provenance, Scope, ScopeKind
from infra.transcodings import register_domain_transcodings


def transcoder() -> JSONTranscoder:
    made = JSONTranscoder()
    register_domain_transcodings(made)
    return made


def test_a_value_reads_back_as_itself() -> None:
    codec = transcoder()
    value = {"scope": Scope(ScopeKind.PROJECT, project_id="fibon"),
             "provenance": Provenance(source="user_stated")}
    assert codec.decode(codec.encode(value)) == value


def test_a_value_stored_with_a_field_since_removed_still_reads() -> None:
    stored = (b'{"_type_":"scope","_data_":{"kind":"project","project_id":"fibon",'
              b'"group_id":null,"retired_field":1}}')
    assert transcoder().decode(stored) == Scope(ScopeKind.PROJECT, project_id="fibon")


def test_fields_are_written_in_their_declared_order() -> None:
    encoded = transcoder().encode(Scope(ScopeKind.GROUP, group_id="ops"))
    assert encoded == b'{"_type_":"scope","_data_":{"kind":"group","project_id":null,"group_id":"ops"}}'
