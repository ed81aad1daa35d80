//! Host-only tests: everything that needs no RDMA device (conversions,
//! names, error texts). They run with a plain `cargo test`.

use rdma_core::sys;
use rdma_core::{
    AccessFlags, AddressVector, Error, Gid, Mtu, PortState, WcOpcode, WcStatus, WorkCompletion,
};
use std::ffi::CStr;
use std::net::IpAddr;

/// Every status the headers define: `IBV_WC_SUCCESS` (0) to
/// `IBV_WC_TM_RNDV_INCOMPLETE` (23).
fn all_statuses() -> impl Iterator<Item = sys::ibv_wc_status> {
    (0..=sys::ibv_wc_status::IBV_WC_TM_RNDV_INCOMPLETE.0).map(sys::ibv_wc_status)
}

#[test]
fn wc_status_round_trips_and_is_named() {
    let mut names = std::collections::HashSet::new();
    for raw in all_statuses() {
        let status = WcStatus::from_raw(raw);
        assert!(
            !matches!(status, WcStatus::Unknown(_)),
            "status {} unknown",
            raw.0
        );
        assert_eq!(status.to_raw(), raw);
        assert!(status.name().starts_with("IBV_WC_"), "{status:?}");
        assert!(
            names.insert(status.name()),
            "duplicate name {}",
            status.name()
        );
        assert!(!status.hint().is_empty());
        let shown = status.to_string();
        assert!(shown.contains(status.name()) && shown.contains(status.description()));
    }
    let unknown = WcStatus::from_raw(sys::ibv_wc_status(999));
    assert_eq!(unknown, WcStatus::Unknown(999));
    assert_eq!(unknown.to_raw().0, 999);
    assert_eq!(unknown.to_string(), "IBV_WC_<999>");
}

#[test]
fn wc_status_descriptions_are_libibverbs_own() {
    for raw in all_statuses() {
        // SAFETY: `ibv_wc_status_str` returns a static string for any value.
        let c = unsafe { CStr::from_ptr(sys::ibv_wc_status_str(raw)) };
        assert_eq!(
            WcStatus::from_raw(raw).description(),
            c.to_str().unwrap(),
            "status {}",
            raw.0
        );
    }
}

#[test]
fn wc_status_names_match_the_c_enumerators() {
    use sys::ibv_wc_status as S;
    for (raw, name) in [
        (S::IBV_WC_SUCCESS, "IBV_WC_SUCCESS"),
        (S::IBV_WC_LOC_PROT_ERR, "IBV_WC_LOC_PROT_ERR"),
        (S::IBV_WC_WR_FLUSH_ERR, "IBV_WC_WR_FLUSH_ERR"),
        (S::IBV_WC_REM_ACCESS_ERR, "IBV_WC_REM_ACCESS_ERR"),
        (S::IBV_WC_RETRY_EXC_ERR, "IBV_WC_RETRY_EXC_ERR"),
        (S::IBV_WC_RNR_RETRY_EXC_ERR, "IBV_WC_RNR_RETRY_EXC_ERR"),
    ] {
        assert_eq!(WcStatus::from_raw(raw).name(), name);
    }
    assert_eq!(
        WcStatus::from_raw(S::IBV_WC_REM_ACCESS_ERR),
        WcStatus::RemoteAccessError
    );
}

#[test]
fn wc_opcodes_convert() {
    use sys::ibv_wc_opcode as O;
    for (raw, op) in [
        (O::IBV_WC_SEND, WcOpcode::Send),
        (O::IBV_WC_RDMA_WRITE, WcOpcode::RdmaWrite),
        (O::IBV_WC_RDMA_READ, WcOpcode::RdmaRead),
        (O::IBV_WC_COMP_SWAP, WcOpcode::CompareSwap),
        (O::IBV_WC_FETCH_ADD, WcOpcode::FetchAdd),
        (O::IBV_WC_BIND_MW, WcOpcode::BindMw),
        (O::IBV_WC_LOCAL_INV, WcOpcode::LocalInvalidate),
        (O::IBV_WC_TSO, WcOpcode::Tso),
        (O::IBV_WC_RECV, WcOpcode::Recv),
        (O::IBV_WC_RECV_RDMA_WITH_IMM, WcOpcode::RecvRdmaWithImm),
    ] {
        assert_eq!(WcOpcode::from_raw(raw), op);
    }
    assert_eq!(
        WcOpcode::from_raw(sys::ibv_wc_opcode(12345)),
        WcOpcode::Unknown(12345)
    );
}

#[test]
fn a_default_work_completion_is_an_empty_success() {
    let wc = WorkCompletion::default();
    assert!(wc.is_success());
    assert!(wc.result().is_ok());
    assert_eq!(wc.imm_data(), None);
    assert!(!wc.has_grh());
    assert_eq!(
        std::mem::size_of::<WorkCompletion>(),
        std::mem::size_of::<sys::ibv_wc>()
    );
}

#[test]
fn work_completion_errors_name_the_status_and_hint() {
    let err = Error::WorkCompletion {
        wr_id: 0x2a,
        status: WcStatus::RemoteAccessError,
        vendor_err: 0x81,
    };
    let text = err.to_string();
    for part in [
        "0x2a",
        "IBV_WC_REM_ACCESS_ERR",
        "remote access error",
        WcStatus::RemoteAccessError.hint(),
        "0x81",
    ] {
        assert!(text.contains(part), "{text:?} lacks {part:?}");
    }
    assert_eq!(err.wc_status(), Some(WcStatus::RemoteAccessError));
    assert_eq!(err.errno(), None);
    assert_eq!(err.failed_verb(), None);
}

#[test]
fn verb_errors_name_the_verb_and_the_errno() {
    let err = Error::verb("ibv_modify_qp", libc::EINVAL);
    let text = err.to_string();
    let errno_text = std::io::Error::from_raw_os_error(libc::EINVAL).to_string();
    assert!(text.starts_with("ibv_modify_qp failed: "), "{text}");
    assert!(text.contains(&errno_text), "{text}");
    assert_eq!(err.errno(), Some(libc::EINVAL));
    assert_eq!(err.failed_verb(), Some("ibv_modify_qp"));
    assert_eq!(err.wc_status(), None);
    // The errno is the error's source, for error-reporting chains.
    let source = std::error::Error::source(&err).expect("source");
    assert_eq!(source.to_string(), errno_text);
}

#[test]
fn device_errors_explain_themselves() {
    let err = Error::DeviceNotFound {
        name: "mlx5_9".into(),
        available: vec!["rxe0".into(), "siw0".into()],
    };
    let text = err.to_string();
    assert!(
        text.contains("mlx5_9") && text.contains("rxe0") && text.contains("siw0"),
        "{text}"
    );
    assert!(Error::NoDevice.to_string().contains("rdma link add"));
}

#[test]
fn mtu_conversions() {
    use sys::ibv_mtu as M;
    let all = [
        (M::IBV_MTU_256, Mtu::Mtu256, 256),
        (M::IBV_MTU_512, Mtu::Mtu512, 512),
        (M::IBV_MTU_1024, Mtu::Mtu1024, 1024),
        (M::IBV_MTU_2048, Mtu::Mtu2048, 2048),
        (M::IBV_MTU_4096, Mtu::Mtu4096, 4096),
    ];
    for (raw, mtu, bytes) in all {
        assert_eq!(Mtu::from_raw(raw), Some(mtu));
        assert_eq!(mtu.to_raw(), raw);
        assert_eq!(mtu.bytes(), bytes);
        assert_eq!(Mtu::from_bytes(bytes), Some(mtu));
    }
    assert_eq!(Mtu::from_raw(sys::ibv_mtu(0)), None);
    assert_eq!(Mtu::from_raw(sys::ibv_mtu(6)), None);
    assert_eq!(Mtu::from_bytes(1500), None);
    assert!(Mtu::Mtu256 < Mtu::Mtu1024 && Mtu::Mtu1024 < Mtu::Mtu4096);
    assert_eq!(Mtu::Mtu4096.min(Mtu::Mtu1024), Mtu::Mtu1024);
}

#[test]
fn access_flags_are_the_verbs_values() {
    use sys::ibv_access_flags as A;
    for (flag, raw) in [
        (AccessFlags::LOCAL_WRITE, A::IBV_ACCESS_LOCAL_WRITE),
        (AccessFlags::REMOTE_WRITE, A::IBV_ACCESS_REMOTE_WRITE),
        (AccessFlags::REMOTE_READ, A::IBV_ACCESS_REMOTE_READ),
        (AccessFlags::REMOTE_ATOMIC, A::IBV_ACCESS_REMOTE_ATOMIC),
        (AccessFlags::MW_BIND, A::IBV_ACCESS_MW_BIND),
        (AccessFlags::ZERO_BASED, A::IBV_ACCESS_ZERO_BASED),
        (AccessFlags::ON_DEMAND, A::IBV_ACCESS_ON_DEMAND),
        (AccessFlags::HUGETLB, A::IBV_ACCESS_HUGETLB),
        (
            AccessFlags::RELAXED_ORDERING,
            A::IBV_ACCESS_RELAXED_ORDERING,
        ),
    ] {
        assert_eq!(flag.bits(), raw.0, "{flag:?}");
    }
    // The numbers of the verbs ABI itself.
    assert_eq!(AccessFlags::LOCAL_WRITE.bits(), 1);
    assert_eq!(AccessFlags::REMOTE_WRITE.bits(), 2);
    assert_eq!(AccessFlags::REMOTE_READ.bits(), 4);
    assert_eq!(AccessFlags::REMOTE_ATOMIC.bits(), 8);
    // Relaxed ordering is an optional-range bit: the reg_mr shim must route
    // it through ibv_reg_mr_iova2.
    assert_ne!(
        AccessFlags::RELAXED_ORDERING.bits() & sys::IBV_ACCESS_OPTIONAL_RANGE,
        0
    );
    assert_eq!(
        AccessFlags::all().bits()
            & !AccessFlags::RELAXED_ORDERING.bits()
            & sys::IBV_ACCESS_OPTIONAL_RANGE,
        0
    );

    assert!(!AccessFlags::LOCAL_WRITE.grants_remote_access());
    assert!(!(AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND).grants_remote_access());
    for remote in [
        AccessFlags::REMOTE_WRITE,
        AccessFlags::REMOTE_READ,
        AccessFlags::REMOTE_ATOMIC,
    ] {
        assert!((AccessFlags::LOCAL_WRITE | remote).grants_remote_access());
    }
}

#[test]
fn port_state_names_are_ibv_devinfos() {
    assert_eq!(PortState::Active.name(), "PORT_ACTIVE");
    assert_eq!(PortState::Down.name(), "PORT_DOWN");
    for (state, raw) in [
        (PortState::Down, sys::ibv_port_state::IBV_PORT_DOWN),
        (PortState::Init, sys::ibv_port_state::IBV_PORT_INIT),
        (PortState::Armed, sys::ibv_port_state::IBV_PORT_ARMED),
        (PortState::Active, sys::ibv_port_state::IBV_PORT_ACTIVE),
    ] {
        // SAFETY: `ibv_port_state_str` returns a static string for any value.
        let c = unsafe { CStr::from_ptr(sys::ibv_port_state_str(raw)) };
        // libibverbs says "active", ibv_devinfo prints "PORT_ACTIVE".
        let c = c.to_str().unwrap().to_uppercase();
        assert_eq!(format!("PORT_{c}"), state.name());
    }
}

#[test]
fn global_address_vector_fills_the_grh() {
    let gid = Gid::from("10.0.2.15".parse::<IpAddr>().unwrap());
    let av = AddressVector::global(1, gid, 3);
    let raw = av.to_raw();
    assert_eq!(raw.is_global, 1);
    assert_eq!(raw.port_num, 1);
    assert_eq!(raw.dlid, 0);
    assert_eq!(raw.grh.sgid_index, 3);
    assert!(
        raw.grh.hop_limit > 1,
        "a hop limit of 0/1 drops routed RoCE v2"
    );
    // SAFETY: every bit pattern of the union is a valid byte array.
    assert_eq!(unsafe { raw.grh.dgid.raw }, *gid.as_bytes());

    let local = AddressVector::local(2, 0x17).to_raw();
    assert_eq!((local.is_global, local.dlid, local.port_num), (0, 0x17, 2));
}

#[test]
fn gids_parse_and_print() {
    let gid: Gid = "fe80::5054:ff:fe12:3456".parse().unwrap();
    assert!(!gid.is_ipv4_mapped());
    assert_eq!(gid.to_string(), "fe80:0000:0000:0000:5054:00ff:fe12:3456");
    assert_eq!(gid.to_string().parse::<Gid>().unwrap(), gid);
    assert_eq!(sys::ibv_gid::from(gid).into_gid(), gid);
    assert!(Gid::default().is_zero());
    assert_eq!(format!("{gid:?}"), format!("Gid({gid})"));
}

/// `From<sys::ibv_gid> for Gid`, spelled as a method for the test above.
trait IntoGid {
    fn into_gid(self) -> Gid;
}
impl IntoGid for sys::ibv_gid {
    fn into_gid(self) -> Gid {
        Gid::from(self)
    }
}
