// Round trip through a Kafka-compatible broker with the Apache Kafka Java client.
//
//   java -cp '.deps/java/*' RoundTrip.java BOOTSTRAP N BASE_TS PREFIX CASE...
//
// CASE is codec:acks[:auto], e.g. none:1 gzip:all zstd:0 lz4:all:auto. For each
// case, on topic PREFIX-codec-acks[-auto]: create it with the Admin client
// (unless :auto, then the first produce auto-creates it), produce N records
// (keys, headers, explicit timestamps BASE_TS + 10*i; the same data as
// tests/integration/harness.make_records(N, BASE_TS, tag="j")), consume them
// back with assign() + seekToBeginning() and compare byte for byte and in
// order, check offsetsForTimes / beginningOffsets / endOffsets and the Admin
// client's listOffsets, then check "latest" semantics (a consumer positioned
// at the end sees only records produced afterwards).
//
// Prints one line "RESULT {json}" per case; exits 1 if any case failed.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class RoundTrip {
    static final String TAG = "j";
    static final int LATEST_EXTRA = 7;

    record Rec(byte[] key, byte[] value, List<Header> headers, long ts) {}

    static List<Rec> makeRecords(int n, long baseTs, String tag) {
        List<Rec> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            byte[] key = (i % 17 == 5) ? null : (tag + "-key-" + (i % 23)).getBytes(StandardCharsets.UTF_8);
            byte[] value;
            if (i % 31 == 7) {
                value = null;
            } else if (i % 29 == 3) {
                value = new byte[0];
            } else {
                byte[] word = String.format("%s:%06d:", tag, i).getBytes(StandardCharsets.UTF_8);
                int reps = 1 + (i * 37) % 60;
                value = new byte[word.length * reps + 3];
                for (int r = 0; r < reps; r++) System.arraycopy(word, 0, value, r * word.length, word.length);
                value[value.length - 3] = (byte) (i % 256);
                value[value.length - 2] = 0;
                value[value.length - 1] = (byte) 255;
            }
            List<Header> headers = new ArrayList<>();
            if (i % 3 != 0) {
                headers.add(new RecordHeader("idx", String.valueOf(i).getBytes(StandardCharsets.UTF_8)));
                headers.add(new RecordHeader("bin", new byte[] {(byte) (i % 256), 0, 1}));
            }
            if (i % 11 == 0) headers.add(new RecordHeader("empty", new byte[0]));
            out.add(new Rec(key, value, headers, baseTs + 10L * i));
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        int n = Integer.parseInt(args[1]);
        long baseTs = Long.parseLong(args[2]);
        String prefix = args[3];
        boolean allOk = true;
        Map<String, Object> adminConf = Map.of(
                AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap,
                AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 15000,
                AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000);
        try (Admin admin = Admin.create(adminConf)) {
            for (int a = 4; a < args.length; a++) {
                Result r = new Result(args[a]);
                try {
                    runCase(admin, bootstrap, n, baseTs, prefix, r);
                } catch (Exception e) {
                    r.fail("exception: " + e);
                    e.printStackTrace();
                }
                allOk &= r.errors.isEmpty();
                System.out.println("RESULT " + r.toJson());
                System.out.flush();
            }
        }
        System.exit(allOk ? 0 : 1);
    }

    static void runCase(Admin admin, String bootstrap, int n, long baseTs, String prefix, Result r)
            throws Exception {
        String[] parts = r.caseName.split(":");
        String codec = parts[0];
        String acks = parts[1];
        boolean auto = parts.length > 2 && parts[2].equals("auto");
        String topic = prefix + "-" + codec + "-" + (acks.equals("-1") ? "all" : acks) + (auto ? "-auto" : "");
        r.put("topic", topic);
        TopicPartition tp = new TopicPartition(topic, 0);
        if (!auto) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            r.put("partitions", d.partitions().size());
        }

        List<Rec> recs = makeRecords(n, baseTs, TAG);
        try (KafkaProducer<byte[], byte[]> p = producer(bootstrap, codec, acks)) {
            List<Future<RecordMetadata>> fs = new ArrayList<>();
            for (Rec rec : recs) {
                fs.add(p.send(new ProducerRecord<>(topic, 0, rec.ts(), rec.key(), rec.value(), rec.headers())));
            }
            p.flush();
            for (int i = 0; i < fs.size(); i++) {
                RecordMetadata md = fs.get(i).get();
                if (!acks.equals("0") && md.offset() != i) {
                    r.fail("record " + i + " acknowledged at offset " + md.offset());
                    break;
                }
            }
        }
        r.put("produced", n);

        try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap)) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<ConsumerRecord<byte[], byte[]>> got = consume(c, n, Duration.ofSeconds(30));
            r.put("consumed", got.size());
            compare(recs, got, r);

            long begin = c.beginningOffsets(List.of(tp)).get(tp);
            long end = c.endOffsets(List.of(tp)).get(tp);
            r.put("earliest", begin);
            r.put("latest", end);
            if (begin != 0) r.fail("beginningOffsets " + begin + " != 0");
            if (end != n) r.fail("endOffsets " + end + " != " + n);
            checkOffsetsForTimes(c, tp, n, baseTs, r);
        }
        checkAdminListOffsets(admin, tp, n, baseTs, r);
        checkLatest(bootstrap, codec, acks, tp, n, baseTs, r);
    }

    static void compare(List<Rec> sent, List<ConsumerRecord<byte[], byte[]>> got, Result r) {
        if (got.size() != sent.size()) r.fail("consumed " + got.size() + " records, sent " + sent.size());
        for (int i = 0; i < Math.min(sent.size(), got.size()); i++) {
            Rec s = sent.get(i);
            ConsumerRecord<byte[], byte[]> g = got.get(i);
            String where = "record " + i + ": ";
            if (g.offset() != i) r.fail(where + "offset " + g.offset());
            if (!Arrays.equals(s.key(), g.key())) r.fail(where + "key differs");
            if (!Arrays.equals(s.value(), g.value())) r.fail(where + "value differs");
            if (g.timestamp() != s.ts()) r.fail(where + "timestamp " + g.timestamp() + " != " + s.ts());
            Header[] gh = g.headers().toArray();
            if (gh.length != s.headers().size()) {
                r.fail(where + "header count " + gh.length + " != " + s.headers().size());
            } else {
                for (int h = 0; h < gh.length; h++) {
                    Header want = s.headers().get(h);
                    if (!gh[h].key().equals(want.key()) || !Arrays.equals(gh[h].value(), want.value())) {
                        r.fail(where + "header " + h + " differs");
                    }
                }
            }
            if (r.errors.size() > 20) return;
        }
    }

    static void checkOffsetsForTimes(KafkaConsumer<byte[], byte[]> c, TopicPartition tp, int n, long baseTs, Result r) {
        for (int i : new int[] {0, 1, n / 2, n - 1}) {
            for (long delta : new long[] {0, -5}) {
                long ts = baseTs + 10L * i + delta;
                OffsetAndTimestamp ot = c.offsetsForTimes(Map.of(tp, ts)).get(tp);
                if (ot == null || ot.offset() != i || ot.timestamp() != baseTs + 10L * i) {
                    r.fail("offsetsForTimes(" + ts + ") = " + ot + ", want offset " + i);
                }
            }
        }
        OffsetAndTimestamp after = c.offsetsForTimes(Map.of(tp, baseTs + 10L * n + 1000)).get(tp);
        if (after != null) r.fail("offsetsForTimes(after last) = " + after + ", want null");
        r.put("offsetsForTimes", "checked");
    }

    static void checkAdminListOffsets(Admin admin, TopicPartition tp, int n, long baseTs, Result r) throws Exception {
        long e = admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp).get().offset();
        long l = admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp).get().offset();
        int mid = n / 2;
        long t = admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(baseTs + 10L * mid))).partitionResult(tp).get().offset();
        if (e != 0) r.fail("admin listOffsets earliest " + e);
        if (l != n) r.fail("admin listOffsets latest " + l + " != " + n);
        if (t != mid) r.fail("admin listOffsets forTimestamp " + t + " != " + mid);
        r.put("adminListOffsets", "checked");
    }

    static void checkLatest(String bootstrap, String codec, String acks, TopicPartition tp, int n, long baseTs, Result r)
            throws Exception {
        try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap)) {
            c.assign(List.of(tp));
            c.seekToEnd(List.of(tp));
            long pos = c.position(tp);
            if (pos != n) r.fail("position after seekToEnd " + pos + " != " + n);
            List<Rec> extra = makeRecords(LATEST_EXTRA, baseTs + 10L * n, "late");
            try (KafkaProducer<byte[], byte[]> p = producer(bootstrap, codec, acks)) {
                for (Rec rec : extra) {
                    p.send(new ProducerRecord<>(tp.topic(), 0, rec.ts(), rec.key(), rec.value(), rec.headers()));
                }
                p.flush();
            }
            List<ConsumerRecord<byte[], byte[]>> got = consume(c, LATEST_EXTRA, Duration.ofSeconds(20));
            // Give a stray record a chance to show up.
            got.addAll(c.poll(Duration.ofMillis(300)).records(tp));
            r.put("latestConsumed", got.size());
            if (got.size() != LATEST_EXTRA) r.fail("latest consumer got " + got.size() + " records, want " + LATEST_EXTRA);
            for (int i = 0; i < Math.min(got.size(), LATEST_EXTRA); i++) {
                if (got.get(i).offset() != n + i) r.fail("latest record " + i + " at offset " + got.get(i).offset());
                if (!Arrays.equals(got.get(i).value(), extra.get(i).value())) r.fail("latest record " + i + " value differs");
            }
        }
    }

    static List<ConsumerRecord<byte[], byte[]>> consume(KafkaConsumer<byte[], byte[]> c, int want, Duration timeout) {
        List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
        long deadline = System.nanoTime() + timeout.toNanos();
        while (got.size() < want && System.nanoTime() < deadline) {
            for (ConsumerRecord<byte[], byte[]> rec : c.poll(Duration.ofMillis(200))) got.add(rec);
        }
        return got;
    }

    static KafkaProducer<byte[], byte[]> producer(String bootstrap, String codec, String acks) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, acks);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, "16384");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<byte[], byte[]> consumer(String bootstrap) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }

    static final class Result {
        final String caseName;
        final Map<String, Object> fields = new LinkedHashMap<>();
        final List<String> errors = new ArrayList<>();

        Result(String caseName) {
            this.caseName = caseName;
        }

        void put(String k, Object v) {
            fields.put(k, v);
        }

        void fail(String msg) {
            errors.add(msg);
        }

        String toJson() {
            StringBuilder sb = new StringBuilder("{\"case\":").append(q(caseName));
            for (Map.Entry<String, Object> e : fields.entrySet()) {
                sb.append(',').append(q(e.getKey())).append(':');
                Object v = e.getValue();
                sb.append(v instanceof Number ? v.toString() : q(String.valueOf(v)));
            }
            sb.append(",\"ok\":").append(errors.isEmpty()).append(",\"errors\":[");
            for (int i = 0; i < errors.size(); i++) sb.append(i > 0 ? "," : "").append(q(errors.get(i)));
            return sb.append("]}").toString();
        }

        static String q(String s) {
            StringBuilder sb = new StringBuilder("\"");
            for (char ch : s.toCharArray()) {
                if (ch == '"' || ch == '\\') sb.append('\\').append(ch);
                else if (ch < 0x20) sb.append(String.format("\\u%04x", (int) ch));
                else sb.append(ch);
            }
            return sb.append('"').toString();
        }
    }
}
