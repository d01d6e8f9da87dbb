package bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.TimestampExtractor;

/**
 * The Kafka Streams peer of bench/bench_worker.py: a one-minute tumbling sum and count per key,
 * emitted once when the window closes.
 *
 * <pre>
 * STREAMS_BOOTSTRAP_SERVERS=... STREAMS_EVENTS=... KSTREAMS_GROUP=... KSTREAMS_OUTPUT=... KSTREAMS_STATE_DIR=... \
 *     java -jar target/kstreams-bench.jar
 * </pre>
 *
 * The same job as the streams worker's buckets, in Kafka Streams' own idiom:
 * <ul>
 *   <li>reads the events topic (RoutingProducer's JSON envelope) from the beginning, application.id
 *       = the consumer group;</li>
 *   <li>a value deserializer parses each envelope once (Jackson) into its (ts_ms, value); event time
 *       is its {@code ts_ms} (a TimestampExtractor);</li>
 *   <li>windows are keyed by the message key (the routing key's text: the bench splits no key),
 *       so no repartition;</li>
 *   <li>grace 5 s, {@code suppress(untilWindowCloses(unbounded()))}: one result per window when
 *       stream time passes its end plus the grace;</li>
 *   <li>RocksDB window store with its changelog (the defaults), commits every second;</li>
 *   <li>results, {@code {"start","end","sum","count"}} as JSON keyed by the key, to the output topic.</li>
 * </ul>
 */
public final class WindowedSums {
  private static final ObjectMapper JSON = new ObjectMapper();

  /** The running (count, sum) of one window. */
  record SumCount(long count, double sum) {
    SumCount add(double value) {
      return new SumCount(count + 1, sum + value);
    }
  }

  /** (count, sum) as 16 bytes, for the window store and the suppression buffer. */
  static final Serde<SumCount> SUM_COUNT = Serdes.serdeFrom(
      (Serializer<SumCount>) (topic, agg) -> ByteBuffer.allocate(16).putLong(agg.count()).putDouble(agg.sum()).array(),
      (Deserializer<SumCount>) (topic, data) -> {
        ByteBuffer buf = ByteBuffer.wrap(data);
        return new SumCount(buf.getLong(), buf.getDouble());
      });

  /** What the job reads of an envelope. */
  record Event(long tsMs, double value) {}

  /** Each envelope parsed once (Jackson); the job only reads events. */
  static final Serde<Event> EVENT = Serdes.serdeFrom(
      (Serializer<Event>) (topic, event) -> {
        throw new UnsupportedOperationException("the job only reads events");
      },
      (Deserializer<Event>) (topic, data) -> {
        try {
          JsonNode tree = JSON.readTree(data);
          return new Event(tree.get("ts_ms").asLong(), tree.get("value").asDouble());
        } catch (IOException e) {
          throw new IllegalArgumentException("not a JSON envelope", e);
        }
      });

  /** Event time from the envelope's ts_ms. */
  static final class EnvelopeTime implements TimestampExtractor {
    @Override
    public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
      return ((Event) record.value()).tsMs();
    }
  }

  public static void main(String[] args) throws InterruptedException {
    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, System.getenv("KSTREAMS_GROUP"));
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, System.getenv("STREAMS_BOOTSTRAP_SERVERS"));
    props.put(StreamsConfig.STATE_DIR_CONFIG, System.getenv("KSTREAMS_STATE_DIR"));
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 1000);
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");

    StreamsBuilder builder = new StreamsBuilder();
    builder.stream(System.getenv("STREAMS_EVENTS"),
            Consumed.with(Serdes.String(), EVENT).withTimestampExtractor(new EnvelopeTime()))
        .mapValues(Event::value)
        .groupByKey(Grouped.with(Serdes.String(), Serdes.Double()))
        .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMinutes(1), Duration.ofSeconds(5)))
        .aggregate(() -> new SumCount(0, 0.0), (key, value, agg) -> agg.add(value),
            Materialized.with(Serdes.String(), SUM_COUNT))
        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
        .toStream()
        .map((window, agg) -> KeyValue.pair(window.key(),
            String.format("{\"start\":%d,\"end\":%d,\"sum\":%s,\"count\":%d}", window.window().start(),
                window.window().end(), Double.toString(agg.sum()), agg.count())))
        .to(System.getenv("KSTREAMS_OUTPUT"), Produced.with(Serdes.String(), Serdes.String()));

    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    CountDownLatch stopped = new CountDownLatch(1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      streams.close(Duration.ofSeconds(20));
      stopped.countDown();
    }));
    streams.start();
    stopped.await();
  }
}
