//! The JIT's threads: a pool of workers behind runtime-c's `mr_threads` hook, which
//! the runtime's `mr_run` and its `_mt` kernels split their work through (runtime-c
//! starts no threads of its own). The caller runs the first share of each range and
//! waits for the workers' shares; results do not depend on the split.

use std::cell::{Cell, UnsafeCell};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use super::runtime::{MrTask, MrThreads};

/// How long a waiting thread spins (yielding every 256 turns, in case it shares a core)
/// before it sleeps: waking a sleeping thread costs tens of microseconds, more than a
/// small kernel takes. The C demo's pool waits the same way.
const SPINS: u32 = 20_000;

/// Workers that run shares of one range at a time.
pub struct Pool {
    inner: Arc<Inner>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

struct Inner {
    /// Held for the length of one `parallel_for`: one range at a time.
    dispatch: Mutex<()>,
    /// Guards the sleeps on `wake` and `done`.
    mu: Mutex<()>,
    wake: Condvar,
    done: Condvar,
    /// Raised for each job (under `mu`), after `job` is written.
    generation: AtomicU64,
    /// Workers that have not finished the current job.
    busy: AtomicUsize,
    stop: AtomicBool,
    job: UnsafeCell<Job>,
    /// The caller and the workers.
    shares: usize,
}

#[derive(Clone, Copy)]
struct Job {
    task: Option<MrTask>,
    ctx: *mut c_void,
    n: i64,
}

// SAFETY: `job` is written only by the thread holding `dispatch` while no worker reads it
// (between jobs: every worker has finished the last one), and read by workers only after
// they see the generation that published it. A job's context is shared by the calls of
// one range, which runtime-c and the JIT's tasks make safe on any thread; it outlives the
// job, since parallel_for waits for every share.
unsafe impl Send for Inner {}
unsafe impl Sync for Inner {}

thread_local! {
    /// Whether this thread is running a share: a range split from within a share runs
    /// on the thread itself.
    static IN_SHARE: Cell<bool> = const { Cell::new(false) };
}

impl Pool {
    /// A pool that splits ranges `threads` ways (`threads - 1` workers beside the caller).
    pub fn new(threads: usize) -> Pool {
        let shares = threads.max(1);
        let inner = Arc::new(Inner {
            dispatch: Mutex::new(()),
            mu: Mutex::new(()),
            wake: Condvar::new(),
            done: Condvar::new(),
            generation: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            job: UnsafeCell::new(Job { task: None, ctx: std::ptr::null_mut(), n: 0 }),
            shares,
        });
        let workers = (1..shares)
            .map(|i| {
                let inner = Arc::clone(&inner);
                std::thread::Builder::new().name(format!("mithrilc-jit-{i}")).spawn(move || worker(&inner, i)).expect("spawning a JIT worker thread")
            })
            .collect();
        Pool { inner, workers }
    }

    /// How many ways it splits a range.
    pub fn threads(&self) -> usize {
        self.inner.shares
    }

    /// The hook to pass to the runtime; valid while the pool lives.
    pub fn hook(&self) -> MrThreads {
        MrThreads { parallel_for: Some(parallel_for), user: Arc::as_ptr(&self.inner) as *mut c_void }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        {
            let _g = self.inner.mu.lock().unwrap_or_else(|e| e.into_inner());
            self.inner.stop.store(true, Ordering::Release);
            self.inner.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// Spins until `done()` or for [`SPINS`] turns; returns whether it is done.
fn spin(done: impl Fn() -> bool) -> bool {
    for turn in 1..=SPINS {
        if done() {
            return true;
        }
        if turn % 256 == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    done()
}

/// Runs share `i` of `shares` of the job's range `[0, n)`: thread t always takes the same
/// part of a kernel's data, which stays in its core's cache from call to call.
fn run_share(job: &Job, i: usize, shares: usize) {
    if i >= shares {
        return;
    }
    let at = |k: usize| (job.n as i128 * k as i128 / shares as i128) as i64;
    let (begin, end) = (at(i), at(i + 1));
    if let (Some(task), true) = (job.task, begin < end) {
        IN_SHARE.with(|s| s.set(true));
        // SAFETY: the task and context are the caller's of parallel_for, alive until it returns.
        unsafe { task(job.ctx, begin, end) };
        IN_SHARE.with(|s| s.set(false));
    }
}

fn worker(inner: &Inner, i: usize) {
    let mut seen = 0;
    loop {
        let fresh = || inner.generation.load(Ordering::Acquire) != seen || inner.stop.load(Ordering::Acquire);
        if !spin(fresh) {
            let mut g = inner.mu.lock().unwrap_or_else(|e| e.into_inner());
            while !fresh() {
                g = inner.wake.wait(g).unwrap_or_else(|e| e.into_inner());
            }
        }
        if inner.stop.load(Ordering::Acquire) {
            return;
        }
        seen = inner.generation.load(Ordering::Acquire);
        // SAFETY: published before the generation this worker has seen (see `Inner`).
        let job = unsafe { *inner.job.get() };
        run_share(&job, i, inner.shares.min(job.n.max(1) as usize));
        if inner.busy.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _g = inner.mu.lock().unwrap_or_else(|e| e.into_inner());
            inner.done.notify_all();
        }
    }
}

/// `mr_threads.parallel_for`.
unsafe extern "C" fn parallel_for(user: *mut c_void, task: MrTask, ctx: *mut c_void, n: i64) {
    // SAFETY: `user` is the pool's `Inner` (`Pool::hook`), alive while the pool is.
    let inner = unsafe { &*(user as *const Inner) };
    if n < 2 || inner.shares < 2 || IN_SHARE.with(Cell::get) {
        // SAFETY: as the caller's.
        unsafe { task(ctx, 0, n) };
        return;
    }
    let _one = inner.dispatch.lock().unwrap_or_else(|e| e.into_inner());
    let job = Job { task: Some(task), ctx, n };
    {
        let _g = inner.mu.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: every worker finished the last job (`busy` was 0), and none reads `job`
        // until the generation below is raised.
        unsafe { *inner.job.get() = job };
        inner.busy.store(inner.shares - 1, Ordering::Release);
        inner.generation.fetch_add(1, Ordering::AcqRel);
        inner.wake.notify_all();
    }
    run_share(&job, 0, inner.shares.min(n as usize));
    let idle = || inner.busy.load(Ordering::Acquire) == 0;
    if !spin(idle) {
        let mut g = inner.mu.lock().unwrap_or_else(|e| e.into_inner());
        while !idle() {
            g = inner.done.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};

    unsafe extern "C" fn add_range(ctx: *mut c_void, begin: i64, end: i64) {
        let sum = unsafe { &*(ctx as *const AtomicI64) };
        sum.fetch_add((begin..end).sum::<i64>(), Ordering::Relaxed);
    }

    /// Every index once, whatever the pool's size, many times over.
    #[test]
    fn a_pool_covers_each_range_once() {
        for threads in [1, 2, 3, 8] {
            let pool = Pool::new(threads);
            let hook = pool.hook();
            for n in [0i64, 1, 2, 5, 1000] {
                let sum = AtomicI64::new(0);
                unsafe { (hook.parallel_for.unwrap())(hook.user, add_range, &sum as *const AtomicI64 as *mut c_void, n) };
                assert_eq!(sum.load(Ordering::Relaxed), n * (n - 1).max(0) / 2, "{threads} threads, n = {n}");
            }
        }
    }
}
