//! Which address a request came from, for counting what an address does (failed logins):
//! the socket's peer, or, when that peer is a proxy the operator trusts
//! (`VIDQ_TRUSTED_PROXIES`), the address its `X-Forwarded-For` names. The header is read
//! from the right: each trusted proxy appends the address it received from, so the
//! right-most address that is not a trusted proxy is the first one no trusted hop vouches
//! past. Anything to its left the client may have written itself.

use std::net::IpAddr;
use std::str::FromStr;

/// An address block such as `10.0.0.0/8` or `fd00::/8` (a bare address is a block of one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    base: IpAddr,
    bits: u8,
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        let raw = raw.trim();
        let (address, bits) = match raw.split_once('/') {
            Some((address, bits)) => (address, Some(bits)),
            None => (raw, None),
        };
        let base: IpAddr = address
            .parse()
            .map_err(|_| format!("{raw:?} is not an IP address or CIDR block"))?;
        let max = if base.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => max,
            Some(bits) => bits
                .parse::<u8>()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(|| format!("{raw:?}: the prefix length must be 0 to {max}"))?,
        };
        Ok(Self { base, bits })
    }
}

impl Cidr {
    /// Whether `ip` is inside the block (an IPv4-mapped IPv6 address counts as its IPv4 one).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.base, canonical(ip)) {
            (IpAddr::V4(base), IpAddr::V4(ip)) => prefix_eq(
                u128::from(u32::from(base)) << 96,
                u128::from(u32::from(ip)) << 96,
                self.bits,
            ),
            (IpAddr::V6(base), IpAddr::V6(ip)) => {
                prefix_eq(u128::from(base), u128::from(ip), self.bits)
            }
            _ => false,
        }
    }
}

fn prefix_eq(a: u128, b: u128, bits: u8) -> bool {
    bits == 0 || (a ^ b) >> (128 - u32::from(bits)) == 0
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The client's address: `peer` unless it is in `trusted`; then the right-most address of
/// the `X-Forwarded-For` values (in the order the headers came) that is not in `trusted`.
/// A header that does not parse stops the walk at the last address believed.
pub fn client_address(peer: IpAddr, forwarded_for: &[&str], trusted: &[Cidr]) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|c| c.contains(ip));
    let mut client = canonical(peer);
    if !is_trusted(client) {
        return client;
    }
    let hops: Vec<&str> = forwarded_for.iter().flat_map(|h| h.split(',')).collect();
    for hop in hops.into_iter().rev() {
        let Ok(ip) = hop.trim().parse::<IpAddr>() else {
            break;
        };
        client = canonical(ip);
        if !is_trusted(client) {
            break;
        }
    }
    client
}

/// The key one address's tries are counted under: an IPv4 address, or an IPv6 address's
/// /64 (one host is commonly given a whole /64, and would otherwise have 2^64 addresses).
pub fn counted_as(ip: IpAddr) -> String {
    match canonical(ip) {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let net = u128::from(v6) >> 64 << 64;
            format!("{}/64", std::net::Ipv6Addr::from(net))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_header_is_believed_only_from_trusted_proxies_and_read_from_the_right() {
        let trusted: Vec<Cidr> = ["10.0.0.0/8", "::1"]
            .iter()
            .map(|c| c.parse().unwrap())
            .collect();
        // Not a trusted peer: the header is ignored.
        assert_eq!(
            client_address(ip("198.51.100.7"), &["203.0.113.9"], &trusted),
            ip("198.51.100.7")
        );
        // A trusted peer: the right-most untrusted address, whatever the client wrote before it.
        let spoofed = ["1.2.3.4, 203.0.113.9", "10.1.1.1"];
        assert_eq!(
            client_address(ip("10.0.0.2"), &spoofed, &trusted),
            ip("203.0.113.9")
        );
        // Only trusted hops: the left-most of them.
        assert_eq!(
            client_address(ip("::1"), &["10.0.0.3"], &trusted),
            ip("10.0.0.3")
        );
        // No header, or a broken one: the last address believed.
        assert_eq!(
            client_address(ip("10.0.0.2"), &[], &trusted),
            ip("10.0.0.2")
        );
        assert_eq!(
            client_address(ip("10.0.0.2"), &["junk"], &trusted),
            ip("10.0.0.2")
        );
        // IPv4-mapped peers are their IPv4 address.
        assert_eq!(
            client_address(ip("::ffff:10.0.0.2"), &["192.0.2.1"], &trusted),
            ip("192.0.2.1")
        );
    }

    #[test]
    fn blocks_parse_and_contain() {
        let block: Cidr = "192.168.0.0/16".parse().unwrap();
        assert!(block.contains(ip("192.168.4.5")) && !block.contains(ip("192.169.0.1")));
        assert!("0.0.0.0/0".parse::<Cidr>().unwrap().contains(ip("8.8.8.8")));
        assert!("10.0.0.0/33".parse::<Cidr>().is_err() && "nonsense".parse::<Cidr>().is_err());
        assert_eq!(
            counted_as(ip("2001:db8::1")),
            counted_as(ip("2001:db8::ffff"))
        );
        assert_eq!(counted_as(ip("2001:db8::1")), "2001:db8::/64");
    }
}
