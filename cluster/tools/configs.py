"""`kray configs`, after kafka-configs.sh, for topics and groups:
  kray configs --entity-type groups --entity-name G --alter --add-config share.auto.offset.reset=earliest
  kray configs --entity-type topics --entity-name T --describe
"""
from __future__ import annotations

import sys

from cluster.admin import COMMAND_CONFIG_HELP, AdminError, KafkaConnection
from protocol.errors import ErrorCode
from protocol.messages import DescribeConfigsRequest, IncrementalAlterConfigsRequest

RESOURCE_TYPES = {"topics": 2, "brokers": 4, "groups": 32}
OP_SET, OP_DELETE = 0, 1


def add_parser(sub) -> None:
    p = sub.add_parser("configs", help="describe and alter topic and group configs (like kafka-configs.sh)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    p.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    p.add_argument("--entity-type", choices=sorted(RESOURCE_TYPES), required=True)
    p.add_argument("--entity-name", required=True)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true")
    action.add_argument("--alter", action="store_true")
    p.add_argument("--add-config", default="", metavar="K1=V1,K2=V2")
    p.add_argument("--delete-config", default="", metavar="K1,K2")
    p.set_defaults(func=run)


def run(args) -> int:
    resource_type = RESOURCE_TYPES[args.entity_type]
    try:
        with KafkaConnection(args.bootstrap_server, client_id="kray-configs") as conn:
            if args.describe:
                result = conn.send(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=resource_type, resource_name=args.entity_name, configuration_keys=None)])).results[0]
                if result.error_code:
                    raise AdminError(f"{ErrorCode(result.error_code).name}: {result.error_message or ''}")
                print(f"Configs for {args.entity_type[:-1]} {args.entity_name} are:")
                for c in result.configs:
                    print(f"  {c.name}={c.value}")
                return 0
            changes = [IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=OP_SET, value=v)
                       for k, _, v in (kv.partition("=") for kv in args.add_config.split(",") if kv)]
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
            print(f"Completed updating config for {args.entity_type[:-1]} {args.entity_name}.")
            return 0
    except AdminError as e:
        print(f"kray configs: {e}", file=sys.stderr)
        return 1
