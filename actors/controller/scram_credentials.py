"""AlterUserScramCredentials at the controller (brokers forward it from clients, KIP-590): the
SCRAM credentials in the metadata log (Kafka's ScramControlManager).

An upsertion carries a salt and a salted password; the controller derives StoredKey and
ServerKey from them (runtime/net/scram.py) and records only those, with the salt and the
iterations, in a UserScramCredentialRecord: neither the password nor the salted password is
ever written. A deletion becomes a RemoveUserScramCredentialRecord. Refusals, per user, with
Kafka's codes and messages:

    empty user name                                   UNACCEPTABLE_CREDENTIAL
    unknown mechanism                                 UNSUPPORTED_SASL_MECHANISM
    iterations below 4096 / above 16384               UNACCEPTABLE_CREDENTIAL
    an empty salt or a salted password of wrong size  UNACCEPTABLE_CREDENTIAL
    a user altered twice for one mechanism            DUPLICATE_RESOURCE
    deleting a credential that does not exist         RESOURCE_NOT_FOUND

A user with any refused alteration gets none of its alterations applied (Kafka answers one
result per user). The records of one request are committed together before the answer; then
every live broker gets UpdateMetadata with the whole credential set (`Outbox.scram_credentials`),
and a broker that registers later gets it with the rest of its metadata. A restarted controller
replays the records, and a snapshot keeps them.

(Whether the client's connection may send salted passwords at all — TLS or loopback — is the
broker's check, which sees that connection: node/broker/scram_credentials.py.)

State: none of its own; it works on the controller actor's (actors/controller/context.py), from
the actor's handler, one message at a time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from actors.controller.context import ControllerContext
from actors.controller.journal import Change
from actors.controller.model import ControllerModel
from actors.controller.outbox import Outbox
from runtime.actor import Ask
from runtime.net.scram import MAX_ITERATIONS, MECHANISMS_BY_TYPE, MIN_ITERATIONS, credential
from wire.errors import ErrorCode
from wire.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
)
from wire.metadata_records import (
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)

log = logging.getLogger("ketch.controller")

_Refusal = tuple[ErrorCode, str]
_Record = UserScramCredentialRecord | RemoveUserScramCredentialRecord


@dataclass(frozen=True, slots=True)
class AlterUserScramCredentials(Ask[AlterUserScramCredentialsResponse]):
    request: AlterUserScramCredentialsRequest


def _mechanism_refusal(mechanism: int) -> _Refusal | None:
    if mechanism not in MECHANISMS_BY_TYPE:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def alterations(
    model: ControllerModel, request: AlterUserScramCredentialsRequest
) -> tuple[dict[str, _Refusal | None], list[_Record]]:
    """Each user's outcome (None: accepted) and the records of the accepted users. Pure."""
    outcome: dict[str, _Refusal | None] = {}
    records: dict[str, list[_Record]] = {}
    seen: set[tuple[str, int]] = set()

    def refuse(user: str, refusal: _Refusal) -> None:
        if outcome.get(user) is None:
            outcome[user] = refusal

    for deletion in request.deletions:
        user, mechanism = deletion.name, deletion.mechanism
        outcome.setdefault(user, None)
        refusal = _common_refusal(user, mechanism, seen)
        if refusal is None and model.scram_credential(user, mechanism) is None:
            refusal = (
                ErrorCode.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
        if refusal is not None:
            refuse(user, refusal)
            continue
        records.setdefault(user, []).append(RemoveUserScramCredentialRecord(user, mechanism))
    for upsertion in request.upsertions:
        user, mechanism = upsertion.name, upsertion.mechanism
        outcome.setdefault(user, None)
        refusal = _common_refusal(user, mechanism, seen) or _credential_refusal(
            mechanism, upsertion.iterations, upsertion.salt, upsertion.salted_password
        )
        if refusal is not None:
            refuse(user, refusal)
            continue
        derived = credential(
            MECHANISMS_BY_TYPE[mechanism],
            upsertion.salt,
            upsertion.salted_password,
            upsertion.iterations,
        )
        records.setdefault(user, []).append(
            UserScramCredentialRecord(
                name=user,
                mechanism=mechanism,
                salt=derived.salt,
                stored_key=derived.stored_key,
                server_key=derived.server_key,
                iterations=derived.iterations,
            )
        )
    accepted = [r for user, rs in records.items() if outcome[user] is None for r in rs]
    return outcome, accepted


def _common_refusal(user: str, mechanism: int, seen: set[tuple[str, int]]) -> _Refusal | None:
    if not user:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    refusal = _mechanism_refusal(mechanism)
    if refusal is not None:
        return refusal
    if (user, mechanism) in seen:
        return (
            ErrorCode.DUPLICATE_RESOURCE,
            "A user credential cannot be altered twice in the same request",
        )
    seen.add((user, mechanism))
    return None


def _credential_refusal(
    mechanism: int, iterations: int, salt: bytes, salted_password: bytes
) -> _Refusal | None:
    if iterations < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    if not salt:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt must not be empty"
    if len(salted_password) != MECHANISMS_BY_TYPE[mechanism].digest_size:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salted password has the wrong length"
    return None


async def alter_user_scram_credentials(
    ctx: ControllerContext, request: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    outcome, records = alterations(ctx.model, request)
    if records:
        change = Change(ctx.model)
        for record in records:
            change.add(record)
        await ctx.journal.commit(change)
        for record in records:
            verb = "set" if isinstance(record, UserScramCredentialRecord) else "deleted"
            name = MECHANISMS_BY_TYPE[record.mechanism].name
            log.info("%s: %s credential of user %r %s", ctx.name, name, record.name, verb)
        ctx.sender.flush(Outbox(scram_credentials=True))
    return AlterUserScramCredentialsResponse(
        results=[
            AlterUserScramCredentialsResult(
                user=user,
                error_code=ErrorCode.NONE if refusal is None else refusal[0],
                error_message=None if refusal is None else refusal[1],
            )
            for user, refusal in outcome.items()
        ]
    )
