//! The Nexmark event model and generator: people registering, auctions
//! opening and bids arriving, as the benchmark every streaming system
//! publishes figures for (Beam's Nexmark, carried on by `nexmark/nexmark`
//! for Flink, and by RisingWave, Arroyo and Feldera).
//!
//! The model follows the reference generator: events interleave in epochs
//! of 50 (1 person, 3 auctions, 46 bids); ids start at 1000 (categories at
//! 10) and each new person or auction takes the next id; auctions mostly
//! come from "hot" sellers (3 in 4 from the first person of the last
//! hundred), bids mostly go to hot auctions (1 in 2) from hot bidders (3 in
//! 4), the rest drawn from the 1000 most recent people and the 100 auctions
//! still in flight, a few ids ahead of the last one created (so a bid can
//! arrive before its auction, as in the reference); prices are
//! `round(10^(6u) · 100)` cents; half the bids come from four hot channels,
//! the rest from 10 000 others with their URLs; `extra` pads each event to
//! the reference's average sizes (person 200, auction 500, bid 100 bytes).
//! Event `n` happens at `BASE_TIME + n / 10` ms: the reference's default
//! 10 000 events/s of event time, with no out-of-order groups.
//!
//! One difference, on purpose: the reference draws every event from one
//! unseeded `java.util.Random`, so no two runs agree. Here each event's
//! fields come from a generator seeded with its event id, so event `n` is a
//! pure function of `n` — every core can generate exactly its own
//! partitions, and a test's oracle sees the same events as the engine.
//!
//! Three sources, one per event kind (three topics in Kafka): record `k` of
//! the `bid` source is the `k`-th bid of the interleaved stream, and so on,
//! so the three together are exactly the reference's single stream.

use std::io::Write;

/// Event time of event 0 (2015-07-15T00:00:00Z, as in other ports).
pub const BASE_TIME: i64 = 1_436_918_400_000;
const FIRST_PERSON_ID: u64 = 1000;
const FIRST_AUCTION_ID: u64 = 1000;
const FIRST_CATEGORY_ID: u64 = 10;
const PERSON_PROPORTION: u64 = 1;
const AUCTION_PROPORTION: u64 = 3;
const TOTAL_PROPORTION: u64 = 50;
/// Microseconds of event time between events: 10 000 events/s.
const INTER_EVENT_DELAY_US: u64 = 100;
const NUM_CATEGORIES: u64 = 5;
const NUM_ACTIVE_PEOPLE: u64 = 1000;
const NUM_IN_FLIGHT_AUCTIONS: u64 = 100;
const ID_LEAD: u64 = 10;
const HOT_AUCTION_RATIO: u64 = 2;
const HOT_SELLERS_RATIO: u64 = 4;
const HOT_BIDDERS_RATIO: u64 = 4;
const HOT_BATCH: u64 = 100;
const CHANNELS: u64 = 10_000;
const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
const AVG_PERSON_BYTES: usize = 200;
const AVG_AUCTION_BYTES: usize = 500;
const AVG_BID_BYTES: usize = 100;

const US_STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];
const US_CITIES: [&str; 10] =
    ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"];
const FIRST_NAMES: [&str; 11] =
    ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"];
const LAST_NAMES: [&str; 9] = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"];

/// The kind of a Nexmark event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Person,
    Auction,
    Bid,
}

/// SplitMix64: small, fast, and good enough for synthetic data; seeded per
/// event so each event is reproducible on its own.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn for_event(event_id: u64) -> Self {
        Self(event_id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` ≥ 1; 0 for `n` = 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Lemire's multiply-shift: no modulo bias worth the name here.
        u64::try_from((u128::from(self.next_u64()) * u128::from(n)) >> 64).unwrap_or(0)
    }

    fn index(&mut self, n: usize) -> usize {
        usize::try_from(self.below(n as u64)).unwrap_or(0)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let v = (self.next_u64() >> 11) as f64;
        v / (1u64 << 53) as f64
    }
}

/// Event id of the `k`-th event of `kind` in the interleaved stream.
pub fn event_id(kind: Kind, k: u64) -> u64 {
    match kind {
        Kind::Person => k * TOTAL_PROPORTION,
        Kind::Auction => (k / AUCTION_PROPORTION) * TOTAL_PROPORTION + PERSON_PROPORTION + k % AUCTION_PROPORTION,
        Kind::Bid => {
            let bids = TOTAL_PROPORTION - PERSON_PROPORTION - AUCTION_PROPORTION;
            (k / bids) * TOTAL_PROPORTION + PERSON_PROPORTION + AUCTION_PROPORTION + k % bids
        }
    }
}

/// Event time (epoch ms) of event `id`.
pub fn timestamp(id: u64) -> i64 {
    BASE_TIME + i64::try_from(id * INTER_EVENT_DELAY_US / 1000).unwrap_or(i64::MAX - BASE_TIME)
}

/// The last person id (base 0) created at or before event `id`.
fn last_person(id: u64) -> u64 {
    // With one person per epoch, the epoch's person is the last one.
    let epoch = id / TOTAL_PROPORTION;
    epoch * PERSON_PROPORTION + (PERSON_PROPORTION - 1)
}

/// The last auction id (base 0) created at or before event `id` (0 before
/// the first).
fn last_auction(id: u64) -> u64 {
    let (epoch, offset) = (id / TOTAL_PROPORTION, id % TOTAL_PROPORTION);
    if offset < PERSON_PROPORTION {
        (epoch * AUCTION_PROPORTION).saturating_sub(1)
    } else {
        epoch * AUCTION_PROPORTION + (offset - PERSON_PROPORTION).min(AUCTION_PROPORTION - 1)
    }
}

/// One of the active people, or a few about to register.
fn some_person(id: u64, rng: &mut Rng) -> u64 {
    let people = last_person(id) + 1;
    let active = people.min(NUM_ACTIVE_PEOPLE);
    people - active + rng.below(active + ID_LEAD)
}

/// One of the auctions still in flight, or a few about to open.
fn some_auction(id: u64, rng: &mut Rng) -> u64 {
    let last = last_auction(id);
    let first = last.saturating_sub(NUM_IN_FLIGHT_AUCTIONS);
    first + rng.below(last - first + 1 + ID_LEAD)
}

fn price(rng: &mut Rng) -> u64 {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let p = (10f64.powf(rng.unit() * 6.0) * 100.0).round() as u64;
    p
}

/// 3 to `max - 1` random lowercase letters, about one in 13 a space,
/// trimmed — or `sep` instead of spaces.
fn random_string(rng: &mut Rng, max: u64, sep: u8, out: &mut Vec<u8>) {
    let start = out.len();
    let len = 3 + rng.below(max - 3);
    let mut draws = Draws::default();
    for _ in 0..len {
        if draws.below(rng, 13) == 0 {
            out.push(sep);
        } else {
            out.push(b'a' + draws.below(rng, 26));
        }
    }
    if sep == b' ' {
        // Trim, as the reference does.
        let end = out[start..].iter().rposition(|b| *b != b' ').map_or(start, |p| start + p + 1);
        out.truncate(end);
        let lead = out[start..].iter().position(|b| *b != b' ').unwrap_or(0);
        out.drain(start..start + lead);
    }
}

/// Letters padding an event of `current` bytes to `average` on average
/// (±20 %).
fn extra(rng: &mut Rng, current: usize, average: usize, out: &mut Vec<u8>) {
    if current > average {
        return;
    }
    let want = average - current;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
    let delta = (want as f64 * 0.2).round() as u64;
    let size = (want as u64 - delta) + if delta == 0 { 0 } else { rng.below(2 * delta) };
    letters(rng, usize::try_from(size).unwrap_or(0), out);
}

/// `n` lowercase letters, two at a time: each 16 bits of a generator word
/// pick one of the 676 pairs (`x · 676 / 2¹⁶`), so a word makes eight
/// letters. Each pair comes up 96 or 97 times in 65,536 — uniform to
/// within 1 %, which padding (`extra`, most of a person's or auction's
/// bytes, never read by a query but copied and parsed) does not notice.
/// Whole words are written, eight letters at once, and the last cut short.
fn letters(rng: &mut Rng, n: usize, out: &mut Vec<u8>) {
    let end = out.len() + n;
    out.reserve(n + 8);
    for _ in 0..n.div_ceil(8) {
        let mut word = rng.next_u64();
        let mut eight = [0u8; 8];
        for pair in eight.chunks_exact_mut(2) {
            #[allow(clippy::cast_possible_truncation)] // below 676
            let p = (((word & 0xFFFF) * 676) >> 16) as u16;
            word >>= 16;
            pair.copy_from_slice(&LETTER_PAIRS[usize::from(p)]);
        }
        out.extend_from_slice(&eight);
    }
    out.truncate(end);
}

/// The 676 pairs of lowercase letters, in order (`aa`, `ab`, … `zz`).
const LETTER_PAIRS: [[u8; 2]; 676] = {
    let mut pairs = [[0u8; 2]; 676];
    let mut i = 0;
    while i < 676 {
        #[allow(clippy::cast_possible_truncation)] // below 26
        let (a, b) = ((i / 26) as u8, (i % 26) as u8);
        pairs[i] = [b'a' + a, b'a' + b];
        i += 1;
    }
    pairs
};

/// Small uniform draws, several from each 64-bit word of the generator:
/// `x · n / 2⁶⁴` is a draw below `n`, and `x · n mod 2⁶⁴` a fresh fraction
/// for the next. Six draws below 26 use 29 of the 64 bits, so each is
/// uniform to within 2⁻³⁵ — and the letters that pad every event (most of
/// a person's or auction's bytes) cost a sixth of the generator calls.
#[derive(Default)]
struct Draws {
    x: u64,
    left: u8,
}

impl Draws {
    fn below(&mut self, rng: &mut Rng, n: u8) -> u8 {
        if self.left == 0 {
            self.x = rng.next_u64();
            self.left = 6;
        }
        self.left -= 1;
        let m = u128::from(self.x) * u128::from(n);
        self.x = m as u64;
        u8::try_from(m >> 64).unwrap_or(0)
    }
}

/// `https://www.nexmark.com/xxx/xxx/xxx/item.htm?query=1`, the same for a
/// given seed.
fn url(seed: u64, out: &mut Vec<u8>) {
    let mut rng = Rng::for_event(seed ^ 0x5EED_0000_0000_0000);
    out.extend_from_slice(b"https://www.nexmark.com/");
    for _ in 0..3 {
        random_string(&mut rng, 5, b'_', out);
        out.push(b'/');
    }
    out.extend_from_slice(b"item.htm?query=1");
    // Nine channels in ten carry their id in the URL.
    if seed < CHANNELS && rng.below(10) > 0 {
        let id = u32::try_from(seed).unwrap_or(0).reverse_bits() as i32;
        out.extend_from_slice(b"&channel_id=");
        int(out, id.unsigned_abs());
    }
}

fn field(out: &mut Vec<u8>, first: bool, name: &str) {
    out.extend_from_slice(if first { b"{\"" } else { b",\"" });
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
}

fn int(out: &mut Vec<u8>, v: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Writes a JSON string field from bytes that need no escaping (the
/// generator writes only letters, digits, spaces and URL characters);
/// returns the value's length.
fn text_field(out: &mut Vec<u8>, name: &str, value: impl FnOnce(&mut Vec<u8>)) -> usize {
    field(out, false, name);
    out.push(b'"');
    let start = out.len();
    value(out);
    let len = out.len() - start;
    out.push(b'"');
    len
}

/// An auction's seller and category: the first draws of its event's
/// generator, so [`event_key`] can partition by them without the rest.
fn auction_parties(id: u64, rng: &mut Rng) -> (u64, u64) {
    let seller =
        if rng.below(HOT_SELLERS_RATIO) > 0 { (last_person(id) / HOT_BATCH) * HOT_BATCH } else { some_person(id, rng) };
    (seller + FIRST_PERSON_ID, FIRST_CATEGORY_ID + rng.below(NUM_CATEGORIES))
}

/// A bid's auction and bidder: the first draws of its event's generator.
fn bid_parties(id: u64, rng: &mut Rng) -> (u64, u64) {
    let auction = if rng.below(HOT_AUCTION_RATIO) > 0 {
        (last_auction(id) / HOT_BATCH) * HOT_BATCH
    } else {
        some_auction(id, rng)
    };
    let bidder = if rng.below(HOT_BIDDERS_RATIO) > 0 {
        (last_person(id) / HOT_BATCH) * HOT_BATCH + 1
    } else {
        some_person(id, rng)
    };
    (auction + FIRST_AUCTION_ID, bidder + FIRST_PERSON_ID)
}

/// Writes the `k`-th event of `kind` as a JSON object into `out` (cleared
/// first), with the reference's field names; times are epoch milliseconds.
pub fn write_event(kind: Kind, k: u64, out: &mut Vec<u8>) {
    out.clear();
    let id = event_id(kind, k);
    let ts = timestamp(id);
    let mut rng = Rng::for_event(id);
    match kind {
        Kind::Person => {
            field(out, true, "id");
            int(out, last_person(id) + FIRST_PERSON_ID);
            // The reference pads to the strings' lengths plus 8 for the id.
            let mut size = 8;
            size += text_field(out, "name", |o| {
                o.extend_from_slice(FIRST_NAMES[rng.index(FIRST_NAMES.len())].as_bytes());
                o.push(b' ');
                o.extend_from_slice(LAST_NAMES[rng.index(LAST_NAMES.len())].as_bytes());
            });
            size += text_field(out, "emailAddress", |o| {
                random_string(&mut rng, 7, b' ', o);
                o.push(b'@');
                random_string(&mut rng, 5, b' ', o);
                o.extend_from_slice(b".com");
            });
            size += text_field(out, "creditCard", |o| {
                for i in 0..4 {
                    if i > 0 {
                        o.push(b' ');
                    }
                    let _ = write!(o, "{:04}", rng.below(10_000));
                }
            });
            size += text_field(out, "city", |o| o.extend_from_slice(US_CITIES[rng.index(US_CITIES.len())].as_bytes()));
            size += text_field(out, "state", |o| o.extend_from_slice(US_STATES[rng.index(US_STATES.len())].as_bytes()));
            field(out, false, "dateTime");
            int(out, ts);
            text_field(out, "extra", |o| extra(&mut rng, size, AVG_PERSON_BYTES, o));
        }
        Kind::Auction => {
            let auction = last_auction(id) + FIRST_AUCTION_ID;
            let (seller, category) = auction_parties(id, &mut rng);
            let initial_bid = price(&mut rng);
            // Auctions last about as long as it takes to open the next
            // hundred, so about a hundred are open at any time.
            let events_for_auctions = NUM_IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION / AUCTION_PROPORTION;
            let horizon = u64::try_from(timestamp(id + events_for_auctions) - ts).unwrap_or(1);
            let expires = ts + i64::try_from(1 + rng.below((horizon * 2).max(1))).unwrap_or(0);
            field(out, true, "id");
            int(out, auction);
            // The reference pads to the strings' lengths plus 8 per number.
            let mut size = 8 + 5 * 8;
            size += text_field(out, "itemName", |o| random_string(&mut rng, 20, b' ', o));
            size += text_field(out, "description", |o| random_string(&mut rng, 100, b' ', o));
            field(out, false, "initialBid");
            int(out, initial_bid);
            field(out, false, "reserve");
            int(out, initial_bid + price(&mut rng));
            field(out, false, "dateTime");
            int(out, ts);
            field(out, false, "expires");
            int(out, expires);
            field(out, false, "seller");
            int(out, seller);
            field(out, false, "category");
            int(out, category);
            text_field(out, "extra", |o| extra(&mut rng, size, AVG_AUCTION_BYTES, o));
        }
        Kind::Bid => {
            let (auction, bidder) = bid_parties(id, &mut rng);
            let price = price(&mut rng);
            field(out, true, "auction");
            int(out, auction);
            field(out, false, "bidder");
            int(out, bidder);
            field(out, false, "price");
            int(out, price);
            if rng.below(2) > 0 {
                let i = rng.index(HOT_CHANNELS.len());
                text_field(out, "channel", |o| o.extend_from_slice(HOT_CHANNELS[i].as_bytes()));
                text_field(out, "url", |o| url(CHANNELS + i as u64, o));
            } else {
                let c = rng.below(CHANNELS);
                text_field(out, "channel", |o| {
                    o.extend_from_slice(b"channel-");
                    int(o, c);
                });
                text_field(out, "url", |o| url(c, o));
            }
            field(out, false, "dateTime");
            int(out, ts);
            text_field(out, "extra", |o| extra(&mut rng, 32, AVG_BID_BYTES, o));
        }
    }
    out.push(b'}');
}

/// The text of key column `column` of the `k`-th event of `kind` — the
/// same value [`write_event`] writes — for partitioning by key.
pub fn event_key(kind: Kind, column: &str, k: u64, out: &mut Vec<u8>) -> bool {
    out.clear();
    let id = event_id(kind, k);
    let mut rng = Rng::for_event(id);
    let v = match (kind, column) {
        (Kind::Person, "id") => last_person(id) + FIRST_PERSON_ID,
        (Kind::Auction, "id") => last_auction(id) + FIRST_AUCTION_ID,
        (Kind::Auction, "seller") => auction_parties(id, &mut rng).0,
        (Kind::Auction, "category") => auction_parties(id, &mut rng).1,
        (Kind::Bid, "auction") => bid_parties(id, &mut rng).0,
        (Kind::Bid, "bidder") => bid_parties(id, &mut rng).1,
        // Keys a topic is partitioned by are ids; other fields are not
        // offered (the source then spreads records round-robin).
        _ => return false,
    };
    int(out, v);
    true
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use serde_json::Value;

    use super::*;

    /// Several draws from one generator word are still uniform: every
    /// letter about as often as any other over 260,000 draws, one by one
    /// or two at a time, and padding is as long as asked.
    #[test]
    fn draws_of_letters_are_uniform() {
        let mut rng = Rng::for_event(42);
        let mut draws = Draws::default();
        let mut counts = [0u32; 26];
        for _ in 0..260_000 {
            counts[usize::from(draws.below(&mut rng, 26))] += 1;
        }
        assert!(counts.iter().all(|&c| (9_400..=10_600).contains(&c)), "{counts:?}");
        let mut text = Vec::new();
        for n in [0, 1, 2, 7, 8, 9, 259_973] {
            text.clear();
            letters(&mut rng, n, &mut text);
            assert_eq!(text.len(), n);
        }
        let mut counts = [0u32; 26];
        text.iter().for_each(|b| counts[usize::from(b - b'a')] += 1);
        assert!(counts.iter().all(|&c| (9_400..=10_600).contains(&c)), "{counts:?}");
    }

    fn event(kind: Kind, k: u64) -> Value {
        let mut b = Vec::new();
        write_event(kind, k, &mut b);
        serde_json::from_slice(&b).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&b)))
    }

    /// The three sources together are the interleaved stream, 1:3:46.
    #[test]
    fn kinds_interleave_one_three_forty_six() {
        let mut ids: Vec<(u64, Kind)> = Vec::new();
        for k in 0..3 {
            ids.push((event_id(Kind::Person, k), Kind::Person));
        }
        for k in 0..9 {
            ids.push((event_id(Kind::Auction, k), Kind::Auction));
        }
        for k in 0..138 {
            ids.push((event_id(Kind::Bid, k), Kind::Bid));
        }
        ids.sort_by_key(|(id, _)| *id);
        let all: Vec<u64> = ids.iter().map(|(id, _)| *id).collect();
        assert_eq!(all, (0..150).collect::<Vec<_>>());
        assert_eq!(ids[0].1, Kind::Person);
        assert_eq!(ids[1..4].iter().map(|i| i.1).collect::<Vec<_>>(), vec![Kind::Auction; 3]);
        assert_eq!(ids[50].1, Kind::Person);
        assert_eq!(timestamp(10_000), BASE_TIME + 1000, "10 000 events per second of event time");
    }

    #[test]
    fn ids_follow_the_reference() {
        assert_eq!(event(Kind::Person, 0)["id"], 1000);
        assert_eq!(event(Kind::Person, 7)["id"], 1007);
        assert_eq!(event(Kind::Auction, 0)["id"], 1000);
        assert_eq!(event(Kind::Auction, 5)["id"], 1005);
        for k in 0..2000 {
            let a = event(Kind::Auction, k);
            let people = k / 3 + 1;
            let seller = a["seller"].as_u64().unwrap() - 1000;
            assert!(seller < people + ID_LEAD, "seller {seller} of auction {k}: {people} people");
            assert!((10..15).contains(&a["category"].as_u64().unwrap()));
            assert!(a["expires"].as_i64().unwrap() > a["dateTime"].as_i64().unwrap());
            assert!(a["reserve"].as_u64().unwrap() >= a["initialBid"].as_u64().unwrap());
        }
        for k in 0..5000 {
            let b = event(Kind::Bid, k);
            let id = event_id(Kind::Bid, k);
            let auction = b["auction"].as_u64().unwrap() - 1000;
            assert!(auction <= last_auction(id) + ID_LEAD, "bid {k} for auction {auction}");
            assert!(b["bidder"].as_u64().unwrap() >= 1000);
            assert!(b["price"].as_u64().unwrap() >= 100 && b["price"].as_u64().unwrap() <= 100_000_000);
            assert_eq!(b["dateTime"].as_i64().unwrap(), timestamp(id));
        }
    }

    #[test]
    fn distributions_are_the_references() {
        let n = 20_000;
        let bids: Vec<Value> = (0..n).map(|k| event(Kind::Bid, k)).collect();
        let hot = bids.iter().filter(|b| (b["auction"].as_u64().unwrap() - 1000) % 100 == 0).count();
        // Hot auctions: one in two bids, plus the random ones that land there.
        assert!((0.48..0.56).contains(&(hot as f64 / n as f64)), "{hot}");
        let hot_bidders = bids.iter().filter(|b| (b["bidder"].as_u64().unwrap() - 1000) % 100 == 1).count();
        assert!((0.72..0.78).contains(&(hot_bidders as f64 / n as f64)), "{hot_bidders}");
        let channels: BTreeMap<String, usize> = bids.iter().fold(BTreeMap::new(), |mut m, b| {
            *m.entry(b["channel"].as_str().unwrap().to_owned()).or_default() += 1;
            m
        });
        let hot_channels: usize = HOT_CHANNELS.iter().map(|c| channels[*c]).sum();
        assert!((0.47..0.53).contains(&(hot_channels as f64 / n as f64)), "{hot_channels}");
        // A channel's URL is always the same.
        let mut url_of = BTreeMap::new();
        for b in &bids {
            let prev = url_of.insert(b["channel"].as_str().unwrap().to_owned(), b["url"].clone());
            assert!(prev.is_none_or(|p| p == b["url"]));
        }
        let sizes: usize = (0..n)
            .map(|k| {
                let mut b = Vec::new();
                write_event(Kind::Bid, k, &mut b);
                b.len()
            })
            .sum();
        let avg = sizes as f64 / n as f64;
        // JSON field names and quotes come on top of the reference's 100.
        assert!((150.0..260.0).contains(&avg), "{avg}");
        let prices: BTreeSet<u64> = bids.iter().map(|b| b["price"].as_u64().unwrap()).collect();
        assert!(prices.len() > n as usize / 2, "prices vary");
    }

    #[test]
    fn events_are_pure_functions_of_their_index() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for kind in [Kind::Person, Kind::Auction, Kind::Bid] {
            for k in [0, 1, 99, 12_345] {
                write_event(kind, k, &mut a);
                write_event(kind, k, &mut b);
                assert_eq!(a, b);
            }
        }
        let p = event(Kind::Person, 3);
        for f in ["name", "emailAddress", "creditCard", "city", "state", "extra"] {
            assert!(p[f].is_string(), "{f}: {p}");
        }
        assert_eq!(p["creditCard"].as_str().unwrap().len(), 19);
        let mut key = Vec::new();
        for (kind, column) in
            [(Kind::Bid, "auction"), (Kind::Bid, "bidder"), (Kind::Auction, "seller"), (Kind::Auction, "category")]
        {
            for k in [0, 17, 4321] {
                assert!(event_key(kind, column, k, &mut key));
                assert_eq!(
                    String::from_utf8(key.clone()).unwrap(),
                    event(kind, k)[column].to_string(),
                    "{column} of {k}"
                );
            }
        }
        assert!(!event_key(Kind::Bid, "channel", 3, &mut key), "not a key column");
        assert!(event_key(Kind::Auction, "id", 4, &mut key));
        assert_eq!(key, b"1004");
    }
}
