//! Safe RDMA API (being written).
