// The patterns the compile-fail tests forbid, done right: buffers are read
// after the scope, handles are polled inside it, two channels' scopes nest.
use rdma_safe::{Channel, MemoryRegion, ReceiveWorkRequest, ScopeError, SendWorkRequest, Error};

fn send_then_reuse(
    a: &mut Channel,
    b: &mut Channel,
    mr: &MemoryRegion,
    tx: &mut [u8],
    rx: &mut [u8],
) -> Result<(), Box<dyn std::error::Error>> {
    b.scope(|sb| {
        let mut scatter = [mr.scatter_element(rx)];
        let recv = sb.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
        a.scope(|sa| {
            let g = [mr.gather_element(tx)];
            let first = sa.post_send(SendWorkRequest::new(&g))?;
            let second = sa.post_send(SendWorkRequest::new(&g))?;
            second.wait()?;
            match first.poll() {
                Ok(outcome) => outcome.map(|_| ()),
                Err(still_pending) => still_pending.wait().map(|_| ()),
            }
        })
        .map_err(|e| match e {
            ScopeError::ClosureError(e) | ScopeError::AutoPollError(e) => e,
        })?;
        // Post the same scatter list again: the element can be reused.
        let again = sb.post_receive(ReceiveWorkRequest::new(&mut scatter))?;
        drop(again); // the scope waits for it
        recv.wait().map(|_| ())
    })?;
    // After the scope, the buffers are ours again.
    tx[0] = rx[0];
    a.send(SendWorkRequest::new(&[mr.gather_element(tx)]))?;
    Ok(())
}

fn forget_is_fine(channel: &mut Channel, mr: &MemoryRegion, buf: &[u8]) {
    let _ = channel.scope(|s| {
        std::mem::forget(s.post_send(SendWorkRequest::new(&[mr.gather_element(buf)]))?);
        Ok::<_, Error>(())
    });
}

// Scatter elements built before the scope can be moved into it and posted
// (their data lifetime outlives the scope), and `?` flattens the scope's
// error into a `Error`.
fn elements_built_outside(channel: &mut Channel, mr: &MemoryRegion, rx: &mut [u8]) -> Result<usize, Error> {
    let element = mr.scatter_element(rx);
    let got = channel.scope(move |s| {
        let mut scatter = [element];
        s.post_receive(ReceiveWorkRequest::new(&mut scatter))?.wait()
    })?;
    Ok(got.bytes())
}

fn main() {
    let _ = elements_built_outside;
    let _ = send_then_reuse;
    let _ = forget_is_fine;
}
