#!/usr/bin/env python3
"""Record kube-apiserver's tables for kubefan's printer goldens.

Loads the fixtures (tests/goldens/fixtures/*.yaml) into a real, fresh
kube-apiserver (conformance/apiserver/run.sh starts one) and writes, per
resource, what the server answered into tests/goldens/recorded/:

- its `Table` (meta.k8s.io/v1, includeObject=Object) of the fixtures, and
- the events of a table watch of them: the initial ADDED events, then one
  step's events (`golden.kubefan.io/watch-*` below).

Each answer is recorded with the second the server printed it in (`at`, Unix
seconds): the request is sent just after a second begins, and the recording
fails if its answer ends in a later second, so that the test can pin
kubefan's clock to `at` and compare time-dependent cells ("5s", "3m (3m
ago)") exactly.

Fixture conventions:
- Multi-document YAML. Namespaced objects without a namespace go into
  `golden`. Every object gets the label `golden.kubefan.io/fixture=true`,
  which selects what is recorded.
- `status` is set after the create through the status subresource, where
  the resource has one.
- A string "NOW", "NOW-<d>" or "NOW+<d>" (d like 90s, 3m, 2h30m, 9d) is
  replaced by that time, RFC 3339, when the object is loaded.
- Annotations that act:
  `golden.kubefan.io/delete: "true"`: deleted after loading (a pod with a
  node, or a namespace, then stays Terminating: there is no kubelet or
  namespace controller);
  `golden.kubefan.io/watch-status: '<JSON merge patch of status>'` and
  `golden.kubefan.io/watch-delete: "true"` (deleted at once, grace period
  0): done during the recorded watch.
- `metadata.managedFields` is left out of what is recorded: no printer
  reads it, and it is most of the bytes.

Usage: record.py [--kubeconfig-dir DIR]  (default $KUBE_DIR/run or
target/apiserver/run; uses admin-token and ca.pem from there).
"""

import argparse
import datetime
import glob
import http.client
import json
import os
import re
import ssl
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "goldens", "fixtures")
RECORDED = os.path.join(ROOT, "tests", "goldens", "recorded")
LABEL = "golden.kubefan.io/fixture"
ANNOTATION = "golden.kubefan.io/"
DEFAULT_NAMESPACE = "golden"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


class Server:
    def __init__(self, run_dir):
        self.ctx = ssl.create_default_context(cafile=os.path.join(run_dir, "ca.pem"))
        self.token = "admin-token"

    def request(self, method, path, body=None, content_type="application/json", accept="application/json"):
        conn = http.client.HTTPSConnection("127.0.0.1", 6443, context=self.ctx, timeout=30)
        headers = {"Authorization": "Bearer " + self.token, "Accept": accept}
        if body is not None:
            body = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        conn.request(method, path, body=body, headers=headers)
        return conn, conn.getresponse()

    def call(self, method, path, body=None, content_type="application/json", accept="application/json", ok=(200, 201, 202)):
        conn, resp = self.request(method, path, body, content_type, accept)
        data = resp.read()
        conn.close()
        if resp.status == 409 and method == "POST":
            raise SystemExit(f"{method} {path}: already there; record.py needs a fresh server "
                             "(conformance/apiserver/run.sh starts one with an empty etcd)")
        if resp.status not in ok:
            raise SystemExit(f"{method} {path}: {resp.status} {data.decode(errors='replace')[-700:]}")
        return json.loads(data) if data else None


DURATION = re.compile(r"^NOW(?:([+-])((?:\d+[dhms])+))?$")


def seconds_of(text):
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([dhms])", text))


def fill_times(value, now):
    if isinstance(value, dict):
        return {k: fill_times(v, now) for k, v in value.items()}
    if isinstance(value, list):
        return [fill_times(v, now) for v in value]
    if isinstance(value, str):
        m = DURATION.match(value)
        if m:
            offset = seconds_of(m.group(2) or "")
            t = now + offset if m.group(1) == "+" else now - offset
            return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return value


class Discovery:
    """(apiVersion, kind) -> (resource, namespaced, has status)."""

    def __init__(self, server):
        self.server = server
        self.known = {}

    def lookup(self, api_version, kind):
        for attempt in range(50):
            if (api_version, kind) in self.known:
                return self.known[(api_version, kind)]
            path = "/api/v1" if api_version == "v1" else "/apis/" + api_version
            conn, resp = self.server.request("GET", path)
            data = resp.read()
            conn.close()
            if resp.status == 200:
                listing = json.loads(data)
                names = {r["name"] for r in listing["resources"]}
                for r in listing["resources"]:
                    if "/" not in r["name"]:
                        self.known[(api_version, r["kind"])] = (
                            r["name"], r["namespaced"], r["name"] + "/status" in names)
            time.sleep(0.2)  # a CRD's resource appears in discovery a moment after it is established
        raise SystemExit(f"no resource for {api_version} {kind}")


def collection_path(api_version, resource, namespace):
    base = "/api/v1" if api_version == "v1" else "/apis/" + api_version
    return f"{base}/namespaces/{namespace}/{resource}" if namespace else f"{base}/{resource}"


def load(server, discovery, objects, now):
    acted = []
    for obj in objects:
        obj = fill_times(obj, now)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("labels", {})[LABEL] = "true"
        annotations = meta.get("annotations", {})
        resource, namespaced, has_status = discovery.lookup(obj["apiVersion"], obj["kind"])
        namespace = meta.setdefault("namespace", DEFAULT_NAMESPACE) if namespaced else None
        path = collection_path(obj["apiVersion"], resource, namespace)
        status = obj.pop("status", None) if has_status else None
        server.call("POST", path, obj)
        item = f"{path}/{meta['name']}"
        if status is not None:
            server.call("PATCH", item + "/status", {"status": status}, "application/merge-patch+json")
        if obj["kind"] == "CustomResourceDefinition":
            wait_established(server, meta["name"])
        if annotations.get(ANNOTATION + "delete") == "true":
            server.call("DELETE", item)
        acted.append((obj["apiVersion"], obj["kind"], resource, namespace, meta["name"], annotations))
    return acted


def wait_established(server, name):
    for _ in range(100):
        crd = server.call("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        for c in crd.get("status", {}).get("conditions", []):
            if c["type"] == "Established" and c["status"] == "True":
                return
        time.sleep(0.1)
    raise SystemExit(f"CRD {name} never became established")


def at_second_start():
    """Sleeps until just after the next second begins; returns that second."""
    now = time.time()
    time.sleep(1 - (now % 1) + 0.005)
    return int(time.time())


def without_managed_fields(value):
    if isinstance(value, dict):
        return {k: without_managed_fields(v) for k, v in value.items() if k != "managedFields"}
    if isinstance(value, list):
        return [without_managed_fields(v) for v in value]
    return value


def record_list(server, api_version, resource):
    path = collection_path(api_version, resource, None) + f"?labelSelector={LABEL}%3Dtrue&includeObject=Object"
    for _ in range(5):
        second = at_second_start()
        table = server.call("GET", path, accept=TABLE)
        if int(time.time()) == second:
            return {"at": second, "table": without_managed_fields(table)}
    raise SystemExit(f"could not list {resource} inside one second")


def record_watch(server, api_version, resource, expected_initial, steps):
    """The initial events, then each step's events; all inside one second."""
    path = collection_path(api_version, resource, None) + (
        f"?watch=1&labelSelector={LABEL}%3Dtrue&includeObject=Object&timeoutSeconds=10")
    second = at_second_start()
    conn, resp = server.request("GET", path, accept=TABLE)
    if resp.status != 200:
        raise SystemExit(f"watch {resource}: {resp.status} {resp.read()}")
    events = [json.loads(resp.readline()) for _ in range(expected_initial)]
    for step, count in steps:
        step()
        events.extend(json.loads(resp.readline()) for _ in range(count))
    conn.close()
    if int(time.time()) != second:
        raise SystemExit(f"the watch of {resource} crossed a second; its steps cannot be repeated: "
                         "stop the server and record again from a fresh one")
    return {"at": second, "events": without_managed_fields(events)}


def watch_steps(server, acted, resource_key):
    steps = []
    for api_version, kind, resource, namespace, name, annotations in acted:
        if (api_version, resource) != resource_key:
            continue
        item = collection_path(api_version, resource, namespace) + "/" + name
        patch = annotations.get(ANNOTATION + "watch-status")
        if patch:
            steps.append((lambda item=item, patch=patch: server.call(
                "PATCH", item + "/status", {"status": fill_times(json.loads(patch), int(time.time()))},
                "application/merge-patch+json"), 1))
        if annotations.get(ANNOTATION + "watch-delete") == "true":
            # Two events: the deletion timestamp is written (MODIFIED), then
            # the object goes (DELETED); apiserver registry/generic/registry
            # store.go, updateForGracefulDeletionAndFinalizers.
            steps.append((lambda item=item: server.call("DELETE", item + "?gracePeriodSeconds=0"), 2))
    return steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_dir = os.path.join(os.environ.get("KUBE_DIR", os.path.join(ROOT, "target", "apiserver")), "run")
    parser.add_argument("--kubeconfig-dir", default=default_dir)
    args = parser.parse_args()
    server = Server(args.kubeconfig_dir)
    server_version = server.call("GET", "/version")["gitVersion"]
    discovery = Discovery(server)

    objects = []
    for file in sorted(glob.glob(os.path.join(FIXTURES, "*.yaml"))):
        with open(file) as f:
            objects.extend(d for d in yaml.safe_load_all(f) if d)
    if not any(o["kind"] == "Namespace" and o["metadata"]["name"] == DEFAULT_NAMESPACE for o in objects):
        objects.insert(0, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DEFAULT_NAMESPACE}})
    acted = load(server, discovery, objects, int(time.time()))

    kinds = []
    for api_version, kind, resource, *_ in acted:
        if (api_version, resource, kind) not in kinds:
            kinds.append((api_version, resource, kind))
    crds = {}
    for api_version, kind, resource, namespace, name, _ in acted:
        if kind == "CustomResourceDefinition":
            crd = server.call("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            crds[crd["spec"]["group"] + "/" + crd["spec"]["names"]["plural"]] = crd

    os.makedirs(RECORDED, exist_ok=True)
    for old in glob.glob(os.path.join(RECORDED, "*.json")):
        os.remove(old)
    for api_version, resource, kind in kinds:
        group = api_version.rpartition("/")[0]
        listed = record_list(server, api_version, resource)
        steps = watch_steps(server, acted, (api_version, resource))
        watched = record_watch(server, api_version, resource, len(listed["table"]["rows"]), steps)
        crd = crds.get(group + "/" + resource)
        golden = {
            "server": server_version,
            "group": group,
            "version": version_of(api_version),
            "resource": resource,
            "crd": crd,
            "list": listed,
            "watch": watched,
        }
        name = f"{group or 'core'}.{resource}.json"
        with open(os.path.join(RECORDED, name), "w") as f:
            json.dump(golden, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"{name}: {len(listed['table']['rows'])} rows, {len(watched['events'])} watch events")


def version_of(api_version):
    return api_version.rpartition("/")[2]


if __name__ == "__main__":
    main()
