import java.io.StringReader;
import java.util.Properties;
import org.apache.kafka.common.config.ConfigDef;

/** Apache Kafka 4.4's broker configs, for tests/kafka/test_broker_configs.py:
 *    java BrokerConfigDef.java            every key: name, type, default, validator (tab-separated)
 *    java BrokerConfigDef.java check      for each properties text on stdin (separated by a line "---"):
 *                                         "OK" or "REFUSED <Kafka's message>", one line each */
public class BrokerConfigDef {
    public static void main(String[] args) throws Exception {
        if (args.length > 0 && args[0].equals("check")) {
            String all = new String(System.in.readAllBytes(), "UTF-8");
            for (String text : all.split("(?m)^---$")) {
                Properties props = new Properties();
                props.load(new StringReader(text));
                try {
                    kafka.server.KafkaConfig.fromProps(props);
                    System.out.println("OK");
                } catch (Exception e) {
                    System.out.println("REFUSED " + String.valueOf(e.getMessage()).replace('\n', ' '));
                }
            }
            return;
        }
        ConfigDef def = kafka.server.KafkaConfig.configDef();
        for (ConfigDef.ConfigKey k : def.configKeys().values()) {
            Object d = k.hasDefault() ? k.defaultValue : "<none>";
            System.out.println(k.name + "\t" + k.type + "\t" + d + "\t" + (k.validator == null ? "" : k.validator.toString()));
        }
    }
}
