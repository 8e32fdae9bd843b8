// Apache Kafka's Java client (kafka-clients 4.3.0) against Kray, driven by tests/e2e/test_java_client.py.
// Plain javac, no build tool: javac -cp 'lib/*' -d OUT KrayTransactions.java; java -cp 'lib/*:OUT' KrayTransactions ...
//
// usage: java KrayTransactions BOOTSTRAP SCENARIO...
//   scenarios: commit-abort, pipeline-classic, pipeline-consumer, fence, admin, share, share-read-committed
//   commit-abort   a transactional KafkaProducer commits 6 records over partitions 0 and 1, aborts 4, commits 2 more;
//                  a read_committed KafkaConsumer must see exactly the 8 committed, a read_uncommitted one all 12
//   pipeline-*     consume-transform-produce with group.protocol classic or consumer: a read_committed consumer
//                  without auto-commit reads 10 input records, a transactional producer writes "out-<value>" and
//                  sendOffsetsToTransaction(positions, consumer.groupMetadata()); the group's offsets (read with
//                  Admin) move only at commitTransaction; a second, aborted transaction over 4 more leaves them
//   fence          a second producer with the same transactional.id (initTransactions) fences the first, whose
//                  open transaction is aborted: its commitTransaction fails with ProducerFencedException (or
//                  InvalidProducerEpochException); read_committed sees only the second producer's committed record
//   admin          Admin listTransactions, describeTransactions and describeProducers while a transaction is open
//                  (Ongoing, its 2 partitions, the first offset) and after its commit (CompleteCommit, none);
//                  then Admin fenceProducers fences an open transaction: its commit fails, its record stays invisible
//   share          a KafkaShareConsumer (share.acknowledgement.mode=explicit; share.auto.offset.reset=earliest set
//                  with Admin incrementalAlterConfigs on the GROUP resource) ACCEPTs, RELEASEs and REJECTs one record
//                  each; the RELEASEd one comes back with delivery count 2, the others never again
//   share-read-committed  a share group with share.isolation.level=read_committed (implicit acknowledgement) over
//                  a topic with a committed, an aborted and a committed transaction gets exactly the committed records
// The scenarios run concurrently; each creates its own topics with Admin and prints one JSON line when it ends:
//   {"scenario": ..., "ok": true|false, "error": ..., ...what it saw...}
// The program exits 1 when a scenario failed.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class KrayTransactions {
    static String bootstrap;
    static final String RUN = Long.toString(System.currentTimeMillis() % 100000000L, 36) + "-" + ProcessHandle.current().pid();

    static class Failure extends RuntimeException {
        Failure(String message) { super(message); }
    }

    static void check(boolean condition, String message) {
        if (!condition) throw new Failure(message);
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        // the scenarios run side by side (each with its own topics, groups and transactional ids): most of their time
        // is spent waiting for records and for the absence of records
        List<String> scenarios = Arrays.asList(Arrays.copyOfRange(args, 1, args.length));
        ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, scenarios.size()));
        List<Future<Boolean>> done = new ArrayList<>();
        for (String scenario : scenarios) done.add(pool.submit(() -> run(scenario)));
        boolean allOk = true;
        for (Future<Boolean> f : done) allOk &= f.get();
        pool.shutdown();
        System.exit(allOk ? 0 : 1);
    }

    static boolean run(String scenario) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("scenario", scenario);
        long start = System.nanoTime();
        boolean ok = true;
        try {
            switch (scenario) {
                case "commit-abort" -> commitAbort(out);
                case "pipeline-classic" -> pipeline(out, "classic");
                case "pipeline-consumer" -> pipeline(out, "consumer");
                case "fence" -> fence(out);
                case "admin" -> adminTransactions(out);
                case "share-read-committed" -> shareReadCommitted(out);
                case "share" -> share(out);
                default -> throw new Failure("unknown scenario " + scenario);
            }
        } catch (Throwable e) {
            ok = false;
            out.put("error", e.toString() + (e.getCause() != null ? " caused by " + e.getCause() : ""));
            if (!(e instanceof Failure)) e.printStackTrace();
        }
        out.put("ok", ok);
        out.put("seconds", Math.round((System.nanoTime() - start) / 1e7) / 100.0);
        synchronized (System.out) {
            System.out.println(json(out));
            System.out.flush();
        }
        return ok;
    }

    // ---- clients ----

    static Admin admin() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30000);
        return Admin.create(p);
    }

    static List<String> createTopics(int partitions, String... names) throws Exception {
        List<String> topics = Arrays.stream(names).map(n -> "java-" + n + "-" + RUN).collect(Collectors.toList());
        try (Admin admin = admin()) {
            admin.createTopics(topics.stream().map(t -> new NewTopic(t, partitions, (short) 1)).toList())
                 .all().get(30, TimeUnit.SECONDS);
        }
        return topics;
    }

    static KafkaProducer<String, String> producer(String transactionalId) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 30000);
        if (transactionalId != null) p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> consumer(String isolation, String group, String protocol) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30000);
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, 200);
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        }
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    static void send(KafkaProducer<String, String> producer, String topic, int partition, String value) throws Exception {
        producer.send(new ProducerRecord<>(topic, partition, null, value)).get(30, TimeUnit.SECONDS);
    }

    /** Every value of `topic` (partitions 0..partitions-1, from the start) that a consumer with `isolation` reads,
     *  ordered by partition and offset: waits for `expect` of them, then 1.5 s more for any that should not be there. */
    static List<String> readAll(String topic, int partitions, String isolation, int expect) {
        List<ConsumerRecord<String, String>> seen = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer(isolation, null, null)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < partitions; p++) tps.add(new TopicPartition(topic, p));
            c.assign(tps);
            c.seekToBeginning(tps);
            long deadline = System.nanoTime() + 20_000_000_000L, settle = Long.MAX_VALUE;
            while (System.nanoTime() < Math.min(deadline, settle)) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) seen.add(r);
                if (seen.size() >= expect && settle == Long.MAX_VALUE) settle = System.nanoTime() + 1_500_000_000L;
            }
        }
        seen.sort(Comparator.comparingInt((ConsumerRecord<String, String> r) -> r.partition())
                            .thenComparingLong(ConsumerRecord::offset));
        return seen.stream().map(ConsumerRecord::value).collect(Collectors.toList());
    }

    // ---- (a), (b): commit, abort, read_committed and read_uncommitted readers ----

    static void commitAbort(Map<String, Object> out) throws Exception {
        String topic = createTopics(2, "txn").get(0);
        out.put("topic", topic);
        List<String> committed = new ArrayList<>(), aborted = new ArrayList<>();
        try (KafkaProducer<String, String> producer = producer("java-txn-" + RUN)) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < 6; i++) {
                producer.send(new ProducerRecord<>(topic, i % 2, null, "committed-" + i));
                committed.add("committed-" + i);
            }
            producer.commitTransaction();

            producer.beginTransaction();
            for (int i = 0; i < 4; i++) {
                producer.send(new ProducerRecord<>(topic, i % 2, null, "aborted-" + i));
                aborted.add("aborted-" + i);
            }
            producer.flush();  // the aborted records are in the log before the abort marker
            producer.abortTransaction();

            producer.beginTransaction();  // committed records after the aborted ones, in the same fetches
            for (int i = 0; i < 2; i++) {
                producer.send(new ProducerRecord<>(topic, i % 2, null, "last-" + i));
                committed.add("last-" + i);
            }
            producer.commitTransaction();
        }
        // transaction version 2 (finalized by the broker) bumps the epoch at each of the three ends; version 1 never
        try (Admin admin = admin()) {
            TransactionDescription done = admin.describeTransactions(List.of("java-txn-" + RUN))
                .description("java-txn-" + RUN).get(30, TimeUnit.SECONDS);
            out.put("producer_epoch", (int) done.producerEpoch());
            out.put("transaction_state", done.state().toString());
        }
        List<String> readCommitted = readAll(topic, 2, "read_committed", committed.size());
        List<String> readUncommitted = readAll(topic, 2, "read_uncommitted", committed.size() + aborted.size());
        out.put("read_committed", readCommitted);
        out.put("read_uncommitted", readUncommitted);
        // by partition and offset: partition 0 holds the even-numbered records, partition 1 the odd ones
        List<String> expectCommitted = List.of("committed-0", "committed-2", "committed-4", "last-0",
                                               "committed-1", "committed-3", "committed-5", "last-1");
        List<String> expectUncommitted = List.of("committed-0", "committed-2", "committed-4", "aborted-0", "aborted-2", "last-0",
                                                 "committed-1", "committed-3", "committed-5", "aborted-1", "aborted-3", "last-1");
        check(readCommitted.equals(expectCommitted), "read_committed saw " + readCommitted + ", expected " + expectCommitted);
        check(readUncommitted.equals(expectUncommitted), "read_uncommitted saw " + readUncommitted + ", expected " + expectUncommitted);
    }

    // ---- (c): consume-transform-produce with sendOffsetsToTransaction ----

    static Map<Integer, Long> groupOffsets(Admin admin, String group, String topic) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> found = admin.listConsumerGroupOffsets(group)
            .partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
        Map<Integer, Long> offsets = new TreeMap<>();
        found.forEach((tp, om) -> { if (tp.topic().equals(topic) && om != null) offsets.put(tp.partition(), om.offset()); });
        return offsets;
    }

    static Map<Integer, Long> awaitGroupOffsets(Admin admin, String group, String topic, Map<Integer, Long> expected) throws Exception {
        // the coordinator writes the markers after it answers EndTxn, as Kafka's does: the offsets move a moment later
        long deadline = System.nanoTime() + 15_000_000_000L;
        Map<Integer, Long> found;
        while (!(found = groupOffsets(admin, group, topic)).equals(expected) && System.nanoTime() < deadline) Thread.sleep(100);
        return found;
    }

    static List<ConsumerRecord<String, String>> pollExactly(KafkaConsumer<String, String> c, int count) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (got.size() < count && System.nanoTime() < deadline) c.poll(Duration.ofMillis(200)).forEach(got::add);
        check(got.size() == count, "polled " + got.size() + " records, expected " + count);
        return got;
    }

    static void pipeline(Map<String, Object> out, String protocol) throws Exception {
        List<String> topics = createTopics(2, "in-" + protocol, "out-" + protocol);
        String source = topics.get(0), sink = topics.get(1), group = "java-eos-" + protocol + "-" + RUN;
        out.put("source", source);
        out.put("sink", sink);
        out.put("group", group);
        try (KafkaProducer<String, String> plain = producer(null)) {
            for (int i = 0; i < 10; i++) send(plain, source, i % 2, "in-" + i);
        }
        try (Admin admin = admin();
             KafkaConsumer<String, String> consumer = consumer("read_committed", group, protocol);
             KafkaProducer<String, String> producer = producer("java-eos-" + protocol + "-" + RUN)) {
            producer.initTransactions();
            consumer.subscribe(List.of(source));

            // a committed transaction over the first 10 records
            List<ConsumerRecord<String, String>> records = pollExactly(consumer, 10);
            producer.beginTransaction();
            for (ConsumerRecord<String, String> r : records)
                producer.send(new ProducerRecord<>(sink, r.partition(), null, "out-" + r.value()));
            Map<TopicPartition, OffsetAndMetadata> positions = new HashMap<>();
            for (TopicPartition tp : consumer.assignment()) positions.put(tp, new OffsetAndMetadata(consumer.position(tp)));
            out.put("first_positions", positionsByPartition(positions));
            producer.sendOffsetsToTransaction(positions, consumer.groupMetadata());
            Map<Integer, Long> beforeCommit = groupOffsets(admin, group, source);
            out.put("offsets_before_commit", beforeCommit);
            check(beforeCommit.isEmpty(), "offsets visible before the commit: " + beforeCommit);
            producer.commitTransaction();
            Map<Integer, Long> afterCommit = awaitGroupOffsets(admin, group, source, Map.of(0, 5L, 1, 5L));
            out.put("offsets_after_commit", afterCommit);
            check(afterCommit.equals(Map.of(0, 5L, 1, 5L)), "offsets after the commit: " + afterCommit);

            // an aborted transaction over 4 more: the group's offsets stay where the commit left them
            try (KafkaProducer<String, String> plain = producer(null)) {
                for (int i = 0; i < 4; i++) send(plain, source, i % 2, "more-" + i);
            }
            records = pollExactly(consumer, 4);
            producer.beginTransaction();
            for (ConsumerRecord<String, String> r : records)
                producer.send(new ProducerRecord<>(sink, r.partition(), null, "out-" + r.value()));
            positions.clear();
            for (TopicPartition tp : consumer.assignment()) positions.put(tp, new OffsetAndMetadata(consumer.position(tp)));
            out.put("second_positions", positionsByPartition(positions));
            producer.sendOffsetsToTransaction(positions, consumer.groupMetadata());
            producer.flush();
            producer.abortTransaction();
            Thread.sleep(1000);  // (the abort marker reaches the group's __consumer_offsets partition meanwhile)
            Map<Integer, Long> afterAbort = groupOffsets(admin, group, source);
            out.put("offsets_after_abort", afterAbort);
            check(afterAbort.equals(Map.of(0, 5L, 1, 5L)), "offsets after the abort: " + afterAbort);
        }
        List<String> readCommitted = readAll(sink, 2, "read_committed", 10);
        List<String> readUncommitted = readAll(sink, 2, "read_uncommitted", 14);
        out.put("sink_read_committed", readCommitted);
        out.put("sink_read_uncommitted", readUncommitted);
        List<String> expectCommitted = new ArrayList<>();
        for (int i = 0; i < 10; i++) expectCommitted.add("out-in-" + i);
        List<String> expectAll = new ArrayList<>(expectCommitted);
        for (int i = 0; i < 4; i++) expectAll.add("out-more-" + i);
        check(sorted(readCommitted).equals(sorted(expectCommitted)), "sink read_committed: " + readCommitted);
        check(sorted(readUncommitted).equals(sorted(expectAll)), "sink read_uncommitted: " + readUncommitted);
    }

    static Map<Integer, Long> positionsByPartition(Map<TopicPartition, OffsetAndMetadata> positions) {
        Map<Integer, Long> m = new TreeMap<>();
        positions.forEach((tp, om) -> m.put(tp.partition(), om.offset()));
        return m;
    }

    static List<String> sorted(List<String> values) {
        List<String> s = new ArrayList<>(values);
        Collections.sort(s);
        return s;
    }

    // ---- zombie fencing (KIP-98): a second producer with the same transactional.id ----

    static void fence(Map<String, Object> out) throws Exception {
        String topic = createTopics(2, "fence").get(0), tid = "java-fence-" + RUN;
        out.put("topic", topic);
        try (KafkaProducer<String, String> zombie = producer(tid)) {
            zombie.initTransactions();
            zombie.beginTransaction();
            zombie.send(new ProducerRecord<>(topic, 0, null, "zombie")).get(30, TimeUnit.SECONDS);
            try (KafkaProducer<String, String> successor = producer(tid)) {
                successor.initTransactions();  // bumps the epoch and aborts the zombie's open transaction
                successor.beginTransaction();
                successor.send(new ProducerRecord<>(topic, 0, null, "successor")).get(30, TimeUnit.SECONDS);
                String fenced = null;
                try {
                    zombie.send(new ProducerRecord<>(topic, 0, null, "zombie-again")).get(30, TimeUnit.SECONDS);
                    zombie.commitTransaction();
                } catch (Exception e) {
                    Throwable cause = e instanceof java.util.concurrent.ExecutionException && e.getCause() != null ? e.getCause() : e;
                    fenced = cause.getClass().getSimpleName();
                }
                out.put("zombie_error", fenced);
                check("ProducerFencedException".equals(fenced) || "InvalidProducerEpochException".equals(fenced),
                      "the fenced producer's send or commit: " + fenced);
                successor.commitTransaction();
            }
        }
        List<String> readCommitted = readAll(topic, 2, "read_committed", 1);
        out.put("read_committed", readCommitted);
        check(readCommitted.equals(List.of("successor")), "read_committed saw " + readCommitted);
    }

    // ---- the transactions' Admin APIs (kafka-transactions.sh): list, describe, describe producers, fence ----

    static void adminTransactions(Map<String, Object> out) throws Exception {
        String topic = createTopics(2, "admin").get(0), tid = "java-admin-" + RUN;
        out.put("topic", topic);
        TopicPartition tp0 = new TopicPartition(topic, 0), tp1 = new TopicPartition(topic, 1);
        try (Admin admin = admin(); KafkaProducer<String, String> producer = producer(tid)) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, null, "open-0")).get(30, TimeUnit.SECONDS);
            producer.send(new ProducerRecord<>(topic, 1, null, "open-1")).get(30, TimeUnit.SECONDS);

            List<String> listed = admin.listTransactions().all().get(30, TimeUnit.SECONDS).stream()
                .filter(l -> l.transactionalId().equals(tid)).map(l -> l.state().toString()).toList();
            out.put("listed_open", listed);
            check(listed.equals(List.of("Ongoing")), "listTransactions while open: " + listed);
            TransactionDescription open = admin.describeTransactions(List.of(tid)).description(tid).get(30, TimeUnit.SECONDS);
            out.put("described_open", open.state() + " " + new TreeSet<>(open.topicPartitions().stream().map(TopicPartition::partition).toList()));
            check(open.state() == TransactionState.ONGOING && open.topicPartitions().equals(Set.of(tp0, tp1))
                  && open.transactionStartTimeMs().isPresent(), "describeTransactions while open: " + open);
            List<ProducerState> producers = admin.describeProducers(List.of(tp0)).partitionResult(tp0).get(30, TimeUnit.SECONDS).activeProducers();
            out.put("producers_open", producers.stream().map(ps -> ps.producerId() + "/" + ps.producerEpoch() + " from "
                                                               + ps.currentTransactionStartOffset()).toList());
            check(producers.size() == 1 && producers.get(0).producerId() == open.producerId()
                  && producers.get(0).currentTransactionStartOffset().equals(OptionalLong.of(0)),
                  "describeProducers while open: " + producers);

            producer.commitTransaction();
            TransactionDescription done = admin.describeTransactions(List.of(tid)).description(tid).get(30, TimeUnit.SECONDS);
            out.put("described_committed", done.state().toString());
            check(done.state() == TransactionState.COMPLETE_COMMIT && done.topicPartitions().isEmpty(),
                  "describeTransactions after the commit: " + done);
            producers = admin.describeProducers(List.of(tp0)).partitionResult(tp0).get(30, TimeUnit.SECONDS).activeProducers();
            check(producers.size() == 1 && producers.get(0).currentTransactionStartOffset().isEmpty(),
                  "describeProducers after the commit: " + producers);

            // fenceProducers (kafka-transactions.sh fence-producers) ends an open transaction's producer
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, null, "fenced")).get(30, TimeUnit.SECONDS);
            admin.fenceProducers(List.of(tid)).all().get(30, TimeUnit.SECONDS);
            String fenced = null;
            try {
                producer.commitTransaction();
            } catch (Exception e) {
                fenced = e.getClass().getSimpleName();
            }
            out.put("commit_after_fence", fenced);
            check("ProducerFencedException".equals(fenced) || "InvalidProducerEpochException".equals(fenced),
                  "commitTransaction after fenceProducers: " + fenced);
        }
        List<String> readCommitted = readAll(topic, 2, "read_committed", 2);
        out.put("read_committed", readCommitted);
        check(readCommitted.equals(List.of("open-0", "open-1")), "read_committed saw " + readCommitted);
    }

    // ---- a read_committed share group over transactional records ----

    static void shareReadCommitted(Map<String, Object> out) throws Exception {
        String topic = createTopics(1, "share-rc").get(0), group = "java-share-rc-" + RUN;
        out.put("topic", topic);
        out.put("group", group);
        try (Admin admin = admin()) {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(
                new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("share.isolation.level", "read_committed"), AlterConfigOp.OpType.SET))))
                .all().get(30, TimeUnit.SECONDS);
        }
        try (KafkaProducer<String, String> producer = producer("java-share-rc-" + RUN)) {
            producer.initTransactions();
            for (String outcome : List.of("committed-a", "aborted", "committed-b")) {
                producer.beginTransaction();
                for (int i = 0; i < 2; i++) producer.send(new ProducerRecord<>(topic, 0, null, outcome + "-" + i));
                producer.flush();
                if (outcome.equals("aborted")) producer.abortTransaction(); else producer.commitTransaction();
            }
        }
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        List<String> seen = new ArrayList<>();
        try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            c.subscribe(List.of(topic));
            long deadline = System.nanoTime() + 30_000_000_000L, settle = Long.MAX_VALUE;
            while (System.nanoTime() < Math.min(deadline, settle)) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(300))) seen.add(r.value() + "@" + r.offset());
                if (seen.size() >= 4 && settle == Long.MAX_VALUE) settle = System.nanoTime() + 1_500_000_000L;
            }
            c.commitSync(Duration.ofSeconds(30));
        }
        out.put("seen", seen);
        // offsets: committed-a 0-1, its marker 2, aborted 3-4, marker 5, committed-b 6-7, marker 8
        check(seen.equals(List.of("committed-a-0@0", "committed-a-1@1", "committed-b-0@6", "committed-b-1@7")),
              "the read_committed share group saw " + seen);
    }

    // ---- (d): a share group with explicit acknowledgement ----

    static void share(Map<String, Object> out) throws Exception {
        String topic = createTopics(1, "share").get(0), group = "java-share-" + RUN;
        out.put("topic", topic);
        out.put("group", group);
        try (Admin admin = admin()) {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp op = new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(op))).all().get(30, TimeUnit.SECONDS);
        }
        try (KafkaProducer<String, String> plain = producer(null)) {
            for (String v : List.of("accept-me", "release-me", "reject-me")) send(plain, topic, 0, v);
        }
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put("share.acknowledgement.mode", "explicit");
        List<String> deliveries = new ArrayList<>();
        try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            c.subscribe(List.of(topic));
            Map<String, Short> firstCounts = new TreeMap<>();
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (firstCounts.size() < 3 && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    short count = r.deliveryCount().orElse((short) -1);
                    deliveries.add(r.value() + "@" + r.offset() + "#" + count);
                    firstCounts.put(r.value(), count);
                    AcknowledgeType type = switch (r.value()) {
                        case "accept-me" -> AcknowledgeType.ACCEPT;
                        case "release-me" -> AcknowledgeType.RELEASE;
                        default -> AcknowledgeType.REJECT;
                    };
                    c.acknowledge(r, type);
                }
                c.commitSync(Duration.ofSeconds(30));
            }
            out.put("first_delivery_counts", firstCounts);
            check(firstCounts.equals(Map.of("accept-me", (short) 1, "release-me", (short) 1, "reject-me", (short) 1)),
                  "first deliveries: " + deliveries);

            // the RELEASEd record comes back (delivery count 2); ACCEPT it; nothing else ever comes back
            List<String> again = new ArrayList<>();
            deadline = System.nanoTime() + 20_000_000_000L;
            long settle = Long.MAX_VALUE;
            while (System.nanoTime() < Math.min(deadline, settle)) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(300))) {
                    short count = r.deliveryCount().orElse((short) -1);
                    deliveries.add(r.value() + "@" + r.offset() + "#" + count);
                    again.add(r.value() + "#" + count);
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                c.commitSync(Duration.ofSeconds(30));
                if (!again.isEmpty() && settle == Long.MAX_VALUE) settle = System.nanoTime() + 1_500_000_000L;
            }
            out.put("redelivered", again);
            check(again.equals(List.of("release-me#2")), "after the acknowledgements: " + deliveries);
        } finally {
            out.put("deliveries", deliveries);
        }
    }

    // ---- a JSON writer for strings, numbers, booleans, lists and maps ----

    static String json(Object o) {
        if (o == null) return "null";
        if (o instanceof String s) {
            StringBuilder b = new StringBuilder("\"");
            for (char ch : s.toCharArray()) {
                switch (ch) {
                    case '"' -> b.append("\\\"");
                    case '\\' -> b.append("\\\\");
                    case '\n' -> b.append("\\n");
                    default -> { if (ch < 0x20) b.append(String.format("\\u%04x", (int) ch)); else b.append(ch); }
                }
            }
            return b.append('"').toString();
        }
        if (o instanceof Number || o instanceof Boolean) return o.toString();
        if (o instanceof Map<?, ?> m)
            return m.entrySet().stream().map(e -> json(String.valueOf(e.getKey())) + ": " + json(e.getValue()))
                    .collect(Collectors.joining(", ", "{", "}"));
        if (o instanceof Collection<?> c) return c.stream().map(KrayTransactions::json).collect(Collectors.joining(", ", "[", "]"));
        return json(o.toString());
    }
}
