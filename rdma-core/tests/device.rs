//! Enumeration and queries on a real device: the device list, port state,
//! GID table and device capabilities.

mod common;

use common::{device_name, open_device, PORT};
use rdma_core::{Context, DeviceList, GidType, LinkLayer, NodeType, PortState, TransportType};

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn device_list_finds_the_test_device() {
    let list = DeviceList::available().expect("ibv_get_device_list");
    assert!(!list.is_empty());
    assert_eq!(list.iter().count(), list.len());
    let name = device_name().unwrap_or_else(|| list.get(0).unwrap().name());
    let dev = list.find(&name).expect("the test device is listed");
    assert_eq!(dev.name(), name);
    assert_ne!(dev.guid(), 0, "node GUID");
    // rxe (and every RoCE/IB HCA) is a channel adapter on the IB transport.
    assert_eq!(dev.node_type(), NodeType::Ca);
    assert_eq!(dev.transport_type(), TransportType::Ib);

    let debug = format!("{dev:?}");
    let guid = dev.guid().to_be_bytes();
    let guid_text = format!("{:02x}{:02x}:", guid[0], guid[1]);
    for part in [name.as_str(), &guid_text, "Ca", "Ib"] {
        assert!(debug.contains(part), "Debug {debug:?} lacks {part:?}");
    }
    assert!(format!("{list:?}").contains(&name));
    assert!(list.get(list.len()).is_none());
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn open_by_name_and_first() {
    let ctx = open_device();
    let by_name = Context::open(ctx.name()).expect("open by name");
    assert_eq!(by_name.name(), ctx.name());
    Context::open_first().expect("open the first device");
    assert!(format!("{ctx:?}").contains(ctx.name()));
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn port_one_is_active_ethernet() {
    let ctx = open_device();
    let port = ctx.query_port(PORT).expect("ibv_query_port");
    assert_eq!(port.state(), PortState::Active, "{port:?}");
    assert_eq!(port.state().name(), "PORT_ACTIVE");
    assert_eq!(port.link_layer(), LinkLayer::Ethernet, "{port:?}");
    assert!(port.needs_grh());
    assert_eq!(port.lid(), 0, "RoCE has no LIDs");
    let active = port.active_mtu().expect("active MTU");
    let max = port.max_mtu().expect("max MTU");
    assert!(active <= max, "{port:?}");
    assert!(port.gid_tbl_len() > 0);
    assert!(port.max_msg_sz() > 0);
    // Port numbers start at 1; port 0 does not exist on a CA.
    assert!(ctx.query_port(0).is_err());
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn gid_table_has_a_roce_v2_entry() {
    let ctx = open_device();
    let table = ctx.gid_table().expect("ibv_query_gid_table");
    assert!(!table.is_empty());
    assert!(
        table
            .iter()
            .all(|e| !e.gid.is_zero() && e.port == u32::from(PORT)),
        "{table:#?}"
    );
    assert!(
        table.iter().any(|e| e.gid_type == GidType::RoceV2),
        "no RoCE v2 GID: {table:#?}"
    );

    let preferred = ctx.preferred_gid(PORT).expect("preferred GID");
    assert_eq!(preferred.gid_type, GidType::RoceV2, "{preferred:?}");
    assert!(
        preferred.gid.is_ipv4_mapped(),
        "rxe over an IPv4 interface has an IPv4-mapped RoCE v2 GID: {table:#?}"
    );
    let first_v4_v2 = table
        .iter()
        .find(|e| e.gid_type == GidType::RoceV2 && e.gid.is_ipv4_mapped());
    assert_eq!(Some(&preferred), first_v4_v2);
    assert_ne!(
        preferred.ndev_ifindex, 0,
        "RoCE GIDs belong to a net device"
    );

    // The single-entry queries agree with the table.
    for entry in &table {
        assert_eq!(ctx.query_gid(PORT, entry.index).unwrap(), entry.gid);
        assert_eq!(ctx.query_gid_entry(PORT, entry.index).unwrap(), *entry);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn query_device_is_sane() {
    let ctx = open_device();
    let attr = ctx.query_device().expect("ibv_query_device_ex");
    assert!(attr.phys_port_cnt() >= 1, "{attr:?}");
    assert!(attr.max_qp() > 0, "{attr:?}");
    assert!(attr.max_qp_wr() > 0, "{attr:?}");
    assert!(attr.max_sge() >= 3, "{attr:?}");
    assert!(attr.max_cq() > 0 && attr.max_cqe() > 0, "{attr:?}");
    assert!(attr.max_mr() > 0 && attr.max_mr_size() > 0, "{attr:?}");
    assert!(attr.max_qp_init_rd_atom() > 0 && attr.max_qp_rd_atom() > 0);
    assert!(attr.max_srq() > 0 && attr.max_srq_wr() > 0, "{attr:?}");
    let dev = DeviceList::available().unwrap().find(ctx.name()).unwrap();
    assert_eq!(attr.node_guid(), dev.guid());
    assert!(format!("{attr:?}").contains("max_qp_wr"));
}
