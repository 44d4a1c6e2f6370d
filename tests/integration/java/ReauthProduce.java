// A producer that outlives its SASL sessions (KIP-368), with the Apache Kafka Java client.
//
//   java -cp '.deps/java4/*' ReauthProduce.java BOOTSTRAP CLIENT_PROPERTIES TOPIC SECONDS
//
// Sends one record to TOPIC every 200 ms for SECONDS on one producer, each acknowledged before
// the next; the client re-authenticates by itself when the broker's session lifetime runs out.
// Prints "RESULT {json}" (how many were sent, and when each was acknowledged, in ms after the
// start); exits 1 on any failure.

import java.io.FileReader;
import java.util.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.StringSerializer;

public class ReauthProduce {
    public static void main(String[] args) {
        try {
            run(args);
        } catch (Exception e) {  // printed here: the source launcher would hide its stack
            e.printStackTrace();
            System.exit(1);
        }
    }

    static void run(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[2];
        long end = System.currentTimeMillis() + 1000L * Integer.parseInt(args[3]);
        Properties p = new Properties();
        try (FileReader in = new FileReader(args[1])) { p.load(in); }
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        long start = System.currentTimeMillis();
        List<String> acked = new ArrayList<>();  // ms after start of each acknowledgement
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            while (System.currentTimeMillis() < end) {
                producer.send(new ProducerRecord<>(topic, 0, null, "v" + acked.size())).get();
                acked.add(Long.toString(System.currentTimeMillis() - start));
                Thread.sleep(200);
            }
        }
        System.out.println("RESULT {\"sent\": " + acked.size() + ", \"acked_ms\": ["
                           + String.join(", ", acked) + "]}");
    }
}
