//! Fetched messages a batch at a time: librdkafka's
//! `rd_kafka_consume_batch_queue`, which rust-rdkafka does not expose.
//!
//! Why: `BaseConsumer::poll` returns one message per call, and each call
//! polls librdkafka's event API (queue lock, clock reads for
//! `max.poll.interval.ms` bookkeeping), wraps the event in an `Arc`, and
//! checks its type. Profiled under `bench/e2e.sh`, that path was ~35 % of a
//! core's time — more than the engine. The batch call takes up to `max`
//! messages in one pass over the queue; `worker/benches/consume.rs` measures
//! both against the same topic (`docs/benchmarks.md`).
//!
//! How: before the consumer is assigned, each of the core's partitions has
//! its fetch queue forwarded to one queue of this core's own, so fetched
//! messages land there instead of the consumer's main queue (librdkafka
//! keeps an application's forward across `assign`). The main queue then
//! carries only events — statistics, errors, commit results — and the
//! caller keeps serving it with `BaseConsumer::poll(0)`.
//!
//! This is the crate's one `unsafe` module: six librdkafka calls, each
//! with its contract stated where it is made.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::BorrowedMessage;
use rdkafka::types::RDKafkaErrorCode;

use sluice_formats::decode::RecordHeaders;

use crate::Error;

/// A fetched message's headers, which librdkafka parses only when first
/// asked for (and then keeps with the message): a job that declares no
/// header column never pays for them.
#[derive(Debug, Clone, Copy)]
pub struct MessageHeaders<'a>(*mut rd::rd_kafka_message_t, PhantomData<&'a ()>);

impl<'a> MessageHeaders<'a> {
    /// # Safety
    /// `message` must be a live message that outlives `'a`.
    unsafe fn of(message: *mut rd::rd_kafka_message_t) -> Self {
        Self(message, PhantomData)
    }

    /// The headers of a message polled the ordinary way.
    pub fn of_message(message: &'a BorrowedMessage<'_>) -> Self {
        // SAFETY: the borrow keeps the message alive for `'a`.
        unsafe { Self::of(message.ptr()) }
    }

    fn parsed(&self) -> Option<*mut rd::rd_kafka_headers_t> {
        let mut headers = std::ptr::null_mut();
        // SAFETY: the message is live (`of`'s contract); librdkafka writes a
        // pointer to headers it owns with the message, or returns an error.
        let err = unsafe { rd::rd_kafka_message_headers(self.0, &mut headers) };
        (err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && !headers.is_null()).then_some(headers)
    }
}

impl RecordHeaders for MessageHeaders<'_> {
    fn count(&self) -> usize {
        // SAFETY: `parsed` returned headers owned by the live message.
        self.parsed().map_or(0, |h| unsafe { rd::rd_kafka_header_cnt(h) })
    }

    fn header(&self, i: usize) -> Option<(&[u8], Option<&[u8]>)> {
        let headers = self.parsed()?;
        let (mut name, mut value, mut size) = (std::ptr::null(), std::ptr::null(), 0);
        // SAFETY: `headers` is live with the message; librdkafka fills the
        // out-pointers with its own NUL-terminated name and value buffer.
        let err = unsafe { rd::rd_kafka_header_get_all(headers, i, &mut name, &mut value, &mut size) };
        if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            return None;
        }
        // SAFETY: both point into the message's headers, valid while it is.
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
        let value = (!value.is_null()).then(|| unsafe { std::slice::from_raw_parts(value.cast::<u8>(), size) });
        Some((name, value))
    }
}

/// One message of a batch, borrowed until the batch's callback returns.
#[derive(Debug, Clone, Copy)]
pub struct Fetched<'a> {
    /// Index of the message's topic in the list the consumer was made with.
    pub topic: usize,
    pub partition: i32,
    pub offset: i64,
    /// CreateTime or LogAppendTime, when the message carries one.
    pub timestamp_ms: Option<i64>,
    /// The value; `None` for a null one (a tombstone).
    pub payload: Option<&'a [u8]>,
    pub key: Option<&'a [u8]>,
    pub headers: Option<&'a MessageHeaders<'a>>,
}

/// A consumer whose assigned partitions are read through one batch queue.
///
/// It owns the consumer so the queue, which points into the consumer's
/// librdkafka handle, is always destroyed first (`Drop` below runs before
/// the fields are dropped).
pub struct BatchConsumer<C: ConsumerContext + 'static> {
    queue: NonNull<rd::rd_kafka_queue_t>,
    consumer: BaseConsumer<C>,
    /// Message pointers of the batch in flight; reused batch after batch.
    slots: Vec<*mut rd::rd_kafka_message_t>,
    /// The topics read, in the caller's order.
    topics: Vec<CString>,
    /// librdkafka's handle of each topic seen so far, and its index: a
    /// message names its topic by handle, and comparing pointers is cheaper
    /// than comparing names for every message.
    handles: Vec<(*mut rd::rd_kafka_topic_t, usize)>,
}

// SAFETY: the queue handle is owned by this value alone and used only
// through `&mut self`; librdkafka queues may be used from any thread.
unsafe impl<C: ConsumerContext + 'static> Send for BatchConsumer<C> {}

impl<C: ConsumerContext + 'static> std::fmt::Debug for BatchConsumer<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchConsumer").field("capacity", &self.slots.capacity()).finish()
    }
}

impl<C: ConsumerContext + 'static> BatchConsumer<C> {
    /// Routes the fetched messages of the given partitions of each topic to
    /// a queue of their own. Call before `assign()`, and assign once: the
    /// forward is what makes librdkafka leave those partitions' fetch queues
    /// alone when it starts fetching them, and an unassign drops it for good.
    pub fn new(consumer: BaseConsumer<C>, topics: &[(&str, &[i32])]) -> Result<Self, Error> {
        let rk = consumer.client().native_ptr();
        let names = topics
            .iter()
            .map(|(t, _)| CString::new(*t).map_err(|_| Error::Config(format!("topic name {t:?} contains NUL"))))
            .collect::<Result<Vec<_>, _>>()?;
        // SAFETY: `rk` is the live handle of `consumer`, which this value
        // keeps alive for as long as the queue exists.
        let queue = NonNull::new(unsafe { rd::rd_kafka_queue_new(rk) })
            .ok_or_else(|| Error::kafka("batch queue", "librdkafka could not create a queue"))?;
        let this = Self { queue, consumer, slots: Vec::new(), topics: names, handles: Vec::new() };
        for ((topic, partitions), name) in topics.iter().zip(&this.topics) {
            for &p in *partitions {
                // SAFETY: `name` is NUL-terminated and outlives the call; the
                // partition queue returned is a new reference that we release
                // right after forwarding it (the forward holds its own).
                unsafe {
                    let partition_queue = rd::rd_kafka_queue_get_partition(rk, name.as_ptr(), p);
                    if partition_queue.is_null() {
                        return Err(Error::kafka(format!("partition queue of {topic}/{p}"), "no such partition"));
                    }
                    rd::rd_kafka_queue_forward(partition_queue, this.queue.as_ptr());
                    rd::rd_kafka_queue_destroy(partition_queue);
                }
            }
        }
        Ok(this)
    }

    /// The index of the topic a message's handle names.
    fn topic_of(&mut self, rkt: *mut rd::rd_kafka_topic_t) -> Option<usize> {
        if self.topics.len() == 1 {
            return Some(0);
        }
        if let Some(&(_, i)) = self.handles.iter().find(|(h, _)| *h == rkt) {
            return Some(i);
        }
        // SAFETY: `rkt` is the topic handle of a live message; librdkafka
        // returns its NUL-terminated name, valid as long as the handle.
        let name = unsafe { std::ffi::CStr::from_ptr(rd::rd_kafka_topic_name(rkt)) };
        let i = self.topics.iter().position(|t| t.as_c_str() == name)?;
        self.handles.push((rkt, i));
        Some(i)
    }

    pub fn consumer(&self) -> &BaseConsumer<C> {
        &self.consumer
    }

    /// Hands up to `max` fetched messages to `f`, waiting at most `timeout`
    /// for the first; returns how many. A fetch error in the batch (an error
    /// "message": librdkafka retries the transient ones itself) is returned
    /// after every real message of the batch was delivered, with their count.
    pub fn consume(
        &mut self,
        max: usize,
        timeout: Duration,
        f: &mut dyn FnMut(Fetched<'_>),
    ) -> Result<usize, (usize, RDKafkaErrorCode)> {
        if max == 0 {
            return Ok(0);
        }
        self.slots.clear();
        self.slots.reserve(max);
        let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `slots` has room for `max` pointers; librdkafka writes at
        // most that many and returns how many it wrote (or -1).
        let n =
            unsafe { rd::rd_kafka_consume_batch_queue(self.queue.as_ptr(), timeout_ms, self.slots.as_mut_ptr(), max) };
        let n = usize::try_from(n).unwrap_or(0).min(max);
        // SAFETY: the first `n` slots were just initialised by librdkafka.
        unsafe { self.slots.set_len(n) };
        let mut delivered = 0;
        let mut error = None;
        for i in 0..self.slots.len() {
            let m = self.slots[i];
            // SAFETY: each pointer is a live message owned by us until it is
            // destroyed below; its payload lives as long as the message, and
            // `f` cannot keep the borrow past its call.
            let msg = unsafe { &*m };
            if msg.err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                error.get_or_insert(RDKafkaErrorCode::from(msg.err));
                continue;
            }
            let payload = if msg.payload.is_null() {
                None
            } else if msg.len == 0 {
                Some(&[][..])
            } else {
                // SAFETY: librdkafka guarantees `len` readable bytes at `payload`.
                Some(unsafe { std::slice::from_raw_parts(msg.payload.cast::<u8>(), msg.len) })
            };
            let key = if msg.key.is_null() {
                None
            } else {
                // SAFETY: librdkafka guarantees `key_len` readable bytes at `key`.
                Some(unsafe { std::slice::from_raw_parts(msg.key.cast::<u8>(), msg.key_len) })
            };
            let mut kind = rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
            // SAFETY: `m` is a live message; `kind` is a valid out-pointer.
            let ts = unsafe { rd::rd_kafka_message_timestamp(m, &mut kind) };
            let timestamp_ms =
                (kind != rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE && ts >= 0).then_some(ts);
            let Some(topic) = self.topic_of(msg.rkt) else {
                // Only the forwarded partitions' messages reach this queue.
                error.get_or_insert(RDKafkaErrorCode::UnknownTopicOrPartition);
                continue;
            };
            // SAFETY: `m` lives until it is destroyed after the loop.
            let headers = unsafe { MessageHeaders::of(m) };
            f(Fetched {
                topic,
                partition: msg.partition,
                offset: msg.offset,
                timestamp_ms,
                payload,
                key,
                headers: Some(&headers),
            });
            delivered += 1;
        }
        for &m in &self.slots {
            // SAFETY: every message returned by the batch call is destroyed
            // exactly once, after its last use above.
            unsafe { rd::rd_kafka_message_destroy(m) };
        }
        self.slots.clear();
        match error {
            None => Ok(delivered),
            Some(code) => Err((delivered, code)),
        }
    }
}

impl<C: ConsumerContext + 'static> Drop for BatchConsumer<C> {
    fn drop(&mut self) {
        // SAFETY: the queue was created by `rd_kafka_queue_new` on the
        // consumer's handle, which is still alive (fields drop after this).
        unsafe { rd::rd_kafka_queue_destroy(self.queue.as_ptr()) };
    }
}
