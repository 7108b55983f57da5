//! The built-in kinds and their field selectors, and CRDs as objects.

use super::{brief, call, list_names, name, next, start};
use crate::{ResourceDef, SimConfig, pod};
use futures::StreamExt;
use kube::api::{
    Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::discovery::Discovery;
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn builtin_kinds_select_by_the_fields_kube_apiserver_defines() {
    let (sim, server, client) = start(SimConfig::default()).await;
    let d = Discovery::new(client.clone()).run().await.unwrap();
    let served: Vec<(String, String)> = d
        .groups()
        .flat_map(|g| g.recommended_resources())
        .map(|(ar, _)| (ar.group, ar.plural))
        .collect();
    for (group, plural) in [
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("apps", "daemonsets"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("", "events"),
        ("events.k8s.io", "events"),
        ("networking.k8s.io", "ingresses"),
        ("", "persistentvolumes"),
        ("", "persistentvolumeclaims"),
        ("", "serviceaccounts"),
        ("", "endpoints"),
        ("discovery.k8s.io", "endpointslices"),
    ] {
        assert!(
            served.contains(&(group.to_owned(), plural.to_owned())),
            "{plural}.{group} is discovered"
        );
    }

    sim.create("jobs.batch", json!({"metadata": {"name": "fresh"}}))
        .unwrap();
    sim.create(
        "jobs.batch",
        json!({"metadata": {"name": "done"}, "status": {"succeeded": 2}}),
    )
    .unwrap();
    let jobs = "/apis/batch/v1/namespaces/default/jobs";
    let sel = |s: &str| format!("{jobs}?fieldSelector={s}");
    assert_eq!(
        list_names(&server, &sel("status.successful%3D0")).await,
        Ok(vec!["fresh".to_owned()]),
        "an absent count reads 0"
    );
    assert_eq!(
        list_names(&server, &sel("status.successful%3D2")).await,
        Ok(vec!["done".to_owned()])
    );
    assert_eq!(
        list_names(&server, &sel("status.succeeded%3D2")).await,
        Err((
            400,
            "field label \"status.succeeded\" not supported for batchv1.Job".to_owned()
        ))
    );
    assert_eq!(
        list_names(
            &server,
            "/apis/apps/v1/replicasets?fieldSelector=status.replicas%3D0"
        )
        .await,
        Err((
            400,
            "\"status.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"".to_owned()
        ))
    );
    assert_eq!(
        list_names(&server, "/api/v1/nodes?fieldSelector=metadata.namespace%3D").await,
        Err((
            400,
            "field label not supported: metadata.namespace".to_owned()
        ))
    );

    sim.create(
        "events",
        json!({"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "a"},
               "reason": "Pulled", "type": "Normal", "reportingComponent": "kubelet"}),
    )
    .unwrap();
    sim.create(
        "events",
        json!({"metadata": {"name": "e2"}, "involvedObject": {"kind": "Node", "name": "n1"},
               "source": {"component": "node-controller"}, "type": "Warning"}),
    )
    .unwrap();
    let events = "/api/v1/events?fieldSelector=";
    assert_eq!(
        list_names(
            &server,
            &format!("{events}involvedObject.kind%3DPod,type%3DNormal")
        )
        .await,
        Ok(vec!["e1".to_owned()])
    );
    assert_eq!(
        list_names(&server, &format!("{events}source%3Dkubelet")).await,
        Ok(vec!["e1".to_owned()]),
        "source falls back to reportingComponent"
    );
    assert_eq!(
        list_names(&server, &format!("{events}source%3Dnode-controller")).await,
        Ok(vec!["e2".to_owned()])
    );
    sim.create(
        "events.events.k8s.io",
        json!({"metadata": {"name": "n1"}, "regarding": {"kind": "Pod", "name": "a"},
               "reportingController": "kubelet", "reason": "Pulled", "type": "Normal"}),
    )
    .unwrap();
    let new_events = "/apis/events.k8s.io/v1/events?fieldSelector=";
    assert_eq!(
        list_names(
            &server,
            &format!(
                "{new_events}regarding.kind%3DPod,regarding.name%3Da,reportingController%3Dkubelet"
            )
        )
        .await,
        Ok(vec!["n1".to_owned()])
    );
    assert_eq!(
        list_names(&server, &format!("{new_events}involvedObject.kind%3DPod")).await,
        Err((
            400,
            "field label not supported: involvedObject.kind".to_owned()
        ))
    );

    let mut p = pod("hosted").build();
    p["status"]["podIPs"] = json!([{"ip": "10.1.2.3"}]);
    sim.create("pods", p).unwrap();
    let pods = "/api/v1/pods?fieldSelector=";
    assert_eq!(
        list_names(
            &server,
            &format!("{pods}spec.hostNetwork%3Dfalse,status.podIP%3D10.1.2.3")
        )
        .await,
        Ok(vec!["hosted".to_owned()])
    );
    assert_eq!(
        list_names(&server, &format!("{pods}status.podIPs%3D10.1.2.3")).await,
        Ok(vec![]),
        "status.podIPs is accepted but never set"
    );

    // The API server's defaults are in the object and select like it.
    let secret = sim
        .create("secrets", json!({"metadata": {"name": "s"}}))
        .unwrap();
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(
        list_names(&server, "/api/v1/secrets?fieldSelector=type%3DOpaque").await,
        Ok(vec!["s".to_owned()])
    );

    // A watch on a field turns the transition into DELETED, like the watch cache.
    let ar = ApiResource {
        group: "batch".into(),
        version: "v1".into(),
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        plural: "jobs".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let rv = sim.resource_version().to_string();
    let mut w = api
        .watch(
            &WatchParams::default()
                .fields("status.successful=0")
                .timeout(10),
            &rv,
        )
        .await
        .unwrap()
        .boxed();
    sim.merge_patch(
        "jobs.batch",
        None,
        "fresh",
        &json!({"status": {"succeeded": 1}}),
    )
    .unwrap();
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("DELETED", "fresh".to_owned())
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn custom_resource_definitions_are_objects_that_serve_their_storage_version() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let (sim, server, client) = start(SimConfig::default()).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "gadgets.example.org"},
        "spec": {
            "group": "example.org",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "kind": "Gadget", "shortNames": ["gd"]},
            "versions": [
                {"name": "v1alpha1", "served": true, "storage": false,
                 "schema": {"openAPIV3Schema": {"type": "object"}}},
                {"name": "v1", "served": true, "storage": true,
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                 "selectableFields": [{"jsonPath": ".spec.color"}],
                 "additionalPrinterColumns": [{"name": "Color", "type": "string", "jsonPath": ".spec.color"}]}
            ]
        }
    }))
    .unwrap();
    let rv = sim.resource_version().to_string();
    let dynamic: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::erase::<CustomResourceDefinition>(&()),
    );
    let mut w = dynamic
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    let made = crds.create(&PostParams::default(), &crd).await.unwrap();
    assert!(
        made.status.is_none_or(|s| s.conditions.is_none()),
        "status starts empty"
    );
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("ADDED", "gadgets.example.org".to_owned())
    );
    match next(&mut w).await.unwrap() {
        WatchEvent::Modified(o) => {
            let conditions = &o.data["status"]["conditions"];
            assert_eq!(conditions[1]["type"], "Established");
            assert_eq!(conditions[1]["status"], "True");
            assert_eq!(o.data["status"]["storedVersions"], json!(["v1"]));
            assert_eq!(o.data["status"]["acceptedNames"]["listKind"], "GadgetList");
        }
        other => panic!("expected the CRD established, got {other:?}"),
    }
    let listed = crds.get("gadgets.example.org").await.unwrap();
    let columns = listed.spec.versions[1]
        .additional_printer_columns
        .clone()
        .unwrap();
    assert_eq!(columns[0].json_path, ".spec.color");

    // The storage version is served, discovered, and selectable by its fields.
    let d = Discovery::new(client.clone()).run().await.unwrap();
    let (ar, _) = d
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(ar, _)| ar.plural == "gadgets")
        .expect("gadgets discovered");
    assert_eq!(ar.version, "v1");
    let gadgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    for (name, color) in [("g1", "red"), ("g2", "blue")] {
        let g = DynamicObject::new(name, &ar).data(json!({"spec": {"color": color}}));
        gadgets.create(&PostParams::default(), &g).await.unwrap();
    }
    let red = gadgets
        .list(&ListParams::default().fields("spec.color=red"))
        .await
        .unwrap();
    assert_eq!(red.items.iter().map(name).collect::<Vec<_>>(), ["g1"]);
    assert_eq!(
        list_names(
            &server,
            "/apis/example.org/v1/gadgets?fieldSelector=spec.size%3D1"
        )
        .await,
        Err((400, "field label not supported: spec.size".to_owned()))
    );
    let mut gw = gadgets
        .watch(&WatchParams::default().timeout(10), "0")
        .await
        .unwrap()
        .boxed();
    next(&mut gw).await.unwrap();
    next(&mut gw).await.unwrap();

    // A changed CRD changes what is served, keeping the objects.
    crds.patch(
        "gadgets.example.org",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"names": {"shortNames": ["gd", "gdt"]}}})),
    )
    .await
    .unwrap();
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("MODIFIED", "gadgets.example.org".to_owned())
    );
    match next(&mut w).await.unwrap() {
        WatchEvent::Modified(o) => assert_eq!(
            o.data["status"]["acceptedNames"]["shortNames"],
            json!(["gd", "gdt"]),
            "the naming controller accepts the new names"
        ),
        other => panic!("expected the accepted names, got {other:?}"),
    }
    let (_, doc) = call(
        &server,
        reqwest::Method::GET,
        "/apis/example.org/v1",
        None,
        None,
    )
    .await;
    assert_eq!(doc["resources"][0]["shortNames"], json!(["gd", "gdt"]));
    assert_eq!(sim.list("gadgets.example.org").0.len(), 2);

    // Refused: invalid CRDs, and CRDs for what the server already serves.
    let bad: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "ingresses.networking.k8s.io"},
        "spec": {"group": "networking.k8s.io", "scope": "Namespaced",
                 "names": {"plural": "ingresses", "kind": "Ingress"},
                 "versions": [{"name": "v1", "served": true, "storage": true}]}
    }))
    .unwrap();
    match crds.create(&PostParams::default(), &bad).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 422),
        other => panic!("expected 422, got {other:?}"),
    }
    let mut nodots = bad.clone();
    nodots.metadata.name = Some("things.nodots".into());
    nodots.spec.group = "nodots".into();
    nodots.spec.names.plural = "things".into();
    match crds.create(&PostParams::default(), &nodots).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422);
            assert!(s.message.contains("at least one dot"), "{}", s.message);
        }
        other => panic!("expected 422, got {other:?}"),
    }

    // Deleting the CRD removes the resource and ends its watches.
    crds.delete("gadgets.example.org", &Default::default())
        .await
        .unwrap();
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("DELETED", "gadgets.example.org".to_owned())
    );
    assert!(
        next(&mut gw).await.is_none(),
        "the custom objects' watch ends"
    );
    match gadgets.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 404),
        other => panic!("expected 404, got {other:?}"),
    }

    // The Rust API's register writes a CRD object.
    sim.register(
        ResourceDef::new("example.com", "v1", "widgets", "Widget", false).with_printer_columns(
            vec![json!({"name": "Size", "type": "integer", "jsonPath": ".spec.size"})],
        ),
    );
    let widgets_crd = sim
        .get(
            "customresourcedefinitions.apiextensions.k8s.io",
            None,
            "widgets.example.com",
        )
        .expect("register writes the CRD");
    assert_eq!(widgets_crd["spec"]["scope"], "Cluster");
    assert_eq!(
        widgets_crd["spec"]["versions"][0]["additionalPrinterColumns"][0]["name"],
        "Size"
    );
    assert!(sim.unregister("widgets.example.com"));
    assert!(
        sim.get(
            "customresourcedefinitions.apiextensions.k8s.io",
            None,
            "widgets.example.com"
        )
        .is_none()
    );
    server.stop().await;
}
