//! Discovery documents for what kubefan serves, derived from the upstream's
//! discovery and the resource policy. Every resource is advertised with the
//! verbs kubefan implements: `get`, `list`, `watch`.

use actix_web::{HttpResponse, web};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, APIVersions, GroupVersionForDiscovery,
    ServerAddressByClientCIDR,
};

use crate::cluster::{Cluster, ClusterOf};
use crate::status::ApiError;
use crate::upstream::ResourceInfo;

async fn served(cluster: &Cluster) -> Result<Vec<ResourceInfo>, ApiError> {
    let informers = cluster.informers();
    let catalog = informers.catalog().await?;
    // Only what kubefan's own credentials may list and watch is advertised.
    informers.self_access().check_all(catalog.resources()).await;
    Ok(catalog
        .resources()
        .iter()
        .filter(|r| informers.serves(r))
        .cloned()
        .collect())
}

fn api_resource(r: &ResourceInfo) -> APIResource {
    APIResource {
        name: r.api.plural.clone(),
        singular_name: r.singular.clone(),
        namespaced: r.namespaced,
        kind: r.api.kind.clone(),
        verbs: vec!["get".into(), "list".into(), "watch".into()],
        short_names: Some(r.short_names.clone()).filter(|s| !s.is_empty()),
        ..APIResource::default()
    }
}

fn resource_list(group_version: String, resources: Vec<APIResource>) -> HttpResponse {
    HttpResponse::Ok().json(APIResourceList {
        group_version,
        resources,
    })
}

/// `GET /api`
pub async fn api_versions() -> HttpResponse {
    HttpResponse::Ok().json(APIVersions {
        versions: vec!["v1".into()],
        server_address_by_client_cidrs: vec![ServerAddressByClientCIDR {
            client_cidr: "0.0.0.0/0".into(),
            server_address: String::new(),
        }],
    })
}

/// `GET /api/{version}`
pub async fn core_resources(
    version: web::Path<String>,
    cluster: ClusterOf,
) -> Result<HttpResponse, ApiError> {
    let version = version.into_inner();
    let resources: Vec<APIResource> = served(&cluster)
        .await?
        .iter()
        .filter(|r| r.api.group.is_empty() && r.api.version == version)
        .map(api_resource)
        .collect();
    if resources.is_empty() {
        return Err(ApiError::NotFound(format!(
            "the server could not find the requested resource: /api/{version}"
        )));
    }
    Ok(resource_list(version, resources))
}

fn groups(resources: &[ResourceInfo]) -> Vec<APIGroup> {
    let mut out: Vec<APIGroup> = Vec::new();
    for r in resources.iter().filter(|r| !r.api.group.is_empty()) {
        if out.iter().any(|g| g.name == r.api.group) {
            continue;
        }
        let gv = GroupVersionForDiscovery {
            group_version: r.api.api_version.clone(),
            version: r.api.version.clone(),
        };
        out.push(APIGroup {
            name: r.api.group.clone(),
            preferred_version: Some(gv.clone()),
            versions: vec![gv],
            server_address_by_client_cidrs: None,
        });
    }
    out
}

/// `GET /apis`
pub async fn api_groups(cluster: ClusterOf) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(APIGroupList {
        groups: groups(&served(&cluster).await?),
    }))
}

/// `GET /apis/{group}`
pub async fn api_group(
    group: web::Path<String>,
    cluster: ClusterOf,
) -> Result<HttpResponse, ApiError> {
    let group = group.into_inner();
    groups(&served(&cluster).await?)
        .into_iter()
        .find(|g| g.name == group)
        .map(|g| HttpResponse::Ok().json(g))
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "the server could not find the requested resource: group {group:?}"
            ))
        })
}

/// `GET /apis/{group}/{version}`
pub async fn group_resources(
    path: web::Path<(String, String)>,
    cluster: ClusterOf,
) -> Result<HttpResponse, ApiError> {
    let (group, version) = path.into_inner();
    let resources: Vec<APIResource> = served(&cluster)
        .await?
        .iter()
        .filter(|r| r.api.group == group && r.api.version == version)
        .map(api_resource)
        .collect();
    if resources.is_empty() {
        return Err(ApiError::NotFound(format!(
            "the server could not find the requested resource: /apis/{group}/{version}"
        )));
    }
    Ok(resource_list(format!("{group}/{version}"), resources))
}

/// `GET /version`: the upstream API server's version.
pub async fn version(cluster: ClusterOf) -> Result<HttpResponse, ApiError> {
    let info = cluster
        .informers()
        .client()
        .apiserver_version()
        .await
        .map_err(|e| ApiError::Unavailable(format!("cannot read the upstream version: {e}")))?;
    Ok(HttpResponse::Ok().json(info))
}
