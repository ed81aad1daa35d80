//! Finds libibverbs and librdmacm with pkg-config and generates the raw
//! bindings with bindgen into `OUT_DIR`. Never writes to the source tree.

use std::env;
use std::path::PathBuf;

/// Oldest libibverbs (pkg-config version) we support: 1.14 is rdma-core 37+,
/// the first release with every verb the shims and upper layers call
/// (`ibv_reg_dmabuf_mr`, `_ibv_query_gid_table`, `ibv_query_qp_data_in_order`).
const MIN_LIBIBVERBS: &str = "1.14";

const INSTALL_HINT: &str = "\
libibverbs development files were not found.
Install them, then build again:
  Debian/Ubuntu:       apt-get install libibverbs-dev pkg-config libclang-dev
  RHEL/Fedora/Rocky:   dnf install rdma-core-devel pkgconf-pkg-config clang-devel
  (or run `cargo xtask setup` from this workspace, which does it for you)
If libibverbs is installed in a non-standard prefix, point PKG_CONFIG_PATH at
the directory holding libibverbs.pc.";

/// Oldest librdmacm (pkg-config version) we support: 1.3 ships with the same
/// rdma-core 37+ as [`MIN_LIBIBVERBS`], with `rdma_establish` and
/// `rdma_init_qp_attr`, which the upper layers use to drive their own QPs.
const MIN_LIBRDMACM: &str = "1.3";

const RDMACM_INSTALL_HINT: &str = "\
librdmacm development files (the RDMA connection manager, <rdma/rdma_cma.h>)
were not found. Install them, then build again:
  Debian/Ubuntu:       apt-get install librdmacm-dev
  RHEL/Fedora/Rocky:   dnf install rdma-core-devel
  (or run `cargo xtask setup` from this workspace, which does it for you)
If librdmacm is installed in a non-standard prefix, point PKG_CONFIG_PATH at
the directory holding librdmacm.pc.";

/// Flag-like C enums: generated as bitflag-style newtypes (`|`, `&`, `contains`).
const FLAG_ENUMS: &[&str] = &[
    "ibv_access_flags",
    "ibv_send_flags",
    "ibv_wc_flags",
    "ibv_qp_attr_mask",
    "ibv_device_cap_flags",
    "ibv_port_cap_flags",
    "ibv_port_cap_flags2",
    "ibv_create_cq_wc_flags",
    "ibv_create_cq_attr_flags",
    "ibv_cq_init_attr_mask",
    "ibv_qp_init_attr_mask",
    "ibv_qp_create_send_ops_flags",
    "ibv_qp_create_flags",
    "ibv_qp_open_attr_mask",
    "ibv_srq_attr_mask",
    "ibv_srq_init_attr_mask",
    "ibv_raw_packet_caps",
    "ibv_odp_transport_cap_bits",
    "ibv_odp_general_caps",
    "ibv_rx_hash_fields",
    "ibv_rx_hash_function_flags",
    "ibv_wq_attr_mask",
    "ibv_wq_flags",
    "ibv_wq_init_attr_mask",
    "ibv_xrcd_init_attr_mask",
    "ibv_values_mask",
    "ibv_device_attr_ex_comp_mask",
    "ibv_parent_domain_init_attr_mask",
    "ibv_cq_attr_mask",
    "ibv_tm_cap_flags",
    "ibv_ops_flags",
    "ibv_flow_flags",
    "ibv_rereg_mr_flags",
    "ibv_read_counters_flags",
    "ibv_fork_status",
    "ibv_mw_bind_flags",
    "ibv_ah_attr_flags",
    "ib_uverbs_access_flags",
    "ibv_query_qp_data_in_order_flags",
    "ibv_query_qp_data_in_order_caps",
    "ibv_pci_atomic_op_size",
    "ibv_selectivity_level",
    "ibv_placement_type",
];

fn main() {
    for var in [
        "PKG_CONFIG_PATH",
        "PKG_CONFIG_LIBDIR",
        "PKG_CONFIG_SYSROOT_DIR",
        "LIBCLANG_PATH",
        "BINDGEN_EXTRA_CLANG_ARGS",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=build.rs");

    let lib = match pkg_config::Config::new()
        .atleast_version(MIN_LIBIBVERBS)
        .probe("libibverbs")
    {
        Ok(lib) => lib,
        Err(err) => {
            eprintln!("error: {err}\n\n{INSTALL_HINT}");
            panic!("libibverbs >= {MIN_LIBIBVERBS} not found (see the message above)");
        }
    };

    let cm = match pkg_config::Config::new()
        .atleast_version(MIN_LIBRDMACM)
        .probe("librdmacm")
    {
        Ok(cm) => cm,
        Err(err) => {
            eprintln!("error: {err}\n\n{RDMACM_INSTALL_HINT}");
            panic!("librdmacm >= {MIN_LIBRDMACM} not found (see the message above)");
        }
    };

    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .clang_args(
            lib.include_paths
                .iter()
                .chain(&cm.include_paths)
                .map(|p| format!("-I{}", p.display())),
        )
        .allowlist_function("ibv_.*")
        .allowlist_function("_ibv_.*")
        .allowlist_type("ibv_.*")
        .allowlist_type("_ibv_.*")
        .allowlist_type("verbs_.*")
        .allowlist_type("ib_uverbs_.*")
        .allowlist_var("IBV_.*")
        .allowlist_var("IB_UVERBS_.*")
        // The connection manager (<rdma/rdma_cma.h>).
        .allowlist_function("rdma_.*")
        .allowlist_type("rdma_.*")
        .allowlist_var("RDMA_.*")
        // Inline in rdma_cma.h: shimmed in `inline/cm.rs`.
        .blocklist_function("rdma_get_local_addr")
        .blocklist_function("rdma_get_peer_addr")
        // These two are macros in verbs.h over inline functions; the exported
        // symbols of the same name are the legacy ABI. The crate binds the
        // symbols privately and exports shims with the macro semantics.
        .blocklist_function("ibv_reg_mr")
        .blocklist_function("ibv_query_port")
        .blocklist_function("ibv_reg_mr_iova")
        // Non-flag C enums become `#[repr(transparent)]` newtypes with
        // associated constants: sound even when a newer provider reports a
        // value these headers do not know (a Rust `enum` would be UB).
        .default_enum_style(bindgen::EnumVariation::NewType {
            is_bitfield: false,
            is_global: false,
        })
        .derive_default(true)
        .derive_debug(true)
        .impl_debug(false)
        .derive_copy(true)
        .derive_hash(false)
        .prepend_enum_name(false)
        .size_t_is_usize(true)
        .layout_tests(true)
        .generate_comments(true)
        .use_core()
        .raw_line(
            "// Generated by bindgen from <infiniband/verbs.h> and <rdma/rdma_cma.h>; do not edit.",
        );
    for flags in FLAG_ENUMS {
        builder = builder.bitfield_enum(*flags);
    }

    let bindings =
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.generate())) {
            Ok(Ok(bindings)) => bindings,
            Ok(Err(err)) => panic!(
                "bindgen failed on <infiniband/verbs.h> or <rdma/rdma_cma.h>: {err}\n\n\
             {INSTALL_HINT}\n\n{RDMACM_INSTALL_HINT}"
            ),
            Err(_) => panic!(
                "bindgen could not run (libclang missing?).\n\
             Install libclang: apt-get install libclang-dev (Debian/Ubuntu), \
             dnf install clang-devel (RHEL family), or set LIBCLANG_PATH."
            ),
        };
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("could not write bindings.rs to OUT_DIR");
}
