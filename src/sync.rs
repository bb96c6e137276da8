//! vidq's one policy for a lock whose holder panicked: the lock is taken as it is.
//!
//! Every `std::sync` lock in vidq guards state that each critical section leaves whole (a
//! counter, a map entry, a breaker's state, set in one step), so a panic while holding it
//! leaves nothing half-written. Refusing the lock after such a panic would only spread it:
//! one panicked upload worker would stop every later one at the sweeper's breaker. The
//! panic itself is logged where it happens.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Taking a `std::sync` lock under the policy above.
pub trait Locked<T: ?Sized> {
    /// The mutex's guard.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Reading or writing a `std::sync::RwLock` under the policy above.
pub trait ReadWriteLocked<T: ?Sized> {
    /// A read guard.
    fn read_locked(&self) -> RwLockReadGuard<'_, T>;
    /// A write guard.
    fn write_locked(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> ReadWriteLocked<T> for RwLock<T> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_locked(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_whose_holder_panicked_is_taken_with_what_it_holds() {
        let shared = std::sync::Arc::new(Mutex::new(1));
        let held = shared.clone();
        let panicked = std::thread::spawn(move || {
            let mut n = held.locked();
            *n = 2;
            panic!("while holding the lock");
        })
        .join();
        assert!(panicked.is_err());
        assert!(shared.is_poisoned());
        assert_eq!(*shared.locked(), 2);

        let table = std::sync::Arc::new(RwLock::new(vec![1]));
        let writer = table.clone();
        let _ = std::thread::spawn(move || {
            let mut rows = writer.write_locked();
            rows.push(2);
            panic!("while writing");
        })
        .join();
        assert!(table.is_poisoned());
        assert_eq!(*table.read_locked(), vec![1, 2]);
    }
}
