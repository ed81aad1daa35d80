//! `test-rxe --smoke`: no build, just prove the device works: rxe0 is
//! listed, its port is active with a RoCE v2 GID, and perftest's
//! ib_write_bw runs over it.

use std::process::ExitCode;

use crate::rxe::{self, Plan, RunOptions};
use crate::workspace::Workspace;
use crate::{heading, Result};

/// Runs the smoke plan and prints its summary.
pub(super) fn run(ws: &Workspace, opts: &RunOptions) -> Result<ExitCode> {
    let mut plan = Plan::new();
    plan.step("ibv_devices lists rxe0", &["ibv_devices"])
        .sh_step(
            "rxe0 port 1 is PORT_ACTIVE with a RoCE v2 GID",
            "ibv_devinfo -v -d \"$RXE_DEVICE\" | grep -E 'state:|link_layer|GID\\['
             ibv_devinfo -d \"$RXE_DEVICE\" | grep -q PORT_ACTIVE &&
             ibv_devinfo -v -d \"$RXE_DEVICE\" | grep -q 'RoCE v2'",
        )
        .server_client(
            "perftest ib_write_bw over rxe0 (loopback)",
            18515,
            "ib_write_bw -d \"$RXE_DEVICE\" -x \"$RXE_GID_INDEX\" -n 2000",
            "ib_write_bw -d \"$RXE_DEVICE\" -x \"$RXE_GID_INDEX\" -n 2000 127.0.0.1",
        );
    let route = rxe::choose_route(ws, "test-rxe", opts.want)?;
    let outcome = rxe::run(ws, "test-rxe-smoke", &route, &plan, opts)?;
    heading("test-rxe --smoke summary");
    println!("route:   {route}");
    outcome.print_steps("         ");
    if let Some(why) = outcome.failure_reason() {
        println!("problem: {why}");
    }
    println!(
        "result:  {}",
        if outcome.success() { "PASS" } else { "FAIL" }
    );
    Ok(if outcome.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
