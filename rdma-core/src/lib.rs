//! rdma-core (being written).
