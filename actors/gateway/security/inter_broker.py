"""Kray's own identity on its internal connections: the broker principal `User:kray-broker`,
which logs in with SCRAM-SHA-512 and a secret only Kray's actors know.

The secret (`kray.inter.broker.secret`) is made once where the cluster is composed
(cluster/composition.py: the controller's config, from which every gateway, shard and
coordinator gets its own) unless the config sets one; it travels to actors over Ray's control
channel only, never over a Kafka connection (SCRAM proves knowledge of it without sending it),
and DescribeConfigs answers it as sensitive. It is the password of one SCRAM credential that is
made from it in each process and never stored in the metadata.

Where it is used: Kray's inter-broker traffic rides on the brokers' own listeners, as Kafka's
does. A replica fetcher (actors/partition/fetcher.py) and a share-partition leader writing share
state to another broker's coordinator (actors/share_partition/state_client.py) connect to that
broker's inter-broker listener with its transport (`broker_transport`): TLS where it uses TLS, and
a login as the broker (`login`) where it uses SASL. The broker is a super user of every broker's
authorizer, so it has CLUSTER_ACTION on the cluster, which those requests need (as in Kafka).
"""
from __future__ import annotations

import functools
import secrets
from typing import Any, Mapping

from protocol.apis import API_BY_KEY
from protocol.headers import RequestHeader, encode_request, response_header_version
from protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest
from protocol.primitives import read_tagged_fields

from actors.gateway.security.principal import BROKER_USER
from actors.gateway.security.scram import ScramClient, ScramClientError, ScramCredential, ScramMechanism, \
    make_credential

SECRET_KEY = "kray.inter.broker.secret"
MECHANISM = ScramMechanism.SCRAM_SHA_512
SECRET_BYTES = 32
CLIENT_ID = "kray-broker"
LOGIN_TIMEOUT_S = 10.0


class BrokerLoginFailed(ConnectionError):
    """An internal listener refused the broker's login: the two ends do not share a secret."""


def with_broker_secret(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config with a fresh secret, unless it has one (a config set by hand, or a restart's)."""
    out = dict(config)
    if not out.get(SECRET_KEY):
        out[SECRET_KEY] = secrets.token_urlsafe(SECRET_BYTES)
    return out


def broker_secret(config: Mapping[str, Any]) -> str | None:
    return config.get(SECRET_KEY) or None


def broker_credentials(config: Mapping[str, Any]) -> dict[ScramMechanism, dict[str, ScramCredential]]:
    """The SCRAM users an internal listener accepts: the broker alone (nobody without a secret)."""
    secret = broker_secret(config)
    return {MECHANISM: {BROKER_USER: make_credential(MECHANISM, secret)} if secret else {}}


def broker_transport(config: Mapping[str, Any]):
    """How Kray's own connections reach another broker's inter-broker listener: (a TLS client
    context, for SSL and SASL_SSL; a login as the broker, `async (PipelinedConnection) -> None`, for
    SASL_...); (None, None) over PLAINTEXT."""
    from cluster.config import inter_broker_listener
    listener = inter_broker_listener(dict(config))
    context = broker_login = None
    if listener.security_protocol.uses_tls:
        from actors.gateway.security.settings import broker_client_ssl_context
        context = broker_client_ssl_context(dict(config), listener.name)
    if listener.security_protocol.uses_sasl:
        broker_login = functools.partial(login, config=config)
    return context, broker_login


async def login(connection, config: Mapping[str, Any], timeout_s: float = LOGIN_TIMEOUT_S) -> None:
    """Log a fresh PipelinedConnection (actors/pipelined.py) in as the broker: SaslHandshake v1,
    then SCRAM over SaslAuthenticate v2. Raises BrokerLoginFailed when refused."""
    secret = broker_secret(config)
    if secret is None:
        raise BrokerLoginFailed(f"no {SECRET_KEY} in this actor's config: it was not started by Kray's "
                                f"composition root (cluster/composition.py), which sets it")

    async def call(request, version):
        api_key = request.API_KEY
        body = await connection.call(lambda correlation_id: [encode_request(
            RequestHeader(api_key, version, correlation_id, CLIENT_ID), request.encode(version))], timeout_s)
        offset = read_tagged_fields(body, 0)[1] if response_header_version(api_key, version) == 1 else 0
        return API_BY_KEY[api_key].response.decode(body[offset:], version)

    handshake = await call(SaslHandshakeRequest(mechanism=MECHANISM.mechanism_name), 1)
    if handshake.error_code:
        raise BrokerLoginFailed(f"the listener refused {MECHANISM.mechanism_name} (error {handshake.error_code}; "
                                f"enabled: {handshake.mechanisms})")
    client = ScramClient(MECHANISM, BROKER_USER, secret)
    try:
        first = await call(SaslAuthenticateRequest(auth_bytes=client.first_message()), 2)
        if first.error_code:
            raise BrokerLoginFailed(f"broker login refused: {first.error_message}")
        final = await call(SaslAuthenticateRequest(auth_bytes=client.final_message(bytes(first.auth_bytes))), 2)
        if final.error_code:
            raise BrokerLoginFailed(f"broker login refused: {final.error_message} (do both ends share "
                                    f"{SECRET_KEY}?)")
        client.verify(bytes(final.auth_bytes))
    except ScramClientError as e:
        raise BrokerLoginFailed(f"the listener is not a Kray broker's: {e}") from None
