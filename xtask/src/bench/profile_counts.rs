//! One side of one `--instructions` run, as its callgrind profile counts
//! it ([`Counts`]): the tool's instructions (ours: its measured loops;
//! perftest: the functions that poll), its calls to the provider's poll
//! function, and the provider's own instructions (libibverbs and its
//! drivers, [`is_provider`]). [`super::instruction_counts`] turns two runs'
//! counts into figures per operation.
//!
//! The provider is stripped: callgrind names its functions by their offset
//! in the library. The poll function's offset is taken from ours' files:
//! the callee of the call made from the line of our `ibv_poll_cq` shim
//! (ibverbs-sys, inlined into rdma-safe with its line information).

use super::callgrind::Profile;
use super::plan::Tool;

/// The file of our `ibv_poll_cq` shim, as callgrind's paths end.
pub(super) const SHIM_FILE: &str = "ibverbs-sys/src/inline/post.rs";

/// The line of the shim's call through `ops.poll_cq` in `text` (the
/// shim's source), 1-based; comments that name it do not count.
pub(super) fn shim_line(text: &str) -> Option<u64> {
    text.lines()
        .position(|l| l.contains("ops.poll_cq") && !l.trim_start().starts_with("//"))
        .map(|i| i as u64 + 1)
}

/// What one side of one run counted.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Counts {
    /// Instructions counted (ours: in the measured loops; perftest: its
    /// polling functions, see [`counts`]).
    pub(super) ir: u64,
    /// Calls to the provider's poll function and their inclusive cost.
    pub(super) polls: u64,
    pub(super) poll_ir: u64,
    /// Inclusive instructions of every call into the provider.
    pub(super) provider: u64,
}

/// rdma-core's libraries that are a driver with an API of its own
/// (`mlx5dv_*` and the like), loaded by perftest beside libibverbs.
const DRIVER_LIBS: [&str; 5] = [
    "libibverbs.so",
    "libmlx4.so",
    "libmlx5.so",
    "libefa.so",
    "libmana.so",
];

/// Whether callgrind's object `obj` is the provider: libibverbs or one of
/// its drivers (`<dir>/libibverbs/lib<driver>-rdmav<N>.so`, or one of
/// [`DRIVER_LIBS`]).
pub(super) fn is_provider(obj: &str) -> bool {
    let base = obj.rsplit('/').next().unwrap_or(obj);
    DRIVER_LIBS.iter().any(|l| base.starts_with(l))
        || (base.starts_with("lib") && base.contains("-rdmav"))
}

/// libc's sort: perftest's latency report sorts its n samples.
const SORTS: [&str; 2] = ["qsort", "qsort_r"];

/// One side's counts from its profile; `poll` is the provider's poll
/// function (object, name) when it is known. perftest's Ir: its loops
/// (the functions that poll, inclusive) when the poll function is known,
/// else the whole program less its sorts.
pub(super) fn counts(tool: Tool, p: &Profile, poll: Option<(&str, &str)>) -> Counts {
    let ir = match (tool, poll) {
        (Tool::Ours, _) => p.total,
        // A C program (perftest; a stream row's TCP run would be rstream).
        (Tool::Perftest | Tool::Tcp, Some((obj, f))) => p.callers_inclusive(obj, f),
        (Tool::Perftest | Tool::Tcp, None) => p.total.saturating_sub(p.calls_named(&SORTS).1),
    };
    let (polls, poll_ir) = poll.map_or((0, 0), |(obj, f)| p.calls_into(obj, f));
    Counts {
        ir,
        polls,
        poll_ir,
        provider: p.calls_into_objects(is_provider).1,
    }
}

#[cfg(test)]
mod tests {
    use super::super::callgrind;
    use super::*;

    #[test]
    fn the_shim_line_is_the_call_through_ops_poll_cq() {
        let src =
            "/// doc\npub unsafe fn ibv_poll_cq() {\n    // SAFETY: sets `ops.poll_cq`.\n    \
                   unsafe { ((*(*cq).context).ops.poll_cq.unwrap_unchecked())(cq, n, wc) }\n}\n";
        assert_eq!(
            shim_line(src),
            Some(4),
            "the call, not the comment above it"
        );
        assert_eq!(shim_line("fn x() {}"), None);
        // The workspace's own shim has one.
        let real = include_str!("../../../ibverbs-sys/src/inline/post.rs");
        assert!(shim_line(real).is_some());
    }

    #[test]
    fn perftest_counts_its_polling_functions_else_all_but_its_sort() {
        let text = "events: Ir\nob=/usr/bin/ib_send_lat\nfn=0x10\ncob=/lib/libc.so.6\ncfn=qsort\ncalls=1 0\n0 5000\n\
                    cob=/lib/librxe.so\ncfn=0x4b30\ncalls=7 0\n0 280\ntotals: 100000\n";
        let p = callgrind::parse(text).unwrap();
        let poll = Some(("/lib/librxe.so", "0x4b30"));
        let pt = counts(Tool::Perftest, &p, None);
        assert_eq!(pt.ir, 95_000, "the whole program less its sort");
        let pt = counts(Tool::Perftest, &p, poll);
        assert_eq!((pt.polls, pt.poll_ir), (7, 280));
        assert_eq!(pt.ir, 0, "nothing calls its polling function 0x10");
        assert_eq!(pt.provider, 0, "/lib/librxe.so is not a provider's name");
        assert_eq!(counts(Tool::Ours, &p, poll).ir, 100_000);
        assert_eq!(counts(Tool::Ours, &p, None).polls, 0);
    }

    #[test]
    fn the_provider_is_libibverbs_and_its_drivers() {
        for obj in [
            "/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so",
            "/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so",
            "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0",
            "/usr/lib/x86_64-linux-gnu/libmlx5.so.1.24.44.0",
        ] {
            assert!(is_provider(obj), "{obj}");
        }
        for obj in [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/librdmacm.so.1.3.44.0",
            "/usr/bin/ib_write_bw",
            "/work/target/release/perf",
        ] {
            assert!(!is_provider(obj), "{obj}");
        }
    }

    /// The real file of `callgrind.rs`' tests: ours' atomic_lat client, 3000
    /// operations. Its provider calls from the measured loop: rxe's post
    /// (3000 x 208: spin locks, the doorbell's `write`, the request's
    /// `memcpy`), its poll (3000 x 63) and once `ibv_query_qp` (377, in
    /// libibverbs, from rdma-safe's first admission).
    #[test]
    fn the_provider_floor_of_a_real_file() {
        let p = callgrind::parse(include_str!("testdata/ours-atomic_lat-n3000.client.cg")).unwrap();
        let poll = p.callee_at(SHIM_FILE, 77);
        let c = counts(Tool::Ours, &p, poll);
        assert_eq!((c.polls, c.poll_ir), (3000, 189_000));
        assert_eq!(c.provider, 3000 * 208 + 3000 * 63 + 377);
        // Inside the provider, its calls into libc are not counted again.
        assert!(p
            .calls
            .iter()
            .any(|c| is_provider(&c.caller_obj) && c.callee_fn.starts_with("write")));
    }
}
