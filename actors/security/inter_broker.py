"""Kray's own identity on its internal connections: who brokers log in as on each other's
inter-broker listener, and the login itself.

Kray's inter-broker traffic rides on the brokers' own listeners, as Kafka's does. A replica
fetcher (actors/partition/fetcher.py) and a share-partition leader writing share state to another
broker's coordinator (actors/share_partition/state_client.py) connect to that broker's
inter-broker listener with its transport (`broker_transport`): TLS where it uses TLS, and a login
(`login`) where it uses SASL. Those requests need CLUSTER_ACTION on the cluster (as in Kafka).

Who logs in (`broker_identity`), on a SASL inter-broker listener:

- **The operator's choice, as Kafka configures it**: `sasl.mechanism.inter.broker.protocol`
  (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, enabled on that listener) and the `username` and
  `password` of the JAAS config `listener.name.<inter-broker listener>.<mechanism>.sasl.jaas.config`
  (or, beyond Kafka, `sasl.jaas.config` when its login module is that mechanism's). The listener
  checks that login as any other: PLAIN against its JAAS `user_<name>` entries (so the broker's
  password must be its `user_<username>`; a mismatch stops `kray start` before anything runs),
  SCRAM against the credentials in the controller's metadata (`kray start` makes the broker user's
  credential from the JAAS password where it has none, as `kafka-storage format --add-scram` does,
  and stops, saying what to fix, when the credential there is another password's:
  cluster/inter_broker_login.py). The principal is `User:<username>`; as in Kafka, put it in
  `super.users` (or grant it CLUSTER_ACTION) once an authorizer is on.
- **Unset (Kafka's default would be GSSAPI, which Kray does not serve): Kray's own broker
  principal `User:kray-broker`**, which logs in with SCRAM-SHA-512 and a secret only Kray's
  actors know (`kray.inter.broker.secret`, made once where the cluster is composed,
  actors/composition.py, unless the config sets one; it travels to actors over Ray's control
  channel only, never over a Kafka connection, and DescribeConfigs answers it as sensitive). Its
  credential is made from the secret in each process and never stored in the metadata; the
  authorizer counts it as a super user (access.py). Nobody else may take that name.
"""
from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass, field
from typing import Any, Mapping

from protocol.apis import API_BY_KEY
from protocol.headers import RequestHeader, encode_request, response_header_version
from protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest
from protocol.primitives import read_tagged_fields

from actors.security.jaas import parse_jaas_config
from actors.security.plain import PLAIN_LOGIN_MODULE, PLAIN_MECHANISM
from actors.security.principal import BROKER_USER, KafkaPrincipal
from actors.security.scram import ScramClient, ScramClientError, ScramCredential, ScramMechanism, \
    make_credential

SECRET_KEY = "kray.inter.broker.secret"
SASL_MECHANISM_INTER_BROKER_PROTOCOL = "sasl.mechanism.inter.broker.protocol"
GENERATED_MECHANISM = ScramMechanism.SCRAM_SHA_512
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
LOGIN_MODULES = {PLAIN_MECHANISM: PLAIN_LOGIN_MODULE, ScramMechanism.SCRAM_SHA_256.mechanism_name: SCRAM_LOGIN_MODULE,
                 ScramMechanism.SCRAM_SHA_512.mechanism_name: SCRAM_LOGIN_MODULE}
SECRET_BYTES = 32
CLIENT_ID = "kray-broker"
LOGIN_TIMEOUT_S = 10.0


class BrokerLoginFailed(ConnectionError):
    """An inter-broker listener refused the broker's login (the message says what it answered)."""


class InterBrokerConfigError(ValueError):
    """The inter-broker login is configured in a way that cannot work; the message names the key."""


@dataclass(frozen=True)
class BrokerIdentity:
    """How brokers log in to each other's inter-broker listener."""
    mechanism: str  # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    username: str
    password: str | None = field(repr=False)  # None: Kray's own, in a process without the secret
    source: str = SECRET_KEY  # the config key it comes from (messages name it)

    @property
    def principal(self) -> KafkaPrincipal:
        return KafkaPrincipal.user(self.username)

    @property
    def generated(self) -> bool:
        """Kray's own User:kray-broker (no inter-broker mechanism configured)."""
        return self.source == SECRET_KEY

    @property
    def scram(self) -> ScramMechanism | None:
        return ScramMechanism.from_name(self.mechanism)


def with_broker_secret(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config with a fresh secret, unless it has one (a config set by hand, or a restart's)."""
    out = dict(config)
    if not out.get(SECRET_KEY):
        out[SECRET_KEY] = secrets.token_urlsafe(SECRET_BYTES)
    return out


def broker_secret(config: Mapping[str, Any]) -> str | None:
    return config.get(SECRET_KEY) or None


def configured_mechanism(config: Mapping[str, Any]) -> str | None:
    """`sasl.mechanism.inter.broker.protocol`, upper-cased, or None when unset (Kray's own login)."""
    value = str(config.get(SASL_MECHANISM_INTER_BROKER_PROTOCOL) or "").strip().upper()
    return value or None


def uses_generated_identity(config: Mapping[str, Any]) -> bool:
    """Whether brokers are Kray's own User:kray-broker (nothing configured), who is a super user."""
    return configured_mechanism(config) is None


def jaas_key(listener_name: str, mechanism: str) -> str:
    return f"listener.name.{listener_name.lower()}.{mechanism.lower()}.sasl.jaas.config"


def _jaas_config(config: Mapping[str, Any], listener_name: str, mechanism: str) -> tuple[str | None, str]:
    """(the JAAS text brokers log in with, the key it came from): the listener-and-mechanism key
    (any case, as Kafka's), else `sasl.jaas.config` when it has this mechanism's login module."""
    key = jaas_key(listener_name, mechanism)
    for name, value in config.items():
        if name.lower() == key and value is not None:
            return str(value), name
    plain = config.get("sasl.jaas.config")
    if plain is not None:
        try:
            modules = {entry.login_module for entry in parse_jaas_config(str(plain))}
        except ValueError:
            modules = set()
        if LOGIN_MODULES[mechanism] in modules:
            return str(plain), "sasl.jaas.config"
    return None, key


def broker_identity(config: Mapping[str, Any]) -> BrokerIdentity | None:
    """Who brokers log in as on the inter-broker listener, or None when it uses no SASL (PLAINTEXT
    or SSL: no login; a broker is whoever its connection shows, e.g. its certificate's subject).
    Raises InterBrokerConfigError naming the key to set."""
    from actors.security.listeners import ListenerConfigError, listener_config, set_keys
    try:
        listener = listener_config(set_keys(config)).inter_broker_listener
    except ListenerConfigError as e:
        raise InterBrokerConfigError(str(e)) from None
    if not listener.security_protocol.uses_sasl:
        return None
    mechanism = configured_mechanism(config)
    if mechanism is None:
        return BrokerIdentity(GENERATED_MECHANISM.mechanism_name, BROKER_USER, broker_secret(config))
    if mechanism not in LOGIN_MODULES:
        raise InterBrokerConfigError(
            f"{SASL_MECHANISM_INTER_BROKER_PROTOCOL}={mechanism}: Kray's brokers log in with "
            f"{', '.join(LOGIN_MODULES)}; set one of them (enabled on the inter-broker listener {listener.name}), "
            f"or leave it unset for Kray's own login as User:{BROKER_USER}")
    text, key = _jaas_config(config, listener.name, mechanism)
    example = (f"{key}='{LOGIN_MODULES[mechanism]} required username=\"broker\" password=\"broker-secret\""
               + (' user_broker="broker-secret"' if mechanism == PLAIN_MECHANISM else "") + ";'")
    if text is None:
        raise InterBrokerConfigError(f"{SASL_MECHANISM_INTER_BROKER_PROTOCOL}={mechanism}: brokers need the login "
                                     f"they use on the inter-broker listener {listener.name}: set {example}")
    try:
        entries = [e for e in parse_jaas_config(text) if e.login_module == LOGIN_MODULES[mechanism]]
    except ValueError as e:
        raise InterBrokerConfigError(f"{key}: {e}") from None
    options = entries[0].options if entries else {}
    if not entries or not options.get("username") or "password" not in options:
        raise InterBrokerConfigError(f"{key}: brokers log in with the username and password of its "
                                     f"{LOGIN_MODULES[mechanism]} entry: set {example}")
    if options["username"] == BROKER_USER:
        raise InterBrokerConfigError(f"{key}: username=\"{BROKER_USER}\" is the name of Kray's own broker login "
                                     f"(used when {SASL_MECHANISM_INTER_BROKER_PROTOCOL} is unset); pick another")
    return BrokerIdentity(mechanism, options["username"], options["password"], key)


def broker_credentials(config: Mapping[str, Any]) -> dict[ScramMechanism, dict[str, ScramCredential]]:
    """The SCRAM users a listener accepts beyond the metadata's: Kray's own broker, while the
    brokers use it and this process has the secret (an operator's broker user is checked against
    the metadata as any user)."""
    secret = broker_secret(config)
    if not uses_generated_identity(config) or secret is None:
        return {GENERATED_MECHANISM: {}}
    return {GENERATED_MECHANISM: {BROKER_USER: make_credential(GENERATED_MECHANISM, secret)}}


def broker_transport(config: Mapping[str, Any]):
    """How Kray's own connections reach another broker's inter-broker listener: (a TLS client
    context, for SSL and SASL_SSL; a login as the broker, `async (PipelinedConnection) -> None`, for
    SASL_...); (None, None) over PLAINTEXT."""
    from actors.config_schema import inter_broker_listener
    listener = inter_broker_listener(dict(config))
    context = broker_login = None
    if listener.security_protocol.uses_tls:
        from actors.security.tls import broker_client_ssl_context
        context = broker_client_ssl_context(dict(config), listener.name)
    if listener.security_protocol.uses_sasl:
        broker_login = functools.partial(login, config=config)
    return context, broker_login


async def login(connection, config: Mapping[str, Any], timeout_s: float = LOGIN_TIMEOUT_S,
                identity: BrokerIdentity | None = None) -> None:
    """Log a fresh PipelinedConnection (actors/pipelined.py) in as the broker: SaslHandshake v1,
    then PLAIN or SCRAM over SaslAuthenticate v2. Raises BrokerLoginFailed when refused."""
    identity = identity or broker_identity(config)
    if identity is None:
        raise BrokerLoginFailed("the inter-broker listener uses no SASL: there is nothing to log in with")
    if identity.password is None:
        raise BrokerLoginFailed(f"no {SECRET_KEY} in this actor's config: it was not started by Kray's "
                                f"composition root (actors/composition.py), which sets it")

    async def call(request, version):
        api_key = request.API_KEY
        body = await connection.call(lambda correlation_id: [encode_request(
            RequestHeader(api_key, version, correlation_id, CLIENT_ID), request.encode(version))], timeout_s)
        offset = read_tagged_fields(body, 0)[1] if response_header_version(api_key, version) == 1 else 0
        return API_BY_KEY[api_key].response.decode(body[offset:], version)

    who = f"User:{identity.username} with {identity.mechanism}"
    handshake = await call(SaslHandshakeRequest(mechanism=identity.mechanism), 1)
    if handshake.error_code:
        raise BrokerLoginFailed(f"the listener refused {identity.mechanism} (error {handshake.error_code}; "
                                f"enabled: {', '.join(handshake.mechanisms)})")
    if identity.scram is None:  # PLAIN: one message
        answer = await call(SaslAuthenticateRequest(
            auth_bytes=f"\0{identity.username}\0{identity.password}".encode("utf-8")), 2)
        if answer.error_code:
            raise BrokerLoginFailed(f"the listener refused {who}: {answer.error_message}")
        return
    client = ScramClient(identity.scram, identity.username, identity.password)
    try:
        first = await call(SaslAuthenticateRequest(auth_bytes=client.first_message()), 2)
        if first.error_code:
            raise BrokerLoginFailed(f"the listener refused {who}: {first.error_message}")
        final = await call(SaslAuthenticateRequest(auth_bytes=client.final_message(bytes(first.auth_bytes))), 2)
        if final.error_code:
            raise BrokerLoginFailed(f"the listener refused {who}: {final.error_message}"
                                    + (f" (do both ends share {SECRET_KEY}?)" if identity.generated else ""))
        client.verify(bytes(final.auth_bytes))
    except ScramClientError as e:
        raise BrokerLoginFailed(f"the listener is not a Kray broker's: {e}") from None
