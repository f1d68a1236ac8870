//! The tokio runtime the addon runs on.

use napi_derive::module_init;

/// One worker by default: on a small machine a second worker mostly adds cross-thread
/// wake-ups (measured in bench/PROFILE.md); `DEADBOLT_WORKER_THREADS` overrides it.
#[module_init]
fn init() {
    let workers = std::env::var("DEADBOLT_WORKER_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| (1..=64).contains(n))
        .unwrap_or(1);
    if let Ok(rt) = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("deadbolt")
        .enable_all()
        .build()
    {
        napi::bindgen_prelude::create_custom_tokio_runtime(rt);
    }
}
