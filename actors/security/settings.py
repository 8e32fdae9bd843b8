"""A broker config's security settings, per listener, read as Kafka reads them.

Each listener gets its security protocol (listeners.py), and, as that protocol needs:

- TLS (SSL, SASL_SSL): a server `ssl.SSLContext` (made in tls.py) from PEM, as Kafka's PEM
  keystores: `ssl.keystore.type=PEM` with `ssl.keystore.location` (one file holding the private
  key and the certificate chain) or `ssl.keystore.certificate.chain` + `ssl.keystore.key` inline,
  the key decrypted with `ssl.key.password`; `ssl.truststore.type=PEM` with `ssl.truststore.location` or
  `ssl.truststore.certificates`; `ssl.client.auth=none|requested|required`; the client
  certificate's subject mapped to a principal by `ssl.principal.mapping.rules`.
- SASL (SASL_PLAINTEXT, SASL_SSL): `sasl.enabled.mechanisms` (PLAIN, SCRAM-SHA-256,
  SCRAM-SHA-512), PLAIN's users from the JAAS config (SCRAM's live in the controller's metadata:
  kray configs --entity-type users, AlterUserScramCredentials), re-authentication
  (`connections.max.reauth.ms`) and the delay before a failed login's connection closes
  (`connection.failed.authentication.delay.ms`).

Every key may be set for one listener as `listener.name.<listener>.<key>` (listener name in any
case; Kafka writes it lower-case), which wins over the plain key, key by key, as Kafka's
`valuesWithPrefixOverride`. PLAIN's JAAS config is `listener.name.<listener>.plain.sasl.jaas.config`
as in Kafka, or (beyond Kafka, which wants it per listener on a broker) `sasl.jaas.config`.

The authorizer (`authorizer.class.name`, `super.users`, `allow.everyone.if.no.acl.found`) is
read here too, so that a bad value stops `kray start` before anything runs (see access.py).

Not read: `ssl.cipher.suites` (Java's suite names are not OpenSSL's), JKS and PKCS12 stores.
"""
from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any, Mapping

from actors.security.access import authorizer_config
from actors.security.authorizer import AuthorizerConfig
from actors.security.inter_broker import (SASL_MECHANISM_INTER_BROKER_PROTOCOL, BrokerIdentity,
                                          InterBrokerConfigError, broker_identity)
from actors.security.listeners import (Listener, ListenerConfig, ListenerConfigError, SecurityProtocol,
                                      listener_config, set_keys)
from actors.security.plain import PLAIN_MECHANISM, password_matches, plain_users_from_jaas
from actors.security.principal import BROKER_USER, SslPrincipalMapper
from actors.security.tls import (CLIENT_AUTH_MODES, SecurityConfigError, broker_client_ssl_context,
                                listener_value, server_ssl_context)

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SUPPORTED_MECHANISMS = (PLAIN_MECHANISM, *SCRAM_MECHANISMS)


@dataclass(frozen=True)
class ListenerSecurity:
    listener: Listener
    ssl_context: ssl.SSLContext | None = None
    client_auth: str = "none"
    principal_mapper: SslPrincipalMapper | None = None
    mechanisms: tuple[str, ...] = ()  # enabled SASL mechanisms, as configured (order kept)
    plain_users: Mapping[str, str] = field(default_factory=dict, repr=False)
    reauth_ms: int = 0  # connections.max.reauth.ms; 0 = no re-authentication required
    failed_auth_delay_ms: int = 100

    @property
    def protocol(self) -> SecurityProtocol:
        return self.listener.security_protocol


@dataclass(frozen=True)
class SecuritySettings:
    listeners: ListenerConfig
    by_listener: dict[str, ListenerSecurity]
    authorizer: AuthorizerConfig | None = None  # None: no authorizer.class.name, nothing enforced

    @property
    def primary(self) -> Listener:
        return self.listeners.inter_broker_listener


def security_settings(config: Mapping[str, Any]) -> SecuritySettings:
    """Read and check every listener's security; raises SecurityConfigError (a ValueError) naming
    the key to change, or OSError/ssl.SSLError when a PEM file cannot be read."""
    try:
        listeners = listener_config(set_keys(config))
    except ListenerConfigError as e:
        raise SecurityConfigError(str(e)) from None
    try:
        authorizer = authorizer_config(config)
    except ValueError as e:
        raise SecurityConfigError(str(e)) from None
    securities = {listener.name: _listener_security(config, listener) for listener in listeners.listeners}
    primary = listeners.inter_broker_listener
    try:
        identity = broker_identity(config)
    except InterBrokerConfigError as e:
        raise SecurityConfigError(str(e)) from None
    if identity is not None:
        _check_broker_login(identity, securities[primary.name])
    if primary.security_protocol.uses_tls:
        try:  # followers connect to it as TLS clients: the same files, read the client's way
            broker_client_ssl_context(config, primary.name)
        except (OSError, ssl.SSLError) as e:
            raise SecurityConfigError(f"the inter-broker listener {primary.name}: followers cannot make their TLS "
                                      f"client from its ssl.truststore / ssl.keystore settings: {e}") from None
    return SecuritySettings(listeners, securities, authorizer)


def _check_broker_login(identity: BrokerIdentity, security: ListenerSecurity) -> None:
    """The brokers' login on the inter-broker listener can work: its mechanism is enabled there,
    and a PLAIN login is one of the listener's JAAS users with the same password (a wrong
    inter-broker password stops `kray start` here, before anything runs; SCRAM's is checked
    against the metadata once the controller runs: cluster/inter_broker_login.py)."""
    name = security.listener.name
    if identity.mechanism not in security.mechanisms:
        how = (f"User:{identity.username} with {identity.mechanism}" if identity.generated else
               f"{identity.mechanism} ({SASL_MECHANISM_INTER_BROKER_PROTOCOL})")
        raise SecurityConfigError(
            f"the inter-broker listener {name} is {security.protocol.value}: Kray's brokers log in there as {how}; "
            f"add {identity.mechanism} to listener.name.{name.lower()}.sasl.enabled.mechanisms (or "
            f"sasl.enabled.mechanisms)")
    if identity.mechanism != PLAIN_MECHANISM:
        return
    expected = security.plain_users.get(identity.username)
    if expected is None:
        raise SecurityConfigError(
            f"{identity.source}: brokers log in to the inter-broker listener {name} as username="
            f"\"{identity.username}\" with PLAIN, which checks its users: add user_{identity.username}=\"<the same "
            f"password>\" to the listener's PLAIN JAAS config (listener.name.{name.lower()}.plain.sasl.jaas.config)")
    if not password_matches(identity.password or "", expected):
        raise SecurityConfigError(
            f"{identity.source}: the inter-broker password is wrong: brokers would log in to listener {name} as "
            f"\"{identity.username}\" with a password that is not its user_{identity.username} entry, and every "
            f"follower's login would be refused. Set password=\"...\" and user_{identity.username}=\"...\" to the "
            f"same value")


def _int(config, name, key, default) -> int:
    value = listener_value(config, name, key, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise SecurityConfigError(f"{key} must be an integer, not {value!r}") from None


def _listener_security(config: Mapping[str, Any], listener: Listener) -> ListenerSecurity:
    protocol = listener.security_protocol
    settings: dict[str, Any] = {}
    if protocol.uses_tls:
        client_auth = str(listener_value(config, listener.name, "ssl.client.auth", "none")).strip().lower()
        if client_auth not in CLIENT_AUTH_MODES:
            raise SecurityConfigError(f"listener {listener.name}: ssl.client.auth must be none, requested or "
                                      f"required, not {client_auth!r}")
        settings.update(ssl_context=server_ssl_context(config, listener.name, client_auth), client_auth=client_auth,
                        principal_mapper=_mapper(config, listener.name))
    if protocol.uses_sasl:
        mechanisms = tuple(m.strip().upper() for m in str(
            listener_value(config, listener.name, "sasl.enabled.mechanisms", "GSSAPI")).split(",") if m.strip())
        unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if not mechanisms or unsupported:
            raise SecurityConfigError(
                f"listener {listener.name}: sasl.enabled.mechanisms={','.join(mechanisms)} names "
                f"{','.join(unsupported) or 'nothing'} (Kray serves {', '.join(SUPPORTED_MECHANISMS)}); set for "
                f"example sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN "
                f"(or listener.name.{listener.name.lower()}.sasl.enabled.mechanisms=...)")
        plain_users = _plain_users(config, listener.name) if PLAIN_MECHANISM in mechanisms else {}
        settings.update(mechanisms=mechanisms, plain_users=plain_users,
                        reauth_ms=_int(config, listener.name, "connections.max.reauth.ms", 0),
                        failed_auth_delay_ms=_int(config, listener.name, "connection.failed.authentication.delay.ms",
                                                  100))
    return ListenerSecurity(listener, **settings)


def _mapper(config, name) -> SslPrincipalMapper:
    rules = listener_value(config, name, "ssl.principal.mapping.rules", "DEFAULT")
    try:
        return SslPrincipalMapper(str(rules))
    except ValueError as e:
        raise SecurityConfigError(f"listener {name}: ssl.principal.mapping.rules: {e}") from None


def _plain_users(config, name) -> dict[str, str]:
    key = f"listener.name.{name.lower()}.plain.sasl.jaas.config"
    jaas = next((v for k, v in config.items() if k.lower() == key and v is not None), None)
    if jaas is None:
        jaas = config.get("sasl.jaas.config")
    if jaas is None:
        raise SecurityConfigError(
            f"listener {name}: SASL/PLAIN needs its users: set {key}="
            f"'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice=\"alice-secret\";'")
    try:
        users = plain_users_from_jaas(str(jaas))
    except ValueError as e:
        raise SecurityConfigError(f"listener {name}: {key} (or sasl.jaas.config): {e}") from None
    if BROKER_USER in users:
        raise SecurityConfigError(f"listener {name}: {key} (or sasl.jaas.config) names user_{BROKER_USER}: that "
                                  f"name is Kray's own brokers' (a super user); pick another")
    return users
