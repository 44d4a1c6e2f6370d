// Consumer-group administration with the Apache Kafka Java Admin client, for
// tests/integration/test_groups_admin.py.
//
//   java -cp '.deps/java/*' GroupAdmin.java BOOTSTRAP GROUP...
//
// Lists the consumer groups, describes GROUP..., and fetches the committed
// offsets of all GROUPs in one listConsumerGroupOffsets call (the batched,
// multi-group OffsetFetch v8+), then prints one line "RESULT {json}":
//
//   {"list": {"group": "State", ...},
//    "describe": {"group": {"state": "Stable", "assignor": "range",
//                           "members": {"member-id": [partitions...]}}},
//    "offsets": {"group": {"topic:partition": offset, ...}}}

import java.util.*;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

public class GroupAdmin {
    static String q(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    public static void main(String[] args) throws Exception {
        List<String> groups = Arrays.asList(args).subList(1, args.length);
        Map<String, Object> conf = Map.of(
                AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0],
                AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 15000,
                AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000);
        try (Admin admin = Admin.create(conf)) {
            StringJoiner list = new StringJoiner(",", "{", "}");
            for (ConsumerGroupListing g : admin.listConsumerGroups().all().get(20, TimeUnit.SECONDS)) {
                list.add(q(g.groupId()) + ":" + q(g.state().map(Object::toString).orElse("?")));
            }

            StringJoiner describe = new StringJoiner(",", "{", "}");
            for (var e : admin.describeConsumerGroups(groups).all().get(20, TimeUnit.SECONDS).entrySet()) {
                ConsumerGroupDescription d = e.getValue();
                StringJoiner members = new StringJoiner(",", "{", "}");
                for (MemberDescription m : d.members()) {
                    StringJoiner parts = new StringJoiner(",", "[", "]");
                    m.assignment().topicPartitions().stream().map(TopicPartition::partition).sorted()
                            .forEach(p -> parts.add(String.valueOf(p)));
                    members.add(q(m.consumerId()) + ":" + parts);
                }
                describe.add(q(e.getKey()) + ":{\"state\":" + q(d.state().toString()) + ",\"assignor\":"
                        + q(d.partitionAssignor()) + ",\"members\":" + members + "}");
            }

            Map<String, ListConsumerGroupOffsetsSpec> specs = new LinkedHashMap<>();
            for (String g : groups) specs.put(g, new ListConsumerGroupOffsetsSpec());
            ListConsumerGroupOffsetsResult res = admin.listConsumerGroupOffsets(specs);
            StringJoiner offsets = new StringJoiner(",", "{", "}");
            for (String g : groups) {
                StringJoiner one = new StringJoiner(",", "{", "}");
                for (var e : res.partitionsToOffsetAndMetadata(g).get(20, TimeUnit.SECONDS).entrySet()) {
                    OffsetAndMetadata om = e.getValue();
                    one.add(q(e.getKey().topic() + ":" + e.getKey().partition()) + ":" + (om == null ? -1 : om.offset()));
                }
                offsets.add(q(g) + ":" + one);
            }
            System.out.println("RESULT {\"list\":" + list + ",\"describe\":" + describe + ",\"offsets\":" + offsets + "}");
        }
    }
}
