//! The simulator's HTTP server (`SimServer`): binding, stopping, and the
//! kubeconfigs that point clients at it, one context per user. Requests
//! are translated in `http`.

use std::net::SocketAddr;

use actix_web::dev::ServerHandle;
use actix_web::{App, HttpServer, web};
use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};
use serde_json::json;
use tokio::task::JoinHandle;

use super::http::dispatch;
use super::{Sim, SimUser};

const CONTEXT: &str = "kubefan-sim";

/// A running simulator HTTP server.
pub struct SimServer {
    addr: SocketAddr,
    sim: Sim,
    handle: ServerHandle,
    task: JoinHandle<std::io::Result<()>>,
}

impl SimServer {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    /// A kubeconfig with one cluster, user and context named "kubefan-sim",
    /// set as current context.
    pub fn kubeconfig(&self) -> Kubeconfig {
        Kubeconfig {
            clusters: vec![NamedCluster {
                name: CONTEXT.into(),
                cluster: Some(Cluster {
                    server: Some(self.url()),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            auth_infos: vec![NamedAuthInfo {
                name: CONTEXT.into(),
                auth_info: Some(Default::default()),
                ..Default::default()
            }],
            contexts: vec![NamedContext {
                name: CONTEXT.into(),
                context: Some(Context {
                    cluster: CONTEXT.into(),
                    user: Some(CONTEXT.into()),
                    namespace: Some("default".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            current_context: Some(CONTEXT.into()),
            kind: Some("Config".into()),
            api_version: Some("v1".into()),
            ..Default::default()
        }
    }

    /// `kubeconfig()` plus a user (with its token) and a context per
    /// `users`, both named after the user; the first is the current context.
    pub fn kubeconfig_for(&self, users: &[SimUser]) -> Kubeconfig {
        let mut kc = self.kubeconfig();
        for user in users {
            kc.auth_infos.push(NamedAuthInfo {
                name: user.username.clone(),
                auth_info: Some(token_auth(&user.token)),
                ..Default::default()
            });
            kc.contexts.push(NamedContext {
                name: user.username.clone(),
                context: Some(Context {
                    cluster: CONTEXT.into(),
                    user: Some(user.username.clone()),
                    namespace: Some("default".into()),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        if let Some(first) = users.first() {
            kc.current_context = Some(first.username.clone());
        }
        kc
    }

    /// A client config pointing at this server, default namespace "default".
    pub fn client_config(&self) -> kube::Config {
        // A `SocketAddr` always forms a valid authority.
        let uri = self.url().parse().unwrap_or_default();
        kube::Config::new(uri)
    }

    /// `client_config()` sending `token` as its bearer token.
    pub fn client_config_with_token(&self, token: &str) -> kube::Config {
        let mut cfg = self.client_config();
        cfg.auth_info = token_auth(token);
        cfg
    }

    /// Ends open watches and stops the server, waiting for it to finish.
    pub async fn stop(self) {
        self.sim.end_watches();
        self.handle.stop(true).await;
        let _ = self.task.await;
    }
}

/// Credentials holding a bearer token. `AuthInfo` keeps its token as a
/// `secrecy::SecretString`, which it builds when deserialised.
fn token_auth(token: &str) -> AuthInfo {
    serde_json::from_value(json!({ "token": token })).unwrap_or_default()
}

pub(crate) async fn serve(sim: Sim, listen: SocketAddr) -> std::io::Result<SimServer> {
    let data = web::Data::new(sim.clone());
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .app_data(web::PayloadConfig::new(16 << 20))
            .default_service(web::to(dispatch))
    })
    .workers(2)
    .disable_signals()
    .shutdown_timeout(1)
    .bind(listen)?;
    let addr = server
        .addrs()
        .first()
        .copied()
        .ok_or_else(|| std::io::Error::other("no address bound"))?;
    let server = server.run();
    let handle = server.handle();
    let task = tokio::spawn(server);
    tracing::debug!(%addr, "simulated API server listening");
    Ok(SimServer {
        addr,
        sim,
        handle,
        task,
    })
}
