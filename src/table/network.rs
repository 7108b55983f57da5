//! Printers of networking resources: ingresses (`networking.k8s.io`) and
//! endpointslices (`discovery.k8s.io`) (kubernetes
//! `pkg/printers/internalversion/printers.go`, v1.36: `printIngress`,
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

#[cfg(test)]
mod tests {
    //! Golden rows ported from kubernetes
    //! `pkg/printers/internalversion/printers_test.go` (`TestPrintIngress`,
    //! `TestPrintEndpointSlice`).

    use serde_json::json;

    use super::super::test_support::{CLOCK, ago, wide_cells};
    use super::*;

    #[test]
    fn ingresses_show_class_hosts_address_and_ports() {
        let ing = json!({
            "metadata": {"name": "test1", "creationTimestamp": ago(10 * 365 * 24 * 3600)},
            "spec": {"ingressClassName": "foo", "defaultBackend": {"service": {"name": "default-backend",
                "port": {"name": "default-backend", "number": 80}}}},
            "status": {"loadBalancer": {"ingress": [{"ip": "2.3.4.5", "hostname": "localhost.localdomain"}]}},
        });
        assert_eq!(
            wide_cells(&print_ingress(&ing, &CLOCK)),
            json!(["test1", "foo", "*", "2.3.4.5", "80", "10y"])
        );
        let ing = json!({
            "metadata": {"name": "hosts"},
            "spec": {"rules": [{"host": "a"}, {}, {"host": "b"}, {"host": "c"}, {"host": "d"}], "tls": [{}]},
        });
        assert_eq!(
            wide_cells(&print_ingress(&ing, &CLOCK)),
            json!([
                "hosts",
                "<none>",
                "a,b,c + 2 more...",
                "",
                "80, 443",
                "<unknown>"
            ])
        );
    }

    #[test]
    fn endpoint_slices_show_three_ports_and_addresses() {
        let slice = |name: &str,
                     kind: &str,
                     ports: serde_json::Value,
                     endpoints: serde_json::Value,
                     created: i64| {
            json!({"metadata": {"name": name, "creationTimestamp": ago(created)},
                "addressType": kind, "ports": ports, "endpoints": endpoints})
        };
        let http = json!({"name": "http", "port": 80, "protocol": "TCP"});
        let https = json!({"name": "https", "port": 443, "protocol": "TCP"});
        let two = json!([{"addresses": ["10.1.2.3", "2001:db8::1234:5678"]},
            {"addresses": ["10.2.3.4", "2001:db8::2345:6789"]}]);
        let s = slice(
            "abcslice.123",
            "IPv4",
            json!([http]),
            json!([{"addresses": ["10.1.2.3", "2001:db8::1234:5678"]}]),
            0,
        );
        assert_eq!(
            wide_cells(&print_endpoint_slice(&s, &CLOCK)),
            json!([
                "abcslice.123",
                "IPv4",
                "80",
                "10.1.2.3,2001:db8::1234:5678",
                "0s"
            ])
        );
        let s = slice(
            "longerslicename.123",
            "IPv6",
            json!([http, https]),
            two.clone(),
            300,
        );
        assert_eq!(
            wide_cells(&print_endpoint_slice(&s, &CLOCK)),
            json!([
                "longerslicename.123",
                "IPv6",
                "80,443",
                "10.1.2.3,2001:db8::1234:5678,10.2.3.4 + 1 more...",
                "5m"
            ])
        );
        let s = slice(
            "multiportslice.123",
            "IPv4",
            json!([http, https, {"name": "extra1", "port": 3000}, {"name": "extra2", "port": 3001}]),
            two,
            300,
        );
        assert_eq!(
            wide_cells(&print_endpoint_slice(&s, &CLOCK))[2],
            "80,443,3000 + 1 more..."
        );
        let s = slice(
            "empty",
            "IPv4",
            json!([{"name": "named"}, {}]),
            json!([]),
            0,
        );
        let c = wide_cells(&print_endpoint_slice(&s, &CLOCK));
        assert_eq!((&c[2], &c[3]), (&json!("named,*"), &json!("<unset>")));
    }
}
