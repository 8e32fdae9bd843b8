"""Kray's own identity on its internal connections: the broker principal `User:kray-broker`,
which logs in with SCRAM-SHA-512 and a secret only Kray's actors know.

The secret (`kray.inter.broker.secret`) is made once where the cluster is composed
(cluster/composition.py: the controller's config, from which every gateway, shard and
coordinator gets its own) unless the config sets one; it travels to actors over Ray's control
channel only, never over a Kafka connection (SCRAM proves knowledge of it without sending it),
and DescribeConfigs answers it as sensitive. It is the password of one SCRAM credential that is
made from it in each process and never stored in the metadata.

Where it is checked today: the share coordinator's state listener (actors/share_coordinator/
wire.py) is a SASL listener whose only user is the broker, so a share-partition leader logs in
(`login`) before writing share state, and anyone else is refused (SASL_AUTHENTICATION_FAILED, then
closed), as Kafka's brokers refuse the share-state APIs without CLUSTER_ACTION.
"""
from __future__ import annotations

import secrets
from typing import Any, Mapping

from protocol.apis import API_BY_KEY
from protocol.headers import RequestHeader, encode_request, response_header_version
from protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest
from protocol.primitives import read_tagged_fields

from actors.gateway.security.listeners import Listener, SecurityProtocol
from actors.gateway.security.principal import BROKER_USER
from actors.gateway.security.scram import ScramClient, ScramClientError, ScramCredential, ScramMechanism, \
    make_credential
from actors.gateway.security.settings import ListenerSecurity

SECRET_KEY = "kray.inter.broker.secret"
MECHANISM = ScramMechanism.SCRAM_SHA_512
STATE_LISTENER_NAME = "SHARE_STATE"
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


def state_listener_security(config: Mapping[str, Any]) -> ListenerSecurity:
    """The share-state listener: SASL (SCRAM-SHA-512) without TLS, the broker its only user."""
    return ListenerSecurity(Listener(STATE_LISTENER_NAME, "", 0, SecurityProtocol.SASL_PLAINTEXT),
                            mechanisms=(MECHANISM.mechanism_name,),
                            failed_auth_delay_ms=int(config.get("connection.failed.authentication.delay.ms", 100)))


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
