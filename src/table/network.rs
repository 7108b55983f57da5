//! Printers of networking resources: ingresses (`networking.k8s.io`) and
//! endpointslices (`discovery.k8s.io`) (kubernetes
//! `pkg/printers/internalversion/printers.go`, v1.33: `printIngress`,
//! `printEndpointSlice`).

use serde_json::Value;

use super::cell::Cell;
use super::column::{AGE, Column, NAME};
use super::core::load_balancer_ingress;
use super::format::{Clock, list_with_more};
use super::printer::Printed;
use super::read::{list_at, opt_int_at, opt_str_at, str_at, time_at};
use super::swagger;

fn name(obj: &Value) -> Cell {
    Cell::from(str_at(obj, &["metadata", "name"]))
}

fn age(obj: &Value, clock: &Clock) -> Cell {
    Cell::Str(clock.since(time_at(obj, &["metadata", "creationTimestamp"])))
}

pub(super) const INGRESS_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Class",
        "string",
        "The name of the IngressClass resource that should be used for additional configuration",
    ),
    Column::new(
        "Hosts",
        "string",
        "Hosts that incoming requests are matched against before the ingress rule",
    ),
    Column::new(
        "Address",
        "string",
        "Address is a list containing ingress points for the load-balancer",
    ),
    Column::new("Ports", "string", "Ports of TLS configurations that open"),
    AGE,
];

/// `formatHosts`: up to three rule hosts, `*` when none names one.
fn format_hosts(rules: &[Value]) -> String {
    const MAX: usize = 3;
    let mut list: Vec<&str> = Vec::new();
    let mut more = false;
    for rule in rules {
        if list.len() == MAX {
            more = true;
        }
        let host = str_at(rule, &["host"]);
        if !more && !host.is_empty() {
            list.push(host);
        }
    }
    if list.is_empty() {
        return "*".to_string();
    }
    let ret = list.join(",");
    if more {
        return format!("{ret} + {} more...", rules.len() - MAX);
    }
    ret
}

pub(super) fn print_ingress(ing: &Value, clock: &Clock) -> Printed {
    let ports = if list_at(ing, &["spec", "tls"]).is_empty() {
        "80"
    } else {
        "80, 443"
    };
    Printed::cells(vec![
        name(ing),
        Cell::from(opt_str_at(ing, &["spec", "ingressClassName"]).unwrap_or("<none>")),
        Cell::Str(format_hosts(list_at(ing, &["spec", "rules"]))),
        Cell::Str(load_balancer_ingress(ing)),
        Cell::from(ports),
        age(ing, clock),
    ])
}

pub(super) const ENDPOINT_SLICE_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "AddressType",
        "string",
        swagger::ENDPOINT_SLICE_ADDRESS_TYPE,
    ),
    Column::new("Ports", "string", swagger::ENDPOINT_SLICE_PORTS),
    Column::new("Endpoints", "string", swagger::ENDPOINT_SLICE_ENDPOINTS),
    AGE,
];

/// `formatDiscoveryPorts`: up to three port numbers (a name, or `*`, when
/// the number is unset).
fn format_ports(ports: &[Value]) -> String {
    const MAX: usize = 3;
    let mut list = Vec::new();
    let mut more = false;
    for port in ports {
        if list.len() < MAX {
            let num = match (opt_int_at(port, &["port"]), opt_str_at(port, &["name"])) {
                (Some(p), _) => p.to_string(),
                (None, Some(name)) => name.to_string(),
                (None, None) => "*".to_string(),
            };
            list.push(num);
        } else if list.len() == MAX {
            more = true;
        }
    }
    list_with_more(&list, more, ports.len(), MAX)
}

/// `formatDiscoveryEndpoints`: up to three addresses of all endpoints.
fn format_endpoints(endpoints: &[Value]) -> String {
    const MAX: usize = 3;
    let mut list = Vec::new();
    let mut more = false;
    let mut count = 0;
    for endpoint in endpoints {
        for address in list_at(endpoint, &["addresses"]) {
            if list.len() < MAX {
                list.push(address.as_str().unwrap_or("").to_string());
            } else if list.len() == MAX {
                more = true;
            }
            count += 1;
        }
    }
    list_with_more(&list, more, count, MAX)
}

pub(super) fn print_endpoint_slice(slice: &Value, clock: &Clock) -> Printed {
    Printed::cells(vec![
        name(slice),
        Cell::from(str_at(slice, &["addressType"])),
        Cell::Str(format_ports(list_at(slice, &["ports"]))),
        Cell::Str(format_endpoints(list_at(slice, &["endpoints"]))),
        age(slice, clock),
    ])
}
