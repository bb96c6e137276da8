//! Resolving webhook hosts under the destination policy, both when an endpoint is registered
//! and at every connection the relay makes.
//!
//! Checking only at registration would not be enough: a host can resolve to a public address
//! when registered and to `169.254.169.254` later. The relay's HTTP client therefore resolves
//! through [`GuardedResolver`], which refuses the connection when any address is not allowed,
//! and sends to literal addresses only after the same check.

use std::net::{IpAddr, SocketAddr};

use url::Url;

use crate::domain::destination::{self, DestinationError};

/// Resolves `url`'s host and checks every address against the policy.
pub async fn resolve(url: &Url, allow_private: bool) -> Result<Vec<SocketAddr>, DestinationError> {
    let port = url
        .port_or_known_default()
        .ok_or(DestinationError::BadUrl)?;
    if let Some(ip) = destination::check_literal(url, allow_private)? {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let host = url.host_str().ok_or(DestinationError::BadUrl)?;
    lookup(host, port, allow_private).await
}

async fn lookup(
    host: &str,
    port: u16,
    allow_private: bool,
) -> Result<Vec<SocketAddr>, DestinationError> {
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map(Iterator::collect)
        .unwrap_or_default();
    let ips: Vec<IpAddr> = addresses.iter().map(SocketAddr::ip).collect();
    destination::check_addresses(host, &ips, allow_private)?;
    Ok(addresses)
}

/// The relay HTTP client's DNS resolver: the system resolver, then the policy.
#[derive(Clone, Copy, Debug)]
pub struct GuardedResolver {
    /// Whether private addresses are allowed (`VIDQ_WEBHOOK_ALLOW_PRIVATE`).
    pub allow_private: bool,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let addresses = lookup(name.as_str(), 0, allow_private).await?;
            Ok(Box::new(addresses.into_iter()) as reqwest::dns::Addrs)
        })
    }
}
