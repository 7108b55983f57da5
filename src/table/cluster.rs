//! Printers of cluster policy and configuration: poddisruptionbudgets,
//! rolebindings, clusterrolebindings, storageclasses, priorityclasses,
//! ingressclasses, networkpolicies, leases (kubernetes
//! `pkg/printers/internalversion/printers.go`, v1.36:
//! `printPodDisruptionBudget`, `printRoleBinding`,
//! `printClusterRoleBinding`, `printStorageClass`, `printPriorityClass`,
//! `printIngressClass`, `printNetworkPolicy`, `printLease`; `SubjectsStrings`
//! of `pkg/apis/rbac/helpers.go`, `IsDefaultAnnotation` of
//! `pkg/apis/storage/util`).

use serde_json::Value;

use super::cell::Cell;
use super::column::{AGE, Column, NAME};
use super::format::{Clock, format_label_selector};
use super::printer::Printed;
use super::read::{at, bool_at, int_at, list_at, obj_at, opt_bool_at, opt_str_at, str_at, time_at};
use super::swagger;

fn name(obj: &Value) -> Cell {
    Cell::from(str_at(obj, &["metadata", "name"]))
}

fn age(obj: &Value, clock: &Clock) -> Cell {
    Cell::Str(clock.since(time_at(obj, &["metadata", "creationTimestamp"])))
}

pub(super) const POD_DISRUPTION_BUDGET_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Min Available",
        "string",
        "The minimum number of pods that must be available.",
    ),
    Column::new(
        "Max Unavailable",
        "string",
        "The maximum number of pods that may be unavailable.",
    ),
    Column::new(
        "Allowed Disruptions",
        "integer",
        "Calculated number of pods that may be disrupted at this time.",
    ),
    AGE,
];

/// An `IntOrString` as `String()` prints it, `N/A` when unset.
fn int_or_string(obj: &Value, path: &[&str]) -> String {
    match at(obj, path) {
        Some(Value::Number(n)) => n
            .as_i64()
            .map_or_else(|| "N/A".to_string(), |i| i.to_string()),
        Some(Value::String(s)) => s.clone(),
        _ => "N/A".to_string(),
    }
}

pub(super) fn print_pod_disruption_budget(pdb: &Value, clock: &Clock) -> Printed {
    Printed::cells(vec![
        name(pdb),
        Cell::Str(int_or_string(pdb, &["spec", "minAvailable"])),
        Cell::Str(int_or_string(pdb, &["spec", "maxUnavailable"])),
        Cell::Int(int_at(pdb, &["status", "disruptionsAllowed"])),
        age(pdb, clock),
    ])
}

pub(super) const ROLE_BINDING_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Role", "string", swagger::ROLE_BINDING_ROLE_REF),
    AGE,
    Column::wide("Users", "string", "Users in the roleBinding"),
    Column::wide("Groups", "string", "Groups in the roleBinding"),
    Column::wide(
        "ServiceAccounts",
        "string",
        "ServiceAccounts in the roleBinding",
    ),
];

pub(super) const CLUSTER_ROLE_BINDING_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Role", "string", swagger::CLUSTER_ROLE_BINDING_ROLE_REF),
    AGE,
    Column::wide("Users", "string", "Users in the clusterRoleBinding"),
    Column::wide("Groups", "string", "Groups in the clusterRoleBinding"),
    Column::wide(
        "ServiceAccounts",
        "string",
        "ServiceAccounts in the clusterRoleBinding",
    ),
];

/// Either binding: `Kind/name` of the role, then (`SubjectsStrings`) the
/// users, groups and `namespace/name` service accounts.
pub(super) fn print_binding(binding: &Value, clock: &Clock) -> Printed {
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for subject in list_at(binding, &["subjects"]) {
        let name = str_at(subject, &["name"]);
        match str_at(subject, &["kind"]) {
            "ServiceAccount" => sas.push(format!("{}/{name}", str_at(subject, &["namespace"]))),
            "User" => users.push(name.to_string()),
            "Group" => groups.push(name.to_string()),
            _ => {}
        }
    }
    Printed::cells(vec![
        name(binding),
        Cell::Str(format!(
            "{}/{}",
            str_at(binding, &["roleRef", "kind"]),
            str_at(binding, &["roleRef", "name"])
        )),
        age(binding, clock),
        Cell::Str(users.join(", ")),
        Cell::Str(groups.join(", ")),
        Cell::Str(sas.join(", ")),
    ])
}

pub(super) const STORAGE_CLASS_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Provisioner", "string", swagger::STORAGE_CLASS_PROVISIONER),
    Column::new(
        "ReclaimPolicy",
        "string",
        swagger::STORAGE_CLASS_RECLAIM_POLICY,
    ),
    Column::new(
        "VolumeBindingMode",
        "string",
        swagger::STORAGE_CLASS_VOLUME_BINDING_MODE,
    ),
    Column::new(
        "AllowVolumeExpansion",
        "string",
        swagger::STORAGE_CLASS_ALLOW_VOLUME_EXPANSION,
    ),
    AGE,
];

/// `storageutil.IsDefaultAnnotation`: the GA or beta annotation is "true".
fn is_default_class(sc: &Value) -> bool {
    obj_at(sc, &["metadata", "annotations"]).is_some_and(|a| {
        [
            "storageclass.kubernetes.io/is-default-class",
            "storageclass.beta.kubernetes.io/is-default-class",
        ]
        .iter()
        .any(|k| a.get(*k).and_then(Value::as_str) == Some("true"))
    })
}

pub(super) fn print_storage_class(sc: &Value, clock: &Clock) -> Printed {
    let mut class = str_at(sc, &["metadata", "name"]).to_string();
    if is_default_class(sc) {
        class.push_str(" (default)");
    }
    Printed::cells(vec![
        Cell::Str(class),
        Cell::from(str_at(sc, &["provisioner"])),
        Cell::from(opt_str_at(sc, &["reclaimPolicy"]).unwrap_or("Delete")),
        Cell::from(opt_str_at(sc, &["volumeBindingMode"]).unwrap_or("Immediate")),
        Cell::Bool(opt_bool_at(sc, &["allowVolumeExpansion"]).unwrap_or(false)),
        age(sc, clock),
    ])
}

pub(super) const PRIORITY_CLASS_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Value", "integer", swagger::PRIORITY_CLASS_VALUE),
    Column::new(
        "Global-Default",
        "boolean",
        swagger::PRIORITY_CLASS_GLOBAL_DEFAULT,
    ),
    AGE,
    Column::new(
        "PreemptionPolicy",
        "string",
        swagger::PRIORITY_CLASS_PREEMPTION_POLICY,
    ),
];

pub(super) fn print_priority_class(pc: &Value, clock: &Clock) -> Printed {
    Printed::cells(vec![
        name(pc),
        Cell::Int(int_at(pc, &["value"])),
        Cell::Bool(bool_at(pc, &["globalDefault"])),
        age(pc, clock),
        Cell::from(str_at(pc, &["preemptionPolicy"])),
    ])
}

pub(super) const INGRESS_CLASS_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Controller",
        "string",
        "Controller that is responsible for handling this class",
    ),
    Column::new(
        "Parameters",
        "string",
        "A reference to a resource with additional parameters",
    ),
    AGE,
];

pub(super) fn print_ingress_class(ic: &Value, clock: &Clock) -> Printed {
    let parameters = match obj_at(ic, &["spec", "parameters"]) {
        None => "<none>".to_string(),
        Some(_) => {
            let mut p = str_at(ic, &["spec", "parameters", "kind"]).to_string();
            if let Some(group) = opt_str_at(ic, &["spec", "parameters", "apiGroup"]) {
                p = format!("{p}.{group}");
            }
            format!("{p}/{}", str_at(ic, &["spec", "parameters", "name"]))
        }
    };
    // v1.36: the default class says so.
    let mut name = str_at(ic, &["metadata", "name"]).to_string();
    if str_at(
        ic,
        &["metadata", "annotations", DEFAULT_INGRESS_CLASS_ANNOTATION],
    ) == "true"
    {
        name.push_str(" (default)");
    }
    Printed::cells(vec![
        Cell::Str(name),
        Cell::from(str_at(ic, &["spec", "controller"])),
        Cell::Str(parameters),
        age(ic, clock),
    ])
}

/// `networkingv1.AnnotationIsDefaultIngressClass`.
const DEFAULT_INGRESS_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";

pub(super) const NETWORK_POLICY_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Pod-Selector",
        "string",
        swagger::EXT_NETWORK_POLICY_SPEC_POD_SELECTOR,
    ),
    AGE,
];

pub(super) fn print_network_policy(np: &Value, clock: &Clock) -> Printed {
    Printed::cells(vec![
        name(np),
        Cell::Str(format_label_selector(np, &["spec", "podSelector"])),
        age(np, clock),
    ])
}

pub(super) const LEASE_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Holder", "string", swagger::LEASE_SPEC_HOLDER_IDENTITY),
    AGE,
];

pub(super) fn print_lease(lease: &Value, clock: &Clock) -> Printed {
    Printed::cells(vec![
        name(lease),
        Cell::from(str_at(lease, &["spec", "holderIdentity"])),
        age(lease, clock),
    ])
}

#[cfg(test)]
mod tests {
    //! Golden rows ported from kubernetes
    //! `pkg/printers/internalversion/printers_test.go`
    //! (`TestPrintPodDisruptionBudget`, `TestPrintRoleBinding`,
    //! `TestPrintClusterRoleBinding`, `TestPrintStorageClass`,
    //! `TestPrintPriorityClass`, `TestPrintIngressClass`,
    //! `TestPrintNetworkPolicy`, `TestPrintLease`).

    use serde_json::json;

    use super::super::test_support::{CLOCK, ago, wide_cells};
    use super::*;

    #[test]
    fn disruption_budgets_print_int_or_string_bounds() {
        let pdb = json!({"metadata": {"name": "pdb1", "namespace": "ns1", "creationTimestamp": ago(0)},
            "spec": {"minAvailable": 22}, "status": {"disruptionsAllowed": 5}});
        assert_eq!(
            wide_cells(&print_pod_disruption_budget(&pdb, &CLOCK)),
            json!(["pdb1", "22", "N/A", 5, "0s"])
        );
        let pdb = json!({"metadata": {"name": "pdb2", "creationTimestamp": ago(0)},
            "spec": {"maxUnavailable": "10%"}, "status": {"disruptionsAllowed": 3}});
        assert_eq!(
            wide_cells(&print_pod_disruption_budget(&pdb, &CLOCK)),
            json!(["pdb2", "N/A", "10%", 3, "0s"])
        );
    }

    #[test]
    fn bindings_print_role_and_subjects() {
        let b = json!({"metadata": {"name": "binding2", "creationTimestamp": ago(0)},
            "subjects": [{"kind": "User", "name": "user-name"}, {"kind": "Group", "name": "group-name"},
                {"kind": "ServiceAccount", "name": "service-account-name", "namespace": "service-account-namespace"}],
            "roleRef": {"kind": "Role", "name": "role-name"}});
        assert_eq!(
            wide_cells(&print_binding(&b, &CLOCK)),
            json!([
                "binding2",
                "Role/role-name",
                "0s",
                "user-name",
                "group-name",
                "service-account-namespace/service-account-name"
            ])
        );
    }

    #[test]
    fn storage_classes_print_defaults_and_the_default_class() {
        let sc = json!({"metadata": {"name": "sc1", "creationTimestamp": ago(0)},
            "provisioner": "kubernetes.io/glusterfs"});
        assert_eq!(
            wide_cells(&print_storage_class(&sc, &CLOCK)),
            json!([
                "sc1",
                "kubernetes.io/glusterfs",
                "Delete",
                "Immediate",
                false,
                "0s"
            ])
        );
        let sc = json!({"metadata": {"name": "sc6", "creationTimestamp": ago(300),
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "kubernetes.io/nfs", "reclaimPolicy": "Retain", "allowVolumeExpansion": true,
            "volumeBindingMode": "WaitForFirstConsumer"});
        assert_eq!(
            wide_cells(&print_storage_class(&sc, &CLOCK)),
            json!([
                "sc6 (default)",
                "kubernetes.io/nfs",
                "Retain",
                "WaitForFirstConsumer",
                true,
                "5m"
            ])
        );
    }

    #[test]
    fn priority_ingress_classes_network_policies_and_leases_print_their_fields() {
        let pc = json!({"metadata": {"name": "pc2", "creationTimestamp": ago(300)},
            "value": 1000000000, "globalDefault": true, "preemptionPolicy": "PreemptLowerPriority"});
        assert_eq!(
            wide_cells(&print_priority_class(&pc, &CLOCK)),
            json!(["pc2", 1000000000, true, "5m", "PreemptLowerPriority"])
        );
        let pc = json!({"metadata": {"name": "pc1"}, "value": 1});
        assert_eq!(
            wide_cells(&print_priority_class(&pc, &CLOCK)),
            json!(["pc1", 1, false, "<unknown>", ""])
        );
        let ic = json!({"metadata": {"name": "test1", "creationTimestamp": ago(10 * 365 * 24 * 3600)},
            "spec": {"controller": "example.com/controller",
                "parameters": {"apiGroup": "example.com", "kind": "customgroup", "name": "example"}}});
        assert_eq!(
            wide_cells(&print_ingress_class(&ic, &CLOCK)),
            json!([
                "test1",
                "example.com/controller",
                "customgroup.example.com/example",
                "10y"
            ])
        );
        let ic = json!({"metadata": {"name": "test2"}, "spec": {"controller": "example.com/controller2"}});
        assert_eq!(wide_cells(&print_ingress_class(&ic, &CLOCK))[2], "<none>");
        // v1.36's "example with default annotation".
        let ic = json!({"metadata": {"name": "test-default", "creationTimestamp": ago(9 * 365 * 24 * 3600),
                "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
            "spec": {"controller": "example.com/controller"}});
        assert_eq!(
            wide_cells(&print_ingress_class(&ic, &CLOCK)),
            json!([
                "test-default (default)",
                "example.com/controller",
                "<none>",
                "9y"
            ])
        );
        let np = json!({"metadata": {"name": "policy1", "creationTimestamp": ago(0)}, "spec": {}});
        assert_eq!(
            wide_cells(&print_network_policy(&np, &CLOCK)),
            json!(["policy1", "<none>", "0s"])
        );
        let np = json!({"metadata": {"name": "policy2"},
            "spec": {"podSelector": {"matchLabels": {"foo": "bar"}}}});
        assert_eq!(wide_cells(&print_network_policy(&np, &CLOCK))[1], "foo=bar");
        let lease = json!({"metadata": {"name": "lease1", "creationTimestamp": ago(0)},
            "spec": {"holderIdentity": "holder1"}});
        assert_eq!(
            wide_cells(&print_lease(&lease, &CLOCK)),
            json!(["lease1", "holder1", "0s"])
        );
    }
}
