//! The built-in generator of the seed scenarios' records, so a job runs with
//! nothing else installed. The same record formulas feed the benchmarks.
//!
//! Record `i` of a scenario is a pure function of `i`. Records are spread
//! over the simulated partitions by the source's partitionKey (hash of the
//! key values), like a keyed Kafka topic, so GROUP BY keys are
//! partition-aligned; without a partitionKey, record `i` goes to partition
//! `i mod partitions`. Each core generates only its own partitions' records.

use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use sluice_crds::DatagenScenario;

use super::nexmark::{self, Kind};
use super::{Deliver, PollEnd, Record, Source};
use crate::Error;

/// The Nexmark event kind a scenario generates, if it is one.
pub fn nexmark_kind(scenario: DatagenScenario) -> Option<Kind> {
    match scenario {
        DatagenScenario::NexmarkPerson => Some(Kind::Person),
        DatagenScenario::NexmarkAuction => Some(Kind::Auction),
        DatagenScenario::NexmarkBid => Some(Kind::Bid),
        DatagenScenario::Orders | DatagenScenario::MarketData | DatagenScenario::Trades => None,
    }
}

/// Writes record `i` of `scenario` as JSON into `out` (cleared first).
pub fn write_record(scenario: DatagenScenario, i: u64, out: &mut Vec<u8>) {
    if let Some(kind) = nexmark_kind(scenario) {
        return nexmark::write_event(kind, i, out);
    }
    let mut int = itoa::Buffer::new();
    let mut float = ryu::Buffer::new();
    out.clear();
    match scenario {
        DatagenScenario::Orders => {
            out.extend_from_slice(b"{\"order_id\":");
            out.extend_from_slice(int.format(i).as_bytes());
            out.extend_from_slice(b",\"customer_id\":");
            out.extend_from_slice(int.format(i % 1000).as_bytes());
            out.extend_from_slice(b",\"order_date\":\"2024-01-15\",\"total_amount\":");
            #[allow(clippy::cast_precision_loss)]
            out.extend_from_slice(float.format((150 + i % 100) as f64).as_bytes());
        }
        DatagenScenario::MarketData => {
            out.extend_from_slice(b"{\"symbol\":\"SYM");
            out.extend_from_slice(int.format(i % 10).as_bytes());
            out.extend_from_slice(b"\",\"price\":");
            #[allow(clippy::cast_precision_loss)]
            let price = 100.0 + (i % 50) as f64 + 10.0 * (i as f64 / 100.0).sin();
            out.extend_from_slice(float.format(price).as_bytes());
            out.extend_from_slice(b",\"timestamp\":");
            out.extend_from_slice(int.format(1_700_000_000_000 + i * 1000).as_bytes());
        }
        DatagenScenario::Trades => {
            out.extend_from_slice(b"{\"trader_id\":\"TRADER");
            out.extend_from_slice(int.format(i % 20).as_bytes());
            out.extend_from_slice(b"\",\"symbol\":\"SYM");
            out.extend_from_slice(int.format(i % 10).as_bytes());
            out.extend_from_slice(b"\",\"price\":");
            #[allow(clippy::cast_precision_loss)]
            out.extend_from_slice(float.format((100 + i % 50) as f64).as_bytes());
            out.extend_from_slice(b",\"quantity\":");
            out.extend_from_slice(int.format(100 + i % 1000).as_bytes());
            out.extend_from_slice(b",\"trade_time\":");
            out.extend_from_slice(int.format(1_700_000_000_000 + i * 900).as_bytes());
        }
        DatagenScenario::NexmarkPerson | DatagenScenario::NexmarkAuction | DatagenScenario::NexmarkBid => {}
    }
    out.push(b'}');
}

/// The text of key column `column` of record `i`, if the scenario has it.
pub fn scenario_key(scenario: DatagenScenario, column: &str, i: u64, out: &mut Vec<u8>) -> bool {
    if let Some(kind) = nexmark_kind(scenario) {
        return nexmark::event_key(kind, column, i, out);
    }
    let mut int = itoa::Buffer::new();
    out.clear();
    match (scenario, column) {
        (DatagenScenario::Orders, "order_id") => out.extend_from_slice(int.format(i).as_bytes()),
        (DatagenScenario::Orders, "customer_id") => out.extend_from_slice(int.format(i % 1000).as_bytes()),
        (DatagenScenario::MarketData | DatagenScenario::Trades, "symbol") => {
            out.extend_from_slice(b"SYM");
            out.extend_from_slice(int.format(i % 10).as_bytes());
        }
        (DatagenScenario::Trades, "trader_id") => {
            out.extend_from_slice(b"TRADER");
            out.extend_from_slice(int.format(i % 20).as_bytes());
        }
        _ => return false,
    }
    true
}

/// Whether key column `column` holds a value no other record of the
/// scenario has (an order's id, a Nexmark person's or auction's id).
fn unique_key(scenario: DatagenScenario, column: &str) -> bool {
    matches!(
        (scenario, column),
        (DatagenScenario::Orders, "order_id")
            | (DatagenScenario::NexmarkPerson | DatagenScenario::NexmarkAuction, "id")
    )
}

/// Whether records are spread round-robin (record `i` in partition
/// `i mod partitions`): when no key is declared, and when the key holds a
/// column unique to each record, which any spreading keeps together. Then
/// a core finds its records by stepping over the others, instead of
/// deriving every record's key — which, with every core doing it for the
/// whole stream, cost each of 16 cores more the more cores there were
/// (issue 37: a tenth of q8's time at 16 cores).
fn round_robin(scenario: DatagenScenario, key_columns: &[String]) -> bool {
    key_columns.is_empty() || key_columns.iter().any(|c| unique_key(scenario, c))
}

/// Which of `partitions` record `i` belongs to.
pub fn partition_of(
    scenario: DatagenScenario,
    key_columns: &[String],
    partitions: u32,
    i: u64,
    scratch: &mut Vec<u8>,
    key: &mut Vec<u8>,
) -> u32 {
    if round_robin(scenario, key_columns) {
        return u32::try_from(i % u64::from(partitions)).unwrap_or(0);
    }
    key.clear();
    for c in key_columns {
        if scenario_key(scenario, c, i, scratch) {
            key.extend_from_slice(scratch);
        }
        key.push(0);
    }
    let h = foldhash::fast::FixedState::with_seed(1).hash_one(&*key);
    u32::try_from(h % u64::from(partitions)).unwrap_or(0)
}

#[derive(Debug)]
pub struct Datagen {
    scenario: DatagenScenario,
    key_columns: Vec<String>,
    partitions: u32,
    /// Slot of each simulated partition on this core, if owned.
    slot_of: Vec<Option<usize>>,
    /// Spread round-robin ([`round_robin`]): per partition, how many
    /// records on the next one this core owns is (0 for its own).
    skip: Option<Vec<u64>>,
    next_offset: Vec<i64>,
    next: u64,
    limit: Option<u64>,
    /// Records per second for this core (0 = unlimited).
    rate: f64,
    started: Instant,
    generated: u64,
    buf: Vec<u8>,
    scratch: Vec<u8>,
    key: Vec<u8>,
}

impl Datagen {
    /// A generator for the simulated partitions `owned` out of `partitions`.
    pub fn new(
        scenario: DatagenScenario,
        key_columns: Vec<String>,
        partitions: u32,
        owned: &[i32],
        records: i64,
        rate_per_second: i64,
    ) -> Self {
        let mut slot_of = vec![None; partitions as usize];
        for (slot, p) in owned.iter().enumerate() {
            if let Some(s) = usize::try_from(*p).ok().and_then(|p| slot_of.get_mut(p)) {
                *s = Some(slot);
            }
        }
        #[allow(clippy::cast_precision_loss)]
        let rate = rate_per_second.max(0) as f64 * owned.len() as f64 / f64::from(partitions.max(1));
        let skip = (round_robin(scenario, &key_columns) && slot_of.iter().any(Option::is_some)).then(|| {
            let n = slot_of.len();
            (0..n).map(|p| (0..n).find(|d| slot_of[(p + d) % n].is_some()).map_or(0, |d| d as u64)).collect()
        });
        Self {
            scenario,
            key_columns,
            partitions: partitions.max(1),
            slot_of,
            skip,
            next_offset: vec![0; owned.len()],
            next: 0,
            limit: (records > 0).then(|| records.unsigned_abs()),
            rate,
            started: Instant::now(),
            generated: 0,
            buf: Vec::with_capacity(256),
            scratch: Vec::with_capacity(32),
            key: Vec::with_capacity(64),
        }
    }
}

impl Source for Datagen {
    fn poll(&mut self, max: usize, timeout: Duration, f: &mut Deliver<'_>) -> Result<(usize, PollEnd), Error> {
        if self.next_offset.is_empty() {
            std::thread::sleep(timeout);
            return Ok((0, PollEnd::Exhausted));
        }
        let mut n = 0;
        let now = crate::clock::now_ms();
        while n < max {
            if self.limit.is_some_and(|l| self.next >= l) {
                return Ok((n, PollEnd::Exhausted));
            }
            if self.rate > 0.0 {
                #[allow(clippy::cast_precision_loss)]
                let due = self.generated as f64 / self.rate;
                let elapsed = self.started.elapsed().as_secs_f64();
                if due > elapsed {
                    if n == 0 {
                        std::thread::sleep(Duration::from_secs_f64((due - elapsed).min(timeout.as_secs_f64())));
                    }
                    break;
                }
            }
            let i = self.next;
            let p = match &self.skip {
                Some(skip) => {
                    let p = i % u64::from(self.partitions);
                    let ahead = skip[p as usize];
                    if ahead > 0 {
                        self.next += ahead;
                        continue;
                    }
                    u32::try_from(p).unwrap_or(0)
                }
                None => {
                    partition_of(self.scenario, &self.key_columns, self.partitions, i, &mut self.scratch, &mut self.key)
                }
            };
            self.next += 1;
            let Some(slot) = self.slot_of[p as usize] else { continue };
            write_record(self.scenario, i, &mut self.buf);
            let offset = self.next_offset[slot];
            self.next_offset[slot] += 1;
            self.generated += 1;
            n += f(Record { slot, offset, timestamp_ms: now, payload: Some(&self.buf), key: None, headers: None })
                .max(1);
        }
        Ok((n, PollEnd::Open))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_follow_the_seed_formulas() {
        let mut b = Vec::new();
        write_record(DatagenScenario::Trades, 25, &mut b);
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["trader_id"], "TRADER5");
        assert_eq!(v["symbol"], "SYM5");
        assert_eq!(v["price"], 125.0);
        assert_eq!(v["quantity"], 125);
        assert_eq!(v["trade_time"], 1_700_000_022_500_i64);
        write_record(DatagenScenario::Orders, 1234, &mut b);
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["customer_id"], 234);
        assert_eq!(v["total_amount"], 184.0);
    }

    #[test]
    fn keyed_partitions_keep_keys_together_and_split_the_work() {
        let keys = vec!["trader_id".to_owned()];
        let (mut scratch, mut key) = (Vec::new(), Vec::new());
        let mut seen = std::collections::HashMap::new();
        for i in 0..1000 {
            let p = partition_of(DatagenScenario::Trades, &keys, 4, i, &mut scratch, &mut key);
            let prev = seen.insert(i % 20, p);
            assert!(prev.is_none_or(|q| q == p), "a trader always maps to one partition");
        }
        // Two cores with two partitions each see disjoint records, together all of them.
        let mut total = 0;
        for owned in [[0, 1], [2, 3]] {
            let mut g = Datagen::new(DatagenScenario::Trades, keys.clone(), 4, &owned, 1000, 0);
            let (n, end) = g.poll(10_000, Duration::ZERO, &mut |_| 1).unwrap();
            assert_eq!(end, PollEnd::Exhausted);
            total += n;
        }
        assert_eq!(total, 1000);
    }

    /// Round-robin spreading (no key, or a key unique to each record) finds
    /// a core's records by stepping over the others: exactly the records
    /// `partition_of` gives its partitions, in order, at their offsets.
    #[test]
    fn a_core_steps_to_exactly_its_round_robin_records() {
        for (scenario, keys) in [
            (DatagenScenario::Orders, vec![]),
            (DatagenScenario::Orders, vec!["order_id".to_owned()]),
            (DatagenScenario::NexmarkPerson, vec!["id".to_owned()]),
        ] {
            assert!(round_robin(scenario, &keys));
            for owned in [vec![0], vec![2, 5], vec![6], vec![0, 1, 2, 3, 4, 5, 6]] {
                let mut g = Datagen::new(scenario, keys.clone(), 7, &owned, 100, 0);
                let mut got = Vec::new();
                loop {
                    let (_, end) = g
                        .poll(8, Duration::ZERO, &mut |r| {
                            got.push((r.slot, r.offset, r.payload.unwrap().to_vec()));
                            1
                        })
                        .unwrap();
                    if end == PollEnd::Exhausted {
                        break;
                    }
                }
                let mut want = Vec::new();
                let mut offsets = vec![0; owned.len()];
                let (mut scratch, mut key, mut buf) = (Vec::new(), Vec::new(), Vec::new());
                for i in 0..100 {
                    let p = partition_of(scenario, &keys, 7, i, &mut scratch, &mut key);
                    if let Some(slot) = owned.iter().position(|&o| o == p as i32) {
                        write_record(scenario, i, &mut buf);
                        want.push((slot, offsets[slot], buf.clone()));
                        offsets[slot] += 1;
                    }
                }
                assert_eq!(got, want, "{scenario:?} {keys:?} owning {owned:?}");
            }
        }
        assert!(!round_robin(DatagenScenario::Orders, &["customer_id".to_owned()]));
    }
}
