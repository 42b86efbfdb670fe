//! The job's one way of taking its locks (the queue's, the engines', the encoders', the journal's).
//!
//! A lock is poisoned only when a thread panicked while holding it. Nothing the job does under
//! its locks panics: it pushes, counts, receives from a channel, and calls the queue's hooks,
//! which report failures as errors. Were a thread to panic there anyway, its panic is raised
//! again where the job's scoped threads are joined, and a thread that meets the poisoned lock
//! meanwhile panics too rather than go on with state left half-updated: hence `expect` here, once.

use std::sync::{Condvar, Mutex, MutexGuard};

const UNPOISONED: &str = "no thread panics while holding a lock of the job";

/// Locks `mutex`.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().expect(UNPOISONED)
}

/// Waits on `condvar`, releasing `guard` meanwhile.
pub(crate) fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar.wait(guard).expect(UNPOISONED)
}

/// The value of a lock no thread holds any more.
pub(crate) fn into_inner<T>(mutex: Mutex<T>) -> T {
    mutex.into_inner().expect(UNPOISONED)
}
