//! Helpers shared by the example programs of this crate.
//!
//! The programs (each one file under `src/bin/`):
//!
//! * `devices` — lists RDMA devices, their ports and GID tables
//!   (what `ibv_devices` and `ibv_devinfo -v` show).
//! * `rc_pingpong` — wire-compatible with rdma-core's `ibv_rc_pingpong`.
//! * `perf` — bandwidth and latency of RDMA write, RDMA read and send/receive
//!   in the spirit of perftest (`ib_write_bw`, `ib_read_lat`, ...), with the
//!   data checked at the end of every test.
//! * `one_sided` — libevpl's one-sided pattern: RDMA reads and writes from
//!   several local iovecs with completion callbacks.
//!
//! What is here: a small command-line parser ([`args`]), TCP helpers for the
//! out-of-band exchanges ([`net`]), the `ibv_rc_pingpong` address message
//! ([`pingpong`]), deterministic data patterns ([`pattern`]), statistics in
//! perftest's units ([`stats`]), a tiny JSON writer ([`json`]), and glue for
//! opening devices and flattening scope errors.

use rdma_safe::{Context, ProtectionDomain, ScopeError};

/// The error type of the example programs: anything, with a message.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Result with [`BoxError`].
pub type Result<T, E = BoxError> = std::result::Result<T, E>;

/// Opens the device called `name`, or the first device if `None`, and
/// allocates a protection domain on it.
///
/// # Errors
/// No such device, no device at all, or the verbs failing.
pub fn open_pd(name: Option<&str>) -> Result<ProtectionDomain> {
    let ctx = match name {
        Some(n) => Context::open(n)?,
        None => Context::open_first()?,
    };
    Ok(ProtectionDomain::new(&ctx)?)
}

/// Turns the error of [`Channel::scope`](rdma_safe::Channel::scope) into a
/// plain [`BoxError`]: the closure's own error as is, a failure found while
/// draining with a note saying so.
///
/// # Errors
/// Whatever the scope reported.
pub fn flatten_scope<T>(r: std::result::Result<T, ScopeError<BoxError>>) -> Result<T> {
    match r {
        Ok(t) => Ok(t),
        Err(ScopeError::ClosureError(e)) => Err(e),
        Err(ScopeError::AutoPollError(e)) => Err(format!("at the end of the scope: {e}").into()),
    }
}

pub mod pages {
    //! [`PageBuf`]: page-aligned, zeroed heap memory for registered buffers.
    //!
    //! perftest and rdma-core's examples register page-aligned buffers; a
    //! plain `Vec<u8>` starts wherever the allocator puts it, so a small
    //! message may straddle two pages and the device (or rxe's software path)
    //! walks both. Same alignment, same work per message.

    use std::alloc::{self, Layout};
    use std::ops::{Deref, DerefMut};
    use std::ptr::NonNull;

    /// Alignment of every buffer here (the page size of the platforms rxe
    /// runs on).
    pub const PAGE: usize = 4096;

    /// Allocates `len` zeroed bytes (at least one) aligned to [`PAGE`].
    /// Aborts (as `Vec` does) if memory is exhausted.
    pub(crate) fn alloc_pages(len: usize) -> (NonNull<u8>, Layout) {
        let layout = Layout::from_size_align(len.max(1), PAGE).expect("buffer size overflows");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        match NonNull::new(ptr) {
            Some(p) => (p, layout),
            None => alloc::handle_alloc_error(layout),
        }
    }

    /// A zeroed, page-aligned heap buffer; derefs to `[u8]`.
    #[derive(Debug)]
    pub struct PageBuf {
        ptr: NonNull<u8>,
        layout: Layout,
        len: usize,
    }

    impl PageBuf {
        /// `len` zeroed bytes starting on a page boundary.
        pub fn zeroed(len: usize) -> Self {
            let (ptr, layout) = alloc_pages(len);
            PageBuf { ptr, layout, len }
        }
    }

    impl Deref for PageBuf {
        type Target = [u8];
        fn deref(&self) -> &[u8] {
            // SAFETY: `ptr` is a live allocation of at least `len` bytes,
            // initialised (zeroed), owned by `self`.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
        }
    }

    impl DerefMut for PageBuf {
        fn deref_mut(&mut self) -> &mut [u8] {
            // SAFETY: as in `deref`, and `&mut self` makes the view exclusive.
            unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
        }
    }

    impl Drop for PageBuf {
        fn drop(&mut self) {
            // SAFETY: allocated in `zeroed` with this layout, freed once.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
        }
    }

    // SAFETY: `PageBuf` owns its allocation like a `Box<[u8]>`, which is
    // `Send` and `Sync`.
    unsafe impl Send for PageBuf {}
    // SAFETY: as above; shared access only reads through `&[u8]`.
    unsafe impl Sync for PageBuf {}

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn page_aligned_zeroed_and_writable() {
            for len in [0, 1, 64, PAGE + 1, 3 * PAGE] {
                let mut b = PageBuf::zeroed(len);
                assert_eq!(b.as_ptr() as usize % PAGE, 0, "{len} bytes");
                assert_eq!(b.len(), len);
                assert!(b.iter().all(|&x| x == 0));
                b.fill(7);
                assert!(b.iter().all(|&x| x == 7));
            }
        }
    }
}

pub mod shared {
    //! [`SharedBuffer`]: memory a peer may read and write through RDMA.

    use rdma_safe::{IbvResult, MemoryRegion, ProtectionDomain};
    use std::alloc::Layout;
    use std::ops::Range;
    use std::ptr::NonNull;
    use std::sync::atomic::{AtomicU8, Ordering};

    /// A heap buffer meant for remote access, owned through a raw pointer so
    /// that no Rust reference to it exists except when the caller creates
    /// one on purpose, at a moment the peer is known to leave it alone.
    ///
    /// While the peer may be writing, the only safe access is
    /// [`load`](Self::load): a single-byte atomic read, which is how
    /// latency tests poll for the peer's write to land.
    ///
    /// Not `Send` or `Sync` (it holds a raw pointer): one thread uses it.
    #[derive(Debug)]
    pub struct SharedBuffer {
        ptr: NonNull<u8>,
        len: usize,
        layout: Layout,
    }

    impl SharedBuffer {
        /// A zeroed buffer of `len` bytes (at least one byte is allocated).
        /// Page-aligned, like the buffers perftest exposes.
        pub fn new(len: usize) -> Self {
            let (ptr, layout) = crate::pages::alloc_pages(len);
            SharedBuffer {
                ptr,
                len: layout.size(),
                layout,
            }
        }

        /// Start of the buffer.
        pub fn as_ptr(&self) -> *mut u8 {
            self.ptr.as_ptr()
        }

        /// Length in bytes.
        pub fn len(&self) -> usize {
            self.len
        }

        /// Whether the buffer is empty (never: at least one byte).
        pub fn is_empty(&self) -> bool {
            self.len == 0
        }

        /// Registers the whole buffer for local use and remote read and write.
        ///
        /// # Safety
        /// The region must be dropped before `self` (the peer may use the
        /// rkey until then), and the peer must only access the buffer when
        /// the program's protocol allows it — see [`slice`](Self::slice).
        pub unsafe fn register(&self, pd: &ProtectionDomain) -> IbvResult<MemoryRegion> {
            // SAFETY: forwarded to the caller; the pointer and length describe
            // this live allocation.
            unsafe { MemoryRegion::register_shared_mr(pd, self.as_ptr(), self.len) }
        }

        /// Reads byte `i` atomically: sound even while the peer's RDMA write
        /// to the buffer is landing.
        ///
        /// # Panics
        /// If `i` is out of bounds.
        pub fn load(&self, i: usize) -> u8 {
            assert!(i < self.len, "index {i} out of bounds ({} bytes)", self.len);
            // Rust code makes non-atomic accesses only through `slice` /
            // `slice_mut`, whose callers promise nothing else (this load
            // included: same thread, sequenced) touches the range meanwhile.
            // SAFETY: in bounds (checked above), byte-aligned, valid for the
            // lifetime of `&self`; no concurrent non-atomic access (above).
            unsafe { AtomicU8::from_ptr(self.as_ptr().add(i)) }.load(Ordering::Acquire)
        }

        /// A shared view of `range`.
        ///
        /// # Safety
        /// While the returned slice lives, no peer may write `range` (the
        /// program's protocol must have told the peer to stop, and the peer
        /// must have confirmed its writes completed).
        ///
        /// # Panics
        /// If `range` is out of bounds.
        pub unsafe fn slice(&self, range: Range<usize>) -> &[u8] {
            assert!(range.start <= range.end && range.end <= self.len);
            // SAFETY: in bounds; the caller guarantees no concurrent writer.
            unsafe { std::slice::from_raw_parts(self.as_ptr().add(range.start), range.len()) }
        }

        /// An exclusive view of `range`.
        ///
        /// # Safety
        /// While the returned slice lives, no peer may read or write `range`.
        ///
        /// # Panics
        /// If `range` is out of bounds.
        pub unsafe fn slice_mut(&mut self, range: Range<usize>) -> &mut [u8] {
            assert!(range.start <= range.end && range.end <= self.len);
            // SAFETY: in bounds; `&mut self` excludes other Rust views; the
            // caller guarantees no concurrent access by the peer.
            unsafe { std::slice::from_raw_parts_mut(self.as_ptr().add(range.start), range.len()) }
        }
    }

    impl Drop for SharedBuffer {
        fn drop(&mut self) {
            // SAFETY: allocated by `new` with this layout, freed once, here.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
        }
    }
}

pub mod args {
    //! A small command-line parser: short (`-s 64`, `-s64`, `-ec`) and long
    //! (`--size 64`, `--size=64`) options, flags, positional arguments and
    //! `--` — enough for the programs here, with a generated usage text.

    use std::fmt;

    /// One option a program accepts.
    #[derive(Debug, Clone, Copy)]
    pub struct Opt {
        /// Short form (`-x`), if any.
        pub short: Option<char>,
        /// Long form (`--name`); also the key to look the option up by.
        pub long: &'static str,
        /// Name of the value in the usage text; `None` for a flag.
        pub value: Option<&'static str>,
        /// One line of help.
        pub help: &'static str,
    }

    impl Opt {
        /// A flag (no value).
        pub const fn flag(short: Option<char>, long: &'static str, help: &'static str) -> Self {
            Opt {
                short,
                long,
                value: None,
                help,
            }
        }
        /// An option taking a value called `value` in the usage text.
        pub const fn value(
            short: Option<char>,
            long: &'static str,
            value: &'static str,
            help: &'static str,
        ) -> Self {
            Opt {
                short,
                long,
                value: Some(value),
                help,
            }
        }
    }

    /// A command line that does not parse.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ArgError(pub String);

    impl fmt::Display for ArgError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for ArgError {}

    /// The parsed command line.
    #[derive(Debug, Clone, Default)]
    pub struct Matches {
        given: Vec<(&'static str, Option<String>)>,
        /// Arguments that are not options, in order.
        pub positionals: Vec<String>,
    }

    /// Parses `args` (without the program name) against `specs`.
    ///
    /// # Errors
    /// An unknown option, or an option missing its value.
    pub fn parse<I>(specs: &[Opt], args: I) -> Result<Matches, ArgError>
    where
        I: IntoIterator<Item = String>,
    {
        let mut m = Matches::default();
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            if arg == "--" {
                m.positionals.extend(it.by_ref());
                break;
            }
            if let Some(long) = arg.strip_prefix("--") {
                let (name, inline) = match long.split_once('=') {
                    Some((n, v)) => (n, Some(v.to_owned())),
                    None => (long, None),
                };
                let spec = specs
                    .iter()
                    .find(|s| s.long == name)
                    .ok_or_else(|| ArgError(format!("unknown option `--{name}`")))?;
                let value = match (spec.value, inline) {
                    (None, None) => None,
                    (None, Some(_)) => {
                        return Err(ArgError(format!("option `--{name}` takes no value")))
                    }
                    (Some(_), Some(v)) => Some(v),
                    (Some(_), None) => Some(
                        it.next()
                            .ok_or_else(|| ArgError(format!("option `--{name}` needs a value")))?,
                    ),
                };
                m.given.push((spec.long, value));
            } else if arg.len() > 1 && arg.starts_with('-') {
                let body = &arg[1..];
                for (pos, c) in body.char_indices() {
                    let spec = specs
                        .iter()
                        .find(|s| s.short == Some(c))
                        .ok_or_else(|| ArgError(format!("unknown option `-{c}`")))?;
                    if spec.value.is_none() {
                        m.given.push((spec.long, None));
                        continue;
                    }
                    let rest = &body[pos + c.len_utf8()..];
                    let value = if rest.is_empty() {
                        it.next()
                            .ok_or_else(|| ArgError(format!("option `-{c}` needs a value")))?
                    } else {
                        rest.to_owned()
                    };
                    m.given.push((spec.long, Some(value)));
                    break;
                }
            } else {
                m.positionals.push(arg);
            }
        }
        Ok(m)
    }

    impl Matches {
        /// Whether the option `long` was given (at least once).
        pub fn flag(&self, long: &str) -> bool {
            self.given.iter().any(|(l, _)| *l == long)
        }

        /// The last value given for `long`.
        pub fn value(&self, long: &str) -> Option<&str> {
            self.given
                .iter()
                .rev()
                .find(|(l, _)| *l == long)
                .and_then(|(_, v)| v.as_deref())
        }

        /// The last value given for `long` as an unsigned number (see
        /// [`parse_uint`]).
        ///
        /// # Errors
        /// The value is not a number.
        pub fn uint(&self, long: &str) -> Result<Option<u64>, ArgError> {
            self.value(long)
                .map(|v| {
                    parse_uint(v).ok_or_else(|| ArgError(format!("--{long}: not a number: `{v}`")))
                })
                .transpose()
        }

        /// Like [`uint`](Self::uint), checked to lie in `min..=max`, with a
        /// default.
        ///
        /// # Errors
        /// Not a number, or out of range.
        pub fn uint_in(
            &self,
            long: &str,
            default: u64,
            min: u64,
            max: u64,
        ) -> Result<u64, ArgError> {
            let v = self.uint(long)?.unwrap_or(default);
            if v < min || v > max {
                return Err(ArgError(format!(
                    "--{long}: {v} is out of range ({min}..={max})"
                )));
            }
            Ok(v)
        }
    }

    /// Parses an unsigned number: decimal, `0x` hexadecimal, or decimal with
    /// a binary suffix `K`, `M` or `G` (`64K` = 65536).
    pub fn parse_uint(s: &str) -> Option<u64> {
        let s = s.trim();
        if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            return u64::from_str_radix(hex, 16).ok();
        }
        let (digits, shift) = match s.as_bytes().last()? {
            b'k' | b'K' => (&s[..s.len() - 1], 10),
            b'm' | b'M' => (&s[..s.len() - 1], 20),
            b'g' | b'G' => (&s[..s.len() - 1], 30),
            _ => (s, 0),
        };
        let n: u64 = digits.parse().ok()?;
        n.checked_mul(1u64 << shift)
    }

    /// The usage text: `synopsis` (already formatted, may span lines), then
    /// one line per option.
    pub fn usage(synopsis: &str, specs: &[Opt]) -> String {
        let mut out = String::from(synopsis.trim_end());
        out.push_str("\n\nOptions:\n");
        let forms: Vec<String> = specs
            .iter()
            .map(|s| {
                let short = s.short.map(|c| format!("-{c}, ")).unwrap_or_default();
                match s.value {
                    Some(v) => format!("{short}--{}=<{v}>", s.long),
                    None => format!("{short}--{}", s.long),
                }
            })
            .collect();
        let width = forms.iter().map(String::len).max().unwrap_or(0);
        for (form, spec) in forms.iter().zip(specs) {
            out.push_str(&format!("  {form:<width$}  {}\n", spec.help));
        }
        out
    }
}

pub mod net {
    //! TCP helpers for the out-of-band exchanges: listening, connecting with
    //! retries (so a client may start before its server), and text lines.

    use std::io::{self, Read, Write};
    use std::net::{Ipv4Addr, Ipv6Addr, TcpListener, TcpStream, ToSocketAddrs};
    use std::time::{Duration, Instant};

    /// How long clients keep retrying a refused connection.
    pub const CONNECT_RETRY: Duration = Duration::from_secs(15);

    /// Listens on TCP `port` on every address: IPv6 and IPv4 where the
    /// system allows a dual-stack socket, else IPv4 only.
    ///
    /// # Errors
    /// The port is in use or cannot be bound.
    pub fn listen(port: u16) -> io::Result<TcpListener> {
        TcpListener::bind((Ipv6Addr::UNSPECIFIED, port))
            .or_else(|_| TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)))
    }

    /// Connects to `host:port`, trying every address it resolves to, and
    /// retrying refused connections for up to `retry_for`.
    ///
    /// # Errors
    /// The name does not resolve, or no address accepted in time.
    pub fn connect(host: &str, port: u16, retry_for: Duration) -> io::Result<TcpStream> {
        let start = Instant::now();
        loop {
            let mut last =
                io::Error::new(io::ErrorKind::NotFound, format!("{host} has no address"));
            for addr in (host, port).to_socket_addrs()? {
                match TcpStream::connect(addr) {
                    Ok(s) => {
                        s.set_nodelay(true)?;
                        return Ok(s);
                    }
                    Err(e) => last = e,
                }
            }
            let retryable = matches!(
                last.kind(),
                io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionReset
            );
            if !retryable || start.elapsed() >= retry_for {
                return Err(io::Error::new(
                    last.kind(),
                    format!("couldn't connect to {host}:{port}: {last}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Writes `line` and a newline.
    ///
    /// # Errors
    /// The connection failed.
    pub fn write_line(stream: &mut TcpStream, line: &str) -> io::Result<()> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        stream.write_all(&bytes)?;
        stream.flush()
    }

    /// Reads one line (without its newline), byte by byte so that nothing
    /// after it is consumed. Lines longer than 64 KiB are an error, as is
    /// end of stream before the newline.
    ///
    /// # Errors
    /// The connection failed or closed, or the line is not UTF-8.
    pub fn read_line(stream: &mut TcpStream) -> io::Result<String> {
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        loop {
            stream.read_exact(&mut byte).map_err(|e| {
                if e.kind() == io::ErrorKind::UnexpectedEof {
                    io::Error::new(e.kind(), "the peer closed the connection")
                } else {
                    e
                }
            })?;
            if byte[0] == b'\n' {
                break;
            }
            line.push(byte[0]);
            if line.len() > 65536 {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "line too long"));
            }
        }
        String::from_utf8(line).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Reads a line and checks that its first word is `word`; returns the
    /// rest of the line.
    ///
    /// # Errors
    /// I/O errors, or another line (`InvalidData`, with the line quoted).
    pub fn expect_line(stream: &mut TcpStream, word: &str) -> io::Result<String> {
        let line = read_line(stream)?;
        let (first, rest) = line.split_once(' ').unwrap_or((&line, ""));
        if first != word {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("expected `{word} ...` from the peer, got `{line}`"),
            ));
        }
        Ok(rest.to_owned())
    }
}

pub mod pingpong {
    //! The address message of rdma-core's `ibv_rc_pingpong` (and its
    //! siblings): `"LLLL:QQQQQQ:PPPPPP:GGGG...G"` — LID (4 hex digits), QP
    //! number (6), PSN (6), GID (32 hex digits, bytes in network order) —
    //! NUL-terminated in a fixed 52-byte buffer.

    use rdma_safe::Gid;
    use std::fmt::Write as _;

    /// Bytes of one address message on the wire (the size of the C
    /// program's buffer, `sizeof "0000:000000:000000:" + 32 hex digits`).
    pub const MSG_LEN: usize = 52;

    /// The word the client sends once it has the server's address (with its
    /// NUL: 5 bytes).
    pub const DONE: &[u8; 5] = b"done\0";

    /// One side's address (`struct pingpong_dest`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Dest {
        /// LID (0 on RoCE).
        pub lid: u16,
        /// QP number (24 bits).
        pub qpn: u32,
        /// Initial packet sequence number (24 bits).
        pub psn: u32,
        /// GID; all zero when the sender uses no GRH.
        pub gid: Gid,
    }

    impl Dest {
        /// The wire form: `%04x:%06x:%06x:` then the GID as 32 hex digits,
        /// NUL-padded to [`MSG_LEN`].
        pub fn to_wire(&self) -> [u8; MSG_LEN] {
            let mut text = format!("{:04x}:{:06x}:{:06x}:", self.lid, self.qpn, self.psn);
            for b in self.gid.as_bytes() {
                let _ = write!(text, "{b:02x}");
            }
            let mut out = [0u8; MSG_LEN];
            let n = text.len().min(MSG_LEN - 1);
            out[..n].copy_from_slice(&text.as_bytes()[..n]);
            out
        }

        /// Parses the wire form (up to the first NUL).
        ///
        /// # Errors
        /// A description of what is malformed.
        pub fn from_wire(msg: &[u8]) -> Result<Dest, String> {
            let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
            let text = std::str::from_utf8(&msg[..end])
                .map_err(|_| "address message is not text".to_owned())?;
            let mut fields = text.splitn(4, ':');
            let mut hex = |what: &str, max: u32| -> Result<u32, String> {
                let f = fields
                    .next()
                    .ok_or_else(|| format!("address message `{text}` lacks the {what}"))?;
                let v = u32::from_str_radix(f, 16)
                    .map_err(|_| format!("bad {what} `{f}` in address message `{text}`"))?;
                if v > max {
                    return Err(format!("{what} {v:#x} out of range in `{text}`"));
                }
                Ok(v)
            };
            let lid = hex("LID", 0xffff)? as u16;
            let qpn = hex("QPN", 0xff_ffff)?;
            let psn = hex("PSN", 0xff_ffff)?;
            let g = fields
                .next()
                .ok_or_else(|| format!("address message `{text}` lacks the GID"))?;
            if g.len() != 32 || !g.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("bad GID `{g}` in address message `{text}`"));
            }
            let mut gid = [0u8; 16];
            for (i, b) in gid.iter_mut().enumerate() {
                *b = u8::from_str_radix(&g[2 * i..2 * i + 2], 16).expect("hex digits");
            }
            Ok(Dest {
                lid,
                qpn,
                psn,
                gid: Gid(gid),
            })
        }

        /// The line the C program prints, e.g.
        /// `LID 0x0000, QPN 0x000011, PSN 0x2a5b3c, GID ::ffff:10.0.2.15`
        /// (GID in `inet_ntop` form).
        pub fn describe(&self) -> String {
            format!(
                "LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
                self.lid,
                self.qpn,
                self.psn,
                std::net::Ipv6Addr::from(self.gid.0)
            )
        }
    }
}

pub mod clock {
    //! Cheap timestamps for per-operation timing, as perftest takes them:
    //! the CPU's time-stamp counter on x86-64 (no system call; on a VM whose
    //! clock source is not the TSC, `Instant::now` costs microseconds and
    //! would dominate a small-message measurement), calibrated once against
    //! `Instant`. Elsewhere, `Instant` itself.

    use std::ops::Sub;
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    /// A point in time from [`Stamp::now`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    pub struct Stamp(u64);

    fn raw() -> u64 {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: RDTSC has no preconditions; it only reads the
            // time-stamp counter (always present on x86-64).
            #[allow(unused_unsafe)]
            unsafe {
                core::arch::x86_64::_rdtsc()
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            static ORIGIN: OnceLock<Instant> = OnceLock::new();
            ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
        }
    }

    /// Ticks per second, measured once (50 ms against `Instant`).
    pub fn ticks_per_sec() -> f64 {
        static RATE: OnceLock<f64> = OnceLock::new();
        *RATE.get_or_init(|| {
            if cfg!(not(target_arch = "x86_64")) {
                return 1e9;
            }
            let (i0, t0) = (Instant::now(), raw());
            std::thread::sleep(Duration::from_millis(50));
            let (i1, t1) = (Instant::now(), raw());
            (t1.wrapping_sub(t0)) as f64 / (i1 - i0).as_secs_f64()
        })
    }

    fn ticks_to_duration(ticks: u64) -> Duration {
        Duration::from_secs_f64(ticks as f64 / ticks_per_sec())
    }

    impl Stamp {
        /// The current time.
        #[inline]
        pub fn now() -> Stamp {
            Stamp(raw())
        }
        /// Time since `self`.
        pub fn elapsed(self) -> Duration {
            Stamp::now() - self
        }
        /// Raw ticks from `earlier` to `self`: no conversion, so a timed
        /// loop can keep it and convert afterwards with [`micros`] (as
        /// perftest keeps raw cycle counts).
        #[inline]
        pub fn ticks_since(self, earlier: Stamp) -> u64 {
            self.0.saturating_sub(earlier.0)
        }
    }

    /// Microseconds in `ticks` (from [`Stamp::ticks_since`]).
    pub fn micros(ticks: u64) -> f64 {
        ticks as f64 / ticks_per_sec() * 1e6
    }

    impl Sub for Stamp {
        type Output = Duration;
        fn sub(self, earlier: Stamp) -> Duration {
            ticks_to_duration(self.ticks_since(earlier))
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn agrees_with_instant() {
            let _ = ticks_per_sec();
            let (s, i) = (Stamp::now(), Instant::now());
            std::thread::sleep(Duration::from_millis(30));
            let ticks = Stamp::now().ticks_since(s);
            let (ds, di) = (s.elapsed().as_secs_f64(), i.elapsed().as_secs_f64());
            assert!(
                (micros(ticks) / 1e6 - ds).abs() < 0.001 + ds * 0.01,
                "ticks {ticks} as {} us vs stamp {ds} s",
                micros(ticks)
            );
            assert!(
                (ds - di).abs() < 0.01 + di * 0.1,
                "stamp {ds} s vs instant {di} s"
            );
        }
    }
}

pub mod pattern {
    //! Deterministic data patterns: byte `i` of pattern `seed` depends on
    //! both, without a short period, so a shifted, truncated, stale or
    //! partly written copy never passes for the real one.

    /// SplitMix64: a good 64-bit mix of `x`.
    fn mix(mut x: u64) -> u64 {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }

    fn word(seed: u64, index: u64) -> [u8; 8] {
        mix(seed.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ index).to_le_bytes()
    }

    /// Byte at logical position `pos` of pattern `seed`.
    pub fn byte_at(seed: u64, pos: u64) -> u8 {
        word(seed, pos / 8)[(pos % 8) as usize]
    }

    /// Fills `buf` with pattern `seed`, as if `buf` started at logical
    /// position `start`.
    pub fn fill(buf: &mut [u8], seed: u64, start: u64) {
        let mut cached = (u64::MAX, [0u8; 8]);
        for (pos, b) in (start..).zip(buf.iter_mut()) {
            let w = pos / 8;
            if cached.0 != w {
                cached = (w, word(seed, w));
            }
            *b = cached.1[(pos % 8) as usize];
        }
    }

    /// A difference between data and its expected pattern.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Mismatch {
        /// Offset in the checked buffer.
        pub offset: usize,
        /// The byte expected there.
        pub expected: u8,
        /// The byte found.
        pub found: u8,
        /// How many bytes differ in all.
        pub count: usize,
    }

    impl std::fmt::Display for Mismatch {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(
                f,
                "{} byte(s) differ; first at offset {}: expected {:#04x}, found {:#04x}",
                self.count, self.offset, self.expected, self.found
            )
        }
    }

    /// Checks that `buf` holds pattern `seed` from logical position `start`.
    ///
    /// # Errors
    /// The first difference and the number of differing bytes.
    pub fn check(buf: &[u8], seed: u64, start: u64) -> Result<(), Mismatch> {
        let mut first: Option<Mismatch> = None;
        let mut count = 0;
        let mut cached = (u64::MAX, [0u8; 8]);
        for (i, &b) in buf.iter().enumerate() {
            let pos = start + i as u64;
            let w = pos / 8;
            if cached.0 != w {
                cached = (w, word(seed, w));
            }
            let want = cached.1[(pos % 8) as usize];
            if b != want {
                count += 1;
                first.get_or_insert(Mismatch {
                    offset: i,
                    expected: want,
                    found: b,
                    count: 0,
                });
            }
        }
        match first {
            None => Ok(()),
            Some(m) => Err(Mismatch { count, ..m }),
        }
    }
}

pub mod stats {
    //! Statistics in perftest's units: bandwidth in MB/sec (MB = 2^20 bytes)
    //! with perftest's "peak", message rate in Mpps, and latency
    //! percentiles in microseconds.

    /// Bytes in perftest's "MB".
    pub const MB: f64 = 1_048_576.0;

    /// The sample at fraction `p` (0..=1) of `sorted` (nearest rank below, as
    /// perftest indexes `delta[(int)(n * p)]`). `NaN` when empty.
    pub fn percentile(sorted: &[f64], p: f64) -> f64 {
        if sorted.is_empty() {
            return f64::NAN;
        }
        let i = ((sorted.len() as f64 * p) as usize).min(sorted.len() - 1);
        sorted[i]
    }

    /// Latency summary (microseconds).
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub struct Latency {
        /// Samples.
        pub count: usize,
        /// Smallest.
        pub min: f64,
        /// Largest.
        pub max: f64,
        /// Median (perftest's `t_typical`).
        pub typical: f64,
        /// Mean.
        pub avg: f64,
        /// Standard deviation.
        pub stdev: f64,
        /// 99th percentile.
        pub p99: f64,
        /// 99.9th percentile.
        pub p999: f64,
    }

    impl Latency {
        /// Summarises `samples` (sorted in place). `None` when empty.
        pub fn from_samples(samples: &mut [f64]) -> Option<Latency> {
            if samples.is_empty() {
                return None;
            }
            samples.sort_by(f64::total_cmp);
            let n = samples.len() as f64;
            let avg = samples.iter().sum::<f64>() / n;
            let var = samples.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n;
            Some(Latency {
                count: samples.len(),
                min: samples[0],
                max: samples[samples.len() - 1],
                typical: percentile(samples, 0.5),
                avg,
                stdev: var.sqrt(),
                p99: percentile(samples, 0.99),
                p999: percentile(samples, 0.999),
            })
        }
    }

    /// Bandwidth summary of `iters` operations of `size` bytes.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub struct Bandwidth {
        /// Peak, MB/sec (see [`Bandwidth::from_times`]).
        pub peak_mb: f64,
        /// Average, MB/sec.
        pub avg_mb: f64,
        /// Average message rate, millions per second.
        pub mpps: f64,
    }

    impl Bandwidth {
        /// From the post and completion times (seconds since any common
        /// origin; `posted[i]` and `completed[i]` belong to operation `i`).
        ///
        /// Average: all bytes over first post to last completion. Peak, as
        /// perftest computes it: the smallest time per operation over any
        /// run `i..=j` of consecutive operations, `(completed[j] -
        /// posted[i]) / (j - i + 1)`. Runs are limited to a window that
        /// keeps the work below 5·10⁷ pairs (every run for up to 7000
        /// operations).
        pub fn from_times(size: usize, posted: &[f64], completed: &[f64]) -> Option<Bandwidth> {
            let n = posted.len().min(completed.len());
            if n == 0 {
                return None;
            }
            let total = completed[n - 1] - posted[0];
            let bytes = size as f64 * n as f64;
            let window = (50_000_000 / n).max(64).min(n);
            let mut best = f64::INFINITY;
            for (i, &start) in posted[..n].iter().enumerate() {
                let end = n.min(i + window);
                for (k, &done) in completed[i..end].iter().enumerate() {
                    let t = (done - start) / (k + 1) as f64;
                    if t > 0.0 && t < best {
                        best = t;
                    }
                }
            }
            let avg = if total > 0.0 {
                bytes / total
            } else {
                f64::INFINITY
            };
            let peak = if best.is_finite() {
                size as f64 / best
            } else {
                avg
            };
            Some(Bandwidth {
                peak_mb: peak.max(avg) / MB,
                avg_mb: avg / MB,
                mpps: if size > 0 {
                    avg / size as f64 / 1e6
                } else {
                    n as f64 / total / 1e6
                },
            })
        }
    }
}

pub mod json {
    //! A tiny JSON object writer (one flat object per line).

    use std::fmt::Write as _;

    /// Builds one flat JSON object.
    #[derive(Debug, Clone)]
    pub struct Object {
        buf: String,
    }

    impl Default for Object {
        fn default() -> Self {
            Self::new()
        }
    }

    impl Object {
        /// An empty object.
        pub fn new() -> Self {
            Object {
                buf: String::from("{"),
            }
        }

        fn key(&mut self, k: &str) {
            if self.buf.len() > 1 {
                self.buf.push(',');
            }
            push_string(&mut self.buf, k);
            self.buf.push(':');
        }

        /// Adds a string member.
        pub fn str(mut self, k: &str, v: &str) -> Self {
            self.key(k);
            push_string(&mut self.buf, v);
            self
        }

        /// Adds an integer member.
        pub fn uint(mut self, k: &str, v: u64) -> Self {
            self.key(k);
            let _ = write!(self.buf, "{v}");
            self
        }

        /// Adds a number member; non-finite numbers become `null`.
        pub fn num(mut self, k: &str, v: f64) -> Self {
            self.key(k);
            if v.is_finite() {
                let _ = write!(self.buf, "{v:.3}");
            } else {
                self.buf.push_str("null");
            }
            self
        }

        /// Adds a boolean member.
        pub fn bool(mut self, k: &str, v: bool) -> Self {
            self.key(k);
            self.buf.push_str(if v { "true" } else { "false" });
            self
        }

        /// The finished object text.
        pub fn finish(mut self) -> String {
            self.buf.push('}');
            self.buf
        }
    }

    fn push_string(out: &mut String, s: &str) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    const SPECS: &[args::Opt] = &[
        args::Opt::value(Some('s'), "size", "bytes", "message size"),
        args::Opt::flag(Some('e'), "events", "sleep on events"),
        args::Opt::flag(Some('c'), "chk", "check"),
        args::Opt::value(None, "test", "name", "test"),
    ];

    #[test]
    fn args_short_long_combined_and_positionals() {
        let m = args::parse(SPECS, strings(&["-s", "64K", "host", "-ec"])).unwrap();
        assert_eq!(m.uint("size").unwrap(), Some(65536));
        assert!(m.flag("events") && m.flag("chk"));
        assert_eq!(m.positionals, ["host"]);
        let m = args::parse(SPECS, strings(&["-s0x10", "--test=write_bw", "--", "-e"])).unwrap();
        assert_eq!(m.uint("size").unwrap(), Some(16));
        assert_eq!(m.value("test"), Some("write_bw"));
        assert!(!m.flag("events"));
        assert_eq!(m.positionals, ["-e"]);
        let m = args::parse(SPECS, strings(&["--size", "7", "--size", "9"])).unwrap();
        assert_eq!(
            m.uint_in("size", 1, 1, 8).unwrap_err().0,
            "--size: 9 is out of range (1..=8)"
        );
    }

    #[test]
    fn args_errors() {
        assert!(args::parse(SPECS, strings(&["-x"])).is_err());
        assert!(args::parse(SPECS, strings(&["--size"])).is_err());
        assert!(args::parse(SPECS, strings(&["--events=1"])).is_err());
        let m = args::parse(SPECS, strings(&["-s", "ten"])).unwrap();
        assert!(m.uint("size").is_err());
        assert_eq!(args::parse_uint("8M"), Some(8 << 20));
        assert_eq!(args::parse_uint(""), None);
        let u = args::usage("usage: x", SPECS);
        assert!(u.contains("-s, --size=<bytes>  message size"), "{u}");
    }

    #[test]
    fn pingpong_message_round_trips_in_the_c_format() {
        let d = pingpong::Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: "::ffff:10.0.2.15".parse().unwrap(),
        };
        let wire = d.to_wire();
        assert_eq!(wire.len(), 52);
        assert_eq!(
            &wire[..51],
            b"0000:000011:abcdef:00000000000000000000ffff0a00020f".as_slice()
        );
        assert_eq!(wire[51], 0);
        assert_eq!(pingpong::Dest::from_wire(&wire).unwrap(), d);
        assert_eq!(
            d.describe(),
            "LID 0x0000, QPN 0x000011, PSN 0xabcdef, GID ::ffff:10.0.2.15"
        );
        assert!(pingpong::Dest::from_wire(b"0000:000011:abcdef:00ff\0").is_err());
        assert!(pingpong::Dest::from_wire(b"zz").is_err());
        assert!(
            pingpong::Dest::from_wire(b"0000:1000000:000000:00000000000000000000000000000000")
                .is_err()
        );
    }

    #[test]
    fn patterns_depend_on_seed_and_position() {
        let mut a = vec![0u8; 100];
        pattern::fill(&mut a, 7, 3);
        assert!(pattern::check(&a, 7, 3).is_ok());
        assert_eq!(a[10], pattern::byte_at(7, 13));
        let e = pattern::check(&a, 8, 3).unwrap_err();
        assert!(e.count > 80, "{e}");
        assert!(pattern::check(&a[1..], 7, 3).is_err(), "shifted");
        a[50] ^= 1;
        let e = pattern::check(&a, 7, 3).unwrap_err();
        assert_eq!((e.offset, e.count), (50, 1));
    }

    #[test]
    fn statistics() {
        let mut s: Vec<f64> = (1..=1000).rev().map(f64::from).collect();
        let l = stats::Latency::from_samples(&mut s).unwrap();
        assert_eq!((l.min, l.max, l.typical), (1.0, 1000.0, 501.0));
        assert_eq!((l.p99, l.p999), (991.0, 1000.0));
        assert!((l.avg - 500.5).abs() < 1e-9);
        assert!(stats::Latency::from_samples(&mut []).is_none());
        // Four operations of 1 MiB, each posted at t and completed at t+1
        // seconds, one per second: 1 MB/s average; the best run is any
        // long one.
        let posted = [0.0, 1.0, 2.0, 3.0];
        let completed = [1.0, 2.0, 3.0, 4.0];
        let b = stats::Bandwidth::from_times(1 << 20, &posted, &completed).unwrap();
        assert!((b.avg_mb - 1.0).abs() < 1e-9, "{b:?}");
        assert!(b.peak_mb >= b.avg_mb);
        assert!((b.mpps - 1e-6).abs() < 1e-12);
    }

    #[test]
    fn json_objects() {
        let o = json::Object::new()
            .str("test", "write\"bw\n")
            .uint("bytes", 65536)
            .num("bw", 1.5)
            .num("nan", f64::NAN)
            .bool("verified", true)
            .finish();
        assert_eq!(
            o,
            r#"{"test":"write\"bw\n","bytes":65536,"bw":1.500,"nan":null,"verified":true}"#
        );
    }
}
