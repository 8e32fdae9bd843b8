"""At start: the operator's inter-broker login (actors/security/inter_broker.py) made ready
and proven on every broker, or `kray start` stops, saying what to fix.

A broker that cannot log in to the others replicates nothing: its followers fall out of every
ISR, acks=all produces fail with NOT_ENOUGH_REPLICAS, share state written across brokers is
refused. Kafka only logs that, over and over; Kray checks once, at start, where the operator is
looking:

- SCRAM: the broker user's credential lives in the controller's metadata, as any user's. Where
  there is none for the mechanism, it is made from the JAAS password (what Kafka's
  `kafka-storage format --add-scram` does for a new cluster). Where there is one the JAAS
  password does not match (a wrong inter-broker password, or a credential changed since with
  `kray configs`), `InterBrokerLoginFailed` says so and how to fix either side. (PLAIN's users are
  in the config itself: settings.py refuses a wrong password before anything starts.)
- Then every broker's inter-broker listener is logged in to, over its transport (TLS as
  followers make it, the mechanism), until each accepts: a credential made here reaches a broker
  with its next metadata, so a refusal is retried until START_LOGIN_TIMEOUT_S.
- With an authorizer, the broker principal needs CLUSTER_ACTION on the cluster (super.users, or
  an ACL, as in Kafka): a console line says so when neither gives it (not an error: the operator
  may be about to add the ACL).

Kray's own User:kray-broker (no `sasl.mechanism.inter.broker.protocol`) needs none of this: its
secret is made in one place and cannot disagree with itself.
"""
from __future__ import annotations

import asyncio
import hmac
import secrets
import time
from typing import Any, Iterable, Mapping

from actors.security.inter_broker import (SASL_MECHANISM_INTER_BROKER_PROTOCOL, BrokerIdentity,
                                          BrokerLoginFailed, broker_identity, broker_transport, login)
from actors.security.scram import (ITERATIONS_MIN, SALT_BYTES_DEFAULT, ScramCredential,
                                   credential_from_salted_password, salted_password)
from cluster.start_errors import InterBrokerLoginFailed

START_LOGIN_TIMEOUT_S = 30.0
LOGIN_RETRY_S = 0.5
CONNECT_TIMEOUT_S = 5.0
RESPONSE_BYTES_MAX = 1 << 20


def password_matches_credential(credential: ScramCredential, password: str) -> bool:
    """Whether `password` is the one a stored SCRAM credential was made from."""
    mine = credential_from_salted_password(credential.mechanism, credential.salt, salted_password(
        credential.mechanism, password, credential.salt, credential.iterations), credential.iterations)
    return hmac.compare_digest(mine.stored_key, credential.stored_key) and \
        hmac.compare_digest(mine.server_key, credential.server_key)


def _kray_configs(identity: BrokerIdentity, bootstrap: str) -> str:
    return (f"kray configs --bootstrap-server {bootstrap} --command-config admin.properties --entity-type users "
            f"--entity-name {identity.username} --alter --add-config '{identity.mechanism}=[password=...]'")


def wrong_password(identity: BrokerIdentity, bootstrap: str) -> str:
    return (f"the inter-broker password is wrong: brokers log in to each other as User:{identity.username} with "
            f"{identity.mechanism} and the password in {identity.source}, but {identity.username}'s "
            f"{identity.mechanism} credential in the cluster's metadata is another password's, so every follower's "
            f"login would be refused and nothing would replicate. Fix the password in {identity.source}, or (logged "
            f"in as an admin) set the credential to it: {_kray_configs(identity, bootstrap)}. To start meanwhile, "
            f"leave {SASL_MECHANISM_INTER_BROKER_PROTOCOL} unset: brokers then log in as Kray's own User:kray-broker")


def scram_credential_step(identity: BrokerIdentity, stored: Mapping, bootstrap: str):
    """What the metadata's credentials ((user, mechanism) -> ScramCredential) call for: None when
    the broker user's credential is there and matches; else the credential to add (salt,
    salted password, iterations). Raises InterBrokerLoginFailed on a wrong password."""
    mechanism = identity.scram
    credential = stored.get((identity.username, mechanism))
    if credential is None:
        salt = secrets.token_bytes(SALT_BYTES_DEFAULT)
        return salt, salted_password(mechanism, identity.password, salt, ITERATIONS_MIN), ITERATIONS_MIN
    if not password_matches_credential(credential, identity.password):
        raise InterBrokerLoginFailed(wrong_password(identity, bootstrap))
    return None


async def _log_in(config: Mapping[str, Any], identity: BrokerIdentity, host: str, port: int) -> None:
    from actors.pipelined import PipelinedConnection
    ssl_context, _ = broker_transport(config)
    connection = await PipelinedConnection.open_tcp(host, port, timeout_s=CONNECT_TIMEOUT_S,
                                                    response_bytes_max=RESPONSE_BYTES_MAX, ssl_context=ssl_context)
    try:
        await login(connection, config, identity=identity)
    finally:
        connection.close()


def check_logins(config: Mapping[str, Any], identity: BrokerIdentity, brokers: Iterable[tuple[int, str, int]],
                 timeout_s: float = START_LOGIN_TIMEOUT_S) -> None:
    """Log in to each (broker id, host, port) as the brokers will; raises InterBrokerLoginFailed
    with the last answer of a broker that still refuses after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    for broker_id, host, port in brokers:
        while True:
            try:
                asyncio.run(_log_in(config, identity, host, port))
                break
            except (BrokerLoginFailed, OSError, asyncio.TimeoutError, ConnectionError) as e:
                if time.monotonic() >= deadline:
                    raise InterBrokerLoginFailed(
                        f"brokers cannot log in to each other: broker {broker_id}'s inter-broker listener "
                        f"({host}:{port}) refused User:{identity.username} with {identity.mechanism} for "
                        f"{timeout_s:.0f} s: {type(e).__name__}: {e}. The login comes from {identity.source}; "
                        f"the listener's TLS from its ssl.* settings (followers check its certificate and host "
                        f"name against the truststore)") from None
                time.sleep(LOGIN_RETRY_S)


def cluster_action_note(config: Mapping[str, Any], identity: BrokerIdentity, acls: Iterable,
                        hosts: Iterable[str]) -> str | None:
    """A console line when an authorizer is on and nothing lets the broker principal do
    CLUSTER_ACTION (follower fetches and share state need it), else None."""
    from actors.security.access import authorizer_config
    from actors.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType, StandardAuthorizer
    settings = authorizer_config(config)
    if settings is None:
        return None
    authorizer = StandardAuthorizer(settings, acls)
    refused = sorted({host for host in hosts if not authorizer.authorize(
        identity.principal, host, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)})
    if not refused:
        return None
    return (f"warning: User:{identity.username}, whom brokers log in as, may not CLUSTER_ACTION the cluster (from "
            f"{', '.join(refused)}): followers cannot fetch and share state cannot be written until it may. Add it "
            f"to super.users (as Kafka's docs do), or: kray acls --add --allow-principal User:{identity.username} "
            f"--operation ClusterAction --cluster")


def prepare(controller, config: Mapping[str, Any], brokers: list, *,
            timeout_s: float = START_LOGIN_TIMEOUT_S) -> list[str]:
    """Make the operator's inter-broker login ready and prove it on every broker (`brokers`:
    the controller's BrokerInfo list). Returns lines for the console; raises InterBrokerLoginFailed."""
    import ray

    from actors.security.scram_credentials import Upsertion
    identity = broker_identity(config)
    if identity is None or identity.generated:
        return []
    lines = []
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers[:1]) or "HOST:PORT"
    image = ray.get(controller.image.remote())
    if identity.scram is not None:
        step = scram_credential_step(identity, getattr(image, "scram_credentials", {}) or {}, bootstrap)
        if step is not None:
            salt, salted, iterations = step
            [result] = ray.get(controller.alter_user_scram_credentials.remote([], [Upsertion(
                identity.username, identity.scram.type_id, iterations, salt, salted)]))
            if result.error_code:
                raise InterBrokerLoginFailed(f"could not make {identity.username}'s {identity.mechanism} credential "
                                             f"for the brokers' login: {result.error_message}")
            lines.append(f"made User:{identity.username}'s {identity.mechanism} credential from {identity.source} "
                         f"(brokers log in to each other with it; as kafka-storage format --add-scram)")
    check_logins(config, identity, [(b.broker_id, b.host, b.port) for b in brokers], timeout_s)
    note = cluster_action_note(config, identity, getattr(image, "acls", ()), {b.host for b in brokers})
    return lines + ([note] if note else [])

