// A transaction through a secured listener with the Apache Kafka Java client.
//
//   java -cp '.deps/java4/*' SecureTxn.java BOOTSTRAP CLIENT_PROPERTIES TOPIC N
//
// CLIENT_PROPERTIES holds the security settings (security.protocol, sasl.*, ssl.*). Commits one
// transaction of N records to TOPIC, then reads them back read_committed from the beginning.
// Prints "RESULT {json}"; exits 1 on any failure.

import java.io.FileReader;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class SecureTxn {
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
        int n = Integer.parseInt(args[3]);
        Properties security = new Properties();
        try (FileReader in = new FileReader(args[1])) { security.load(in); }

        Properties p = new Properties();
        p.putAll(security);
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", topic + "-txn");  // under the topic's prefix, as the ACLs allow
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < n; i++) producer.send(new ProducerRecord<>(topic, 0, null, "v" + i));
            producer.commitTransaction();
        }

        Properties c = new Properties();
        c.putAll(security);
        c.put("bootstrap.servers", bootstrap);
        c.put("isolation.level", "read_committed");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        List<String> read = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long deadline = System.currentTimeMillis() + 30000;
            while (read.size() < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) read.add(r.value());
            }
        }
        System.out.println("RESULT {\"read\": " + read.size() + "}");
        System.exit(read.size() == n ? 0 : 1);
    }
}
