//! Reading callgrind's output files (`callgrind.out` format, version 1):
//! the total instructions collected and every call record of the call
//! graph, which `--instructions` needs to count the provider's completion
//! polls. A pure function of the file's text, so that it is tested on
//! sample files.
//!
//! The format (valgrind's `docs/callgrind-format`): header lines
//! (`events: Ir`, `totals: N`/`summary: N`), then per function a block:
//! `ob=` (object), `fl=` (its file), `fn=`, cost lines `<position> <Ir>`;
//! `fi=`/`fe=` switch the file of the following cost lines (code inlined
//! from another file); a call is `cob=` (absent: the caller's object),
//! `cfn=`, `calls=<count> <target>`, then one cost line giving the call's
//! source position and its inclusive cost. Names may be compressed: the
//! first use is `(id) name`, later ones `(id)`; positions may be relative
//! (`+N`, `-N`, `*`) to the previous cost line's.

use std::collections::{HashMap, HashSet};

/// One call record: who called whom, from where, how often, at what
/// inclusive cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Call {
    pub(super) caller_obj: String,
    pub(super) caller_fn: String,
    /// The source file and line of the call site (after `fi=`/`fe=`: the
    /// file the inlined code came from).
    pub(super) file: String,
    pub(super) line: u64,
    pub(super) callee_obj: String,
    pub(super) callee_fn: String,
    pub(super) count: u64,
    /// Instructions executed inside the callee and its callees.
    pub(super) inclusive: u64,
}

/// What `--instructions` reads from one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Profile {
    /// The instructions collected (only inside `--toggle-collect`
    /// functions when that option was given).
    pub(super) total: u64,
    pub(super) calls: Vec<Call>,
}

/// The three name spaces of compressed names.
#[derive(Default)]
struct Names {
    objs: HashMap<String, String>,
    files: HashMap<String, String>,
    fns: HashMap<String, String>,
}

/// `(id) name` defines and returns `name`; `(id)` looks it up; a name
/// without an id is itself.
fn name(table: &mut HashMap<String, String>, value: &str) -> Result<String, String> {
    let value = value.trim();
    let Some(rest) = value.strip_prefix('(') else {
        return Ok(value.to_string());
    };
    let (id, name) = rest
        .split_once(')')
        .ok_or_else(|| format!("unterminated name id `{value}`"))?;
    let name = name.trim();
    if name.is_empty() {
        table
            .get(id)
            .cloned()
            .ok_or_else(|| format!("name id ({id}) used before it was defined"))
    } else {
        table.insert(id.to_string(), name.to_string());
        Ok(name.to_string())
    }
}

/// A position field: absolute, or relative to `last` (`+N`, `-N`, `*`).
fn position(field: &str, last: u64) -> Result<u64, String> {
    let bad = || format!("bad position `{field}`");
    if field == "*" {
        Ok(last)
    } else if let Some(d) = field.strip_prefix('+') {
        Ok(last + d.parse::<u64>().map_err(|_| bad())?)
    } else if let Some(d) = field.strip_prefix('-') {
        last.checked_sub(d.parse::<u64>().map_err(|_| bad())?)
            .ok_or_else(bad)
    } else if let Some(hex) = field.strip_prefix("0x") {
        u64::from_str_radix(hex, 16).map_err(|_| bad())
    } else {
        field.parse().map_err(|_| bad())
    }
}

/// The first event (Ir) of a cost line's costs; an absent cost is 0.
fn first_cost(fields: &mut std::str::SplitWhitespace<'_>) -> Result<u64, String> {
    match fields.next() {
        None => Ok(0),
        Some(c) => c.parse().map_err(|_| format!("bad cost `{c}`")),
    }
}

/// Parses a callgrind output file; the first event must be `Ir`.
///
/// # Errors
/// A line that does not parse, a compressed name used before its
/// definition, or a file without a total.
pub(super) fn parse(text: &str) -> Result<Profile, String> {
    let mut names = Names::default();
    let (mut obj, mut file, mut fn_file, mut func) =
        (String::new(), String::new(), String::new(), String::new());
    let mut last_line = 0u64;
    // A call record waiting for its cost line: (callee obj, callee fn, count).
    let mut pending: Option<(String, String, u64)> = None;
    let mut callee_obj: Option<String> = None;
    let mut callee_fn: Option<String> = None;
    let mut total: Option<u64> = None;
    let mut calls = Vec::new();
    for (k, raw) in text.lines().enumerate() {
        let line = raw.trim_end();
        let at = |e: String| format!("line {}: {e}", k + 1);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let first = line.as_bytes()[0];
        if first.is_ascii_digit() || matches!(first, b'+' | b'-' | b'*') {
            let mut fields = line.split_whitespace();
            let pos = position(fields.next().unwrap_or_default(), last_line).map_err(at)?;
            let cost = first_cost(&mut fields).map_err(at)?;
            last_line = pos;
            if let Some((cob, cfn, count)) = pending.take() {
                calls.push(Call {
                    caller_obj: obj.clone(),
                    caller_fn: func.clone(),
                    file: file.clone(),
                    line: pos,
                    callee_obj: cob,
                    callee_fn: cfn,
                    count,
                    inclusive: cost,
                });
            }
            continue;
        }
        let Some((key, value)) = line.split_once(['=', ':']) else {
            return Err(at(format!("not a callgrind line: `{line}`")));
        };
        match key {
            "events" if value.split_whitespace().next() != Some("Ir") => {
                return Err(at(format!("the first event is not Ir: `{value}`")));
            }
            "totals" | "summary" => {
                let v = value.split_whitespace().next().unwrap_or_default();
                let v: u64 = v.parse().map_err(|_| at(format!("bad total `{v}`")))?;
                // Several parts each have totals; `summary` is the whole.
                total = Some(if key == "summary" {
                    v
                } else {
                    total.unwrap_or(0).max(v)
                });
            }
            "ob" => obj = name(&mut names.objs, value).map_err(at)?,
            "fl" => {
                fn_file = name(&mut names.files, value).map_err(at)?;
                file = fn_file.clone();
            }
            "fi" | "fe" => file = name(&mut names.files, value).map_err(at)?,
            "fn" => {
                func = name(&mut names.fns, value).map_err(at)?;
                file = fn_file.clone();
            }
            "cob" => callee_obj = Some(name(&mut names.objs, value).map_err(at)?),
            "cfn" => callee_fn = Some(name(&mut names.fns, value).map_err(at)?),
            "cfi" | "cfl" => {
                name(&mut names.files, value).map_err(at)?;
            }
            "calls" => {
                let count = value.split_whitespace().next().unwrap_or_default();
                let count: u64 = count
                    .parse()
                    .map_err(|_| at(format!("bad call count `{count}`")))?;
                let cfn = callee_fn
                    .take()
                    .ok_or_else(|| at("calls= without cfn=".to_string()))?;
                let cob = callee_obj.take().unwrap_or_else(|| obj.clone());
                pending = Some((cob, cfn, count));
            }
            // Header and other lines bench does not need (version,
            // creator, cmd, positions, part, desc, jump, jcnd, ...).
            _ => {}
        }
    }
    let total = total.ok_or("no `totals:` or `summary:` line")?;
    Ok(Profile { total, calls })
}

impl Profile {
    /// The function a call site at `file_suffix:line` calls into another
    /// object: `(object, function)` of the most frequent such callee. Used
    /// to find the provider's poll function (reached through a function
    /// pointer, so it has no name in a stripped provider) from the line of
    /// our `ibv_poll_cq` shim.
    pub(super) fn callee_at(&self, file_suffix: &str, line: u64) -> Option<(&str, &str)> {
        self.calls
            .iter()
            .filter(|c| {
                c.line == line && c.file.ends_with(file_suffix) && c.callee_obj != c.caller_obj
            })
            .max_by_key(|c| c.count)
            .map(|c| (c.callee_obj.as_str(), c.callee_fn.as_str()))
    }

    /// Calls from one object into another function named one of `names`
    /// (any object), and their inclusive cost: `(calls, instructions)`.
    pub(super) fn calls_named(&self, names: &[&str]) -> (u64, u64) {
        self.calls
            .iter()
            .filter(|c| {
                // Versioned symbols come as `qsort@@GLIBC_2.2.5`.
                let base = c.callee_fn.split('@').next().unwrap_or_default();
                names.contains(&base) && c.caller_obj != c.callee_obj
            })
            .fold((0, 0), |(n, ir), c| (n + c.count, ir + c.inclusive))
    }

    /// Calls into any function of the objects `inside` accepts from an
    /// object it does not, and their inclusive cost: `(calls,
    /// instructions)`. What runs in those objects on behalf of the others,
    /// with whatever they call in turn (libc's locks, the doorbell's
    /// `write`), each instruction counted once.
    pub(super) fn calls_into_objects(&self, inside: impl Fn(&str) -> bool) -> (u64, u64) {
        self.calls
            .iter()
            .filter(|c| inside(&c.callee_obj) && !inside(&c.caller_obj))
            .fold((0, 0), |(n, ir), c| (n + c.count, ir + c.inclusive))
    }

    /// The inclusive cost of the functions that call `func` of `obj` from
    /// another object (a stripped program's loops around the provider's
    /// poll), each counted where it is entered from a function that is
    /// not one of them (a loop function calling another counts once).
    pub(super) fn callers_inclusive(&self, obj: &str, func: &str) -> u64 {
        let callers: HashSet<(&str, &str)> = self
            .calls
            .iter()
            .filter(|c| c.callee_obj == obj && c.callee_fn == func && c.caller_obj != obj)
            .map(|c| (c.caller_obj.as_str(), c.caller_fn.as_str()))
            .collect();
        self.calls
            .iter()
            .filter(|c| {
                callers.contains(&(c.callee_obj.as_str(), c.callee_fn.as_str()))
                    && !callers.contains(&(c.caller_obj.as_str(), c.caller_fn.as_str()))
            })
            .map(|c| c.inclusive)
            .sum()
    }

    /// Calls into `func` of `obj` from outside that object, and their
    /// inclusive cost: `(calls, instructions)`.
    pub(super) fn calls_into(&self, obj: &str, func: &str) -> (u64, u64) {
        self.calls
            .iter()
            .filter(|c| c.callee_obj == obj && c.callee_fn == func && c.caller_obj != obj)
            .fold((0, 0), |(n, ir), c| (n + c.count, ir + c.inclusive))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shaped like ours under `--toggle-collect`: compressed names, an
    /// inlined file (`fi=`), relative positions, a call into a stripped
    /// provider (named by its offset) from the poll shim's line, and one
    /// from the post shim's.
    const OURS: &str = "\
# callgrind format
version: 1
creator: callgrind-3.19.0
positions: line
events: Ir
summary: 5000

ob=(1) /work/target/release/perf
fl=(1) /work/rdma-examples/src/bin/perf/measured.rs
fn=(1) perf::measured::measured_loop
16 100
fi=(2) /work/ibverbs-sys/src/inline/post.rs
77 4
cob=(2) /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
cfn=(2) 0x0000000000004b30
calls=40 0
* 1200
+2 3
cob=(2)
cfn=(3) 0x0000000000005000
calls=10 0
-36 900
fe=(1)
cfn=(4) perf::helper
calls=1 0
20 50

ob=(2)
fl=(3) ???
fn=(2)
0x4b30 30
totals: 5000
";

    #[test]
    fn reads_totals_and_calls_with_compressed_names() {
        let p = parse(OURS).unwrap();
        assert_eq!(p.total, 5000);
        assert_eq!(p.calls.len(), 3);
        let poll = &p.calls[0];
        assert_eq!(poll.callee_fn, "0x0000000000004b30");
        assert!(poll.callee_obj.ends_with("librxe-rdmav34.so"));
        assert_eq!((poll.line, poll.count, poll.inclusive), (77, 40, 1200));
        assert!(poll.file.ends_with("inline/post.rs"));
        // `+2` from 77, then `-36` from 79: relative positions.
        assert_eq!(p.calls[1].line, 43);
        assert_eq!(p.calls[1].callee_fn, "0x0000000000005000");
        // Back in the function's own file after `fe=`, same object.
        let helper = &p.calls[2];
        assert!(helper.file.ends_with("measured.rs"));
        assert_eq!(helper.callee_obj, "/work/target/release/perf");
    }

    #[test]
    fn finds_the_provider_poll_function_and_counts_its_calls() {
        let p = parse(OURS).unwrap();
        let (obj, func) = p.callee_at("ibverbs-sys/src/inline/post.rs", 77).unwrap();
        assert_eq!(func, "0x0000000000004b30");
        assert_eq!(p.callee_at("ibverbs-sys/src/inline/post.rs", 78), None);
        assert_eq!(p.calls_into(obj, func), (40, 1200));
        assert_eq!(p.calls_into(obj, "0x0000000000009999"), (0, 0));
        assert_eq!(p.calls_named(&["perf::helper"]), (0, 0), "same object");
        assert_eq!(p.calls_named(&["0x0000000000005000", "x"]), (10, 900));
        let versioned = "events: Ir\nob=a\nfn=f\ncob=libc\ncfn=qsort@@GLIBC_2.2.5\ncalls=2 0\n0 70\ntotals: 1\n";
        assert_eq!(parse(versioned).unwrap().calls_named(&["qsort"]), (2, 70));
    }

    /// Shaped like a stripped perftest: no compression, every function a
    /// `0x` offset, two call sites into the same provider function, and a
    /// call inside the provider that is not counted.
    #[test]
    fn counts_calls_from_every_site_but_not_from_inside() {
        let text = "\
events: Ir
fl=???
ob=/usr/bin/ib_write_bw
fn=0x0000000000012340
0 10
cob=/usr/lib/librxe.so
cfn=0x0000000000004b30
calls=3 0
0 90
fn=0x0000000000012400
cob=/usr/lib/librxe.so
cfn=0x0000000000004b30
calls=2 0
0 70
ob=/usr/lib/librxe.so
fn=0x0000000000004b60
cfn=0x0000000000004b30
calls=1 0
0 30
totals: 12345
";
        let p = parse(text).unwrap();
        assert_eq!(p.total, 12345);
        assert_eq!(
            p.calls_into("/usr/lib/librxe.so", "0x0000000000004b30"),
            (5, 160)
        );
        // Nothing calls the two polling functions here: no cost found.
        assert_eq!(
            p.callers_inclusive("/usr/lib/librxe.so", "0x0000000000004b30"),
            0
        );
    }

    /// perftest's shape: main calls its loop (which polls, and calls a
    /// helper that polls too) and its report; only the loop counts, once.
    #[test]
    fn the_loops_around_a_poll_count_inclusive_and_once() {
        let text = "\
events: Ir
ob=/usr/bin/ib_write_bw
fn=main
cfn=loop
calls=1 0
0 1000
cfn=report
calls=1 0
0 5000
fn=loop
cob=/lib/librxe.so
cfn=poll
calls=9 0
0 90
cfn=helper
calls=2 0
0 300
cfn=loop
calls=1 0
0 40
fn=helper
cob=/lib/librxe.so
cfn=poll
calls=2 0
0 20
totals: 7000
";
        let p = parse(text).unwrap();
        assert_eq!(p.callers_inclusive("/lib/librxe.so", "poll"), 1000);
        assert_eq!(p.callers_inclusive("/lib/librxe.so", "other"), 0);
    }

    /// A real file: ours' atomic_lat client, 3000 operations, under
    /// `--toggle-collect='*measured_loop*'` (callgrind 3.19, rxe VM).
    const REAL: &str = include_str!("testdata/ours-atomic_lat-n3000.client.cg");

    #[test]
    fn reads_a_real_file() {
        let p = parse(REAL).unwrap();
        assert_eq!(p.total, 1_818_477);
        let (obj, func) = p.callee_at("ibverbs-sys/src/inline/post.rs", 77).unwrap();
        assert!(obj.ends_with("libibverbs/librxe-rdmav34.so"), "{obj}");
        assert_eq!(func, "0x0000000000002ca0");
        // One poll per atomic (its completion is there at once under
        // valgrind), 63 instructions each inside the provider.
        assert_eq!(p.calls_into(obj, func), (3000, 189_000));
        // Every call record has its caller and callee resolved.
        assert!(p.calls.iter().all(|c| !c.caller_fn.is_empty()
            && !c.callee_fn.is_empty()
            && !c.callee_obj.is_empty()));
        assert!(p
            .calls
            .iter()
            .any(|c| c.caller_fn == "perf::measured::measured_loop"));
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse("events: Ir\nfn=(3)\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("(3)"), "{e}");
        assert!(parse("events: Ir\n").unwrap_err().contains("totals"));
        let e = parse("events: Dr Ir\ntotals: 1\n").unwrap_err();
        assert!(e.contains("not Ir"), "{e}");
        let e = parse("events: Ir\nfn=f\ncalls=1 0\n").unwrap_err();
        assert!(e.contains("cfn"), "{e}");
        let e = parse("events: Ir\nfn=f\n-5 1\n").unwrap_err();
        assert!(e.contains("bad position"), "{e}");
    }
}
