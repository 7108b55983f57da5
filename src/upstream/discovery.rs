//! Resource discovery: which resources the upstream serves, and how a name
//! a client uses (`pods`, `pod`, `po`, `deployments.apps`, `deploy`,
//! `Deployment`) maps to one of them.

use kube::Client;
use kube::core::ApiResource;

/// One listable, watchable resource the upstream serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceInfo {
    pub api: ApiResource,
    pub namespaced: bool,
    pub singular: String,
    pub short_names: Vec<String>,
}

impl ResourceInfo {
    /// `pods` for the core group, `deployments.apps` otherwise: the name
    /// hubs, metrics and logs use.
    pub fn canonical_name(&self) -> String {
        if self.api.group.is_empty() {
            self.api.plural.clone()
        } else {
            format!("{}.{}", self.api.plural, self.api.group)
        }
    }

    fn answers_to(&self, name: &str) -> bool {
        let (base, group) = match name.split_once('.') {
            Some((base, group)) => (base, Some(group)),
            None => (name, None),
        };
        if let Some(group) = group {
            // `plural.group` or `plural.version.group`, as kubectl accepts.
            let full_group = group == self.api.group;
            let versioned = group
                .split_once('.')
                .is_some_and(|(v, g)| v == self.api.version && g == self.api.group);
            let core = group == "core" && self.api.group.is_empty();
            return (full_group || versioned || core)
                && (base == self.api.plural || base == self.singular);
        }
        base == self.api.plural
            || base == self.singular
            || base.eq_ignore_ascii_case(&self.api.kind)
            || self.short_names.iter().any(|s| s == base)
    }
}

/// Everything the upstream serves that can be listed and watched.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    resources: Vec<ResourceInfo>,
}

impl Catalog {
    /// Reads `/api/v1` and every group's preferred version under `/apis`.
    pub async fn discover(client: &Client) -> Result<Catalog, kube::Error> {
        let mut resources = Vec::new();
        let core = client.list_core_api_resources("v1").await?;
        add_list(&mut resources, "", "v1", core);
        let groups = client.list_api_groups().await?;
        for group in groups.groups {
            let Some(version) = group
                .preferred_version
                .as_ref()
                .or_else(|| group.versions.first())
                .map(|v| v.version.clone())
            else {
                continue;
            };
            let api_version = format!("{}/{}", group.name, version);
            match client.list_api_group_resources(&api_version).await {
                Ok(list) => add_list(&mut resources, &group.name, &version, list),
                // One broken aggregated API must not hide the others.
                Err(err) => {
                    tracing::warn!(group = %api_version, error = %err, "discovery of a group failed")
                }
            }
        }
        Ok(Catalog { resources })
    }

    pub fn from_resources(resources: Vec<ResourceInfo>) -> Catalog {
        Catalog { resources }
    }

    /// Finds a resource by plural, singular, short name, kind or
    /// `plural.group`. The core group wins over others, then the order
    /// the upstream lists groups in (its priority), as kubectl resolves.
    pub fn resolve(&self, name: &str) -> Option<&ResourceInfo> {
        let name = name.trim().to_ascii_lowercase();
        if name.is_empty() {
            return None;
        }
        self.resources.iter().find(|r| r.answers_to(&name))
    }

    pub fn resources(&self) -> &[ResourceInfo] {
        &self.resources
    }
}

fn add_list(
    out: &mut Vec<ResourceInfo>,
    group: &str,
    version: &str,
    list: k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList,
) {
    for r in list.resources {
        // Subresources (`pods/log`) are not objects to watch.
        if r.name.contains('/') {
            continue;
        }
        let can = |verb: &str| r.verbs.iter().any(|v| v == verb);
        if !(can("list") && can("watch")) {
            continue;
        }
        let group = r
            .group
            .clone()
            .filter(|g| !g.is_empty())
            .unwrap_or_else(|| group.to_string());
        let version = r
            .version
            .clone()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| version.to_string());
        let api_version = if group.is_empty() {
            version.clone()
        } else {
            format!("{group}/{version}")
        };
        let singular = if r.singular_name.is_empty() {
            r.kind.to_ascii_lowercase()
        } else {
            r.singular_name.clone()
        };
        out.push(ResourceInfo {
            api: ApiResource {
                group,
                version,
                api_version,
                kind: r.kind.clone(),
                plural: r.name.clone(),
            },
            namespaced: r.namespaced,
            singular,
            short_names: r.short_names.clone().unwrap_or_default(),
        });
    }
}

#[cfg(test)]
impl ResourceInfo {
    /// A namespaced `v1` resource fixture for tests.
    pub(crate) fn fixture(group: &str, plural: &str, kind: &str, short: &[&str]) -> ResourceInfo {
        ResourceInfo {
            api: ApiResource {
                group: group.into(),
                version: "v1".into(),
                api_version: if group.is_empty() {
                    "v1".into()
                } else {
                    format!("{group}/v1")
                },
                kind: kind.into(),
                plural: plural.into(),
            },
            namespaced: true,
            singular: kind.to_ascii_lowercase(),
            short_names: short.iter().map(|s| s.to_string()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(group: &str, plural: &str, kind: &str, short: &[&str]) -> ResourceInfo {
        ResourceInfo::fixture(group, plural, kind, short)
    }

    #[test]
    fn names_resolve_like_kubectl() {
        let c = Catalog::from_resources(vec![
            info("", "pods", "Pod", &["po"]),
            info("apps", "deployments", "Deployment", &["deploy"]),
            info("metrics.k8s.io", "pods", "PodMetrics", &[]),
        ]);
        for name in ["pods", "pod", "po", "Pod", "pods.core", " PODS "] {
            assert_eq!(c.resolve(name).unwrap().canonical_name(), "pods", "{name}");
        }
        for name in [
            "deployments",
            "deploy",
            "deployments.apps",
            "deployment.apps",
            "deployments.v1.apps",
        ] {
            assert_eq!(
                c.resolve(name).unwrap().canonical_name(),
                "deployments.apps",
                "{name}"
            );
        }
        assert_eq!(
            c.resolve("pods.metrics.k8s.io").unwrap().api.kind,
            "PodMetrics"
        );
        assert!(c.resolve("podz").is_none());
        assert!(c.resolve("deployments.extensions").is_none());
        assert!(c.resolve("").is_none());
    }
}
