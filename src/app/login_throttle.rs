//! Failed dashboard logins, counted per client address across every API node
//! ([`db::login_tries`]): at most [`MAX_TRIES`] unsuccessful tries from one address within
//! [`WINDOW`]; past that, the address is refused before its token is even looked at, until its
//! oldest try leaves the window. A try counts from the moment it starts, so guesses sent in
//! parallel are counted as surely as guesses in a row; a successful login gives its try back.
//!
//! The address is the request's client ([`client_address`]): behind a load balancer, set
//! `VIDQ_TRUSTED_PROXIES` so each client is counted apart, or every client shares the
//! balancer's address and one guesser locks everyone out.

use std::net::IpAddr;
use std::time::Duration;

use crate::db::{self, DbPool};
use crate::domain::client_address::{Cidr, client_address, counted_as};

use super::AppError;

/// Unsuccessful tries one address may make within [`WINDOW`].
pub const MAX_TRIES: u32 = 5;

/// The window tries are counted over.
pub const WINDOW: Duration = Duration::from_secs(60);

/// Who the proxies in front of the API are.
#[derive(Clone, Debug, Default)]
pub struct LoginThrottle {
    /// `VIDQ_TRUSTED_PROXIES`: peers whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<Cidr>,
}

/// One try under way; it counts unless [`Try::succeeded`] gives it back.
#[derive(Debug)]
pub struct Try {
    id: i64,
    /// The address it is counted under.
    pub address: IpAddr,
}

impl LoginThrottle {
    /// The address a request is counted under: its peer, or what a trusted proxy says.
    pub fn address_of(&self, peer: IpAddr, forwarded_for: &[&str]) -> IpAddr {
        client_address(peer, forwarded_for, &self.trusted_proxies)
    }

    /// Starts a try from `address`, or says how long until it may try again.
    pub async fn begin(
        &self,
        db: &DbPool,
        address: IpAddr,
    ) -> Result<Result<Try, Duration>, AppError> {
        let mut conn = db.get().await?;
        let begun =
            db::login_tries::begin(&mut conn, &counted_as(address), MAX_TRIES, WINDOW).await?;
        Ok(begun.map(|id| Try { id, address }))
    }
}

impl Try {
    /// The try logged in: it does not count against its address.
    pub async fn succeeded(self, db: &DbPool) -> Result<(), AppError> {
        let mut conn = db.get().await?;
        db::login_tries::give_back(&mut conn, self.id).await?;
        Ok(())
    }
}
