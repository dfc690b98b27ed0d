//! The audit's own runtime: one worker thread, and the blocking threads its `authorizer`
//! checks take, each at a lower scheduling priority ([`NICE`]). A scan decodes every list page
//! and evaluates every object; on the webhook's runtime it took the webhook's workers (the
//! webhook's p99 during a scan of 100,000 objects was 7.2× its idle p99). Here it takes what
//! the webhook leaves of the cores, and all of a core when nothing else runs.

use std::future::Future;

use celgate_snapshot::dispatch::THREAD_STACK_BYTES;
use tokio::sync::oneshot;
use tracing::{error, warn};

/// The nice value of the audit's threads (the webhook's are 0): when both want a core, the
/// kernel gives a thread at 10 about a tenth of what it gives one at 0.
pub const NICE: i32 = 10;

/// The name of the audit's threads.
const NAME: &str = "celgate-audit";

/// Runs `audit` on a runtime and thread of its own, until it completes or this future is
/// dropped (the audit is then dropped too, on its thread). A runtime or thread the system
/// cannot make is logged, and this completes at once.
pub async fn apart(audit: impl Future<Output = ()> + Send + 'static) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(NAME)
        .thread_stack_size(THREAD_STACK_BYTES)
        .on_thread_start(lower_priority)
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            error!(error = %e, "audit: cannot make its runtime");
            return;
        }
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let (done, ended) = oneshot::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name(NAME.into())
        .stack_size(THREAD_STACK_BYTES)
        .spawn(move || {
            lower_priority();
            runtime.block_on(async {
                tokio::select! {
                    () = audit => {}
                    _ = stopped => {}
                }
            });
            let _ = done.send(());
        });
    if let Err(e) = spawned {
        error!(error = %e, "audit: cannot start its thread");
        return;
    }
    let _ = ended.await;
    drop(stop);
}

/// Lowers the calling thread's priority to [`NICE`], unless it is lower already (on Linux,
/// where a nice value is a thread's own).
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{getpriority_process, setpriority_process};
        let thread = Some(rustix::thread::gettid());
        let lowered = match getpriority_process(thread) {
            Ok(nice) if nice >= NICE => Ok(()),
            _ => setpriority_process(thread, NICE),
        };
        if let Err(e) = lowered {
            warn!(error = %e, "audit: cannot lower its threads' priority; it competes with the webhook as an equal");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This thread's nice value, from `/proc/thread-self/stat` (field 19).
    fn nice() -> i64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
        let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        after_name
            .split_whitespace()
            .nth(16)
            .and_then(|n| n.parse().ok())
            .unwrap_or(i64::MIN)
    }

    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_audit_runs_on_threads_of_its_own_at_a_lower_priority() {
        let webhook = (std::thread::current().id(), nice());
        let (seen, saw) = oneshot::channel();
        apart(async move {
            let here = (std::thread::current().id(), nice());
            // A spawned task runs on the audit runtime's worker.
            let worker = tokio::spawn(async { (std::thread::current().id(), nice()) })
                .await
                .unwrap_or((here.0, i64::MIN));
            let _ = seen.send((here, worker));
        })
        .await;
        let (here, worker) = saw
            .await
            .unwrap_or_else(|_| panic!("the audit did not run"));
        for (thread, nice) in [here, worker] {
            assert_ne!(thread, webhook.0, "on the caller's thread");
            assert_eq!(nice, webhook.1.max(i64::from(NICE)), "{thread:?}");
        }
    }
}
