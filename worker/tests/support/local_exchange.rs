//! An exchange in memory, for the golden tests and the benchmarks: the
//! routing of a repartition topic (each row to the partition its key
//! hashes to, as Kafka's partitioner puts it) and its watermark markers,
//! without a broker or the worker's threads. Included with `#[path]`.

#![allow(dead_code)]

use sluice_crds::partition_for_key;
use sluice_formats::encode::EncodedRows;

/// One partition of an exchange: rows in arrival order, and the upstream
/// watermarks that arrived between them.
#[derive(Debug, Default)]
pub struct ExchangePartition {
    /// Row values (the keys have done their work: they chose the partition).
    pub rows: EncodedRows,
    /// The upstream partition of each row.
    pub upstreams: Vec<u32>,
    /// `(rows before it, upstream partition, watermark)`, in arrival order.
    pub marks: Vec<(usize, usize, i64)>,
}

#[derive(Debug)]
pub struct LocalExchange {
    partitions: Vec<ExchangePartition>,
}

impl LocalExchange {
    pub fn new(partitions: usize) -> Self {
        Self { partitions: (0..partitions.max(1)).map(|_| ExchangePartition::default()).collect() }
    }

    pub fn partitions(&self) -> usize {
        self.partitions.len()
    }

    /// Appends each row of upstream partition `from` to the partition its
    /// key hashes to.
    pub fn route(&mut self, from: u32, rows: &EncodedRows) {
        let n = i32::try_from(self.partitions.len()).unwrap_or(i32::MAX);
        for i in 0..rows.len() {
            let p = usize::try_from(partition_for_key(rows.key(i), n)).unwrap_or(0);
            let part = &mut self.partitions[p];
            part.rows.values.extend_from_slice(rows.value(i));
            part.rows.value_ends.push(part.rows.values.len());
            part.upstreams.push(from);
        }
    }

    /// Upstream partition `from` reached watermark `at`: a marker after the
    /// rows it sent so far, in every partition.
    pub fn watermark(&mut self, from: usize, at: i64) {
        for part in &mut self.partitions {
            part.marks.push((part.rows.len(), from, at));
        }
    }

    /// Partition `p`'s contents so far, leaving it empty.
    pub fn take(&mut self, p: usize) -> ExchangePartition {
        self.partitions.get_mut(p).map(std::mem::take).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(items: &[(&str, &str)]) -> EncodedRows {
        let mut r = EncodedRows::default();
        for (k, v) in items {
            r.keys.extend_from_slice(k.as_bytes());
            r.key_ends.push(r.keys.len());
            r.values.extend_from_slice(v.as_bytes());
            r.value_ends.push(r.values.len());
        }
        r
    }

    #[test]
    fn rows_go_where_kafka_would_put_their_keys_with_markers_after_them() {
        let mut x = LocalExchange::new(3);
        x.route(0, &rows(&[("a", "1"), ("b", "2"), ("a", "3")]));
        x.watermark(0, 100);
        x.route(0, &rows(&[("c", "4")]));
        let where_a = usize::try_from(partition_for_key(Some(b"a"), 3)).unwrap();
        let p = x.take(where_a);
        assert_eq!(p.rows.value(0), b"1");
        assert_eq!(p.rows.value(1), b"3", "order is kept");
        assert_eq!(p.marks[0], (p.marks[0].0, 0, 100));
        let total: usize = (0..3).map(|q| if q == where_a { p.rows.len() } else { x.take(q).rows.len() }).sum();
        assert_eq!(total, 4);
        assert!(x.take(where_a).rows.is_empty(), "take empties the partition");
    }
}
