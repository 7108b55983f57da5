//! An access set: what one (user, groups) may read, compiled from the rules
//! its bindings grant, and the questions kubefan asks of it.
//!
//! Only the verbs kubefan serves are kept (`get`, `list`, `watch`; a `*`
//! verb grants all three): a change to who may `create` pods changes no
//! access set and wakes no stream. Per verb, API group and resource (each
//! possibly `*`, a resource possibly `pods/log` or `*/scale`) a `Reach`
//! says where the grant holds. Lookups follow `RuleAllows`
//! (`plugin/pkg/auth/authorizer/rbac/rbac.go`): a request's group matches
//! its own and `*`; its resource matches itself, `*`, and with a
//! subresource `resource/sub` and `*/sub`, never the bare resource.
//!
//! Two access sets compare equal when they were compiled from the same
//! grants. Within one (verb, group, resource) the form is canonical (a
//! wider grant absorbs narrower ones); across them it is not (`*` and
//! `pods` granting the same are two entries), so two sets granting the
//! same through different rules may compare unequal: a caller comparing
//! sets may do needless work, never miss a change.

use std::collections::{BTreeMap, BTreeSet};

use super::object::Rule;
use crate::auth::Verb;

/// Where the rules of one binding hold.
#[derive(Debug, Clone, Copy)]
pub(super) enum Within<'a> {
    /// A ClusterRoleBinding: every namespace, and cluster-scoped objects.
    Cluster,
    /// A RoleBinding: objects in its namespace.
    Namespace(&'a str),
}

/// Where a grant of one (verb, group, resource) holds. Canonical: nothing
/// in it is implied by another part of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Reach {
    /// Everything, in every namespace and cluster-wide.
    everywhere: bool,
    /// Objects of these names in every namespace and cluster-wide
    /// (`resourceNames` through a ClusterRoleBinding).
    names: BTreeSet<String>,
    /// Every object in these namespaces.
    namespaces: BTreeSet<String>,
    /// Objects of these names in these namespaces (`resourceNames` through a
    /// RoleBinding).
    named: BTreeMap<String, BTreeSet<String>>,
}

impl Reach {
    /// Adds a grant of `name` (`None`: every name) `within`.
    fn add(&mut self, within: Within<'_>, name: Option<&str>) {
        if self.everywhere {
            return;
        }
        match (within, name) {
            (Within::Cluster, None) => *self = Reach::everywhere(),
            (Within::Cluster, Some(name)) => {
                self.names.insert(name.to_string());
                self.named.retain(|_, names| {
                    names.remove(name);
                    !names.is_empty()
                });
            }
            (Within::Namespace(ns), None) => {
                self.namespaces.insert(ns.to_string());
                self.named.remove(ns);
            }
            (Within::Namespace(ns), Some(name)) => {
                if !self.names.contains(name) && !self.namespaces.contains(ns) {
                    self.named
                        .entry(ns.to_string())
                        .or_default()
                        .insert(name.to_string());
                }
            }
        }
    }

    fn everywhere() -> Reach {
        Reach {
            everywhere: true,
            ..Reach::default()
        }
    }

    /// Whether a request in `namespace` (empty: cluster-wide) naming `name`
    /// (empty: the collection) is allowed.
    fn allows(&self, namespace: &str, name: &str) -> bool {
        self.everywhere
            || self.names.contains(name)
            || (!namespace.is_empty() && self.namespaces.contains(namespace))
            || self
                .named
                .get(namespace)
                .is_some_and(|names| names.contains(name))
    }

    /// Adds to `out` the namespaces where the collection may be read.
    /// True when every namespace may.
    fn collection(&self, out: &mut BTreeSet<String>) -> bool {
        if self.allows("", "") {
            return true;
        }
        out.extend(self.namespaces.iter().cloned());
        out.extend(
            self.named
                .iter()
                .filter(|(_, names)| names.contains(""))
                .map(|(ns, _)| ns.clone()),
        );
        false
    }
}

/// Per API group, per resource.
type Grants = BTreeMap<String, BTreeMap<String, Reach>>;

/// What one (user, groups) may get, list and watch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessSet {
    /// Indexed by [`slot`].
    verbs: [Grants; 3],
}

const VERBS: [Verb; 3] = [Verb::Get, Verb::List, Verb::Watch];

fn slot(verb: Verb) -> usize {
    match verb {
        Verb::Get => 0,
        Verb::List => 1,
        Verb::Watch => 2,
    }
}

/// The attributes of one request, as kube-apiserver's `RequestInfo` sets
/// them (`k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`).
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub verb: Verb,
    /// `""` for the core group.
    pub group: &'a str,
    /// The plural (`pods`).
    pub resource: &'a str,
    /// `""` for the resource itself.
    pub subresource: &'a str,
    /// `""` for a cluster-scoped request (a cluster-scoped resource, or a
    /// collection across namespaces). Note `GET /api/v1/namespaces/NAME`
    /// is in namespace `NAME`.
    pub namespace: &'a str,
    /// The object's name: a `get`, or a `list`/`watch` whose field selector
    /// requires `metadata.name=NAME`; `""` for a collection.
    pub name: &'a str,
}

/// The namespaces where a collection may be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespaces {
    /// Every namespace, and the collection across namespaces (or, for a
    /// cluster-scoped resource, the collection).
    All,
    /// Only these (never empty); the collection across namespaces is
    /// refused by kube-apiserver.
    Only(BTreeSet<String>),
    /// None.
    Nothing,
}

impl AccessSet {
    /// Adds what `rule` grants `within` a binding's reach.
    pub(super) fn grant(&mut self, rule: &Rule, within: Within<'_>) {
        for verb in VERBS {
            if !rule.verbs.iter().any(|v| v == "*" || v == verb.as_str()) {
                continue;
            }
            let grants = &mut self.verbs[slot(verb)];
            for group in &rule.api_groups {
                let resources = grants.entry(group.clone()).or_default();
                for resource in &rule.resources {
                    let reach = resources.entry(resource.clone()).or_default();
                    if rule.resource_names.is_empty() {
                        reach.add(within, None);
                    }
                    for name in &rule.resource_names {
                        reach.add(within, Some(name));
                    }
                }
            }
        }
    }

    /// Whether nothing at all may be read.
    pub fn is_empty(&self) -> bool {
        self.verbs.iter().all(BTreeMap::is_empty)
    }

    /// The grants that can match `verb` on `group`/`resource`/`subresource`.
    fn reaches(&self, verb: Verb, group: &str, resource: &str, subresource: &str) -> Vec<&Reach> {
        let grants = &self.verbs[slot(verb)];
        let (combined, any_sub);
        let resources: Vec<&str> = if subresource.is_empty() {
            vec![resource, "*"]
        } else {
            combined = format!("{resource}/{subresource}");
            any_sub = format!("*/{subresource}");
            vec![&combined, "*", &any_sub]
        };
        let groups: &[&str] = if group == "*" { &["*"] } else { &[group, "*"] };
        groups
            .iter()
            .filter_map(|g| grants.get(*g))
            .flat_map(|by_resource| resources.iter().filter_map(|r| by_resource.get(*r)))
            .collect()
    }

    /// Whether `request` is allowed.
    pub fn allows(&self, request: &Request<'_>) -> bool {
        self.reaches(
            request.verb,
            request.group,
            request.resource,
            request.subresource,
        )
        .into_iter()
        .any(|reach| reach.allows(request.namespace, request.name))
    }

    /// The namespaces in which `verb` (`list` or `watch`) may read the
    /// whole collection of `group`/`resource`. For a cluster-scoped
    /// resource, anything but [`Namespaces::All`] means no.
    pub fn namespaces(&self, verb: Verb, group: &str, resource: &str) -> Namespaces {
        let mut some = BTreeSet::new();
        for reach in self.reaches(verb, group, resource, "") {
            if reach.collection(&mut some) {
                return Namespaces::All;
            }
        }
        if some.is_empty() {
            Namespaces::Nothing
        } else {
            Namespaces::Only(some)
        }
    }

    /// Whether the collection of `group`/`resource` may be read with
    /// `verb` across every namespace, or (a cluster-scoped resource) at
    /// all.
    pub fn cluster_wide(&self, verb: Verb, group: &str, resource: &str) -> bool {
        self.namespaces(verb, group, resource) == Namespaces::All
    }

    /// Whether object `name` of `group`/`resource` in `namespace` (empty:
    /// a cluster-scoped object) may be read with `get`. A Namespace object
    /// counts as being in itself, as kube-apiserver reads
    /// `GET /api/v1/namespaces/NAME` ([`request_namespace`]).
    pub fn may_get(&self, group: &str, resource: &str, namespace: &str, name: &str) -> bool {
        self.allows(&Request {
            verb: Verb::Get,
            group,
            resource,
            subresource: "",
            namespace: request_namespace(Verb::Get, group, resource, namespace, name),
            name,
        })
    }
}

/// The namespace kube-apiserver's `RequestInfo` gives a request of `verb`
/// for object `name` of `group`/`resource` in `namespace`: its own, but a
/// Namespace's `get` (`GET /api/v1/namespaces/NAME`) is in namespace NAME
/// (`k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`); a list of
/// namespaces is in none.
pub fn request_namespace<'a>(
    verb: Verb,
    group: &str,
    resource: &str,
    namespace: &'a str,
    name: &'a str,
) -> &'a str {
    if verb == Verb::Get && group.is_empty() && resource == "namespaces" {
        name
    } else {
        namespace
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> Rule {
        let own = |items: &[&str]| items.iter().map(|s| s.to_string()).collect();
        Rule {
            verbs: own(verbs),
            api_groups: own(groups),
            resources: own(resources),
            resource_names: own(names),
        }
    }

    fn set(grants: &[(Rule, Within<'_>)]) -> AccessSet {
        let mut set = AccessSet::default();
        for (rule, within) in grants {
            set.grant(rule, *within);
        }
        set
    }

    #[test]
    fn wider_grants_absorb_narrower_ones_in_any_order() {
        let pods = |names: &[&str]| rule(&["get"], &[""], &["pods"], names);
        let grants = [
            (pods(&["x"]), Within::Namespace("a")),
            (pods(&["y"]), Within::Namespace("b")),
            (pods(&["y"]), Within::Cluster),
            (pods(&[]), Within::Namespace("a")),
        ];
        let forward = set(&grants);
        let mut reversed = grants.clone();
        reversed.reverse();
        assert_eq!(forward, set(&reversed));
        assert_eq!(
            forward,
            set(&[
                (pods(&["y"]), Within::Cluster),
                (pods(&[]), Within::Namespace("a"))
            ]),
        );
        let everywhere = (pods(&[]), Within::Cluster);
        let mut all = grants.to_vec();
        all.push(everywhere.clone());
        assert_eq!(set(&all), set(&[everywhere]));
    }

    #[test]
    fn only_the_verbs_kubefan_serves_are_kept() {
        let writes = set(&[(
            rule(&["create", "delete", "patch"], &[""], &["pods"], &[]),
            Within::Cluster,
        )]);
        assert!(writes.is_empty());
        let star = set(&[(rule(&["*"], &[""], &["pods"], &[]), Within::Cluster)]);
        for verb in VERBS {
            assert!(star.cluster_wide(verb, "", "pods"), "{verb:?}");
        }
    }

    #[test]
    fn the_collection_is_read_where_a_grant_names_no_object() {
        let set = set(&[
            (
                rule(&["list"], &[""], &["pods"], &[]),
                Within::Namespace("a"),
            ),
            (
                rule(&["list"], &[""], &["pods"], &["x"]),
                Within::Namespace("b"),
            ),
            (rule(&["list"], &[""], &["pods"], &["x"]), Within::Cluster),
        ]);
        assert_eq!(
            set.namespaces(Verb::List, "", "pods"),
            Namespaces::Only(BTreeSet::from(["a".to_string()]))
        );
        assert_eq!(set.namespaces(Verb::Watch, "", "pods"), Namespaces::Nothing);
        let request = |namespace, name| Request {
            verb: Verb::List,
            group: "",
            resource: "pods",
            subresource: "",
            namespace,
            name,
        };
        assert!(set.allows(&request("b", "x")), "a list naming x");
        assert!(set.allows(&request("c", "x")), "x everywhere");
        assert!(!set.allows(&request("b", "")));
    }
}
