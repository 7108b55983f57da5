//! Connection limits: requests in flight (streams included) in total, per
//! principal and per client address, and new requests per second per
//! client address. A [`Permit`] is held for as long as a response is
//! being sent (for a stream, its whole life) and gives its place back on
//! drop.
//!
//! Counting is one `std` mutex around a few maps, taken once when a
//! request starts and once when it ends; nothing is awaited under it. Maps
//! only hold addresses and principals with something in flight, plus rate
//! buckets that are pruned once they have refilled.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crate::config::LimitsConfig;
use crate::status::ApiError;

/// Seconds a client refused by a per-principal or per-address limit is
/// told to wait.
const RETRY_AFTER_SECS: u64 = 5;
/// Rate buckets kept before full ones are pruned.
const MAX_BUCKETS: usize = 10_000;

pub struct Limits {
    cfg: LimitsConfig,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    total: usize,
    principals: HashMap<String, usize>,
    addresses: HashMap<IpAddr, usize>,
    buckets: HashMap<IpAddr, Bucket>,
}

/// A token bucket: `per_second_per_address` tokens a second, as many at most.
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// A place in the limits, given back on drop.
pub struct Permit {
    limits: Arc<Limits>,
    principal: String,
    addr: Option<IpAddr>,
}

/// TLS handshakes under way, per TCP peer: a peer past
/// `--max-pending-handshakes-per-address` has its new connection closed
/// before the handshake (each costs ~25 KB and up to the 10 s handshake
/// timeout). Trusted proxies are not counted: their clients are, by
/// their forwarded address, once a request is read.
pub struct Handshakes {
    max: usize,
    trusted: Vec<ipnet::IpNet>,
    pending: Mutex<HashMap<IpAddr, usize>>,
}

/// A handshake counted in, counted out on drop.
pub struct Handshake {
    of: Arc<Handshakes>,
    addr: Option<IpAddr>,
}

impl Handshakes {
    pub fn new(cfg: &LimitsConfig) -> Arc<Handshakes> {
        Arc::new(Handshakes {
            max: cfg.max_pending_handshakes_per_address,
            trusted: cfg.trusted_proxies.clone(),
            pending: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a handshake from `peer`, or `None` when it has as many
    /// under way as allowed.
    pub fn begin(self: &Arc<Self>, peer: Option<IpAddr>) -> Option<Handshake> {
        let counted = peer
            .map(|p| p.to_canonical())
            .filter(|p| self.max > 0 && !self.trusted.iter().any(|net| net.contains(p)));
        if let Some(addr) = counted {
            let mut pending = self.lock();
            let n = pending.entry(addr).or_default();
            if *n >= self.max {
                return None;
            }
            *n += 1;
        }
        Some(Handshake {
            of: self.clone(),
            addr: counted,
        })
    }

    /// Handshakes under way from `peer`.
    #[cfg(test)]
    fn pending(&self, peer: IpAddr) -> usize {
        self.lock().get(&peer.to_canonical()).copied().unwrap_or(0)
    }
}

impl Drop for Handshake {
    fn drop(&mut self) {
        if let Some(addr) = self.addr {
            let mut pending = self.of.lock();
            if let Some(n) = pending.get_mut(&addr) {
                *n -= 1;
                if *n == 0 {
                    pending.remove(&addr);
                }
            }
        }
    }
}

/// The client a request comes from: its TCP peer, or, when the peer is a
/// trusted proxy, the address that proxy (and any trusted proxy before it)
/// appended to `X-Forwarded-For`. The list is read from its right end,
/// which the trusted proxies wrote; the first address that is not a trusted
/// proxy is the client. Entries left of it could be anything a client
/// sent, and are never read; an entry that is not an address ends the walk
/// at the proxy that passed it on.
pub fn client_address(
    peer: Option<IpAddr>,
    forwarded_for: &[&str],
    trusted: &[ipnet::IpNet],
) -> Option<IpAddr> {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    // An IPv4 peer of a dual-stack listener (`[::]`) arrives as
    // `::ffff:a.b.c.d`, which no IPv4 network contains, and would count
    // apart from the same client over IPv4: as the address it is.
    let mut client = peer?.to_canonical();
    if !is_trusted(&client) {
        return Some(client);
    }
    let entries = forwarded_for
        .iter()
        .flat_map(|header| header.split(','))
        .rev();
    for entry in entries {
        let entry = entry.trim();
        let Some(ip) = entry
            .parse::<IpAddr>()
            .ok()
            .or_else(|| entry.parse::<std::net::SocketAddr>().ok().map(|a| a.ip()))
        else {
            break;
        };
        let ip = ip.to_canonical();
        client = ip;
        if !is_trusted(&ip) {
            break;
        }
    }
    Some(client)
}

impl Limits {
    pub fn new(cfg: LimitsConfig) -> Arc<Limits> {
        Arc::new(Limits {
            cfg,
            state: Mutex::new(State::default()),
        })
    }

    pub fn config(&self) -> &LimitsConfig {
        &self.cfg
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes one token of `addr`'s bucket: 429 when it is empty.
    pub fn rate(&self, addr: Option<IpAddr>) -> Result<(), ApiError> {
        let rate = self.cfg.per_second_per_address;
        let Some(addr) = addr.filter(|_| rate > 0) else {
            return Ok(());
        };
        let rate = f64::from(rate);
        let now = Instant::now();
        let mut state = self.lock();
        if state.buckets.len() >= MAX_BUCKETS {
            state
                .buckets
                .retain(|_, b| b.tokens + now.duration_since(b.at).as_secs_f64() * rate < rate);
        }
        let bucket = state.buckets.entry(addr).or_insert(Bucket {
            tokens: rate,
            at: now,
        });
        bucket.tokens =
            (bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * rate).min(rate);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let wait = ((1.0 - bucket.tokens) / rate).ceil().max(1.0) as u64;
        Err(ApiError::TooManyRequests(
            format!(
                "too many new connections from your address (at most {} a second)",
                self.cfg.per_second_per_address
            ),
            wait,
        ))
    }

    /// A place for one request of `principal` from `addr`: 503 when the
    /// gateway is full, 429 when this principal or address is.
    pub fn admit(
        self: &Arc<Self>,
        principal: &str,
        addr: Option<IpAddr>,
    ) -> Result<Permit, ApiError> {
        let cfg = &self.cfg;
        let mut state = self.lock();
        if cfg.max_connections > 0 && state.total >= cfg.max_connections {
            return Err(ApiError::Unavailable(format!(
                "kubefan is serving {} connections, the most allowed; retry shortly",
                cfg.max_connections
            )));
        }
        let per_principal = state.principals.get(principal).copied().unwrap_or(0);
        if cfg.max_per_principal > 0 && per_principal >= cfg.max_per_principal {
            return Err(ApiError::TooManyRequests(
                format!(
                    "{principal} already has {} connections open, the most allowed",
                    cfg.max_per_principal
                ),
                RETRY_AFTER_SECS,
            ));
        }
        if let Some(addr) = addr {
            let per_address = state.addresses.get(&addr).copied().unwrap_or(0);
            if cfg.max_per_address > 0 && per_address >= cfg.max_per_address {
                return Err(ApiError::TooManyRequests(
                    format!(
                        "your address already has {} connections open, the most allowed",
                        cfg.max_per_address
                    ),
                    RETRY_AFTER_SECS,
                ));
            }
            *state.addresses.entry(addr).or_default() += 1;
        }
        *state.principals.entry(principal.to_string()).or_default() += 1;
        state.total += 1;
        Ok(Permit {
            limits: self.clone(),
            principal: principal.to_string(),
            addr,
        })
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.lock().total
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut state = self.limits.lock();
        state.total = state.total.saturating_sub(1);
        if let Some(n) = state.principals.get_mut(&self.principal) {
            *n -= 1;
            if *n == 0 {
                state.principals.remove(&self.principal);
            }
        }
        if let Some(addr) = self.addr
            && let Some(n) = state.addresses.get_mut(&addr)
        {
            *n -= 1;
            if *n == 0 {
                state.addresses.remove(&addr);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_address_is_read_from_forwarded_for_only_through_trusted_proxies() {
        let trusted: Vec<ipnet::IpNet> = vec![
            "10.0.0.0/8".parse().unwrap(),
            "127.0.0.1/32".parse().unwrap(),
        ];
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        let at = |peer: &str, headers: &[&str]| client_address(ip(peer), headers, &trusted);
        // Not from a trusted proxy: the header is ignored.
        assert_eq!(at("192.0.2.1", &["198.51.100.7"]), ip("192.0.2.1"));
        // From the ingress: the address it appended.
        assert_eq!(at("10.1.2.3", &["198.51.100.7"]), ip("198.51.100.7"));
        // Through two proxies; what the client wrote on the left is not read.
        assert_eq!(
            at("10.1.2.3", &["6.6.6.6, 198.51.100.7, 10.9.9.9"]),
            ip("198.51.100.7")
        );
        // Several headers make one list; ports and IPv6 are understood.
        assert_eq!(
            at("127.0.0.1", &["6.6.6.6", "[2001:db8::1]:443"]),
            ip("2001:db8::1")
        );
        // Something that is not an address ends the walk at the proxy
        // that passed it on.
        assert_eq!(at("10.1.2.3", &["198.51.100.7, unknown"]), ip("10.1.2.3"));
        assert_eq!(
            at("10.1.2.3", &["198.51.100.7, unknown, 10.0.0.9"]),
            ip("10.0.0.9")
        );
        // No header: the proxy itself.
        assert_eq!(at("10.1.2.3", &[]), ip("10.1.2.3"));
        // Nothing trusted: always the peer.
        assert_eq!(
            client_address(ip("10.1.2.3"), &["198.51.100.7"], &[]),
            ip("10.1.2.3")
        );
    }

    fn limits(f: impl FnOnce(&mut LimitsConfig)) -> Arc<Limits> {
        let mut cfg = LimitsConfig::default();
        f(&mut cfg);
        Limits::new(cfg)
    }

    #[test]
    fn handshakes_are_counted_per_peer_and_a_trusted_proxys_are_not() {
        let mut cfg = LimitsConfig {
            max_pending_handshakes_per_address: 2,
            ..LimitsConfig::default()
        };
        cfg.trusted_proxies = vec!["10.9.0.0/16".parse().unwrap()];
        let h = Handshakes::new(&cfg);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        let first = h.begin(Some(a)).expect("one");
        let second = h.begin(Some(mapped)).expect("two: the same address");
        assert!(h.begin(Some(a)).is_none(), "a third is refused");
        assert!(
            h.begin(Some("10.0.0.2".parse().unwrap())).is_some(),
            "another address"
        );
        drop(first);
        assert_eq!(h.pending(a), 1);
        assert!(h.begin(Some(a)).is_some(), "a place was given back");
        drop(second);
        let proxy: IpAddr = "10.9.1.1".parse().unwrap();
        let held: Vec<_> = (0..10)
            .map(|_| h.begin(Some(proxy)).expect("a trusted proxy"))
            .collect();
        assert_eq!(h.pending(proxy), 0);
        drop(held);
        // 0: no limit.
        let none = Handshakes::new(&LimitsConfig {
            max_pending_handshakes_per_address: 0,
            ..LimitsConfig::default()
        });
        let held: Vec<_> = (0..1000).map(|_| none.begin(Some(a)).unwrap()).collect();
        assert_eq!(held.len(), 1000);
    }

    #[test]
    fn permits_count_and_give_back() {
        let l = limits(|c| {
            c.max_connections = 3;
            c.max_per_principal = 2;
            c.max_per_address = 2;
        });
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let p1 = l.admit("alice", Some(a)).unwrap();
        let _p2 = l.admit("alice", Some(b)).unwrap();
        assert!(matches!(
            l.admit("alice", Some(b)),
            Err(ApiError::TooManyRequests(..))
        ));
        let _p3 = l.admit("bob", Some(a)).unwrap();
        assert!(matches!(
            l.admit("carol", None),
            Err(ApiError::Unavailable(_))
        ));
        drop(p1);
        let _p4 = l.admit("carol", Some(a)).unwrap();
        assert_eq!(l.in_flight(), 3);
    }

    #[test]
    fn an_ipv4_peer_of_a_dual_stack_listener_is_its_ipv4_address() {
        let trusted: Vec<ipnet::IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let mapped: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        assert_eq!(
            client_address(Some(mapped), &["198.51.100.7"], &trusted),
            Some("198.51.100.7".parse().unwrap()),
            "a trusted proxy's"
        );
        assert_eq!(
            client_address(Some("::ffff:192.0.2.9".parse().unwrap()), &[], &trusted),
            Some("192.0.2.9".parse().unwrap())
        );
    }

    #[test]
    fn rate_allows_a_burst_then_refuses() {
        let l = limits(|c| c.per_second_per_address = 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        l.rate(Some(a)).unwrap();
        l.rate(Some(a)).unwrap();
        assert!(matches!(
            l.rate(Some(a)),
            Err(ApiError::TooManyRequests(_, 1))
        ));
        l.rate(Some("10.0.0.2".parse().unwrap())).unwrap();
    }
}
