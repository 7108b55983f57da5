//! What part of a resource a subscriber may see, and how its stream follows
//! when that changes.
//!
//! The authorizer (`crate::auth`) hands a subscription a [`ScopeSource`]:
//! the namespaces its principal may see of the resource now, and an
//! [`Epoch`] that moves whenever that may have changed (RBAC objects
//! changed, a token no longer reviews). The subscription sees the
//! namespaces it asked for within that scope. When the scope changes, the
//! objects of namespaces it lost arrive as DELETED and those of namespaces
//! it gained as ADDED — the watch cache's transition rule
//! (`hub::transition`), as for a changing selector — and when nothing is
//! left, or the credentials ended, the stream ends with the source's
//! denial.
//!
//! # Ids of narrowed streams
//! A client resuming after a disconnect must get a fresh snapshot if its
//! scope changed while it was away: its state holds objects it may no
//! longer see, or lacks ones it now may. So when access narrows what a
//! stream shows (its namespaces are not simply the ones it asked for), its
//! ids carry a tag of the namespaces shown (`RV~TAG`, [`scope_tag`]); a
//! resume whose tag differs from the current one gets a RESET
//! (`AccessChanged`) and a fresh snapshot. The tag depends only on the
//! namespaces, so a resume on another replica works as before.

use sha2::{Digest, Sha256};

use super::Denial;
use crate::epoch::Epoch;

/// The namespaces a principal may see of a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every namespace (and cluster-scoped objects).
    All,
    /// These namespaces only.
    Only(Vec<String>),
    /// Nothing any more, for this reason.
    Denied(Denial),
}

/// Where a subscription learns its scope.
pub trait ScopeSource: Send + Sync {
    /// Moves whenever [`ScopeSource::scope`] may have changed.
    fn changes(&self) -> &Epoch;
    /// The scope now.
    fn scope(&self) -> Scope;
}

/// The namespaces a stream that asked for `requested` (empty: all) shows
/// within `scope` (empty: all), or why it shows nothing.
pub fn shown(requested: &[String], scope: &Scope) -> Result<Vec<String>, Denial> {
    let mut shown: Vec<String> = match scope {
        Scope::Denied(denial) => return Err(denial.clone()),
        Scope::All => requested.to_vec(),
        Scope::Only(granted) if requested.is_empty() => granted.clone(),
        Scope::Only(granted) => requested
            .iter()
            .filter(|ns| granted.contains(ns))
            .cloned()
            .collect(),
    };
    if shown.is_empty() && *scope != Scope::All {
        return Err(Denial {
            code: 403,
            reason: "Forbidden",
            message: "access to every namespace this stream showed was withdrawn".into(),
        });
    }
    shown.sort();
    shown.dedup();
    Ok(shown)
}

/// The tag the ids of a stream showing `shown` carry when asked for
/// `requested`: none when the stream shows what it asked for, else eight
/// hex digits of a digest of the namespaces shown.
pub fn scope_tag(requested: &[String], shown: &[String]) -> Option<String> {
    let mut asked = requested.to_vec();
    asked.sort();
    asked.dedup();
    if asked == shown {
        return None;
    }
    let digest = Sha256::digest(shown.join(",").as_bytes());
    Some(digest[..4].iter().map(|b| format!("{b:02x}")).collect())
}

/// A subscription's scoping: where its scope comes from, and the
/// namespaces it asked for (empty: all).
#[derive(Clone)]
pub struct Scoping {
    pub source: std::sync::Arc<dyn ScopeSource>,
    pub requested: Vec<String>,
}

impl std::fmt::Debug for Scoping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scoping")
            .field("requested", &self.requested)
            .finish_non_exhaustive()
    }
}

/// A scope that never changes (a JWT's claims).
pub struct FixedScope {
    scope: Scope,
    never: Epoch,
}

impl FixedScope {
    pub fn new(scope: Scope) -> FixedScope {
        FixedScope {
            scope,
            never: Epoch::default(),
        }
    }
}

impl ScopeSource for FixedScope {
    fn changes(&self) -> &Epoch {
        &self.never
    }

    fn scope(&self) -> Scope {
        self.scope.clone()
    }
}

/// A resume position: a resourceVersion, and the tag of the namespaces
/// the client's stream showed then (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    pub rv: u64,
    pub tag: Option<String>,
}

/// `RV` or `RV~TAG`: an event's id, as [`Position::parse`] reads it.
impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.tag {
            Some(tag) => write!(f, "{}~{tag}", self.rv),
            None => write!(f, "{}", self.rv),
        }
    }
}

/// A resourceVersion as clients write it: decimal digits within `u64` (no
/// sign or space, as Go's `strconv.ParseUint` reads one); `None` otherwise.
pub fn parse_rv(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

impl Position {
    /// `RV` or `RV~TAG`, as ids are written; `None` for what is neither.
    pub fn parse(id: &str) -> Option<Position> {
        let (rv, tag) = match id.split_once('~') {
            Some((rv, tag)) => {
                if tag.len() != 8 || !tag.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                (rv, Some(tag.to_ascii_lowercase()))
            }
            None => (id, None),
        };
        Some(Position {
            rv: parse_rv(rv)?,
            tag,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_stream_shows_what_it_asked_for_within_its_scope() {
        let only = |xs: &[&str]| Scope::Only(v(xs));
        assert_eq!(shown(&[], &Scope::All).unwrap(), v(&[]));
        assert_eq!(shown(&v(&["b"]), &Scope::All).unwrap(), v(&["b"]));
        assert_eq!(shown(&[], &only(&["b", "a"])).unwrap(), v(&["a", "b"]));
        assert_eq!(
            shown(&v(&["a", "c"]), &only(&["a", "b"])).unwrap(),
            v(&["a"])
        );
        assert_eq!(shown(&v(&["c"]), &only(&["a"])).unwrap_err().code, 403);
        assert_eq!(shown(&[], &only(&[])).unwrap_err().code, 403);
        let gone = Scope::Denied(Denial::expired());
        assert_eq!(shown(&[], &gone).unwrap_err().code, 401);
    }

    #[test]
    fn only_narrowed_streams_tag_their_ids_and_tags_follow_the_namespaces() {
        assert_eq!(scope_tag(&[], &[]), None);
        assert_eq!(scope_tag(&v(&["b", "a"]), &v(&["a", "b"])), None);
        let a = scope_tag(&[], &v(&["a"])).unwrap();
        assert_eq!(a.len(), 8);
        assert_eq!(scope_tag(&v(&["a", "x"]), &v(&["a"])).as_ref(), Some(&a));
        assert_ne!(scope_tag(&[], &v(&["a", "b"])).unwrap(), a);
    }

    #[test]
    fn positions_are_resource_versions_with_an_optional_tag() {
        assert_eq!(Position::parse("42"), Some(Position { rv: 42, tag: None }));
        assert_eq!(
            Position::parse("42~00ab12CD"),
            Some(Position {
                rv: 42,
                tag: Some("00ab12cd".into())
            })
        );
        for bad in ["", "x", "42~", "42~abc", "42~0123456z", "~00000000", "-1"] {
            assert_eq!(Position::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_position_is_decimal_digits_without_a_sign() {
        for bad in ["+42", "+42~00ab12cd", " 42", "18446744073709551616"] {
            assert_eq!(Position::parse(bad), None, "{bad}");
        }
        assert_eq!(parse_rv("18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_rv("007"), Some(7));
    }
}
