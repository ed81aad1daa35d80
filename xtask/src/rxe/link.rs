//! [`Link`]: the virtual Ethernet wire between the two hosts' VMs, and
//! what each host is called and addressed as on it.
//!
//! qemu's UDP socket netdev joins the guests: each qemu binds
//! `127.0.0.1:<its port>` and sends its frames to `127.0.0.1:<the other's
//! port>`. Host A is `192.168.77.1/24`, host B `192.168.77.2/24`; each guest
//! puts rxe0 on that NIC. The ports are derived from xtask's process id and
//! checked free, so two runs at once (two terminals, two worktrees) each get
//! their own wire.

use std::net::UdpSocket;

/// How many hosts a two-host run has.
pub(crate) const HOSTS: usize = 2;

/// Lowest UDP port handed out (above the usual ephemeral range's start is
/// avoided: ports here are picked, not given by the kernel).
const PORT_BASE: u16 = 20000;
/// Number of port pairs in the range `PORT_BASE..PORT_BASE + 2 * PAIRS`.
const PAIRS: u16 = 10000;
/// How many pairs are tried before giving up.
const TRIES: u16 = 64;

/// `A` or `B`, the name of host `index` in messages and output labels.
pub(crate) fn host_name(index: usize) -> char {
    (b'A' + index as u8) as char
}

/// The IPv4 address of host `index` on the link: `192.168.77.<index + 1>`.
pub(crate) fn host_ipv4(index: usize) -> String {
    format!("192.168.77.{}", index + 1)
}

/// The prefix length of the link's subnet.
pub(crate) const PREFIX_LEN: u8 = 24;

/// The MAC address of host `index`'s link NIC.
fn host_mac(index: usize) -> String {
    format!("52:54:00:77:00:{:02x}", index + 1)
}

/// The wire: one local UDP port per host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Link {
    /// `ports[i]` is where host `i`'s qemu listens.
    pub(crate) ports: [u16; HOSTS],
}

impl Link {
    /// The first pair of ports, in the order derived from `pid`, that
    /// `is_free` accepts; `None` after [`TRIES`] busy pairs.
    pub(crate) fn choose(pid: u32, is_free: impl Fn(u16) -> bool) -> Option<Link> {
        let first = (pid % u32::from(PAIRS)) as u16;
        (0..TRIES)
            .map(|k| PORT_BASE + 2 * ((first + k) % PAIRS))
            .map(|p| Link { ports: [p, p + 1] })
            .find(|l| l.ports.iter().all(|&p| is_free(p)))
    }

    /// Ports free now for this process (a bind test on 127.0.0.1; qemu
    /// binds them a moment later).
    pub(crate) fn choose_free() -> Option<Link> {
        Link::choose(std::process::id(), |p| {
            UdpSocket::bind(("127.0.0.1", p)).is_ok()
        })
    }

    /// What vng passes to qemu for host `index`: the socket netdev and a
    /// virtio-net NIC on it (given to vng as `--qemu-opts=<this>`).
    pub(crate) fn qemu_opts(&self, index: usize) -> String {
        let mine = self.ports[index];
        let peer = self.ports[HOSTS - 1 - index];
        format!(
            "-netdev socket,id=link,udp=127.0.0.1:{peer},localaddr=127.0.0.1:{mine} \
             -device virtio-net-pci,netdev=link,mac={}",
            host_mac(index)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_follow_the_pid_and_skip_busy_ones() {
        let l = Link::choose(7, |_| true).unwrap();
        assert_eq!(l.ports, [20014, 20015]);
        // Wraps inside the range.
        let l = Link::choose(u32::from(PAIRS) - 1, |_| true).unwrap();
        assert_eq!(l.ports, [39998, 39999]);
        assert_eq!(
            Link::choose(u32::from(PAIRS), |_| true).unwrap().ports,
            [20000, 20001]
        );
        // A busy port moves to the next pair.
        let l = Link::choose(7, |p| p != 20015).unwrap();
        assert_eq!(l.ports, [20016, 20017]);
        // Different processes, different wires.
        assert_ne!(Link::choose(100, |_| true), Link::choose(101, |_| true));
        assert_eq!(Link::choose(7, |_| false), None);
    }

    #[test]
    fn qemu_opts_cross_the_ports() {
        let l = Link {
            ports: [20014, 20015],
        };
        assert_eq!(
            l.qemu_opts(0),
            "-netdev socket,id=link,udp=127.0.0.1:20015,localaddr=127.0.0.1:20014 \
             -device virtio-net-pci,netdev=link,mac=52:54:00:77:00:01"
        );
        assert!(l
            .qemu_opts(1)
            .starts_with("-netdev socket,id=link,udp=127.0.0.1:20014,localaddr=127.0.0.1:20015 "));
        assert!(l.qemu_opts(1).ends_with("mac=52:54:00:77:00:02"));
        assert_eq!((host_name(0), host_name(1)), ('A', 'B'));
        assert_eq!(host_ipv4(1), "192.168.77.2");
    }

    #[test]
    fn a_free_pair_is_found_here() {
        let l = Link::choose_free().expect("two free UDP ports on 127.0.0.1");
        assert_eq!(l.ports[1], l.ports[0] + 1);
    }
}
