"""`kray configs`, after kafka-configs.sh, for topics, groups, brokers and users' SCRAM credentials:
  kray configs --entity-type groups --entity-name G --alter --add-config share.auto.offset.reset=earliest
  kray configs --entity-type topics --entity-name T --describe
  kray configs --entity-type users --entity-name alice --alter \\
      --add-config 'SCRAM-SHA-512=[iterations=8192,password=alice-secret]'
  kray configs --entity-type users --entity-name alice --alter --delete-config SCRAM-SHA-512
  kray configs --entity-type users [--entity-name alice] --describe
  kray configs --entity-type users --entity-name alice --entity-type clients --entity-name app --alter \
      --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
  kray configs --entity-type clients --entity-default --alter --add-config producer_byte_rate=1048576
  kray configs --entity-type brokers --entity-default --alter --add-config max.connections.per.ip=100
                                                                      (every broker's dynamic default)
  kray configs --entity-type users --entity-name alice --describe     (SCRAM credentials and quotas)
  kray configs --entity-type clients --describe                       (every client id's quotas)

`--add-config` is split as Kafka splits it: at commas outside square brackets, the brackets then
dropped from the value. A SCRAM credential is `[iterations=N,]password=P` (4096 iterations unless
given, as kafka-configs.sh); the tool salts and hashes the password here (AlterUserScramCredentials
carries the salt and the salted password, never the password). Kafka's broker refuses changing one
user twice in one request (DUPLICATE_RESOURCE), so each mechanism's change goes in a request of its
own, and `SCRAM-SHA-256=[...],SCRAM-SHA-512=[...]` works in one command, as kafka-configs.sh meant.
"""
from __future__ import annotations

import re
import secrets
import sys

from actors.security.scram import (ITERATIONS_MIN, SALT_BYTES_DEFAULT, ScramMechanism,
                                   salted_password)
from cluster.admin import COMMAND_CONFIG_HELP, AdminError, KafkaConnection
from protocol.errors import ErrorCode
from protocol.messages import (AlterClientQuotasRequest, AlterUserScramCredentialsRequest,
                               DescribeClientQuotasRequest, DescribeConfigsRequest,
                               DescribeUserScramCredentialsRequest, IncrementalAlterConfigsRequest)

RESOURCE_TYPES = {"topics": 2, "brokers": 4, "groups": 32}
# DescribeConfigs' ConfigSource, by the names of Kafka's admin client (ConfigEntry.ConfigSource)
CONFIG_SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                  3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
                  6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
# client quota entities (KIP-546): kafka-configs.sh's entity type -> the protocol's
QUOTA_ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
QUOTA_ENTITY_NAMES = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
ENTITY_TYPES = sorted([*RESOURCE_TYPES, *QUOTA_ENTITY_TYPES])
DEFAULT_ENTITY = object()  # --entity-default
OP_SET, OP_DELETE = 0, 1
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"  # Kafka's lookahead: the next '[' comes before any ']'
_SCRAM_VALUE = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.S)


def add_parser(sub) -> None:
    p = sub.add_parser("configs", help="describe and alter topic, group and broker configs and users' SCRAM "
                                       "credentials (like kafka-configs.sh)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    p.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    p.add_argument("--entity-type", choices=ENTITY_TYPES, required=True, action="append",
                   help="repeat with --entity-name for a user and client id's quotas (users, then clients)")
    p.add_argument("--entity-name", action="append", help="required but for --describe of every user, client or ip")
    p.add_argument("--entity-default", action="append_const", const=DEFAULT_ENTITY, dest="entity_name",
                   help="the default user, client id or ip (quotas), in place of --entity-name")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true")
    action.add_argument("--alter", action="store_true")
    p.add_argument("--add-config", default="", metavar="K1=V1,K2=[V2,V3]")
    p.add_argument("--delete-config", default="", metavar="K1,K2")
    p.set_defaults(func=run)


def parse_add_config(text: str) -> dict[str, str]:
    """kafka-configs.sh's --add-config: `k1=v1,k2=[a,b],k3=` (empty values kept)."""
    configs = {}
    for item in re.split("," + _OUTSIDE_BRACKETS, text) if text else []:
        parts = re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, item)
        if len(parts) != 2:
            raise AdminError(f'invalid --add-config item {item!r}: all configs to be added must be in the format '
                             f'"key=val" (a value with commas goes in square brackets: key=[a,b])')
        configs[parts[0].strip()] = re.sub(r"[\[\]]", "", parts[1]).strip()
    return configs


def scram_upsertion(user: str, mechanism_name: str, value: str) -> AlterUserScramCredentialsRequest:
    mechanism = ScramMechanism.from_name(mechanism_name)
    match = _SCRAM_VALUE.fullmatch(value)
    if match is None:
        raise AdminError(f"invalid credential property {mechanism_name}={value[:16]}…: use "
                         f"{mechanism_name}=[iterations=8192,password=SECRET] (iterations optional)")
    iterations = int(match.group(1)) if match.group(1) not in (None, "", "-1") else ITERATIONS_MIN
    if iterations < ITERATIONS_MIN:
        raise AdminError(f"iterations {iterations} is less than the minimum {ITERATIONS_MIN} required for "
                         f"{mechanism_name}")
    salt = secrets.token_bytes(SALT_BYTES_DEFAULT)
    # the broker bounds iterations above (UNACCEPTABLE_CREDENTIAL); hash no more than it accepts
    salted = salted_password(mechanism, match.group(2), salt, min(iterations, 16384))
    R = AlterUserScramCredentialsRequest
    return R(deletions=[], upsertions=[R.ScramCredentialUpsertion(
        name=user, mechanism=mechanism.type_id, iterations=iterations, salt=salt, salted_password=salted)])


def scram_deletion(user: str, mechanism_name: str) -> AlterUserScramCredentialsRequest:
    R = AlterUserScramCredentialsRequest
    return R(deletions=[R.ScramCredentialDeletion(name=user, mechanism=ScramMechanism.from_name(mechanism_name).type_id)],
             upsertions=[])


def _alter_users(conn: KafkaConnection, user: str, to_add: dict[str, str], to_delete: list[str]) -> None:
    scram_names = [m.mechanism_name for m in ScramMechanism]
    unknown = [k for k in [*to_add, *to_delete] if k not in scram_names]
    if unknown:
        raise AdminError(f"unexpected SCRAM credential config names: {', '.join(unknown)}")
    requests = [scram_deletion(user, name) for name in to_delete]
    requests += [scram_upsertion(user, name, value) for name, value in to_add.items()]
    for request in requests:
        for result in conn.send(request).results:
            if result.error_code:
                raise AdminError(f"{ErrorCode(result.error_code).name}: {result.error_message or ''} "
                                 f"(user {result.user})")


def _describe_users(conn: KafkaConnection, user: str | None) -> int:
    R = DescribeUserScramCredentialsRequest
    response = conn.send(R(users=[R.UserName(name=user)] if user is not None else None))
    if response.error_code:
        raise AdminError(f"{ErrorCode(response.error_code).name}: {response.error_message or ''}")
    names = {m.type_id: m.mechanism_name for m in ScramMechanism}
    for result in response.results:
        if result.error_code == ErrorCode.RESOURCE_NOT_FOUND:
            print(f"No SCRAM credential configs for user-principal '{result.user}'.")
        elif result.error_code:
            print(f"Error retrieving SCRAM credential configs for user-principal '{result.user}': "
                  f"{ErrorCode(result.error_code).name}: {result.error_message or ''}")
        else:
            text = ", ".join(f"{names.get(c.mechanism, c.mechanism)}=iterations={c.iterations}"
                             for c in result.credential_infos)
            print(f"SCRAM credential configs for user-principal '{result.user}' are {text}")
    return 0


def _quota_entity(args) -> list[tuple[str, str | None]]:
    """(protocol entity type, name or None for the default) per --entity-type given."""
    names = list(args.entity_name or [])
    if len(names) > len(args.entity_type):
        raise AdminError("an --entity-name or --entity-default without its --entity-type")
    names += [None] * (len(args.entity_type) - len(names))  # (describe: any)
    return [(QUOTA_ENTITY_TYPES[t], n) for t, n in zip(args.entity_type, names)]


def _alter_quotas(conn: KafkaConnection, entity, to_add: dict[str, str], to_delete: list[str]) -> None:
    A = AlterClientQuotasRequest
    ops = [A.OpData(key=k, value=_quota_value(k, v), remove=False) for k, v in to_add.items()]
    ops += [A.OpData(key=k, value=0.0, remove=True) for k in to_delete]
    response = conn.send(A(validate_only=False, entries=[A.EntryData(entity=[
        A.EntityData(entity_type=t, entity_name=None if n is DEFAULT_ENTITY else n) for t, n in entity], ops=ops)]))
    for entry in response.entries:
        if entry.error_code:
            raise AdminError(f"{ErrorCode(entry.error_code).name}: {entry.error_message or ''}")


def _quota_value(key: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise AdminError(f"invalid value {value!r} for {key}: a quota is a number") from None


def _describe_quotas(conn: KafkaConnection, entity) -> int:
    D = DescribeClientQuotasRequest
    components = [D.ComponentData(entity_type=t, match_type=2 if n is None else 1 if n is DEFAULT_ENTITY else 0,
                                  match=None if n is None or n is DEFAULT_ENTITY else n) for t, n in entity]
    response = conn.send(D(components=components, strict=True))
    if response.error_code:
        raise AdminError(f"{ErrorCode(response.error_code).name}: {response.error_message or ''}")
    for entry in sorted(response.entries or [], key=lambda e: [(d.entity_type, d.entity_name or "") for d in e.entity]):
        who = ", ".join(f"{QUOTA_ENTITY_NAMES.get(d.entity_type, d.entity_type)} "
                        f"{'<default>' if d.entity_name is None else repr(d.entity_name)}" for d in entry.entity)
        values = ", ".join(f"{v.key}={v.value}" for v in sorted(entry.values, key=lambda v: v.key))
        print(f"Quota configs for {who} are {values}")
    return 0


def run(args) -> int:
    try:
        types = args.entity_type
        brokers_default = types == ["brokers"] and args.entity_name == [DEFAULT_ENTITY]  # the cluster-wide default
        if len(types) > 1 or types[0] in ("clients", "ips") or (DEFAULT_ENTITY in (args.entity_name or [])
                                                                and not brokers_default):
            return _run_quotas(args)
        args.entity_type = types[0]
        args.entity_name = "" if brokers_default else (args.entity_name or [None])[0]
        if args.entity_name is None and not (args.describe and args.entity_type == "users"):
            raise AdminError("--entity-name is required (only --describe of users may leave it out: every user)")
        with KafkaConnection(args.bootstrap_server, client_id="kray-configs") as conn:
            if args.entity_type == "users":
                entity = [("user", args.entity_name)]
                if args.describe:
                    _describe_users(conn, args.entity_name)
                    return _describe_quotas(conn, entity)
                to_add = parse_add_config(args.add_config)
                to_delete = [k.strip() for k in args.delete_config.split(",") if k.strip()]
                if not to_add and not to_delete:
                    raise AdminError("--alter needs --add-config 'SCRAM-SHA-512=[password=…]' or "
                                     "--delete-config SCRAM-SHA-512, or quotas (producer_byte_rate=1048576)")
                scram_names = {m.mechanism_name for m in ScramMechanism}
                quota_add = {k: v for k, v in to_add.items() if k not in scram_names}
                quota_delete = [k for k in to_delete if k not in scram_names]
                if quota_add or quota_delete:
                    _alter_quotas(conn, entity, quota_add, quota_delete)
                scram_add = {k: v for k, v in to_add.items() if k in scram_names}
                scram_delete = [k for k in to_delete if k in scram_names]
                if scram_add or scram_delete:
                    _alter_users(conn, args.entity_name, scram_add, scram_delete)
                print(f"Completed updating config for user {args.entity_name}.")
                return 0
            resource_type = RESOURCE_TYPES[args.entity_type]
            if args.describe:
                result = conn.send(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=resource_type, resource_name=args.entity_name, configuration_keys=None)])).results[0]
                if result.error_code:
                    raise AdminError(f"{ErrorCode(result.error_code).name}: {result.error_message or ''}")
                print("Default configs for brokers in the cluster are:" if brokers_default
                      else f"Configs for {args.entity_type[:-1]} {args.entity_name} are:")
                for c in result.configs:
                    print(f"  {c.name}={c.value} source={CONFIG_SOURCES.get(c.config_source, c.config_source)}")
                return 0
            changes = [IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=OP_SET, value=v)
                       for k, v in parse_add_config(args.add_config).items()]
            changes += [IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=OP_DELETE, value=None)
                        for k in args.delete_config.split(",") if k]
            if not changes:
                raise AdminError("--alter needs --add-config K=V[,K=V] or --delete-config K[,K]")
            result = conn.send(IncrementalAlterConfigsRequest(validate_only=False, resources=[
                IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=resource_type,
                                                                    resource_name=args.entity_name,
                                                                    configs=changes)])).responses[0]
            if result.error_code:
                raise AdminError(f"{ErrorCode(result.error_code).name}: {result.error_message or ''}")
            print("Completed updating default config for brokers in the cluster." if brokers_default
                  else f"Completed updating config for {args.entity_type[:-1]} {args.entity_name}.")
            return 0
    except AdminError as e:
        print(f"kray configs: {e}", file=sys.stderr)
        return 1


def _run_quotas(args) -> int:
    """Quotas of clients, ips, a user and client id together, or a default entity (kafka-configs.sh's forms)."""
    if any(t not in QUOTA_ENTITY_TYPES for t in args.entity_type):
        raise AdminError("only users, clients and ips combine (--entity-type users --entity-type clients)")
    entity = _quota_entity(args)
    with KafkaConnection(args.bootstrap_server, client_id="kray-configs") as conn:
        if args.describe:
            return _describe_quotas(conn, entity)
        if any(n is None for _, n in entity):
            raise AdminError("--alter needs an --entity-name or --entity-default for each --entity-type")
        to_add = parse_add_config(args.add_config)
        to_delete = [k.strip() for k in args.delete_config.split(",") if k.strip()]
        if not to_add and not to_delete:
            raise AdminError("--alter needs --add-config K=V[,K=V] or --delete-config K[,K]")
        _alter_quotas(conn, entity, to_add, to_delete)
    who = " and ".join(f"{t[:-1]} {'<default>' if n is DEFAULT_ENTITY else n}"
                       for t, n in zip(args.entity_type, args.entity_name))
    print(f"Completed updating config for {who}.")
    return 0
