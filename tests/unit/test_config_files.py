"""Broker config files as Kafka users bring them (cluster/config.py): Kafka's server.properties
format beside TOML, Kafka's alternative key spellings, every value checked with the file and key
named, "did you mean" for a typo. (tests/kafka/test_broker_configs.py holds the same verdicts beside
Kafka 4.4's own.)"""
import pytest

from actors.config_schema import ConfigError, with_listener
from cluster.config import DEFAULT_LOCAL_CONFIG, detect_format, load_broker_config, parse_properties

KAFKA_SERVER_PROPERTIES = """\
# Kafka 4.4's config/server.properties, abridged
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
log.retention.hours=168
log.segment.bytes=1073741824
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_kafkas_own_server_properties_loads_and_says_what_it_ignores(tmp_path):
    notes = []
    config = with_listener(load_broker_config(write(tmp_path, "server.properties", KAFKA_SERVER_PROPERTIES),
                                              notes=notes), None, None)
    assert config["broker.id"] == 1 and config["num.partitions"] == 1 and config["auto.create.topics.enable"] is True
    assert config["log.dirs"] == "/tmp/kraft-combined-logs" and config["log.retention.ms"] == 168 * 3_600_000
    assert config["inter.broker.listener.name"] == "PLAINTEXT" and config["process.roles"] == "broker,controller"
    assert notes == [f"{tmp_path}/server.properties (read as Kafka properties): Kafka configs that Kray does not use, "
                     "ignored: controller.listener.names, num.io.threads, num.network.threads"]


def test_the_format_is_chosen_by_extension_then_by_content(tmp_path):
    assert detect_format(tmp_path / "a.properties", '"x" = 1')[0] == "Kafka properties"
    assert detect_format(tmp_path / "a.toml", "num.partitions=1")[0] == "TOML"
    assert detect_format(tmp_path / "broker.conf", "num.partitions=3\n")[0] == "Kafka properties"
    assert detect_format(tmp_path / "broker", "[broker]\n\"num.partitions\" = 3\n")[0] == "TOML"
    assert detect_format(tmp_path / "broker", "num.partitions = 3\n")[0] == "Kafka properties"
    assert detect_format(tmp_path / "broker", 'log.dirs = "x"\n')[0] == "TOML"
    assert load_broker_config(write(tmp_path, "kafka-like", "num.partitions=3\nlog.dirs=/d\n"))["num.partitions"] == 3


def test_properties_are_read_as_java_reads_them():
    assert parse_properties("a=1\n b : 2\nc 3\n# d=4\n! e=5\nf=x\\\n   y\ng=\\u0041\\tb\nh\n") == {
        "a": "1", "b": "2", "c": "3", "f": "xy", "g": "A\tb", "h": ""}


def test_a_mistyped_value_stops_kray_start_naming_the_file_and_the_key(tmp_path):
    path = write(tmp_path, "bad.toml", '[broker]\n"num.partitions" = "three"\n')
    with pytest.raises(ConfigError) as e:
        load_broker_config(path)
    assert str(e.value) == f"{path} (read as TOML): num.partitions must be an integer, not 'three'"
    path = write(tmp_path, "bad.properties", "num.partitions=three\n")
    with pytest.raises(ConfigError, match=r"bad.properties \(read as Kafka properties\): num.partitions must be an "
                                          r"integer, not 'three'"):
        load_broker_config(path)


@pytest.mark.parametrize("setting,problem", [
    ("num.partitions=0", "num.partitions=0: must be at least 1"),
    ("compression.gzip.level=10", "compression.gzip.level=10: must be between 1 and 9 or -1"),
    ("group.share.max.size=1001", "group.share.max.size=1001: must be between 1 and 1000"),
    ("auto.create.topics.enable=yes", "auto.create.topics.enable must be true or false, not 'yes'"),
    ("log.cleaner.min.cleanable.ratio=1.5", "log.cleaner.min.cleanable.ratio=1.5: must be between 0.0 and 1.0"),
    ("log.message.timestamp.type=Create", "log.message.timestamp.type=Create: must be one of CreateTime, "
                                          "LogAppendTime"),
    ("num.io.threads=eight", "num.io.threads must be an integer, not 'eight'"),  # a Kafka key Kray ignores
    ("offsets.topic.replication.factor=40000", "offsets.topic.replication.factor=40000: must be between 1 and 32767"),
])
def test_every_value_is_checked_for_its_type_and_range(setting, problem):
    with pytest.raises(ConfigError) as e:
        load_broker_config(None, [setting])
    assert str(e.value) == f"--override: {problem}"


def test_toml_values_must_have_their_keys_types(tmp_path):
    with pytest.raises(ConfigError, match=r"log.dirs must be a comma-separated list, not 5"):
        load_broker_config(write(tmp_path, "c.toml", '"log.dirs" = 5\n'))
    config = load_broker_config(write(tmp_path, "c.toml", '"num.partitions" = "3"\n"log.dirs" = ["/a", "/b"]\n'
                                                          'num.partition.shards = 2\n'))
    assert config["num.partitions"] == 3 and config["log.dirs"] == "/a,/b" and config["num.partition.shards"] == 2


def test_kafkas_alternative_spellings_resolve_as_in_kafka(tmp_path):
    def retention(text):
        return load_broker_config(write(tmp_path, "s.properties", text))["log.retention.ms"]
    assert retention("log.retention.hours=2\n") == 7_200_000
    assert retention("log.retention.hours=2\nlog.retention.minutes=3\n") == 180_000
    assert retention("log.retention.hours=2\nlog.retention.minutes=3\nlog.retention.ms=5\n") == 5
    assert retention("log.retention.hours=-1\n") == -1
    # an override's spelling replaces the file's setting, whichever spelling that used
    assert load_broker_config(DEFAULT_LOCAL_CONFIG, ["log.retention.hours=1"])["log.retention.ms"] == 3_600_000
    config = load_broker_config(write(tmp_path, "s.properties", "log.dir=/x\nlog.roll.hours=1\nnode.id=4\n"))
    assert (config["log.dirs"], config["log.roll.ms"], config["broker.id"]) == ("/x", 3_600_000, 4)
    assert load_broker_config(write(tmp_path, "s.properties", "log.dir=/x\nlog.dirs=/y\n"))["log.dirs"] == "/y"
    with pytest.raises(ConfigError, match="broker.id \\(3\\) and node.id \\(4\\) must be equal"):
        load_broker_config(write(tmp_path, "s.properties", "broker.id=3\nnode.id=4\n"))


def test_an_unknown_key_gets_a_suggestion(tmp_path):
    path = write(tmp_path, "typo.toml", "[broker]\n\"num.partitons\" = 3\n\"log.retention.hour\" = 1\n")
    with pytest.raises(ConfigError) as e:
        load_broker_config(path)
    assert str(e.value).startswith(f"{path} (read as TOML): unknown broker config num.partitons (did you mean "
                                   "num.partitions")
    assert "unknown broker config log.retention.hour (did you mean log.retention.hours" in str(e.value)
    with pytest.raises(ConfigError, match=r"unknown broker config zzz.qqq$"):
        load_broker_config(None, ["zzz.qqq=1"])


def test_unquoted_dotted_toml_keys_are_kafka_names(tmp_path):
    config = load_broker_config(write(tmp_path, "c.toml", "num.partitions = 3\nbroker.id = 2\n"))
    assert config["num.partitions"] == 3 and config["broker.id"] == 2
    config = load_broker_config(write(tmp_path, "c.toml", "[broker]\nnum.partitions = 4\n"))
    assert config["num.partitions"] == 4


def test_a_toml_parse_error_names_the_file_and_the_format(tmp_path):
    path = write(tmp_path, "broken.toml", '[broker]\n"log.dirs = "x"\n')
    with pytest.raises(ConfigError) as e:
        load_broker_config(path)
    assert str(e.value).startswith(f"{path} (read as TOML by its .toml extension): not valid TOML: ")
    assert "line 2" in str(e.value)


def test_naming_the_inter_broker_listener_alone_is_accepted_both_keys_refused(tmp_path):
    """Kafka refuses only a config that sets both (security.inter.broker.protocol's default counts
    as no setting: issue 35)."""
    two = "listeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093\n"
    config = with_listener(load_broker_config(write(tmp_path, "a.properties", two + "inter.broker.listener.name=SSL\n")),
                           None, None)
    assert config["inter.broker.listener.name"] == "SSL"
    assert with_listener(load_broker_config(None, ["inter.broker.listener.name=PLAINTEXT"]), None, None)
    for text in ("inter.broker.listener.name=PLAINTEXT\nsecurity.inter.broker.protocol=PLAINTEXT\n",
                 "inter.broker.listener.name=SSL\nsecurity.inter.broker.protocol=SSL\n"):
        with pytest.raises(ConfigError, match="Only one of inter.broker.listener.name and "
                                              "security.inter.broker.protocol should be set"):
            load_broker_config(write(tmp_path, "b.properties", two + text))
    # a file's protocol gives way to an override naming the listener, and the other way round
    path = write(tmp_path, "c.properties", two + "security.inter.broker.protocol=SSL\n")
    assert with_listener(load_broker_config(path, ["inter.broker.listener.name=PLAINTEXT"]), None, None)
