//! The extended QP API (`ibv_create_qp_ex`, `ibv_wr_*`) on a real device:
//! a QP created for sends and RDMA writes posts through [`WrBatch`]es to an
//! ordinary QP of the same device, data checked byte for byte. Where the
//! provider has no extended QPs, the tests pin the error instead (and say
//! so on stderr).

mod common;

use common::{assert_bytes_eq, pattern, poll_exactly, poll_success, recv_wr, TestDevice};
use rdma_core::{QpType, QueuePair, QueuePairEx, SendFlags, SendOps, WcOpcode};

/// An extended QP (sends and RDMA writes) and a plain one, connected to
/// each other, each with its own CQ; `None` when the provider refuses the
/// extended QP, after checking its error is a clear one.
struct ExPair {
    dev: TestDevice,
    cq_a: rdma_core::CompQueue,
    cq_b: rdma_core::CompQueue,
    a: QueuePairEx,
    b: QueuePair,
}

fn ex_pair() -> Option<ExPair> {
    let dev = TestDevice::open();
    let cq_a = dev.cq(None);
    let cq_b = dev.cq(None);
    let built = QueuePair::builder(&dev.pd, QpType::Rc, &cq_a, &cq_a)
        .build_ex(SendOps::SEND | SendOps::RDMA_WRITE);
    let a = match built {
        Ok(a) => a,
        Err(e) => {
            assert!(
                e.to_string().contains("ibv_create_qp_ex")
                    || e.to_string().contains("ibv_qp_to_qp_ex"),
                "the error names the verb: {e}"
            );
            assert!(e.errno().is_some(), "the error carries an errno: {e}");
            eprintln!("SKIPPED: this device has no extended QPs: {e}");
            return None;
        }
    };
    assert_eq!(a.send_ops(), SendOps::SEND | SendOps::RDMA_WRITE);
    let b = dev.rc_qp(&cq_b);
    dev.connect(a.qp(), &b);
    Some(ExPair {
        dev,
        cq_a,
        cq_b,
        a,
        b,
    })
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn new_post_send_api_sends_every_size() {
    let Some(mut p) = ex_pair() else { return };
    let pd = p.dev.pd.clone();
    for (i, size) in [1usize, 7, 4096, 65536 + 13].into_iter().enumerate() {
        let what = format!("ibv_wr_send of {size} B");
        let src = common::Buf::new(&pd, size + 3, common::Buf::full_access());
        let dst = common::Buf::new(&pd, size, common::Buf::full_access());
        let data = pattern(7 + i as u64, size);
        src.write(3, &data);

        let mut rsge = [dst.sge(0, size)];
        let mut rwr = recv_wr(100 + i as u64, &mut rsge);
        // SAFETY: `dst` outlives the poll of this receive's completion.
        unsafe { p.b.post_recv(&mut rwr) }.expect("post_recv");
        let mut batch = p.a.start();
        let sge = [src.entry(3, size)];
        // SAFETY: `src` outlives the poll of this send's completion.
        unsafe { batch.send(200 + i as u64, SendFlags::SIGNALED, &sge) }.expect("ibv_wr_send");
        batch.complete().expect("ibv_wr_complete");

        let s = poll_success(&p.cq_a, &what);
        assert_eq!((s.wr_id(), s.opcode()), (200 + i as u64, WcOpcode::Send));
        let r = poll_success(&p.cq_b, &what);
        assert_eq!((r.wr_id(), r.byte_len() as usize), (100 + i as u64, size));
        assert_bytes_eq(&dst.read(0, size), &data, &what);
    }
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn one_batch_posts_several_writes_and_an_abort_posts_nothing() {
    let Some(mut p) = ex_pair() else { return };
    let pd = p.dev.pd.clone();
    let (n, size) = (4usize, 3000usize);
    let src = common::Buf::new(&pd, n * size, common::Buf::full_access());
    let dst = common::Buf::new(&pd, n * size, common::Buf::full_access());
    let data = pattern(42, n * size);
    src.write(0, &data);

    // Aborted: nothing may reach the peer.
    let mut batch = p.a.start();
    let sge = [src.entry(0, size)];
    // SAFETY: the batch is aborted: nothing is posted.
    unsafe { batch.rdma_write(1, SendFlags::SIGNALED, &sge, dst.addr(0), dst.rkey()) }
        .expect("ibv_wr_rdma_write");
    batch.abort();
    // Dropped without completing: aborted as well.
    {
        let mut batch = p.a.start();
        // SAFETY: as above.
        unsafe { batch.rdma_write(2, SendFlags::SIGNALED, &sge, dst.addr(0), dst.rkey()) }
            .expect("ibv_wr_rdma_write");
    }

    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(
        dst.read(0, size).iter().all(|&b| b == 0),
        "an aborted batch wrote to the peer"
    );

    // One batch of `n` writes (the aborted ones would complete first), every one signaled, one doorbell.
    let mut batch = p.a.start();
    for k in 0..n {
        let sge = [src.entry(k * size, size)];
        let remote = dst.addr(k * size);
        // SAFETY: `src` and `dst` outlive the polls below.
        unsafe { batch.rdma_write(10 + k as u64, SendFlags::SIGNALED, &sge, remote, dst.rkey()) }
            .expect("ibv_wr_rdma_write");
    }
    batch.complete().expect("ibv_wr_complete");
    let wcs = poll_exactly(&p.cq_a, n, "the batch's writes");
    for (k, wc) in wcs.iter().enumerate() {
        assert!(wc.is_success(), "write {k}: {wc:?}");
        assert_eq!(
            (wc.wr_id(), wc.opcode()),
            (10 + k as u64, WcOpcode::RdmaWrite)
        );
    }
    assert_bytes_eq(&dst.read(0, n * size), &data, "the batch's writes");
    poll_exactly(&p.cq_b, 0, "the responder of RDMA writes");
}

#[test]
#[ignore = "needs an RDMA device: run `cargo xtask test-rxe`"]
fn a_send_gathers_an_sge_list() {
    let Some(mut p) = ex_pair() else { return };
    let pd = p.dev.pd.clone();
    // Equal lengths: rdma-core 44's rxe sums the first element's length
    // once per element (see `WrBatch`), which is right only for these.
    let (n, part) = (3usize, 1000usize);
    let src = common::Buf::new(&pd, n * part + 64, common::Buf::full_access());
    let dst = common::Buf::new(&pd, n * part, common::Buf::full_access());
    let data = pattern(99, n * part);
    // The parts lie apart in the source, in reverse order.
    for k in 0..n {
        src.write((n - 1 - k) * (part + 16), &data[k * part..(k + 1) * part]);
    }
    let sges: Vec<_> = (0..n)
        .map(|k| src.entry((n - 1 - k) * (part + 16), part))
        .collect();
    let mut rsge = [dst.sge(0, n * part)];
    let mut rwr = recv_wr(1, &mut rsge);
    // SAFETY: `dst` outlives the poll of this receive's completion.
    unsafe { p.b.post_recv(&mut rwr) }.expect("post_recv");
    let mut batch = p.a.start();
    // SAFETY: `src` outlives the poll of this send's completion.
    unsafe { batch.send(2, SendFlags::SIGNALED, &sges) }.expect("ibv_wr_send");
    batch.complete().expect("ibv_wr_complete");
    assert_eq!(poll_success(&p.cq_a, "gathered send").wr_id(), 2);
    let r = poll_success(&p.cq_b, "gathered send");
    assert_eq!(
        r.byte_len() as usize,
        n * part,
        "byte_len of the gathered send"
    );
    assert_bytes_eq(&dst.read(0, n * part), &data, "gathered send");
}
