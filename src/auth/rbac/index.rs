//! The index of RBAC objects: roles by key, the rules each ClusterRole
//! grants after aggregation, and bindings by the users and groups they
//! name, so that an access set is computed from the bindings of one user
//! and its groups only, and a change names the users and groups it may
//! affect ([`Affected`]).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use super::Kind;
use super::access::{AccessSet, Within};
use super::aggregation;
use super::identity::Identity;
use super::object::{Binding, ClusterRole, ObjectKey, Parsed, RoleRef, Rule, Subject};

#[derive(Default)]
pub struct Index {
    roles: HashMap<ObjectKey, Arc<Vec<Rule>>>,
    cluster_roles: HashMap<String, ClusterRole>,
    /// What each ClusterRole grants, aggregation included.
    effective: HashMap<String, Arc<Vec<Rule>>>,
    /// RoleBindings (keys with a namespace) and ClusterRoleBindings.
    bindings: HashMap<ObjectKey, Binding>,
    by_user: HashMap<String, BTreeSet<ObjectKey>>,
    by_group: HashMap<String, BTreeSet<ObjectKey>>,
    /// Objects present upstream that did not parse.
    ignored: BTreeSet<(Kind, ObjectKey)>,
}

/// The users and groups whose access a change may have altered.
#[derive(Debug, Default)]
pub struct Affected {
    users: HashSet<String>,
    groups: HashSet<String>,
}

impl Affected {
    fn binding(&mut self, binding: &Binding) {
        for subject in &binding.subjects {
            match subject {
                Subject::User(user) => self.users.insert(user.clone()),
                Subject::Group(group) => self.groups.insert(group.clone()),
            };
        }
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty() && self.groups.is_empty()
    }

    pub fn touches(&self, identity: &Identity) -> bool {
        self.users.contains(identity.user())
            || identity.groups().iter().any(|g| self.groups.contains(g))
    }
}

impl Index {
    /// `key` of `kind` is now `parsed`; `None`: it is there but does not
    /// parse, and grants nothing.
    pub fn put(&mut self, kind: Kind, key: ObjectKey, parsed: Option<Parsed>) -> Affected {
        if parsed.is_some() {
            self.ignored.remove(&(kind, key.clone()));
        } else {
            self.ignored.insert((kind, key.clone()));
        }
        let mut affected = Affected::default();
        self.set(kind, key, parsed, &mut affected);
        if kind == Kind::ClusterRole {
            self.reaggregate(&mut affected);
        }
        affected
    }

    /// `key` of `kind` is gone.
    pub fn remove(&mut self, kind: Kind, key: ObjectKey) -> Affected {
        self.ignored.remove(&(kind, key.clone()));
        let mut affected = Affected::default();
        self.set(kind, key, None, &mut affected);
        if kind == Kind::ClusterRole {
            self.reaggregate(&mut affected);
        }
        affected
    }

    /// Every object of `kind` is now one of `objects` (a relist).
    pub fn replace(&mut self, kind: Kind, objects: Vec<(ObjectKey, Option<Parsed>)>) -> Affected {
        let listed: HashSet<&ObjectKey> = objects.iter().map(|(key, _)| key).collect();
        let gone: Vec<ObjectKey> = self
            .keys(kind)
            .into_iter()
            .filter(|key| !listed.contains(key))
            .collect();
        let mut affected = Affected::default();
        for key in gone {
            self.ignored.remove(&(kind, key.clone()));
            self.set(kind, key, None, &mut affected);
        }
        for (key, parsed) in objects {
            if parsed.is_some() {
                self.ignored.remove(&(kind, key.clone()));
            } else {
                self.ignored.insert((kind, key.clone()));
            }
            self.set(kind, key, parsed, &mut affected);
        }
        if kind == Kind::ClusterRole {
            self.reaggregate(&mut affected);
        }
        affected
    }

    pub fn ignored(&self) -> usize {
        self.ignored.len()
    }

    fn keys(&self, kind: Kind) -> Vec<ObjectKey> {
        let mut keys: Vec<ObjectKey> = match kind {
            Kind::Role => self.roles.keys().cloned().collect(),
            Kind::ClusterRole => self
                .cluster_roles
                .keys()
                .map(|name| ObjectKey::new(kind, "", name))
                .collect(),
            Kind::RoleBinding | Kind::ClusterRoleBinding => self
                .bindings
                .keys()
                .filter(|key| key.is_cluster() != kind.namespaced())
                .cloned()
                .collect(),
        };
        keys.extend(
            self.ignored
                .iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, key)| key.clone()),
        );
        keys
    }

    /// Stores `parsed` (`None`: nothing) at `key`, adding to `affected`
    /// whom the difference concerns. ClusterRoles are re-aggregated by the
    /// caller, once per batch.
    fn set(&mut self, kind: Kind, key: ObjectKey, parsed: Option<Parsed>, affected: &mut Affected) {
        match kind {
            Kind::Role => {
                let new = match parsed {
                    Some(Parsed::Role(rules)) => Some(rules),
                    _ => None,
                };
                let old = match &new {
                    Some(rules) => self.roles.insert(key.clone(), rules.clone()),
                    None => self.roles.remove(&key),
                };
                if old != new {
                    let role = RoleRef::Role(key.name.clone());
                    for (binding_key, binding) in &self.bindings {
                        if binding_key.namespace == key.namespace && binding.role_ref == role {
                            affected.binding(binding);
                        }
                    }
                }
            }
            Kind::ClusterRole => match parsed {
                Some(Parsed::ClusterRole(role)) => {
                    self.cluster_roles.insert(key.name, role);
                }
                _ => {
                    self.cluster_roles.remove(&key.name);
                }
            },
            Kind::RoleBinding | Kind::ClusterRoleBinding => {
                let new = match parsed {
                    Some(Parsed::Binding(binding)) => Some(binding),
                    _ => None,
                };
                let old = self.bindings.remove(&key);
                if old == new {
                    if let Some(binding) = old {
                        self.bindings.insert(key, binding);
                    }
                    return;
                }
                if let Some(old) = &old {
                    affected.binding(old);
                    self.unindex(&key, old);
                }
                if let Some(new) = new {
                    affected.binding(&new);
                    self.index(&key, &new);
                    self.bindings.insert(key, new);
                }
            }
        }
    }

    fn index(&mut self, key: &ObjectKey, binding: &Binding) {
        for subject in &binding.subjects {
            let (map, name) = match subject {
                Subject::User(user) => (&mut self.by_user, user),
                Subject::Group(group) => (&mut self.by_group, group),
            };
            map.entry(name.clone()).or_default().insert(key.clone());
        }
    }

    fn unindex(&mut self, key: &ObjectKey, binding: &Binding) {
        for subject in &binding.subjects {
            let (map, name) = match subject {
                Subject::User(user) => (&mut self.by_user, user),
                Subject::Group(group) => (&mut self.by_group, group),
            };
            if let Some(keys) = map.get_mut(name) {
                keys.remove(key);
                if keys.is_empty() {
                    map.remove(name);
                }
            }
        }
    }

    /// Recomputes what each ClusterRole grants, and adds to `affected`
    /// the subjects of bindings to the roles whose grant changed.
    fn reaggregate(&mut self, affected: &mut Affected) {
        let new = aggregation::effective_rules(&self.cluster_roles);
        let old = std::mem::replace(&mut self.effective, new);
        let changed: HashSet<&String> = old
            .keys()
            .chain(self.effective.keys())
            .filter(|name| old.get(*name) != self.effective.get(*name))
            .collect();
        if changed.is_empty() {
            return;
        }
        for binding in self.bindings.values() {
            if let RoleRef::ClusterRole(name) = &binding.role_ref
                && changed.contains(name)
            {
                affected.binding(binding);
            }
        }
    }

    /// What `identity` may read: the rules of every binding naming its user
    /// or one of its groups, each within its binding's reach.
    pub fn evaluate(&self, identity: &Identity) -> AccessSet {
        let mut keys: BTreeSet<&ObjectKey> = BTreeSet::new();
        if let Some(bound) = self.by_user.get(identity.user()) {
            keys.extend(bound);
        }
        for group in identity.groups() {
            if let Some(bound) = self.by_group.get(group) {
                keys.extend(bound);
            }
        }
        let mut set = AccessSet::default();
        for key in keys {
            // `by_user` and `by_group` name only stored bindings (`set`
            // indexes a binding as it stores it and unindexes it as it
            // takes it out); a miss would grant nothing.
            let Some(binding) = self.bindings.get(key) else {
                continue;
            };
            let rules = match &binding.role_ref {
                // A ClusterRoleBinding's Role would be looked up in no
                // namespace, and is never found.
                RoleRef::Role(name) if !key.is_cluster() => self.roles.get(&ObjectKey {
                    namespace: key.namespace.clone(),
                    name: name.clone(),
                }),
                RoleRef::ClusterRole(name) => self.effective.get(name),
                RoleRef::Role(_) | RoleRef::Unsupported => None,
            };
            let within = if key.is_cluster() {
                Within::Cluster
            } else {
                Within::Namespace(&key.namespace)
            };
            for rule in rules.iter().flat_map(|rules| rules.iter()) {
                set.grant(rule, within);
            }
        }
        set
    }
}
