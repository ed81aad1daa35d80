//! Guides that span the API: which part of it to use for what.

pub mod performance {
    #![doc = include_str!("../docs/performance.md")]
}

pub mod faults {
    #![doc = include_str!("../docs/faults.md")]
}
