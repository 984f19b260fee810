//! The harness broker is a real Kafka: records produced with rdkafka come
//! back, per partition in order, with keys and timestamps intact.

use std::time::Duration;

use sluice_e2e::kafka;

#[test]
fn produce_then_consume_round_trips_through_the_real_broker() {
    let topic = sluice_e2e::unique_name("roundtrip");
    kafka::create_topic(&topic, 3);
    let values: Vec<String> = (0..3000).map(|i| format!(r#"{{"i":{i}}}"#)).collect();
    let keys: Vec<String> = (0..3000).map(|i| format!("k{}", i % 7)).collect();
    let records: Vec<_> = values
        .iter()
        .zip(&keys)
        .enumerate()
        .map(|(i, (v, k))| (Some(k.as_bytes()), v.as_bytes(), Some(i32::try_from(i % 3).unwrap())))
        .collect();
    kafka::produce(&topic, &records);

    let got = kafka::consume(&topic, 3000, Duration::from_secs(60));
    assert_eq!(got.len(), 3000, "every produced record is consumed");
    for p in 0..3 {
        let in_partition: Vec<_> = got.iter().filter(|r| r.partition == p).collect();
        assert_eq!(in_partition.len(), 1000);
        // Order within a partition is the produce order, offsets dense from 0.
        for (n, r) in in_partition.iter().enumerate() {
            assert_eq!(r.offset, i64::try_from(n).unwrap());
            let i = n * 3 + usize::try_from(p).unwrap();
            assert_eq!(r.value, values[i].as_bytes());
            assert_eq!(r.key.as_deref(), Some(keys[i].as_bytes()));
            assert!(r.timestamp_ms.is_some_and(|t| t > 1_600_000_000_000), "broker timestamps are set");
        }
    }
}
