"""The SCRAM credential store of KIP-554, pure: what AlterUserScramCredentials may change, the
metadata records that change it, and what DescribeUserScramCredentials answers.

The rules are those of Kafka's controller (ScramControlManager) and metadata image (ScramImage):

- one request changes a user at most once: a second deletion or upsertion of the same user (even
  of the other mechanism) answers DUPLICATE_RESOURCE for that user, and nothing of that user
  changes ("A user credential cannot be altered twice in the same request"); deletions are
  looked at before upsertions;
- an empty user name is UNACCEPTABLE_CREDENTIAL, a mechanism other than SCRAM-SHA-256 (1) and
  SCRAM-SHA-512 (2) UNSUPPORTED_SASL_MECHANISM, iterations below 4096 or above 16384
  UNACCEPTABLE_CREDENTIAL ("Too few iterations" / "Too many iterations"), deleting a credential
  that does not exist RESOURCE_NOT_FOUND;
- beyond Kafka (whose HMAC fails on an empty key with an unknown server error), an empty salt or
  salted password is UNACCEPTABLE_CREDENTIAL;
- describing names each user once with the mechanisms and iterations it has (never salts or
  keys); a user asked for twice answers DUPLICATE_RESOURCE, one without credentials
  RESOURCE_NOT_FOUND; no users (null or empty) means every user with a credential.

The store is keyed (user name, mechanism); an upsertion keeps the salt and iteration count the
client chose and the two keys derived from its salted password, never the password (scram.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from protocol.errors import ErrorCode

from actors.security.principal import BROKER_USER
from actors.security.scram import (ITERATIONS_MAX, ITERATIONS_MIN, ScramCredential, ScramMechanism,
                                   credential_from_salted_password)

RECORD_CREDENTIAL = "scram_credential"  # the controller's metadata record kinds
RECORD_REMOVE_CREDENTIAL = "remove_scram_credential"
RECORD_KINDS = (RECORD_CREDENTIAL, RECORD_REMOVE_CREDENTIAL)

ALTERED_TWICE = "A user credential cannot be altered twice in the same request"
DESCRIBED_TWICE = "Cannot describe SCRAM credentials for the same user twice in a single request: "
NOT_FOUND_DELETE = "Attempt to delete a user credential that does not exist"
NOT_FOUND_DESCRIBE = "Attempt to describe a user credential that does not exist: "

CredentialKey = tuple[str, ScramMechanism]  # (user name, mechanism)


@dataclass(frozen=True)
class Deletion:
    name: str
    mechanism: int  # Kafka's type byte: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512


@dataclass(frozen=True)
class Upsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes = field(repr=False)
    salted_password: bytes = field(repr=False)


@dataclass(frozen=True)
class AlterResult:
    user: str
    error_code: int = 0
    error_message: str | None = None


@dataclass(frozen=True)
class DescribeResult:
    user: str
    error_code: int = 0
    error_message: str | None = None
    credentials: tuple[tuple[int, int], ...] = ()  # (mechanism type byte, iterations)


class _Refused(Exception):
    def __init__(self, error_code: int, message: str):
        super().__init__(message)
        self.error_code, self.message = error_code, message


def _mechanism(name: str, type_id: int) -> ScramMechanism:
    if not name:
        raise _Refused(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if name == BROKER_USER:
        raise _Refused(ErrorCode.UNACCEPTABLE_CREDENTIAL,
                       f"{BROKER_USER} is the name of Kray's own brokers (a super user); pick another")
    mechanism = ScramMechanism.from_type_id(type_id)
    if mechanism is None:
        raise _Refused(ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    return mechanism


def _check_deletion(deletion: Deletion, existing: Mapping[CredentialKey, ScramCredential]) -> None:
    if (deletion.name, _mechanism(deletion.name, deletion.mechanism)) not in existing:
        raise _Refused(ErrorCode.RESOURCE_NOT_FOUND, NOT_FOUND_DELETE)


def _credential(upsertion: Upsertion) -> ScramCredential:
    mechanism = _mechanism(upsertion.name, upsertion.mechanism)
    if upsertion.iterations < ITERATIONS_MIN:
        raise _Refused(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    if upsertion.iterations > ITERATIONS_MAX:
        raise _Refused(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    if not upsertion.salt:
        raise _Refused(ErrorCode.UNACCEPTABLE_CREDENTIAL, "The salt must not be empty")
    if not upsertion.salted_password:
        raise _Refused(ErrorCode.UNACCEPTABLE_CREDENTIAL, "The salted password must not be empty")
    return credential_from_salted_password(mechanism, upsertion.salt, upsertion.salted_password,
                                           upsertion.iterations)


def alter_credentials(existing: Mapping[CredentialKey, ScramCredential], deletions: Iterable[Deletion],
                      upsertions: Iterable[Upsertion]) -> tuple[list[AlterResult], list[dict[str, Any]]]:
    """AlterUserScramCredentials against the current store: one result per user named in the
    request (successes first, deletions then upsertions, then refusals) and the records to apply."""
    errors: dict[str, _Refused] = {}
    deleting: dict[str, Deletion] = {}
    upserting: dict[str, tuple[Upsertion, ScramCredential]] = {}
    for deletion in deletions:
        if deletion.name in errors:
            continue
        if deleting.pop(deletion.name, None) is not None:
            errors[deletion.name] = _Refused(ErrorCode.DUPLICATE_RESOURCE, ALTERED_TWICE)
            continue
        try:
            _check_deletion(deletion, existing)
        except _Refused as refused:
            errors[deletion.name] = refused
        else:
            deleting[deletion.name] = deletion
    for upsertion in upsertions:
        if upsertion.name in errors:
            continue
        if deleting.pop(upsertion.name, None) is not None or upserting.pop(upsertion.name, None) is not None:
            errors[upsertion.name] = _Refused(ErrorCode.DUPLICATE_RESOURCE, ALTERED_TWICE)
            continue
        try:
            upserting[upsertion.name] = (upsertion, _credential(upsertion))
        except _Refused as refused:
            errors[upsertion.name] = refused
    results, records = [], []
    for deletion in deleting.values():
        results.append(AlterResult(deletion.name))
        records.append({"type": RECORD_REMOVE_CREDENTIAL, "name": deletion.name, "mechanism": deletion.mechanism})
    for upsertion, credential in upserting.values():
        results.append(AlterResult(upsertion.name))
        records.append(credential_record(upsertion.name, credential))
    results += [AlterResult(user, refused.error_code, refused.message) for user, refused in errors.items()]
    return results, records


def credential_record(name: str, credential: ScramCredential) -> dict[str, Any]:
    return {"type": RECORD_CREDENTIAL, "name": name, "mechanism": credential.mechanism.type_id,
            "salt": credential.salt, "stored_key": credential.stored_key, "server_key": credential.server_key,
            "iterations": credential.iterations}


def apply_record(store: dict[CredentialKey, ScramCredential], record: Mapping[str, Any]) -> None:
    """Replay one record of RECORD_KINDS into the store."""
    mechanism = ScramMechanism.from_type_id(record["mechanism"])
    if mechanism is None:
        raise ValueError(f"a {record['type']} record with unknown SCRAM mechanism {record['mechanism']}")
    key = (record["name"], mechanism)
    if record["type"] == RECORD_REMOVE_CREDENTIAL:
        store.pop(key, None)
    else:
        store[key] = ScramCredential(mechanism=mechanism, salt=bytes(record["salt"]),
                                     stored_key=bytes(record["stored_key"]), server_key=bytes(record["server_key"]),
                                     iterations=int(record["iterations"]))


def describe_credentials(store: Mapping[CredentialKey, ScramCredential],
                         users: Iterable[str] | None) -> list[DescribeResult]:
    """DescribeUserScramCredentials: `users` None or empty means every user with a credential."""
    by_user: dict[str, list[ScramCredential]] = {}
    for (user, _), credential in store.items():
        by_user.setdefault(user, []).append(credential)
    asked = list(users or ())
    if not asked:
        asked = sorted(by_user)
    seen: dict[str, bool] = {}  # user -> asked more than once
    for user in asked:
        seen[user] = user in seen
    results = []
    for user, twice in seen.items():
        if twice:
            results.append(DescribeResult(user, ErrorCode.DUPLICATE_RESOURCE, DESCRIBED_TWICE + user))
        elif user not in by_user:
            results.append(DescribeResult(user, ErrorCode.RESOURCE_NOT_FOUND, NOT_FOUND_DESCRIBE + user))
        else:
            results.append(DescribeResult(user, credentials=tuple(sorted(
                (c.mechanism.type_id, c.iterations) for c in by_user[user]))))
    return results


def by_mechanism(store: Mapping[CredentialKey, ScramCredential]) -> dict[ScramMechanism, dict[str, ScramCredential]]:
    """The store as the SCRAM exchange reads it: per mechanism, user name -> credential."""
    out: dict[ScramMechanism, dict[str, ScramCredential]] = {m: {} for m in ScramMechanism}
    for (user, mechanism), credential in store.items():
        out[mechanism][user] = credential
    return out
