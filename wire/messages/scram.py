"""SCRAM credential administration, version 0 of ketch's native protocol:
DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), and the credential entries
UpdateMetadata carries to the brokers.

Field names are Kafka's JSON message specs (DescribeUserScramCredentialsRequest.json,
AlterUserScramCredentialsRequest.json and their responses) in snake_case, so the Kafka listener
converts them field by field. `mechanism` is Kafka's ScramMechanism type code (1 SCRAM-SHA-256,
2 SCRAM-SHA-512; runtime/net/scram.py names them).

An upsertion carries the salt and the salted password (never the password; the client salts it,
as kafka-configs does); the controller derives StoredKey and ServerKey from it and keeps only
those. Brokers forward AlterUserScramCredentials to the controller and answer
DescribeUserScramCredentials from the credentials the controller last sent them (mechanisms and
iterations only). Both are answered per user (their Kafka responses have per-user errors).
"""

# No `from __future__ import annotations`: the codec reads each field's type at class creation.

from dataclasses import dataclass, field

from wire.messages.base import ApiKey, Request, Response
from wire.messages.fields import Int8, Int16, Int32

# -- DescribeUserScramCredentials (50) -------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CredentialInfo:
    mechanism: Int8
    iterations: Int32


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeUserScramCredentialsResult:
    user: str
    error_code: Int16 = 0
    error_message: str | None = None
    credential_infos: list[CredentialInfo] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeUserScramCredentialsResponse(Response):
    API_KEY = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS
    API_VERSION = 0
    error_message: str | None = None
    results: list[DescribeUserScramCredentialsResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class UserName:
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeUserScramCredentialsRequest(Request):
    """`users` None: every user with a credential."""

    API_KEY = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS
    API_VERSION = 0
    RESPONSE = DescribeUserScramCredentialsResponse
    users: list[UserName] | None = None


# -- AlterUserScramCredentials (51) ----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterUserScramCredentialsResult:
    user: str
    error_code: Int16 = 0
    error_message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterUserScramCredentialsResponse(Response):
    API_KEY = ApiKey.ALTER_USER_SCRAM_CREDENTIALS
    API_VERSION = 0
    results: list[AlterUserScramCredentialsResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScramCredentialDeletion:
    name: str
    mechanism: Int8


@dataclass(frozen=True, slots=True, kw_only=True)
class ScramCredentialUpsertion:
    name: str
    mechanism: Int8
    iterations: Int32
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterUserScramCredentialsRequest(Request):
    API_KEY = ApiKey.ALTER_USER_SCRAM_CREDENTIALS
    API_VERSION = 0
    RESPONSE = AlterUserScramCredentialsResponse
    deletions: list[ScramCredentialDeletion] = field(default_factory=list)
    upsertions: list[ScramCredentialUpsertion] = field(default_factory=list)


# -- UpdateMetadata's credentials ------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataScramCredential:
    """One user's credential for one mechanism, as the controller keeps it (no password)."""

    name: str
    mechanism: Int8
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: Int32
