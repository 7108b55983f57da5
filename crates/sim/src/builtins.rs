//! The resources every `Sim` starts with, and what each may be selected by.

use super::resource::ResourceDef;

/// Resources every `Sim` starts with.
pub(crate) fn builtins() -> Vec<ResourceDef> {
    vec![
        ResourceDef::new("", "v1", "pods", "Pod", true)
            .with_short_names(&["po"])
            .with_selectable_fields(&[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ]),
        ResourceDef::new("", "v1", "nodes", "Node", false)
            .with_short_names(&["no"])
            .with_selectable_fields(&["metadata.namespace", "spec.unschedulable"]),
        ResourceDef::new("", "v1", "namespaces", "Namespace", false)
            .with_short_names(&["ns"])
            .with_selectable_fields(&["metadata.namespace", "status.phase"]),
        ResourceDef::new("", "v1", "services", "Service", true).with_short_names(&["svc"]),
        ResourceDef::new("", "v1", "configmaps", "ConfigMap", true).with_short_names(&["cm"]),
        ResourceDef::new("", "v1", "secrets", "Secret", true).with_selectable_fields(&["type"]),
        ResourceDef::new("apps", "v1", "deployments", "Deployment", true)
            .with_short_names(&["deploy"]),
    ]
}
