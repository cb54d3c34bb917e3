"""A command's receipt: the answer given to a client request id, kept so a retry gets it again."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TenantAggregate, derived_id


class Receipt(TenantAggregate):
    @staticmethod
    def create_id(tenant_id: str, request_id: str) -> UUID:
        return derived_id("receipt", tenant_id, request_id)

    @event("Issued")
    def __init__(
        self, tenant_id: str, request_id: str, command: str, fingerprint: str,
        answer: dict[str, Any], timestamp: datetime,
    ) -> None:
        self.tenant_id = tenant_id
        self.request_id = request_id
        self.command = command
        self.fingerprint = fingerprint
        self.answer = answer
