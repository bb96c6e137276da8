//! Which webhook destinations vidq will send to.
//!
//! A webhook URL is chosen by an uploader, and the relay runs inside the operator's network:
//! without a rule, an uploader could make the relay POST to the metadata service or an
//! internal admin port. Destinations must be `http`/`https` and resolve only to public
//! addresses; loopback, link-local, private, shared (CGNAT), unspecified, multicast and
//! documentation ranges are refused unless the operator sets `VIDQ_WEBHOOK_ALLOW_PRIVATE`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::Url;

/// Why a webhook URL is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DestinationError {
    /// Not an absolute http(s) URL with a host.
    #[error("the webhook URL must be an absolute http:// or https:// URL with a host")]
    BadUrl,
    /// Port 0 names no service: nothing can listen there.
    #[error("the webhook URL's port must be between 1 and 65535")]
    PortZero,
    /// Resolves to an address vidq does not send to.
    #[error(
        "the webhook URL resolves to {0}, a loopback, link-local or private address; vidq only sends to public addresses (operators can allow private ones with VIDQ_WEBHOOK_ALLOW_PRIVATE=true)"
    )]
    PrivateAddress(IpAddr),
    /// The host name does not resolve.
    #[error("the webhook host {0:?} does not resolve")]
    Unresolvable(String),
}

/// Checks the shape of a webhook URL: absolute, `http` or `https`, with a host, no
/// credentials, a port other than 0, at most 2,048 characters.
pub fn parse_url(text: &str) -> Result<Url, DestinationError> {
    if text.len() > 2048 {
        return Err(DestinationError::BadUrl);
    }
    let url = Url::parse(text).map_err(|_| DestinationError::BadUrl)?;
    if url.port() == Some(0) {
        return Err(DestinationError::PortZero);
    }
    let shaped = matches!(url.scheme(), "http" | "https")
        && url.host_str().is_some_and(|h| !h.is_empty())
        && url.username().is_empty()
        && url.password().is_none();
    if shaped {
        Ok(url)
    } else {
        Err(DestinationError::BadUrl)
    }
}

/// The address literally written in the URL, if the host is one.
pub fn literal_address(url: &Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
        url::Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
        url::Host::Domain(_) => None,
    }
}

/// The address literally written in the URL, if the host is one and the policy allows it
/// (names are checked where they are resolved).
pub fn check_literal(url: &Url, allow_private: bool) -> Result<Option<IpAddr>, DestinationError> {
    match literal_address(url) {
        Some(ip) => check_addresses(&ip.to_string(), &[ip], allow_private).map(|()| Some(ip)),
        None => Ok(None),
    }
}

/// Whether the relay may connect to `ip` on an uploader's behalf.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (18..20).contains(&b)) // benchmarking
        || a >= 240) // reserved
}

/// Only global unicast (`2000::/3`) is public, minus the ranges inside it that tunnel to
/// IPv4 addresses vidq could not check (6to4, Teredo) or are documentation. Everything else
/// (loopback, unspecified, IPv4-compatible, NAT64, unique local, link- and site-local,
/// multicast) is refused.
fn is_public_v6(ip: Ipv6Addr) -> bool {
    let [first, second, ..] = ip.segments();
    (first & 0xe000) == 0x2000
        && first != 0x2002 // 6to4
        && !(first == 0x2001 && second == 0x0000) // Teredo
        && !(first == 0x2001 && second == 0x0db8) // documentation
}

/// Refuses `addresses` unless every one is public (or private ones are allowed). An empty
/// list means the name did not resolve.
pub fn check_addresses(
    host: &str,
    addresses: &[IpAddr],
    allow_private: bool,
) -> Result<(), DestinationError> {
    if addresses.is_empty() {
        return Err(DestinationError::Unresolvable(host.to_owned()));
    }
    if allow_private {
        return Ok(());
    }
    match addresses.iter().find(|ip| !is_public(**ip)) {
        Some(ip) => Err(DestinationError::PrivateAddress(*ip)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn internal_ranges_are_not_public() {
        for text in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "::127.0.0.1",
            "2002:a00:1::1",
            "2001:0:a00:1::1",
            "fec0::1",
            "100::1",
            "2001:db8::1",
        ] {
            assert!(!is_public(ip(text)), "{text} must be refused");
        }
        for text in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(is_public(ip(text)), "{text} is public");
        }
    }

    #[test]
    fn one_private_address_among_public_ones_refuses_the_host() {
        let mixed = [ip("8.8.8.8"), ip("10.0.0.1")];
        assert_eq!(
            check_addresses("h", &mixed, false),
            Err(DestinationError::PrivateAddress(ip("10.0.0.1")))
        );
        assert_eq!(check_addresses("h", &mixed, true), Ok(()));
        assert_eq!(
            check_addresses("h", &[], true),
            Err(DestinationError::Unresolvable("h".into()))
        );
    }

    #[test]
    fn only_http_urls_with_a_host_and_no_credentials() {
        assert!(parse_url("https://example.com/hooks").is_ok());
        assert!(parse_url("http://127.0.0.1:8080/x").is_ok());
        for bad in [
            "ftp://example.com/",
            "file:///etc/passwd",
            "example.com/hooks",
            "https://user:pw@example.com/",
            "",
        ] {
            assert_eq!(parse_url(bad), Err(DestinationError::BadUrl), "{bad}");
        }
        assert_eq!(
            parse_url("http://example.com:0/hooks"),
            Err(DestinationError::PortZero)
        );
        let url = parse_url("http://[::1]:9/").unwrap();
        assert_eq!(literal_address(&url), Some(ip("::1")));
    }
}
