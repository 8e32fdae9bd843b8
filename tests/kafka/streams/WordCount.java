import java.nio.file.Files;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;

/** Kafka Streams word count with group.protocol=streams (KIP-1071): lines from an input topic of 3 partitions are
 *  split into words, re-keyed by word (a repartition topic), counted in a state store (its changelog topic) and
 *  written to an output topic. Two instances of the application run at once (the second joins while the first is
 *  processing), each with one stream thread; then the first leaves and as many lines again are counted by the
 *  second alone. Prints one JSON line: the final count per word read back from the output topic (and whether it
 *  matched after the leave), the application's internal topics (partitions, cleanup.policy), the interactive-query
 *  metadata, the states the instances went through, and the streams group as Admin.describeStreamsGroups sees it
 *  at the end (one member).
 *  Arguments: bootstrap, application id (also the prefix of the topics), the number of lines, and optionally the
 *  processing guarantee (at_least_once, the default, or exactly_once_v2: transactions, read back read_committed). */
public class WordCount {
    static final String[] WORDS = {"apple", "banana", "cherry", "damson", "elder", "fig", "grape"};

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], app = args[1];
        int lines = Integer.parseInt(args[2]);
        String guarantee = args.length > 3 ? args[3] : StreamsConfig.AT_LEAST_ONCE;
        String input = app + "-lines", output = app + "-counts";
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        Map<String, Long> expected = new TreeMap<>();
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(input, 3, (short) 1), new NewTopic(output, 2, (short) 1)))
                 .all().get(30, TimeUnit.SECONDS);
        }
        Properties pp = new Properties();
        pp.putAll(common);
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        produce(pp, input, 0, lines, expected);

        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(input)
               .flatMapValues(v -> Arrays.asList(v.split(" ")))
               .groupBy((k, word) -> word, Grouped.as("by-word"))
               .count(Materialized.as("word-counts"))
               .toStream()
               .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        Topology topology = builder.build();

        List<String> states = Collections.synchronizedList(new ArrayList<>());
        List<KafkaStreams> instances = new ArrayList<>();
        Map<String, Long> counts = new TreeMap<>();
        Map<String, Object> result = new LinkedHashMap<>();
        try {
            for (int n = 0; n < 2; n++) {
                Properties sp = new Properties();
                sp.putAll(common);
                sp.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
                sp.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "streams");
                sp.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName());
                sp.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName());
                sp.put(StreamsConfig.STATE_DIR_CONFIG, Files.createTempDirectory("wordcount-state").toString());
                sp.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "200");
                sp.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
                sp.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
                sp.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
                sp.put(StreamsConfig.APPLICATION_SERVER_CONFIG, "localhost:" + (7070 + n));  // for the IQ metadata
                KafkaStreams streams = new KafkaStreams(topology, sp);
                final int id = n;
                streams.setStateListener((now, before) -> states.add(id + ":" + now));
                streams.start();
                instances.add(streams);
                if (n == 0) Thread.sleep(3000);
            }
            Properties cp = new Properties();
            cp.putAll(common);
            cp.put("group.id", app + "-reader");
            cp.put("auto.offset.reset", "earliest");
            cp.put("isolation.level", StreamsConfig.AT_LEAST_ONCE.equals(guarantee) ? "read_uncommitted" : "read_committed");
            cp.put("key.deserializer", StringDeserializer.class.getName());
            cp.put("value.deserializer", LongDeserializer.class.getName());
            readCounts(cp, output, counts, expected);
            result.put("counts", new TreeMap<>(counts));
            // interactive queries: which instance (application.server) holds which partitions, as the group
            // coordinator told the members (KIP-1071's partitions_by_user_endpoint)
            Map<String, Object> iq = new TreeMap<>();
            long iqDeadline = System.currentTimeMillis() + 20_000;
            while (System.currentTimeMillis() < iqDeadline) {
                iq.clear();
                Set<String> active = new TreeSet<>();
                for (StreamsMetadata md : instances.get(0).metadataForAllStreamsClients()) {
                    for (TopicPartition tp : md.topicPartitions()) active.add(tp.topic().substring(app.length() + 1) + "-" + tp.partition());
                    iq.put("hosts", ((Integer) iq.getOrDefault("hosts", 0)) + 1);
                }
                iq.put("active_partitions", new ArrayList<>(active));
                KeyQueryMetadata key = instances.get(0).queryMetadataForKey("word-counts", "apple", Serdes.String().serializer());
                iq.put("apple_has_host", key != null && key.activeHost() != null && key.activeHost().port() > 0);
                if (Integer.valueOf(2).equals(iq.get("hosts")) && active.size() == 6) break;
                Thread.sleep(200);
            }
            result.put("iq", iq);
            result.put("expected", new TreeMap<>(expected));
            // the first instance leaves: its tasks move to the second, which restores their counts from the
            // changelog topic and goes on counting the lines produced after
            instances.get(0).close(Duration.ofSeconds(20));
            produce(pp, input, lines, 2 * lines, expected);
            cp.put("group.id", app + "-reader2");
            readCounts(cp, output, counts, expected);
            result.put("counts_after_leave_match", counts.equals(expected));
            try (Admin admin = Admin.create(common)) {
                Map<String, Object> internal = new TreeMap<>();
                Set<String> names = new TreeSet<>();
                for (String t : admin.listTopics().names().get(30, TimeUnit.SECONDS)) {
                    if (t.startsWith(app + "-") && !t.equals(input) && !t.equals(output)) names.add(t);
                }
                Map<String, TopicDescription> described = admin.describeTopics(names).allTopicNames().get(30, TimeUnit.SECONDS);
                List<org.apache.kafka.common.config.ConfigResource> resources = new ArrayList<>();
                for (String t : names) resources.add(new org.apache.kafka.common.config.ConfigResource(
                        org.apache.kafka.common.config.ConfigResource.Type.TOPIC, t));
                Map<org.apache.kafka.common.config.ConfigResource, Config> configs =
                        admin.describeConfigs(resources).all().get(30, TimeUnit.SECONDS);
                for (String t : names) {
                    Map<String, Object> info = new LinkedHashMap<>();
                    info.put("partitions", described.get(t).partitions().size());
                    Config config = configs.get(new org.apache.kafka.common.config.ConfigResource(
                            org.apache.kafka.common.config.ConfigResource.Type.TOPIC, t));
                    info.put("cleanup.policy", config.get("cleanup.policy").value());
                    internal.put(t.substring(app.length() + 1), info);
                }
                result.put("internal_topics", internal);
                try {
                    StreamsGroupDescription g = admin.describeStreamsGroups(List.of(app)).all()
                            .get(30, TimeUnit.SECONDS).get(app);
                    Map<String, Object> group = new LinkedHashMap<>();
                    group.put("state", g.groupState().toString());
                    group.put("members", g.members().size());
                    List<String> subtopologies = new ArrayList<>();
                    for (StreamsGroupSubtopologyDescription s : g.subtopologies()) subtopologies.add(
                            s.subtopologyId() + " source=" + new TreeSet<>(s.sourceTopics()) + " repartition_sink="
                            + new TreeSet<>(s.repartitionSinkTopics()) + " changelogs="
                            + new TreeSet<>(s.stateChangelogTopics().keySet()) + " repartition_source="
                            + new TreeSet<>(s.repartitionSourceTopics().keySet()));
                    group.put("subtopologies", subtopologies);
                    List<String> tasks = new ArrayList<>();
                    for (StreamsGroupMemberDescription m : g.members()) {
                        List<String> active = new ArrayList<>();
                        for (StreamsGroupMemberAssignment.TaskIds t : m.assignment().activeTasks())
                            for (int p : t.partitions()) active.add(t.subtopologyId() + "_" + p);
                        tasks.addAll(active);
                    }
                    Collections.sort(tasks);
                    group.put("active_tasks", tasks);
                    result.put("group", group);
                } catch (Exception e) {
                    result.put("group", "describeStreamsGroups failed: " + e);
                }
            }
        } finally {
            for (KafkaStreams s : instances) s.close(Duration.ofSeconds(20));
        }
        result.put("states", new ArrayList<>(states));
        System.out.println(toJson(result));
    }

    static void produce(Properties pp, String input, int from, int to, Map<String, Long> expected) {
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            for (int i = from; i < to; i++) {
                StringBuilder line = new StringBuilder();
                for (int j = 0; j <= i % 4; j++) {
                    String word = WORDS[(i * 3 + j) % WORDS.length];
                    line.append(j == 0 ? "" : " ").append(word);
                    expected.merge(word, 1L, Long::sum);
                }
                p.send(new ProducerRecord<>(input, "line" + i, line.toString()));
            }
            p.flush();
        }
    }

    /** The last count per word on the output topic, read from its start until it equals `expected` (90 s at most). */
    static void readCounts(Properties cp, String output, Map<String, Long> counts, Map<String, Long> expected) {
        counts.clear();
        long deadline = System.currentTimeMillis() + 90_000;
        try (KafkaConsumer<String, Long> c = new KafkaConsumer<>(cp)) {
            c.subscribe(List.of(output));
            while (!counts.equals(expected) && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, Long> r : c.poll(Duration.ofMillis(300))) counts.put(r.key(), r.value());
            }
        }
    }

    static String toJson(Object o) {
        if (o instanceof Map<?, ?> m) {
            StringJoiner j = new StringJoiner(",", "{", "}");
            m.forEach((k, v) -> j.add(toJson(String.valueOf(k)) + ":" + toJson(v)));
            return j.toString();
        }
        if (o instanceof Collection<?> c) {
            StringJoiner j = new StringJoiner(",", "[", "]");
            c.forEach(v -> j.add(toJson(v)));
            return j.toString();
        }
        if (o instanceof Number || o instanceof Boolean) return String.valueOf(o);
        return "\"" + String.valueOf(o).replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }
}
