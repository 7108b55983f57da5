//! The resource policy: which resources clients may use. Secrets are
//! refused unless `allow_secrets` (even when listed in the allow list); a
//! resource named by `deny_resources` is refused; a non-empty
//! `allow_resources` refuses everything it does not name. Configured names
//! are resolved through the current discovery catalog like client names
//! (`po` is `pods`), so a name for a CRD installed later takes effect once
//! it appears.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{Catalog, Informers, ResourceInfo, UpstreamConfig};

const SECRETS_REFUSED: &str = " (Secrets are refused unless --allow-secrets)";
const DENIED: &str = " (refused by --deny-resources)";
const NOT_ALLOWED: &str = " (not listed in --allow-resources)";

/// Why the policy refuses a resource (the text of [`super::Error::Forbidden`]),
/// or `None` when it is served.
pub(super) fn refusal(
    cfg: &UpstreamConfig,
    catalog: &Catalog,
    info: &ResourceInfo,
) -> Option<&'static str> {
    let key = info.canonical_name();
    if info.api.group.is_empty() && info.api.plural == "secrets" && !cfg.allow_secrets {
        return Some(SECRETS_REFUSED);
    }
    let named = |list: &[String]| {
        list.iter().any(|entry| {
            let entry = entry.trim().to_ascii_lowercase();
            entry == key
                || catalog
                    .resolve(&entry)
                    .is_some_and(|r| r.canonical_name() == key)
        })
    };
    if named(&cfg.deny_resources) {
        return Some(DENIED);
    }
    if !cfg.allow_resources.is_empty() && !named(&cfg.allow_resources) {
        return Some(NOT_ALLOWED);
    }
    None
}

/// Policy names the catalog does not resolve, with the flag naming them.
fn unknown_policy_names<'a>(
    cfg: &'a UpstreamConfig,
    catalog: &Catalog,
) -> Vec<(&'static str, &'a str)> {
    let allow = cfg.allow_resources.iter().map(|n| ("--allow-resources", n));
    let deny = cfg.deny_resources.iter().map(|n| ("--deny-resources", n));
    allow
        .chain(deny)
        .filter(|(_, n)| catalog.resolve(n).is_none())
        .map(|(flag, n)| (flag, n.as_str()))
        .collect()
}

impl Informers {
    /// Warns about allow/deny names discovery does not know. False when
    /// discovery failed (try again later).
    pub(super) async fn check_policy_names(&self) -> bool {
        let cfg = &self.cfg;
        if (cfg.allow_resources.is_empty() && cfg.deny_resources.is_empty())
            || self.policy_checked.load(Ordering::Relaxed)
        {
            return true;
        }
        let catalog = match self.current_catalog() {
            Some(catalog) => catalog,
            None => match self.refresh(Instant::now()).await {
                Ok(catalog) => catalog,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot check the resource policy against discovery yet");
                    return false;
                }
            },
        };
        for (flag, name) in unknown_policy_names(cfg, &catalog) {
            tracing::warn!(flag, resource = %name,
                "the upstream does not serve this resource (yet); the rule applies if it appears");
        }
        self.policy_checked.store(true, Ordering::Relaxed);
        true
    }

    /// Whether the policy lets clients use this resource (what the
    /// Kubernetes face's discovery advertises).
    pub fn serves(&self, info: &ResourceInfo) -> bool {
        let catalog = self.current_catalog().unwrap_or_default();
        refusal(&self.cfg, &catalog, info).is_none() && self.self_access.refused(info).is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(group: &str, plural: &str, kind: &str, short: &[&str]) -> ResourceInfo {
        ResourceInfo::fixture(group, plural, kind, short)
    }

    fn catalog() -> Catalog {
        Catalog::from_resources(vec![
            info("", "pods", "Pod", &["po"]),
            info("", "secrets", "Secret", &[]),
            info("", "services", "Service", &["svc"]),
            info("apps", "deployments", "Deployment", &["deploy"]),
            info("metrics.k8s.io", "pods", "PodMetrics", &[]),
        ])
    }

    fn policy(allow: &[&str], deny: &[&str], secrets: bool) -> UpstreamConfig {
        UpstreamConfig {
            allow_resources: allow.iter().map(|s| s.to_string()).collect(),
            deny_resources: deny.iter().map(|s| s.to_string()).collect(),
            allow_secrets: secrets,
            ..UpstreamConfig::default()
        }
    }

    fn verdicts(cfg: &UpstreamConfig) -> Vec<(String, Option<&'static str>)> {
        let c = catalog();
        c.resources()
            .iter()
            .map(|r| (r.canonical_name(), refusal(cfg, &c, r)))
            .collect()
    }

    #[test]
    fn deny_wins_over_allow_and_secrets_need_their_own_flag() {
        let cfg = policy(&["po", "Secrets", "deploy", "svc"], &["services"], false);
        let got = verdicts(&cfg);
        let want = [
            ("pods", None),
            ("secrets", Some(SECRETS_REFUSED)),
            ("services", Some(DENIED)),
            ("deployments.apps", None),
            // `po` resolves to the core group's pods, not to these.
            ("pods.metrics.k8s.io", Some(NOT_ALLOWED)),
        ];
        let want: Vec<_> = want.iter().map(|(n, v)| (n.to_string(), *v)).collect();
        assert_eq!(got, want);
        let cfg = policy(&[], &["deployments.apps", "pods.metrics.k8s.io"], true);
        let refused: Vec<_> = verdicts(&cfg)
            .into_iter()
            .filter(|(_, v)| v.is_some())
            .map(|(n, _)| n)
            .collect();
        assert_eq!(refused, ["deployments.apps", "pods.metrics.k8s.io"]);
    }

    #[test]
    fn unknown_policy_names_are_reported_with_their_flag() {
        let cfg = policy(
            &["pods", "widgets.example.com"],
            &["gadgets", "deploy"],
            false,
        );
        assert_eq!(
            unknown_policy_names(&cfg, &catalog()),
            [
                ("--allow-resources", "widgets.example.com"),
                ("--deny-resources", "gadgets")
            ]
        );
    }
}
