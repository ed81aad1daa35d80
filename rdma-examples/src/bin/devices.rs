//! `devices` — lists the RDMA devices of this host: what `ibv_devices` and
//! `ibv_devinfo -v` show that a user needs to pick a device, a port and a GID
//! index.
//!
//! ```text
//! devices                 every device: attributes, ports, GID tables
//! devices -l              names and node GUIDs only (like ibv_devices)
//! devices -d rxe0 -v      one device, with its limits (max_qp, max_sge, ...)
//! ```
//!
//! For each port: state, MTUs, LID, link layer, width and speed, and every
//! valid GID with its index, type (RoCE v1/v2, IB), IP form and network
//! device. On RoCE (rxe included) the RoCE v2 entry with an IPv4-mapped
//! address is the usual choice (`-g`/`-x` of the other programs).
//!
//! Uses the `rdma-core` layer directly (`DeviceList`, `Context`,
//! `query_device`, `query_port`, `gid_table`).

use clap::Parser;
use rdma_core::{Context, DeviceList, GidEntry, GidType, LinkLayer, NodeType, TransportType};
use rdma_examples::cli;
use rdma_examples::fail;
use rdma_examples::limit::Limit;
use rdma_examples::Result;
use std::process::ExitCode;

/// Lists RDMA devices, their ports, and GID tables.
#[derive(Debug, Parser)]
#[command(name = "devices")]
struct Options {
    #[arg(
        help = "show only device <dev>",
        short = 'd',
        long = "ib-dev",
        value_name = "dev"
    )]
    ib_dev: Option<String>,
    #[arg(help = "show only port <port>", short = 'i', long = "ib-port", value_name = "port",
          value_parser = cli::number::<u8>(Limit::new("-i/--ib-port", 1, 255)))]
    ib_port: Option<u8>,
    /// list device names and GUIDs only
    #[arg(short = 'l', long = "list")]
    list: bool,
    /// also show device limits
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
}

fn main() -> ExitCode {
    cli::finish("devices", run(&Options::parse()))
}

fn run(o: &Options) -> Result<()> {
    let list = DeviceList::available()?;
    if o.list {
        println!("    {:<16}\t   node GUID", "device");
        println!("    {:<16}\t----------------", "------");
        for dev in list.iter() {
            println!("    {:<16}\t{:016x}", dev.name(), dev.guid());
        }
        return Ok(());
    }
    let devices: Vec<_> = match &o.ib_dev {
        Some(name) => vec![list.find(name)?],
        None => list.iter().collect(),
    };
    for (n, dev) in devices.iter().enumerate() {
        if n > 0 {
            println!();
        }
        let ctx = dev.open()?;
        show_device(&ctx, dev.node_type(), dev.transport_type(), o.verbose)?;
        let attr = ctx.query_device()?;
        let gids = ctx.gid_table()?;
        if let Some(p) = o.ib_port.filter(|&p| p > attr.phys_port_cnt()) {
            return Err(fail(format!(
                "{} has {} port(s); there is no port {p}",
                ctx.name(),
                attr.phys_port_cnt()
            )));
        }
        for port in 1..=attr.phys_port_cnt() {
            if o.ib_port.is_some_and(|p| p != port) {
                continue;
            }
            show_port(&ctx, port, &gids)?;
        }
    }
    Ok(())
}

fn show_device(
    ctx: &Context,
    node: NodeType,
    transport: TransportType,
    verbose: bool,
) -> Result<()> {
    let a = ctx.query_device()?;
    let transport = match transport {
        TransportType::Ib => "InfiniBand (0)".to_owned(),
        TransportType::Iwarp => "iWARP (1)".to_owned(),
        TransportType::Usnic => "usNIC (2)".to_owned(),
        TransportType::UsnicUdp => "usNIC UDP (3)".to_owned(),
        other => format!("{other:?}"),
    };
    let g = a.node_guid().to_be_bytes();
    println!("hca_id:\t{}", ctx.name());
    println!("\ttransport:\t\t\t{transport}");
    println!("\tnode_type:\t\t\t{node:?}");
    println!("\tfw_ver:\t\t\t\t{}", a.fw_ver());
    println!(
        "\tnode_guid:\t\t\t{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]
    );
    println!("\tvendor_id:\t\t\t{:#06x}", a.vendor_id());
    println!("\tvendor_part_id:\t\t\t{}", a.vendor_part_id());
    println!("\thw_ver:\t\t\t\t{:#x}", a.hw_ver());
    println!("\tphys_port_cnt:\t\t\t{}", a.phys_port_cnt());
    if verbose {
        println!("\tmax_mr_size:\t\t\t{:#x}", a.max_mr_size());
        println!("\tmax_qp:\t\t\t\t{}", a.max_qp());
        println!("\tmax_qp_wr:\t\t\t{}", a.max_qp_wr());
        println!("\tmax_sge:\t\t\t{}", a.max_sge());
        println!("\tmax_cq:\t\t\t\t{}", a.max_cq());
        println!("\tmax_cqe:\t\t\t{}", a.max_cqe());
        println!("\tmax_mr:\t\t\t\t{}", a.max_mr());
        println!("\tmax_qp_rd_atom:\t\t\t{}", a.max_qp_rd_atom());
        println!("\tmax_qp_init_rd_atom:\t\t{}", a.max_qp_init_rd_atom());
        println!("\tmax_srq:\t\t\t{}", a.max_srq());
        println!("\tmax_srq_wr:\t\t\t{}", a.max_srq_wr());
    }
    Ok(())
}

fn show_port(ctx: &Context, port: u8, gids: &[GidEntry]) -> Result<()> {
    let p = ctx.query_port(port)?;
    let mtu = |m: Option<rdma_core::Mtu>| match m {
        Some(m) => format!("{} ({})", m.bytes(), m.to_raw().0),
        None => "unknown".to_owned(),
    };
    let link = match p.link_layer() {
        LinkLayer::Ethernet => "Ethernet".to_owned(),
        LinkLayer::InfiniBand | LinkLayer::Unspecified => "InfiniBand".to_owned(),
        other => format!("{other:?}"),
    };
    println!("\t\tport:\t{port}");
    println!("\t\t\tstate:\t\t\t{} ({})", p.state().name(), p.0.state.0);
    println!("\t\t\tmax_mtu:\t\t{}", mtu(p.max_mtu()));
    println!("\t\t\tactive_mtu:\t\t{}", mtu(p.active_mtu()));
    println!("\t\t\tsm_lid:\t\t\t{}", p.0.sm_lid);
    println!("\t\t\tport_lid:\t\t{}", p.lid());
    println!("\t\t\tport_lmc:\t\t{:#04x}", p.0.lmc);
    println!("\t\t\tlink_layer:\t\t{link}");
    println!("\t\t\tmax_msg_sz:\t\t{:#x}", p.max_msg_sz());
    println!("\t\t\tactive_width:\t\t{}", width(p.active_width()));
    println!("\t\t\tactive_speed:\t\t{}", speed(p.active_speed()));
    println!("\t\t\tphys_state:\t\t{}", phys_state(p.0.phys_state));
    let mut any = false;
    for e in gids.iter().filter(|e| e.port == u32::from(port)) {
        any = true;
        let kind = match e.gid_type {
            GidType::Ib => "IB".to_owned(),
            GidType::RoceV1 => "RoCE v1".to_owned(),
            GidType::RoceV2 => "RoCE v2".to_owned(),
            other => format!("{other:?}"),
        };
        let ndev = netdev(ctx.name(), port, e.index).unwrap_or_default();
        let ip = e.gid.to_ip();
        println!(
            "\t\t\tGID[{:>3}]:\t\t{}, {kind}, {ip}{}",
            e.index,
            e.gid,
            if ndev.is_empty() {
                String::new()
            } else {
                format!(", {ndev}")
            }
        );
    }
    if !any {
        println!("\t\t\tGID:\t\t\tnone valid (no IP address on the network device?)");
    }
    Ok(())
}

/// The network device a GID belongs to, from sysfs (RoCE only).
fn netdev(dev: &str, port: u8, index: u32) -> Option<String> {
    let path = format!("/sys/class/infiniband/{dev}/ports/{port}/gid_attrs/ndevs/{index}");
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn width(w: u8) -> String {
    match w {
        1 => "1X (1)".into(),
        2 => "4X (2)".into(),
        4 => "8X (4)".into(),
        8 => "12X (8)".into(),
        16 => "2X (16)".into(),
        other => format!("invalid width ({other})"),
    }
}

fn speed(s: u8) -> String {
    let gbps = match s {
        1 => "2.5 Gbps",
        2 => "5.0 Gbps",
        4 | 8 => "10.0 Gbps",
        16 => "14.0 Gbps",
        32 => "25.0 Gbps",
        64 => "50.0 Gbps",
        128 => "100.0 Gbps",
        _ => return format!("invalid speed ({s})"),
    };
    format!("{gbps} ({s})")
}

fn phys_state(s: u8) -> String {
    let name = match s {
        1 => "SLEEP",
        2 => "POLLING",
        3 => "DISABLED",
        4 => "PORT_CONFIGURATION TRAINING",
        5 => "LINK_UP",
        6 => "LINK_ERROR_RECOVERY",
        7 => "PHY TEST",
        _ => "unknown",
    };
    format!("{name} ({s})")
}
