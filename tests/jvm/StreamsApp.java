/*
 * A Kafka Streams application for the streams-group scenarios (tests/scenarios/test_streams_groups_e2e.py,
 * test_streams_repartition_e2e.py). Under the streams rebalance protocol (KIP-1071, group.protocol=streams)
 * the broker's group coordinator keeps a streams group named APPLICATION_ID in __consumer_offsets.
 *
 * By default it copies INPUT to OUTPUT: stateless, no internal topics, no state store. With the mode
 * "repartition" it counts INPUT's records per key after re-keying them (groupBy on a hash of the value),
 * which routes every record through the repartition topic APPLICATION_ID-rekey-repartition, and writes
 * the counts to OUTPUT. It commits every second and purges the repartition topic below each commit every
 * second (DeleteRecords): the log start of a topic the group commits to moves right after each commit.
 *
 * Run as a single-file program with the broker's and Kafka Streams' jars on the class path:
 *   java -cp 'build/jars/kafka-4.3.1/*:build/jars/kafka-streams-4.3.1/*' tests/jvm/StreamsApp.java \
 *       BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR [repartition]
 * It prints RUNNING each time Kafka Streams reaches that state. When stdin closes it closes the
 * application, asking explicitly to leave the group (so the test need not wait for a session
 * timeout, 45 s at least for streams groups), then exits 0, or 1 if closing did not finish in time.
 */

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.Stores;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;

public class StreamsApp {
    static final int KEYS = 8;

    public static void main(String[] args) throws Exception {
        boolean repartition = args.length == 6 && args[5].equals("repartition");
        if (args.length != 5 && !repartition) {
            System.err.println("usage: StreamsApp BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR [repartition]");
            System.exit(2);
        }
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.CLIENT_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "streams");
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.ByteArraySerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.ByteArraySerde.class);

        StreamsBuilder builder = new StreamsBuilder();
        if (repartition) {
            props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 1000);
            props.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 1000);
            countPerKey(builder.stream(args[2]), args[3]);
        } else {
            builder.stream(args[2]).to(args[3]);
        }
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) {
                System.out.println("RUNNING");
                System.out.flush();
            }
        });
        streams.start();

        while (System.in.read() != -1) {
            // runs until the test closes stdin
        }
        boolean closed = streams.close(CloseOptions
                .groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP)
                .withTimeout(Duration.ofSeconds(20)));
        System.exit(closed ? 0 : 1);
    }

    /** Re-keyed by a hash of the value, so every record goes through the repartition topic "rekey"; counted in
     * memory (no RocksDB to load on a shared test machine), the counts written to OUTPUT. */
    static void countPerKey(KStream<byte[], byte[]> input, String output) {
        input.groupBy((key, value) -> key(value), Grouped.as("rekey"))
                .count(Materialized.<byte[], Long>as(Stores.inMemoryKeyValueStore("counts"))
                        .withValueSerde(Serdes.Long()))
                .toStream()
                .to(output, Produced.with(Serdes.ByteArray(), Serdes.Long()));
    }

    static byte[] key(byte[] value) {
        return Integer.toString(Math.floorMod(Arrays.hashCode(value), KEYS)).getBytes(StandardCharsets.UTF_8);
    }
}
