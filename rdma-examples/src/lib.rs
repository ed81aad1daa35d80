//! Shared helpers for the example programs (being written).
