// Idempotent produce through a Kafka-compatible broker with the Apache Kafka Java client.
//
//   java -cp '.deps/java/*' IdempotentProduce.java BOOTSTRAP TOPIC N BASE_TS TAG [REQUEST_TIMEOUT_MS]
//
// Produces N records (the same data as tests/integration/harness.make_records(N,
// BASE_TS, tag=TAG)) to partition 0 of TOPIC with enable.idempotence=true,
// acks=all, small batches and up to 5 requests in flight, then checks that
// record i was acknowledged at offset i. The caller consumes the topic and
// checks the log; this program only reports what the producer saw.
//
// Prints one line "RESULT {json}"; exits 1 on any error.

import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class IdempotentProduce {
    record Rec(byte[] key, byte[] value, List<Header> headers, long ts) {}

    // Same as RoundTrip.makeRecords and harness.make_records.
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
        String topic = args[1];
        int n = Integer.parseInt(args[2]);
        long baseTs = Long.parseLong(args[3]);
        String tag = args[4];
        String requestTimeout = args.length > 5 ? args[5] : "15000";

        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "5");
        p.put(ProducerConfig.RETRIES_CONFIG, String.valueOf(Integer.MAX_VALUE));
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, "2048");
        p.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "50");
        p.put(ProducerConfig.RECONNECT_BACKOFF_MS_CONFIG, "20");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, requestTimeout);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

        List<String> errors = new ArrayList<>();
        List<Rec> recs = makeRecords(n, baseTs, tag);
        int acked = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            List<Future<RecordMetadata>> fs = new ArrayList<>();
            for (Rec rec : recs) {
                fs.add(producer.send(new ProducerRecord<>(topic, 0, rec.ts(), rec.key(), rec.value(), rec.headers())));
            }
            producer.flush();
            for (int i = 0; i < fs.size(); i++) {
                try {
                    RecordMetadata md = fs.get(i).get();
                    acked++;
                    if (md.offset() != i && errors.size() < 20) {
                        errors.add("record " + i + " acknowledged at offset " + md.offset());
                    }
                } catch (Exception e) {
                    if (errors.size() < 20) errors.add("record " + i + ": " + e);
                }
            }
        } catch (Exception e) {
            errors.add("exception: " + e);
            e.printStackTrace();
        }
        StringBuilder sb = new StringBuilder("{\"acked\":").append(acked).append(",\"errors\":[");
        for (int i = 0; i < errors.size(); i++) sb.append(i > 0 ? "," : "").append(q(errors.get(i)));
        System.out.println("RESULT " + sb.append("]}"));
        System.out.flush();
        System.exit(errors.isEmpty() ? 0 : 1);
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
