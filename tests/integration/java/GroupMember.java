// One consumer-group member (Apache Kafka Java KafkaConsumer, group.id + subscribe)
// for the consumer-group integration tests; the Java twin of the member process
// in tests/integration/test_groups_member.py, with the same arguments, events
// and commands.
//
//   java -cp '.deps/java/*' GroupMember.java BOOTSTRAP GROUP TOPIC SESSION_MS HEARTBEAT_MS [INSTANCE_ID]
//
// Subscribes to TOPIC with manual commits: after each polled batch it commits
// the next offset of every partition in the batch (commitSync), then reports
// the batch. Writes one JSON event per line on stdout, prefixed "@@ ":
//
//   {"ev":"ready"}
//   {"ev":"assigned","tps":[...],"gen":G,"member":"M"}
//   {"ev":"revoked","tps":[...]}
//   {"ev":"batch","recs":[[partition,offset,"value"],...],"commit_error":null|"..."}
//   {"ev":"error","fatal":true,"error":"..."}      poll threw (e.g. FencedInstanceIdException)
//   {"ev":"closed"}
//
// Reads "close" on stdin: close the consumer (a dynamic member leaves the
// group; a static member does not) and exit.

import java.io.*;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class GroupMember {
    static final int MAX_POLL_INTERVAL_MS = 10000;

    static String q(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static synchronized void emit(String json) {
        System.out.println("@@ " + json);
        System.out.flush();
    }

    static String partitions(Collection<TopicPartition> tps) {
        StringJoiner j = new StringJoiner(",", "[", "]");
        tps.stream().map(TopicPartition::partition).sorted().forEach(p -> j.add(String.valueOf(p)));
        return j.toString();
    }

    static String describe(Throwable e) {
        StringBuilder b = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (b.length() > 0) b.append(" <- ");
            b.append(t.getClass().getSimpleName()).append(": ").append(t.getMessage());
        }
        return b.toString();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], group = args[1], topic = args[2];
        int sessionMs = Integer.parseInt(args[3]), heartbeatMs = Integer.parseInt(args[4]);
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        if (args.length > 5) p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, args[5]);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        // -Dgroup.protocol=consumer: KIP-848, the broker's session timeout and heartbeat interval
        boolean consumerProtocol = "consumer".equals(System.getProperty("group.protocol"));
        if (consumerProtocol) {
            p.put("group.protocol", "consumer");
        } else {
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, String.valueOf(sessionMs));
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, String.valueOf(heartbeatMs));
        }
        p.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, String.valueOf(Math.max(MAX_POLL_INTERVAL_MS, sessionMs)));
        p.put(ConsumerConfig.RETRY_BACKOFF_MS_CONFIG, "50");
        p.put(ConsumerConfig.RECONNECT_BACKOFF_MS_CONFIG, "50");
        p.put(ConsumerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

        AtomicBoolean closing = new AtomicBoolean(false);
        Thread stdin = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) if (line.trim().equals("close")) break;
            } catch (IOException ignored) {
            }
            closing.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();

        KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p);
        c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
            public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                emit("{\"ev\":\"revoked\",\"tps\":" + partitions(tps) + "}");
            }

            public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                ConsumerGroupMetadata md = c.groupMetadata();
                if (consumerProtocol) {  // incremental: only the partitions added; no generation
                    Set<TopicPartition> all = new HashSet<>(c.assignment());
                    all.addAll(tps);
                    emit("{\"ev\":\"assigned\",\"tps\":" + partitions(all) + ",\"gen\":null"
                            + ",\"member\":" + q(md.memberId()) + "}");
                    return;
                }
                emit("{\"ev\":\"assigned\",\"tps\":" + partitions(tps) + ",\"gen\":" + md.generationId()
                        + ",\"member\":" + q(md.memberId()) + "}");
            }
        });
        emit("{\"ev\":\"ready\"}");
        boolean fatal = false;
        while (!closing.get()) {
            if (fatal) {
                Thread.sleep(100);
                continue;
            }
            ConsumerRecords<byte[], byte[]> recs;
            try {
                recs = c.poll(Duration.ofMillis(100));
            } catch (KafkaException e) {
                fatal = e instanceof org.apache.kafka.common.errors.FencedInstanceIdException;
                emit("{\"ev\":\"error\",\"fatal\":" + fatal + ",\"error\":" + q(describe(e)) + "}");
                continue;
            }
            if (recs.isEmpty()) continue;
            StringJoiner batch = new StringJoiner(",", "[", "]");
            Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
            for (ConsumerRecord<byte[], byte[]> r : recs) {
                batch.add("[" + r.partition() + "," + r.offset() + "," + q(new String(r.value(), StandardCharsets.UTF_8)) + "]");
                next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
            }
            String commitError = null;
            try {
                c.commitSync(next);
            } catch (KafkaException e) {
                commitError = describe(e);
            }
            emit("{\"ev\":\"batch\",\"recs\":" + batch + ",\"commit_error\":" + q(commitError) + "}");
        }
        try {
            c.close(Duration.ofSeconds(10));
        } catch (KafkaException ignored) {
        }
        emit("{\"ev\":\"closed\"}");
        System.exit(0);
    }
}
