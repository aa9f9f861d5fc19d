//! The JIT's threads: a pool of workers behind runtime-c's `mr_threads` hook, which
//! the runtime's `mr_run` and its `_mt` kernels split their work through (runtime-c
//! starts no threads of its own). The caller runs the first share of each range and
//! waits for the workers' shares; results do not depend on the split.

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::{Arc, Condvar, Mutex};

use super::runtime::{MrTask, MrThreads};

/// Workers that run shares of one range at a time.
pub struct Pool {
    inner: Arc<Inner>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

struct Inner {
    /// Held for the length of one `parallel_for`: one range at a time.
    dispatch: Mutex<()>,
    state: Mutex<State>,
    work: Condvar,
    done: Condvar,
    /// The caller and the workers.
    shares: usize,
}

struct State {
    job: Option<Job>,
    /// Raised for each job, so a worker takes each once.
    generation: u64,
    /// Workers' shares not finished yet.
    remaining: usize,
    quit: bool,
}

#[derive(Clone, Copy)]
struct Job {
    task: MrTask,
    ctx: *mut c_void,
    n: i64,
    shares: usize,
}

// SAFETY: a job's context is shared by the calls of one range, which runtime-c and the
// JIT's tasks make safe to run on any thread (they read it, and write disjoint parts of
// the buffers it points at); it outlives the job, since parallel_for waits for it.
unsafe impl Send for State {}

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
            state: Mutex::new(State { job: None, generation: 0, remaining: 0, quit: false }),
            work: Condvar::new(),
            done: Condvar::new(),
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

    /// The hook to pass to the runtime; valid while the pool lives.
    pub fn hook(&self) -> MrThreads {
        MrThreads { parallel_for: Some(parallel_for), user: Arc::as_ptr(&self.inner) as *mut c_void }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner()).quit = true;
        self.inner.work.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// Share `i` of `shares` of `[0, n)`.
fn share(n: i64, i: usize, shares: usize) -> (i64, i64) {
    let at = |k: usize| (n as i128 * k as i128 / shares as i128) as i64;
    (at(i), at(i + 1))
}

fn run_share(job: &Job, i: usize) {
    let (begin, end) = share(job.n, i, job.shares);
    if begin < end {
        IN_SHARE.with(|s| s.set(true));
        // SAFETY: the task and context are the caller's of parallel_for, alive until it returns.
        unsafe { (job.task)(job.ctx, begin, end) };
        IN_SHARE.with(|s| s.set(false));
    }
}

fn worker(inner: &Inner, i: usize) {
    let mut seen = 0;
    loop {
        let job = {
            let mut st = inner.state.lock().unwrap_or_else(|e| e.into_inner());
            while !st.quit && st.generation == seen {
                st = inner.work.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            if st.quit {
                return;
            }
            seen = st.generation;
            st.job
        };
        let Some(job) = job else { continue };
        if i < job.shares {
            run_share(&job, i);
            let mut st = inner.state.lock().unwrap_or_else(|e| e.into_inner());
            st.remaining -= 1;
            if st.remaining == 0 {
                inner.done.notify_all();
            }
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
    let shares = inner.shares.min(n as usize);
    let job = Job { task, ctx, n, shares };
    {
        let mut st = inner.state.lock().unwrap_or_else(|e| e.into_inner());
        st.job = Some(job);
        st.generation += 1;
        st.remaining = shares - 1;
    }
    inner.work.notify_all();
    run_share(&job, 0);
    let mut st = inner.state.lock().unwrap_or_else(|e| e.into_inner());
    while st.remaining > 0 {
        st = inner.done.wait(st).unwrap_or_else(|e| e.into_inner());
    }
    st.job = None;
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
