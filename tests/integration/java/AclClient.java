// The Java client against a broker with Kafka's StandardAuthorizer (tests/integration/test_acls.py).
//
//   java -cp '.deps/java4/*' AclClient.java txn BOOTSTRAP TOPIC TRANSACTIONAL_ID
//       a transactional producer: initTransactions, one record, commit. Prints
//       RESULT {"init": "...", "after": "..."}: the exception class names (or "ok") of
//       initTransactions and of a following beginTransaction.
//   java -cp '.deps/java4/*' AclClient.java admin BOOTSTRAP TOPIC
//       Admin createAcls / describeAcls (with filters) / deleteAcls on TOPIC's ACLs for
//       User:java; prints RESULT lines of what each answered.

import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.acl.*;
import org.apache.kafka.common.resource.*;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class AclClient {
    static String name(Throwable e) {
        Throwable t = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
        return t.getClass().getSimpleName();
    }

    static void txn(String bootstrap, String topic, String tid) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        String init = "ok", after = "ok";
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            try {
                producer.initTransactions();
            } catch (Exception e) {
                init = name(e);
            }
            try {
                producer.beginTransaction();
                producer.send(new ProducerRecord<>(topic, "v".getBytes())).get();
                producer.commitTransaction();
            } catch (Exception e) {
                after = name(e);
                System.err.println("after: " + e);
            }
        }
        System.out.println("RESULT {\"init\": \"" + init + "\", \"after\": \"" + after + "\"}");
    }

    static String show(AclBinding b) {
        return b.pattern().resourceType() + " " + b.pattern().name() + " " + b.pattern().patternType() + " "
            + b.entry().principal() + " " + b.entry().host() + " " + b.entry().operation() + " "
            + b.entry().permissionType();
    }

    static void print(String step, Collection<AclBinding> found) {
        List<String> shown = new ArrayList<>();
        for (AclBinding b : found) shown.add("\"" + show(b) + "\"");
        Collections.sort(shown);
        System.out.println("RESULT {\"step\": \"" + step + "\", \"acls\": " + shown + "}");
    }

    static void admin(String bootstrap, String topic) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(p)) {
            AclBinding read = new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                new AccessControlEntry("User:java", "*", AclOperation.READ, AclPermissionType.ALLOW));
            AclBinding deny = new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic.substring(0, 5), PatternType.PREFIXED),
                new AccessControlEntry("User:java", "10.0.0.1", AclOperation.WRITE, AclPermissionType.DENY));
            admin.createAcls(List.of(read, deny)).all().get();
            AclBindingFilter javaOnly = new AclBindingFilter(ResourcePatternFilter.ANY,
                new AccessControlEntryFilter("User:java", null, AclOperation.ANY, AclPermissionType.ANY));
            print("all", admin.describeAcls(javaOnly).values().get());
            AclBindingFilter match = new AclBindingFilter(
                new ResourcePatternFilter(ResourceType.TOPIC, topic, PatternType.MATCH), AccessControlEntryFilter.ANY);
            print("match", admin.describeAcls(match).values().get());
            AclBindingFilter literal = new AclBindingFilter(
                new ResourcePatternFilter(ResourceType.TOPIC, topic, PatternType.LITERAL), AccessControlEntryFilter.ANY);
            print("literal", admin.describeAcls(literal).values().get());
            try {
                admin.createAcls(List.of(new AclBinding(new ResourcePattern(ResourceType.CLUSTER, "other", PatternType.LITERAL),
                    new AccessControlEntry("User:java", "*", AclOperation.ALTER, AclPermissionType.ALLOW)))).all().get();
                System.out.println("RESULT {\"step\": \"bad cluster\", \"error\": \"none\"}");
            } catch (ExecutionException e) {
                System.out.println("RESULT {\"step\": \"bad cluster\", \"error\": \"" + name(e) + "\"}");
            }
            print("deleted", admin.deleteAcls(List.of(javaOnly)).all().get());
            print("after", admin.describeAcls(javaOnly).values().get());
        }
    }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("txn")) txn(args[1], args[2], args[3]);
        else admin(args[1], args[2]);
    }
}
