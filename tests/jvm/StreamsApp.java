/*
 * A Kafka Streams application for the streams-group scenario (tests/scenarios/test_streams_groups_e2e.py).
 * It copies INPUT to OUTPUT under the streams rebalance protocol (KIP-1071, group.protocol=streams), so
 * the broker's group coordinator keeps a streams group named APPLICATION_ID in __consumer_offsets.
 * The topology is stateless on purpose: it needs no internal topics and no state store.
 *
 * Run as a single-file program with the broker's and Kafka Streams' jars on the class path:
 *   java -cp 'build/jars/kafka-4.3.1/*:build/jars/kafka-streams-4.3.1/*' tests/jvm/StreamsApp.java \
 *       BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR
 * It prints RUNNING each time Kafka Streams reaches that state. When stdin closes it closes the
 * application, asking explicitly to leave the group (so the test need not wait for a session
 * timeout, 45 s at least for streams groups), then exits 0, or 1 if closing did not finish in time.
 */

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;

import java.time.Duration;
import java.util.Properties;

public class StreamsApp {
    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: StreamsApp BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR");
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
        builder.stream(args[2]).to(args[3]);
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
}
