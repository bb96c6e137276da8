//! Failed dashboard logins, counted per client address: at most [`MAX_TRIES`] unsuccessful
//! tries from one address within [`WINDOW`]; past that, the address is refused before its
//! token is even looked at, until its oldest try leaves the window. A try counts from the
//! moment it starts, so guesses sent in parallel are counted as surely as guesses in a row; a
//! successful login gives its try back.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Unsuccessful tries one address may make within [`WINDOW`].
pub const MAX_TRIES: usize = 5;

/// The window tries are counted over.
pub const WINDOW: Duration = Duration::from_secs(60);

/// Addresses kept before the table is swept of those with no try in the window.
const SWEEP_ABOVE: usize = 10_000;

/// The tries of every address, shared by all of one process's requests.
#[derive(Clone, Debug, Default)]
pub struct LoginThrottle {
    tries: Arc<Mutex<HashMap<IpAddr, VecDeque<Instant>>>>,
}

/// One try under way; it counts unless [`Try::succeeded`] gives it back.
#[derive(Debug)]
pub struct Try {
    throttle: LoginThrottle,
    ip: IpAddr,
    at: Instant,
}

impl LoginThrottle {
    /// Starts a try from `ip`, or says how long until it may try again.
    pub fn begin(&self, ip: IpAddr) -> Result<Try, Duration> {
        let now = Instant::now();
        let mut tries = self.tries.lock().unwrap_or_else(|e| e.into_inner());
        if tries.len() > SWEEP_ABOVE {
            tries.retain(|_, at| at.back().is_some_and(|t| now.duration_since(*t) < WINDOW));
        }
        let of_ip = tries.entry(ip).or_default();
        while of_ip
            .front()
            .is_some_and(|t| now.duration_since(*t) >= WINDOW)
        {
            of_ip.pop_front();
        }
        if of_ip.len() >= MAX_TRIES {
            let oldest = *of_ip.front().expect("full");
            return Err(WINDOW.saturating_sub(now.duration_since(oldest)));
        }
        of_ip.push_back(now);
        Ok(Try {
            throttle: self.clone(),
            ip,
            at: now,
        })
    }
}

impl Try {
    /// The try logged in: it does not count against its address.
    pub fn succeeded(self) {
        let mut tries = self
            .throttle
            .tries
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(of_ip) = tries.get_mut(&self.ip)
            && let Some(i) = of_ip.iter().position(|t| *t == self.at)
        {
            of_ip.remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gets_five_tries_a_minute_and_a_success_gives_its_try_back() {
        let throttle = LoginThrottle::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let ok = throttle.begin(a).unwrap();
        ok.succeeded();
        for _ in 0..MAX_TRIES {
            throttle.begin(a).unwrap();
        }
        let wait = throttle.begin(a).unwrap_err();
        assert!(wait > Duration::from_secs(55) && wait <= WINDOW, "{wait:?}");
        assert!(throttle.begin(b).is_ok(), "another address is not slowed");
    }
}
