// Dynamic broker configs and authorized operations with the Apache Kafka Java Admin client, for
// tests/integration/test_dynamic_configs.py and test_authorized_ops.py.
//
//   java -cp '.deps/java/*' ConfigsAdmin.java BOOTSTRAP configs NODE_ID TOPIC
//   java -cp '.deps/java/*' ConfigsAdmin.java BOOTSTRAP authz TOPIC GROUP
//
// Prints "RESULT {json}" lines.
//   configs: {"step": "...", ...} for: the per-broker and cluster-default changes, the broker's
//            and the topic's description (value, source, synonyms as [name, value, source]),
//            a refused key (exception class and message), and the clean-up.
//   authz:   {"cluster": [ops], "topic": [ops], "group": [ops], "cluster_plain": null|[...]}

import java.util.*;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.config.ConfigResource;

public class ConfigsAdmin {
    static String q(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static void result(String json) {
        System.out.println("RESULT " + json);
    }

    static String entry(ConfigEntry e) {
        StringJoiner syn = new StringJoiner(",", "[", "]");
        for (ConfigEntry.ConfigSynonym s : e.synonyms())
            syn.add("[" + q(s.name()) + "," + q(s.value()) + "," + q(s.source().name()) + "]");
        return "{\"value\":" + q(e.value()) + ",\"source\":" + q(e.source().name()) + ",\"read_only\":"
                + e.isReadOnly() + ",\"synonyms\":" + syn + "}";
    }

    static void alter(Admin admin, ConfigResource r, AlterConfigOp... ops) throws Exception {
        admin.incrementalAlterConfigs(Map.of(r, List.of(ops))).all().get(20, TimeUnit.SECONDS);
    }

    static AlterConfigOp set(String k, String v) {
        return new AlterConfigOp(new ConfigEntry(k, v), AlterConfigOp.OpType.SET);
    }

    static AlterConfigOp delete(String k) {
        return new AlterConfigOp(new ConfigEntry(k, null), AlterConfigOp.OpType.DELETE);
    }

    static Config describe(Admin admin, ConfigResource r) throws Exception {
        var options = new DescribeConfigsOptions().includeSynonyms(true);
        return admin.describeConfigs(List.of(r), options).all().get(20, TimeUnit.SECONDS).get(r);
    }

    static void configs(Admin admin, String node, String topic) throws Exception {
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, node);
        ConfigResource cluster = new ConfigResource(ConfigResource.Type.BROKER, "");
        ConfigResource topicRes = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        alter(admin, cluster, set("log.retention.ms", "7200000"), set("message.max.bytes", "2000000"));
        alter(admin, broker, set("log.retention.ms", "3600000"));
        Config b = describe(admin, broker);
        Config d = describe(admin, cluster);
        Config t = describe(admin, topicRes);
        result("{\"step\":\"described\",\"broker_retention\":" + entry(b.get("log.retention.ms"))
                + ",\"broker_max\":" + entry(b.get("message.max.bytes"))
                + ",\"default_names\":" + q(String.join(",", new TreeSet<>(d.entries().stream().map(ConfigEntry::name).toList())))
                + ",\"topic_retention\":" + entry(t.get("retention.ms")) + "}");
        try {
            alter(admin, broker, set("num.partitions", "3"));
            result("{\"step\":\"refused\",\"error\":null}");
        } catch (ExecutionException e) {
            result("{\"step\":\"refused\",\"error\":" + q(e.getCause().getClass().getSimpleName())
                    + ",\"message\":" + q(e.getCause().getMessage()) + "}");
        }
        alter(admin, broker, delete("log.retention.ms"));
        alter(admin, cluster, delete("log.retention.ms"), delete("message.max.bytes"));
        result("{\"step\":\"cleaned\",\"topic_retention\":" + entry(describe(admin, topicRes).get("retention.ms")) + "}");
    }

    static String ops(Set<AclOperation> ops) {
        if (ops == null) return "null";
        StringJoiner j = new StringJoiner(",", "[", "]");
        ops.stream().map(AclOperation::name).sorted().forEach(o -> j.add(q(o)));
        return j.toString();
    }

    static void authz(Admin admin, String topic, String group) throws Exception {
        var cluster = admin.describeCluster(new DescribeClusterOptions().includeAuthorizedOperations(true))
                .authorizedOperations().get(20, TimeUnit.SECONDS);
        var plain = admin.describeCluster().authorizedOperations().get(20, TimeUnit.SECONDS);
        var topics = admin.describeTopics(List.of(topic), new DescribeTopicsOptions().includeAuthorizedOperations(true))
                .allTopicNames().get(20, TimeUnit.SECONDS);
        var groups = admin.describeConsumerGroups(List.of(group),
                new DescribeConsumerGroupsOptions().includeAuthorizedOperations(true)).all().get(20, TimeUnit.SECONDS);
        result("{\"cluster\":" + ops(cluster) + ",\"cluster_plain\":" + ops(plain) + ",\"topic\":"
                + ops(topics.get(topic).authorizedOperations()) + ",\"group\":"
                + ops(groups.get(group).authorizedOperations()) + "}");
    }

    public static void main(String[] args) throws Exception {
        Map<String, Object> conf = Map.of(
                AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0],
                AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 15000,
                AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000);
        try (Admin admin = Admin.create(conf)) {
            if (args[1].equals("configs")) configs(admin, args[2], args[3]);
            else authz(admin, args[2], args[3]);
        }
    }
}
