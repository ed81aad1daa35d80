//! Optional device features a flag asks for — on-demand paging (`-o`,
//! `-O`, `-P`), completion timestamps (`-t`), device memory (`-j`) —
//! decided from what the device reports (`ibv_query_device_ex`), never
//! from its name. A device without the feature ends the run with
//! "`<flag>`: not supported by this device (`<what was checked>`)".
//!
//! These programs implement none of the three yet (the safe API has no
//! on-demand-paging registration, no timestamped completions and no
//! device memory): on a device that has the feature the run ends with an
//! error saying so, naming the flag, rather than ignoring it.

use rdma_core::{Context, DeviceAttr, OdpCaps};

/// What a flag needs from the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// On-demand paging for an RC queue pair's sends and receives
    /// (`-o`, and `-P`, which prefetches an ODP region).
    Odp,
    /// Implicit on-demand paging: the whole address space (`-O`).
    ImplicitOdp,
    /// On-demand paging for RC sends and for receives through a shared
    /// receive queue (`ibv_srq_pingpong -o`).
    SrqOdp,
    /// Completion timestamps (`-t`).
    CompletionTimestamps,
    /// `bytes` of device memory (`-j`: the message buffer on the device).
    DeviceMemory {
        /// Bytes the program would allocate.
        bytes: u64,
    },
}

/// Checks that the device of `ctx` offers what `flag` needs.
///
/// # Errors
/// "`flag`: not supported by this device (…)" naming what was checked, or,
/// where the device has it, that this program does not implement it.
pub fn require(ctx: &Context, flag: &str, feature: Feature) -> Result<(), String> {
    let attr = ctx
        .query_device()
        .map_err(|e| format!("{flag}: cannot query {}: {e}", ctx.name()))?;
    verdict(&attr_view(&attr), ctx.name(), flag, feature)
}

/// The attributes [`verdict`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attrs {
    /// `odp_caps`.
    pub odp: OdpCaps,
    /// `completion_timestamp_mask`.
    pub timestamp_mask: u64,
    /// `hca_core_clock` (kHz).
    pub core_clock: u64,
    /// `max_dm_size`.
    pub max_dm_size: u64,
}

fn attr_view(a: &DeviceAttr) -> Attrs {
    Attrs {
        odp: a.odp_caps(),
        timestamp_mask: a.completion_timestamp_mask(),
        core_clock: a.hca_core_clock(),
        max_dm_size: a.max_dm_size(),
    }
}

/// The decision of [`require`] for a device `dev` with attributes `a`.
///
/// # Errors
/// As [`require`].
pub fn verdict(a: &Attrs, dev: &str, flag: &str, feature: Feature) -> Result<(), String> {
    let missing = |what: String| Err(format!("{flag}: not supported by this device ({what})"));
    let odp = a.odp;
    match feature {
        Feature::Odp | Feature::ImplicitOdp | Feature::SrqOdp if !odp.supported() => {
            missing(format!(
                "{dev}: odp_caps.general_caps {:#x} lacks IBV_ODP_SUPPORT",
                odp.general
            ))
        }
        Feature::Odp if !odp.rc_send_recv() => missing(format!(
            "{dev}: odp_caps.rc_odp_caps {:#x} lacks IBV_ODP_SUPPORT_SEND|RECV",
            odp.rc
        )),
        Feature::ImplicitOdp if !odp.implicit() => missing(format!(
            "{dev}: odp_caps.general_caps {:#x} lacks IBV_ODP_SUPPORT_IMPLICIT",
            odp.general
        )),
        Feature::SrqOdp if !odp.rc_send_srq_recv() => missing(format!(
            "{dev}: odp_caps.rc_odp_caps {:#x} lacks IBV_ODP_SUPPORT_SEND|SRQ_RECV",
            odp.rc
        )),
        Feature::CompletionTimestamps if a.timestamp_mask == 0 => missing(format!(
            "{dev}: completion_timestamp_mask is 0 (hca_core_clock {} kHz)",
            a.core_clock
        )),
        Feature::CompletionTimestamps if a.core_clock == 0 => missing(format!(
            "{dev}: hca_core_clock is 0, completion timestamps cannot be converted"
        )),
        Feature::DeviceMemory { bytes } if a.max_dm_size < bytes => missing(format!(
            "{dev}: max_dm_size is {} bytes, {bytes} needed",
            a.max_dm_size
        )),
        _ => Err(format!(
            "{flag}: {dev} offers {}, but this program does not implement it yet",
            describe(feature)
        )),
    }
}

fn describe(feature: Feature) -> &'static str {
    match feature {
        Feature::Odp | Feature::ImplicitOdp | Feature::SrqOdp => "on-demand paging",
        Feature::CompletionTimestamps => "completion timestamps",
        Feature::DeviceMemory { .. } => "device memory",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What rxe on Debian's 6.1 kernel reports (`ibv_devinfo -v`).
    const RXE: Attrs = Attrs {
        odp: OdpCaps {
            general: 0,
            rc: 0,
            uc: 0,
            ud: 0,
        },
        timestamp_mask: 0,
        core_clock: 0,
        max_dm_size: 0,
    };

    #[test]
    fn rxe_lacks_every_optional_feature_and_the_error_names_the_flag() {
        let e = verdict(&RXE, "rxe0", "-o/--odp", Feature::Odp).unwrap_err();
        assert_eq!(
            e,
            "-o/--odp: not supported by this device \
             (rxe0: odp_caps.general_caps 0x0 lacks IBV_ODP_SUPPORT)"
        );
        let e = verdict(&RXE, "rxe0", "-O/--iodp", Feature::ImplicitOdp).unwrap_err();
        assert!(
            e.starts_with("-O/--iodp: not supported by this device (rxe0: "),
            "{e}"
        );
        let e = verdict(&RXE, "rxe0", "-t/--ts", Feature::CompletionTimestamps).unwrap_err();
        assert!(e.contains("completion_timestamp_mask is 0"), "{e}");
        let e = verdict(
            &RXE,
            "rxe0",
            "-j/--dm",
            Feature::DeviceMemory { bytes: 4096 },
        );
        assert_eq!(
            e.unwrap_err(),
            "-j/--dm: not supported by this device (rxe0: max_dm_size is 0 bytes, 4096 needed)"
        );
    }

    #[test]
    fn each_odp_flavour_checks_its_own_bit() {
        let mut a = RXE;
        a.odp.general = 1; // IBV_ODP_SUPPORT only
        let e = verdict(&a, "d", "-o", Feature::Odp).unwrap_err();
        assert!(
            e.contains("rc_odp_caps 0x0 lacks IBV_ODP_SUPPORT_SEND|RECV"),
            "{e}"
        );
        let e = verdict(&a, "d", "-O", Feature::ImplicitOdp).unwrap_err();
        assert!(e.contains("lacks IBV_ODP_SUPPORT_IMPLICIT"), "{e}");
        a.odp.rc = 3; // send and receive
        let e = verdict(&a, "d", "-o", Feature::SrqOdp).unwrap_err();
        assert!(e.contains("lacks IBV_ODP_SUPPORT_SEND|SRQ_RECV"), "{e}");
        // Present but not implemented: said so, never taken silently.
        let e = verdict(&a, "d", "-o", Feature::Odp).unwrap_err();
        assert_eq!(
            e,
            "-o: d offers on-demand paging, but this program does not implement it yet"
        );
    }

    #[test]
    fn timestamps_need_a_mask_and_a_clock() {
        let mut a = RXE;
        a.timestamp_mask = u64::MAX;
        let e = verdict(&a, "d", "-t", Feature::CompletionTimestamps).unwrap_err();
        assert!(e.contains("hca_core_clock is 0"), "{e}");
        a.core_clock = 1_000_000;
        let e = verdict(&a, "d", "-t", Feature::CompletionTimestamps).unwrap_err();
        assert!(e.contains("does not implement it yet"), "{e}");
        a.max_dm_size = 4096;
        let e = verdict(&a, "d", "-j", Feature::DeviceMemory { bytes: 4096 }).unwrap_err();
        assert!(e.contains("does not implement it yet"), "{e}");
    }
}
