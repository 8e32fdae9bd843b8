"""Who brokers log in as on each other's inter-broker listener (actors/security/
inter_broker.py) and what `kray start` checks of it (cluster/inter_broker_login.py): Kray's own
User:kray-broker by default; the operator's choice as Kafka configures it
(`sasl.mechanism.inter.broker.protocol`, `listener.name.<l>.<mechanism>.sasl.jaas.config`'s
username and password, `super.users`); a config that cannot work refused with the key to set; a
wrong PLAIN password refused before anything runs, a wrong SCRAM password found against the
metadata's credential; and the login itself against a real SASL front end."""
import asyncio
import threading

import pytest

from actors.gateway.context import GatewayContext
from actors.gateway.frontend import start_frontend
from actors.security.access import authorizer_config
from actors.security.inter_broker import (BrokerLoginFailed, broker_credentials, broker_identity, login,
                                          with_broker_secret)
from actors.security.principal import BROKER_USER, KafkaPrincipal
from actors.security.scram import ScramMechanism, make_credential
from actors.security.scram_credentials import by_mechanism
from actors.security.settings import security_settings
from actors.security.tls import SecurityConfigError
from actors.pipelined import PipelinedConnection
from actors.config_schema import BROKER_DEFAULTS
from cluster.inter_broker_login import (check_logins, cluster_action_note, password_matches_credential,
                                        scram_credential_step)
from cluster.start_errors import InterBrokerLoginFailed

SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
SASL = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "security.inter.broker.protocol": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "sasl.jaas.config": f'{PLAIN_MODULE} required user_admin="admin-secret";'}
SCRAM_BROKER = {**SASL, "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
                    f'{SCRAM_MODULE} required username="broker" password="broker-secret";'}


def plain_broker(password="broker-secret", listed="broker-secret"):
    return {**SASL, "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                f'{PLAIN_MODULE} required username="broker" password="{password}" user_broker="{listed}" '
                f'user_admin="admin-secret";'}


def test_unset_the_brokers_are_krays_own_super_user():
    config = with_broker_secret({**SASL, **AUTHORIZER})
    identity = broker_identity(config)
    assert (identity.username, identity.mechanism, identity.generated) == (BROKER_USER, "SCRAM-SHA-512", True)
    assert f"User:{BROKER_USER}" in authorizer_config(config).super_users
    assert BROKER_USER in broker_credentials(config)[ScramMechanism.SCRAM_SHA_512]
    security_settings(config)
    assert broker_identity({**SASL, "listeners": "PLAINTEXT://127.0.0.1:0",
                            "security.inter.broker.protocol": "PLAINTEXT"}) is None, "no SASL: no login"


def test_the_operators_scram_login_replaces_krays_own():
    config = with_broker_secret({**SCRAM_BROKER, **AUTHORIZER, "super.users": "User:broker"})
    identity = broker_identity(config)
    assert (identity.principal, identity.mechanism, identity.password, identity.generated) == \
        (KafkaPrincipal.user("broker"), "SCRAM-SHA-512", "broker-secret", False)
    assert identity.source == "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"
    assert "broker-secret" not in repr(identity)
    assert authorizer_config(config).super_users == {"User:broker"}, "as Kafka: super.users, nothing added"
    assert broker_credentials(config)[ScramMechanism.SCRAM_SHA_512] == {}, "kray-broker no longer logs in"
    security_settings(config)
    # sasl.jaas.config stands in when its login module is the mechanism's (as for PLAIN's users)
    shared = {**SASL, "sasl.mechanism.inter.broker.protocol": "scram-sha-256", "sasl.enabled.mechanisms": "SCRAM-SHA-256",
              "sasl.jaas.config": f'{SCRAM_MODULE} required username="b" password="p";'}
    assert (broker_identity(shared).username, broker_identity(shared).mechanism) == ("b", "SCRAM-SHA-256")


@pytest.mark.parametrize("change, says", [
    ({"sasl.enabled.mechanisms": "PLAIN"}, "add SCRAM-SHA-512 to listener.name.sasl_plaintext.sasl.enabled.mechanisms"),
    ({"sasl.mechanism.inter.broker.protocol": "GSSAPI"}, "Kray's brokers log in with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": None},
     "set listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config="),
    ({"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": f'{SCRAM_MODULE} required username="b";'},
     "brokers log in with the username and password"),
    ({"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
        f'{SCRAM_MODULE} required username="{BROKER_USER}" password="x";'}, "pick another"),
    ({"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": f'{SCRAM_MODULE} required username="b'},
     "is not closed"),
])
def test_a_login_that_cannot_work_stops_kray_start_naming_the_key(change, says):
    config = {k: v for k, v in {**SCRAM_BROKER, **change}.items() if v is not None}
    with pytest.raises(SecurityConfigError) as e:
        security_settings(config)
    assert says in str(e.value)


def test_a_plain_login_is_checked_against_the_listeners_users_before_anything_runs():
    assert broker_identity(plain_broker()).mechanism == "PLAIN"
    security_settings(plain_broker())
    with pytest.raises(SecurityConfigError) as e:
        security_settings(plain_broker(password="typo"))
    assert "the inter-broker password is wrong" in str(e.value) and "typo" not in str(e.value)
    assert "user_broker" in str(e.value)
    config = plain_broker()
    config["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = \
        f'{PLAIN_MODULE} required username="broker" password="p" user_admin="admin-secret";'
    with pytest.raises(SecurityConfigError, match='add user_broker="<the same password>"'):
        security_settings(config)


def test_a_scram_password_is_checked_against_the_metadatas_credential():
    identity = broker_identity(SCRAM_BROKER)
    salt, salted, iterations = scram_credential_step(identity, {}, "127.0.0.1:9092")  # none yet: made
    assert len(salt) == 32 and iterations == 4096
    same = make_credential(ScramMechanism.SCRAM_SHA_512, "broker-secret", iterations=8192)
    assert password_matches_credential(same, "broker-secret")
    assert scram_credential_step(identity, {("broker", ScramMechanism.SCRAM_SHA_512): same}, "h:1") is None
    other = make_credential(ScramMechanism.SCRAM_SHA_512, "rotated")
    with pytest.raises(InterBrokerLoginFailed) as e:
        scram_credential_step(identity, {("broker", ScramMechanism.SCRAM_SHA_512): other}, "10.0.0.5:9092")
    message = str(e.value)
    assert "the inter-broker password is wrong" in message
    assert "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config" in message
    assert "kray configs --bootstrap-server 10.0.0.5:9092" in message and "--entity-name broker" in message
    assert "broker-secret" not in message and "rotated" not in message
    # another mechanism's credential of the same user is no answer for this one
    assert scram_credential_step(identity, {("broker", ScramMechanism.SCRAM_SHA_256): other}, "h:1") is not None


def test_a_missing_cluster_action_is_said_but_super_users_or_an_acl_give_it():
    from actors.security.authorizer import (CLUSTER_NAME, AccessControlEntry, AclBinding, AclOperation,
                                            AclPermissionType, PatternType, ResourcePattern, ResourceType)
    identity = broker_identity(SCRAM_BROKER)
    assert cluster_action_note(SCRAM_BROKER, identity, (), {"127.0.0.1"}) is None, "no authorizer: nothing needed"
    note = cluster_action_note({**SCRAM_BROKER, **AUTHORIZER}, identity, (), {"127.0.0.1"})
    assert note.startswith("warning: User:broker") and "super.users" in note and "--operation ClusterAction" in note
    assert cluster_action_note({**SCRAM_BROKER, **AUTHORIZER, "super.users": "User:broker"}, identity, (),
                               {"127.0.0.1"}) is None
    grant = AclBinding(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL),
                       AccessControlEntry("User:broker", "*", AclOperation.CLUSTER_ACTION, AclPermissionType.ALLOW))
    assert cluster_action_note({**SCRAM_BROKER, **AUTHORIZER}, identity, [grant], {"127.0.0.1"}) is None


# --- the login itself, against a real SASL front end --------------------------------------------------

async def _frontend(config, scram_users: dict):
    config = {**BROKER_DEFAULTS, **config}
    ctx = GatewayContext(broker_id=1, config=config, controller=None)
    ctx._scram = by_mechanism(scram_users)
    settings = security_settings(config)
    security = settings.by_listener[settings.primary.name]
    server = await start_frontend(ctx, "127.0.0.1", 0, security=security)
    return server, server.sockets[0].getsockname()[1], config


@pytest.mark.parametrize("config", [SCRAM_BROKER, plain_broker()], ids=["SCRAM-SHA-512", "PLAIN"])
def test_brokers_log_in_with_the_operators_login_and_a_wrong_password_is_refused(config):
    stored = {("broker", ScramMechanism.SCRAM_SHA_512): make_credential(ScramMechanism.SCRAM_SHA_512, "broker-secret")}

    async def main():
        server, port, full = await _frontend(config, stored)
        try:
            connection = await PipelinedConnection.open_tcp("127.0.0.1", port, timeout_s=5, response_bytes_max=1 << 20)
            await login(connection, full)  # accepted
            connection.close()
            wrong = {**full}
            for key in list(wrong):
                if key.endswith("sasl.jaas.config") and "username=" in str(wrong[key]):
                    wrong[key] = str(wrong[key]).replace('password="broker-secret"', 'password="typo"')
            connection = await PipelinedConnection.open_tcp("127.0.0.1", port, timeout_s=5, response_bytes_max=1 << 20)
            with pytest.raises(BrokerLoginFailed, match="refused User:broker"):
                await login(connection, wrong)
            connection.close()
        finally:
            server.close()
    asyncio.run(main())


def test_start_checks_every_brokers_listener_and_says_which_refused():
    stored = {("broker", ScramMechanism.SCRAM_SHA_512): make_credential(ScramMechanism.SCRAM_SHA_512, "other")}

    async def serve():
        return await _frontend(SCRAM_BROKER, stored)

    loop = asyncio.new_event_loop()  # the front end on a thread of its own: check_logins blocks
    server, port, config = loop.run_until_complete(serve())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(InterBrokerLoginFailed) as e:
            check_logins(config, broker_identity(config), [(2, "127.0.0.1", port)], timeout_s=1)
        assert f"broker 2's inter-broker listener (127.0.0.1:{port}) refused User:broker with SCRAM-SHA-512" \
            in str(e.value)
        assert "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config" in str(e.value)
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def test_kray_start_prints_a_failed_inter_broker_login_and_exits_1(monkeypatch, tmp_path, capsys):
    """The console path: whatever the start check raises is `kray start`'s last word (exit 1), the
    cluster it started stopped."""
    import cluster.local
    from cluster import cli
    stopped = []

    class Refused:
        def __init__(self, config, address=None, **options):
            pass

        def start(self):
            raise InterBrokerLoginFailed("the inter-broker password is wrong: ... Fix the password in X")

        def stop(self):
            stopped.append(True)
    monkeypatch.setattr(cluster.local, "LocalBroker", Refused)
    assert cli.main(["start", "--data-dir", str(tmp_path), "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert "kray start: the inter-broker password is wrong" in err and "Traceback" not in err
    assert stopped == [True]
