//! One hostile client against the real binary: each test starts `kubefan
//! demo` (the gateway and its simulated cluster, 20 changes a second) as
//! a child process, keeps a legitimate SSE viewer on it, attacks it from
//! loopback, and checks what the attack did to everyone else
//! ([`harness::withstands`]): the attacker is refused or cut off within
//! 3 s, the viewer's longest wait for a change stays under 1 s, fresh
//! requests are answered within 100 ms, and the gateway's RSS afterwards
//! is within 10 MB of before.
//!
//! Its own test binary, and its tests one at a time
//! ([`harness::Gateway::start`] holds a lock): the figures are the
//! attack's, not those of other tests sharing the two cores.

mod harness;
mod http2;
mod requests;
mod websocket;
