//! Running many simulated runs on a few threads: each run gets its own runtime and thread
//! (see [`crate::seeds::run_isolated`]), `jobs` of them at a time, and the results come
//! back in a fixed order whatever finished first, so a report depends only on its seeds.

use std::collections::VecDeque;
use std::sync::Mutex;

/// Runs `task` for every item of `items`, `jobs` at a time, calling `progress` after each
/// with the item and its wall time; returns the outputs in the order of `items`.
pub fn run_all<I, T>(
    items: Vec<I>,
    jobs: usize,
    task: impl Fn(&I) -> T + Sync,
    progress: impl Fn(&I, &T, f64) + Sync,
) -> Vec<T>
where
    I: Send + Sync,
    T: Send,
{
    let queue: Mutex<VecDeque<usize>> = Mutex::new((0..items.len()).collect());
    let done: Mutex<Vec<(usize, T)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| loop {
                let Some(index) = queue.lock().expect("queue lock").pop_front() else {
                    return;
                };
                let started = std::time::Instant::now();
                let output = task(&items[index]);
                progress(&items[index], &output, started.elapsed().as_secs_f64());
                done.lock().expect("results lock").push((index, output));
            });
        }
    });
    let mut done = done.into_inner().expect("results lock");
    done.sort_by_key(|(index, _)| *index);
    done.into_iter().map(|(_, output)| output).collect()
}

/// A one-line description of this machine: CPU model and cores.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{cpu}, {cores} cores, {}", std::env::consts::OS)
}
