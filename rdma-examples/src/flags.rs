//! The flags the example programs share, defined once: each program
//! `#[command(flatten)]`s the groups it takes, so a flag has one spelling,
//! one range check and one help line everywhere.
//!
//! * [`DeviceFlags`] — `-d/--ib-dev` and `-i/--ib-port`, as every rdma-core
//!   and perftest program spells them.
//! * [`GidIdx`] — `-g/--gid-idx`, the GID index of rdma-core's
//!   `ibv_*_pingpong`; [`GidIndex`] — `-x/--gid-index`, perftest's.
//! * [`Timeout`] — `--timeout`, this workspace's bound on every wait.
//! * [`PingpongFlags`] — what `ibv_rc_pingpong`, `ibv_ud_pingpong` and
//!   `ibv_srq_pingpong` all take (`-p -d -i -r -n -l -e -g -c`, the server
//!   to connect to), with the C programs' names, defaults and help text.
//!   Each program adds its own (`-s` has different defaults, `-m`, `-q`,
//!   `-o`, …).

use crate::cli;
use crate::limit::Limit;
use std::time::Duration;

/// `-i/--ib-port`: a device port, 1 to 255.
pub const IB_PORT: Limit = Limit::new("-i/--ib-port", 1, 255);
/// `-p/--port`: a TCP port.
pub const TCP_PORT: Limit = Limit::new("-p/--port", 1, 65535);
/// `-g/--gid-idx` and `-x/--gid-index`: a GID table index.
pub const GID_IDX: Limit = Limit::new("-g/--gid-idx", 0, 255);
/// `-x/--gid-index`.
pub const GID_INDEX: Limit = Limit::new("-x/--gid-index", 0, 255);

/// `-d/--ib-dev` and `-i/--ib-port`: which device, and which of its ports.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct DeviceFlags {
    #[arg(
        help = "use IB device <dev> (default first device found)",
        short = 'd',
        long = "ib-dev",
        value_name = "dev"
    )]
    /// The device name (`None`: the first device).
    pub ib_dev: Option<String>,
    #[arg(help = "use port <port> of IB device (default 1)", short = 'i', long = "ib-port",
          value_name = "port", hide_default_value = true, default_value = "1",
          value_parser = cli::number::<u8>(IB_PORT))]
    /// The device port.
    pub ib_port: u8,
}

/// `-g/--gid-idx`: the local GID index of rdma-core's pingpong programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct GidIdx {
    /// local port gid index (default: the port's RoCE v2 GID on RoCE)
    #[arg(short = 'g', long = "gid-idx", value_name = "gid index",
          value_parser = cli::number::<u32>(GID_IDX))]
    pub gid_idx: Option<u32>,
}

/// `-x/--gid-index`: the local GID index, as perftest spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct GidIndex {
    /// local GID index (default: the port's RoCE v2 IPv4 GID)
    #[arg(short = 'x', long = "gid-index", alias = "gid-idx", value_name = "index",
          value_parser = cli::number::<u32>(GID_INDEX))]
    pub gid_index: Option<u32>,
}

/// `--timeout <seconds>`: the bound on every wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct Timeout {
    #[arg(long = "timeout", value_name = "seconds", hide_default_value = true,
          default_value = "30", value_parser = cli::timeout, help = cli::TIMEOUT_HELP)]
    /// The bound.
    pub timeout: Duration,
}

/// The flags `ibv_rc_pingpong`, `ibv_ud_pingpong` and `ibv_srq_pingpong`
/// share, with their long names and defaults.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct PingpongFlags {
    #[arg(help = "listen on/connect to port <port> (default 18515)", short = 'p', long = "port",
          value_name = "port", hide_default_value = true, default_value = "18515",
          value_parser = cli::number::<u16>(TCP_PORT))]
    /// The TCP port of the address exchange.
    pub port: u16,
    /// `-d`, `-i`.
    #[command(flatten)]
    pub device: DeviceFlags,
    /// number of receives to post at a time (default 500)
    #[arg(short = 'r', long = "rx-depth", value_name = "dep", hide_default_value = true,
          default_value = "500",
          value_parser = cli::number::<u32>(Limit::new("-r/--rx-depth", 1, 1 << 20)))]
    pub rx_depth: u32,
    /// number of exchanges (default 1000)
    #[arg(short = 'n', long = "iters", value_name = "iters", hide_default_value = true,
          default_value = "1000",
          value_parser = cli::number::<usize>(Limit::new("-n/--iters", 1, u32::MAX as u64)))]
    pub iters: usize,
    /// service level value (default 0)
    #[arg(short = 'l', long = "sl", value_name = "sl", hide_default_value = true,
          default_value = "0", value_parser = cli::number::<u8>(Limit::new("-l/--sl", 0, 15)))]
    pub sl: u8,
    /// sleep on CQ events (default poll)
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// `-g`.
    #[command(flatten)]
    pub gid: GidIdx,
    /// validate received buffer
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// `--timeout`.
    #[command(flatten)]
    pub timeout: Timeout,
    /// the server to connect to (none: be the server)
    #[arg(value_name = "host")]
    pub server: Option<String>,
}

impl PingpongFlags {
    /// The device name, if `-d` was given.
    pub fn ib_dev(&self) -> Option<&str> {
        self.device.ib_dev.as_deref()
    }
    /// The device port (`-i`).
    pub fn ib_port(&self) -> u8 {
        self.device.ib_port
    }
    /// The GID index, if `-g` was given.
    pub fn gid_idx(&self) -> Option<u32> {
        self.gid.gid_idx
    }
    /// The bound on every wait (`--timeout`).
    pub fn timeout(&self) -> Duration {
        self.timeout.timeout
    }
    /// Whether this side is the client (a server was named).
    pub fn is_client(&self) -> bool {
        self.server.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Pingpong {
        #[command(flatten)]
        flags: PingpongFlags,
    }

    #[derive(Debug, Parser)]
    struct Perftest {
        #[command(flatten)]
        device: DeviceFlags,
        #[command(flatten)]
        gid: GidIndex,
        #[command(flatten)]
        timeout: Timeout,
    }

    fn pingpong(args: &[&str]) -> Result<PingpongFlags, String> {
        Pingpong::try_parse_from(std::iter::once("pp").chain(args.iter().copied()))
            .map(|p| p.flags)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn pingpong_defaults_are_the_c_programs() {
        let f = pingpong(&[]).unwrap();
        assert_eq!(f.port, 18515);
        assert_eq!(f.device.ib_dev, None);
        assert_eq!(f.ib_port(), 1);
        assert_eq!((f.rx_depth, f.iters, f.sl), (500, 1000, 0));
        assert!(!f.events && !f.chk && !f.is_client());
        assert_eq!(f.gid_idx(), None);
        assert_eq!(f.timeout(), Duration::from_secs(30));
    }

    #[test]
    fn pingpong_short_and_long_flags_as_the_c_programs() {
        let short = pingpong(&[
            "-p",
            "19000",
            "-d",
            "rxe0",
            "-i",
            "2",
            "-r",
            "8",
            "-n",
            "5",
            "-l",
            "3",
            "-e",
            "-g",
            "1",
            "-c",
            "--timeout",
            "5",
            "10.0.2.15",
        ])
        .unwrap();
        let long = pingpong(&[
            "--port=19000",
            "--ib-dev=rxe0",
            "--ib-port=2",
            "--rx-depth=8",
            "--iters=5",
            "--sl=3",
            "--events",
            "--gid-idx=1",
            "--chk",
            "--timeout=5",
            "10.0.2.15",
        ])
        .unwrap();
        assert_eq!(short, long);
        assert_eq!(short.ib_dev(), Some("rxe0"));
        assert_eq!((short.ib_port(), short.rx_depth, short.iters), (2, 8, 5));
        assert_eq!((short.sl, short.gid_idx()), (3, Some(1)));
        assert!(short.events && short.chk);
        assert_eq!(short.server.as_deref(), Some("10.0.2.15"));
        assert_eq!(short.timeout(), Duration::from_secs(5));
        // Clustered short flags, as getopt takes them.
        let clustered = pingpong(&["-ec", "-g1"]).unwrap();
        assert!(clustered.events && clustered.chk);
        assert_eq!(clustered.gid_idx(), Some(1));
    }

    #[test]
    fn pingpong_values_out_of_range_name_the_flag() {
        let e = pingpong(&["-l", "16"]).unwrap_err();
        assert!(e.contains("-l/--sl: 16 is out of range (0..=15)"), "{e}");
        let e = pingpong(&["-i", "0"]).unwrap_err();
        assert!(e.contains("-i/--ib-port"), "{e}");
        let e = pingpong(&["-g", "256"]).unwrap_err();
        assert!(e.contains("-g/--gid-idx"), "{e}");
        let e = pingpong(&["-p", "70000"]).unwrap_err();
        assert!(e.contains("-p/--port"), "{e}");
        assert!(pingpong(&["-n", "0"]).is_err());
        assert!(pingpong(&["--timeout", "0"]).is_err());
    }

    #[test]
    fn perftest_spelling_takes_x_and_the_shared_device_flags() {
        let p = Perftest::try_parse_from(["perf", "-d", "rxe0", "-i", "1", "-x", "3"]).unwrap();
        assert_eq!(p.device.ib_dev.as_deref(), Some("rxe0"));
        assert_eq!(p.gid.gid_index, Some(3));
        assert_eq!(p.timeout.timeout, Duration::from_secs(30));
        let p = Perftest::try_parse_from(["perf", "--gid-idx", "2"]).unwrap();
        assert_eq!(p.gid.gid_index, Some(2), "the older long name is an alias");
        assert!(Perftest::try_parse_from(["perf", "-g", "1"]).is_err());
    }
}
