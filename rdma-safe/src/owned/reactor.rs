//! [`CompletionReactor`]: how futures sleep on the completion channel's
//! file descriptor, whatever the async runtime.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

/// Waits for the completion channel's descriptor to become readable, or
/// for a deadline, on behalf of a future — the one runtime-specific piece
/// of the async API. `TokioReactor` (feature `tokio`) is the default;
/// another runtime implements this over its own reactor and timer.
///
/// The descriptor is non-blocking: an implementation must wake the waker
/// of the *latest* call when the descriptor becomes readable after that
/// call or when `deadline` passes; only the latest registration needs to
/// be kept (it is always the channel's completion driver's).
///
/// The completion driver is one task per [`SharedChannel`] with a reactor,
/// spawned on first need through [`spawn`](Self::spawn): it alone waits
/// here, reaps the completion queue, and wakes the operations whose
/// completions arrived.
///
/// [`SharedChannel`]: crate::SharedChannel
pub trait CompletionReactor: Send + Sync + fmt::Debug {
    /// Runs `driver` to completion on the runtime, as a task of its own
    /// (`tokio::spawn` for `TokioReactor`). It ends by itself when the
    /// channel's last handle is dropped.
    fn spawn(&self, driver: Pin<Box<dyn Future<Output = ()> + Send + 'static>>);

    /// Returns `Ready(Ok(()))` when the descriptor was readable — having
    /// called `drain` (which consumes the pending events, reading until the
    /// descriptor would block) before clearing its readiness — or when
    /// `deadline` has passed; otherwise registers `cx`'s waker for both and
    /// returns `Pending`.
    ///
    /// # Errors
    /// The reactor's or `drain`'s I/O error.
    fn poll_ready(
        &self,
        cx: &mut Context<'_>,
        deadline: Instant,
        drain: &mut dyn FnMut() -> io::Result<()>,
    ) -> Poll<io::Result<()>>;
}

#[cfg(feature = "tokio")]
pub use tokio_impl::TokioReactor;

#[cfg(feature = "tokio")]
mod tokio_impl {
    use super::CompletionReactor;
    use rdma_core::CompChannel;
    use std::io;
    use std::pin::Pin;
    use std::sync::Mutex;
    use std::task::{Context, Poll};
    use std::time::Instant;
    use tokio::io::unix::AsyncFd;
    use tokio::time::Sleep;

    /// The completion channel's descriptor registered with tokio's reactor
    /// (`AsyncFd`), and one timer for the engine's stall deadline.
    #[derive(Debug)]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub struct TokioReactor {
        /// The runtime the descriptor was registered with, which runs the
        /// completion driver.
        runtime: tokio::runtime::Handle,
        fd: AsyncFd<CompChannel>,
        /// One timer for the channel, reset to the waiting task's deadline
        /// (allocated once, not per operation).
        timer: Mutex<Pin<Box<Sleep>>>,
    }

    impl TokioReactor {
        /// Registers `channel`'s descriptor with the current tokio runtime.
        ///
        /// # Errors
        /// Outside a tokio runtime (with I/O and time enabled), or if the
        /// descriptor cannot be registered.
        pub(crate) fn new(channel: CompChannel) -> io::Result<Self> {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return Err(io::Error::other(
                    "TokioReactor needs a tokio runtime (enable_io and enable_time)",
                ));
            };
            // `CompChannel::as_raw_fd` always returns the channel's
            // own descriptor, which stays open until the last clone of the
            // channel is dropped — the one moved into the `AsyncFd` lives as
            // long as the registration.
            // SAFETY: by the reasoning just above.
            let fd =
                unsafe { AsyncFd::register_with_interest(channel, tokio::io::Interest::READABLE) }?;
            let timer = Box::pin(tokio::time::sleep_until(tokio::time::Instant::now()));
            Ok(TokioReactor {
                runtime,
                fd,
                timer: Mutex::new(timer),
            })
        }
    }

    impl CompletionReactor for TokioReactor {
        fn spawn(&self, driver: Pin<Box<dyn Future<Output = ()> + Send + 'static>>) {
            self.runtime.spawn(driver);
        }

        fn poll_ready(
            &self,
            cx: &mut Context<'_>,
            deadline: Instant,
            drain: &mut dyn FnMut() -> io::Result<()>,
        ) -> Poll<io::Result<()>> {
            match self.fd.poll_read_ready(cx) {
                Poll::Ready(Ok(mut guard)) => {
                    // Drain, then clear readiness: `try_io` clears it only
                    // if no new readiness arrived meanwhile, so an event
                    // raised after the drain is not lost.
                    return match guard.try_io(|_| {
                        drain()?;
                        Err::<(), _>(io::ErrorKind::WouldBlock.into())
                    }) {
                        Ok(Err(e)) => Poll::Ready(Err(e)),
                        Ok(Ok(())) | Err(_) => Poll::Ready(Ok(())),
                    };
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {}
            }
            let mut timer = self.timer.lock().unwrap_or_else(|e| e.into_inner());
            let deadline = tokio::time::Instant::from_std(deadline);
            if timer.deadline() != deadline {
                timer.as_mut().reset(deadline);
            }
            match timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Ok(())),
                Poll::Pending => Poll::Pending,
            }
        }
    }

    use std::future::Future;
}
