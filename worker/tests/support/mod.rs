//! Shared by the property tests.

use proptest::test_runner::{Config, RngSeed};

/// A property test's configuration: `cases` cases from a fixed seed, so a
/// CI run is deterministic (committed regressions run first, as always).
/// `PROPTEST_CASES` and `PROPTEST_RNG_SEED` override both, for exploration
/// at volume (`bench/fuzz.sh`).
pub fn deterministic(cases: u32) -> Config {
    let mut config = Config::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        config.rng_seed = RngSeed::Fixed(0x51_u64 << 56 | 0x00C3_5EED);
    }
    config
}
