//! `kubefan kubeconfig`: the flags, and the kubeconfig written from them
//! and the gateway's own settings (`kubefan::kubeconfig` builds it).

use std::path::PathBuf;

use anyhow::Context;

use kubefan::config::{AuthMethod, GatewayArgs};

#[derive(clap::Args)]
pub struct KubeconfigArgs {
    /// The URL clients reach kubefan at (default: from --listen, https://
    /// when --tls-cert-file is set).
    #[arg(long)]
    pub(crate) server: Option<String>,
    /// A file holding the bearer token the kubeconfig's user sends (needed
    /// when --auth is jwt or kubernetes).
    #[arg(long, value_name = "FILE")]
    pub(crate) token_file: Option<PathBuf>,
    /// The user signs in with kubelogin (`kubectl oidc-login get-token`),
    /// at the issuer and as the client of --oidc-issuer-url and
    /// --oidc-client-id (the flags of --auth oidc), trusting --oidc-ca-file.
    #[arg(long, conflicts_with = "token_file")]
    pub(crate) oidc: bool,
    /// With --oidc: a scope kubelogin asks the issuer for besides `openid`
    /// (repeatable, or comma-separated), e.g. `email`, `groups`.
    #[arg(long, value_name = "SCOPE", value_delimiter = ',', requires = "oidc")]
    pub(crate) oidc_extra_scope: Vec<String>,
    /// With --oidc, for an issuer whose kubectl client must be
    /// confidential: a file holding that client's secret (not the
    /// gateway's --oidc-client-secret-file). kubelogin takes it only as a
    /// flag, so it is written into the kubeconfig in the clear; prefer a
    /// public client (PKCE) where the issuer allows one.
    #[arg(long, value_name = "FILE", requires = "oidc")]
    pub(crate) kubelogin_client_secret_file: Option<PathBuf>,
    /// Where to write the kubeconfig (default: standard output).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
    /// The cluster, user and context name.
    #[arg(long, default_value = "kubefan")]
    pub(crate) name: String,
    /// The namespace of the contexts (kubectl's default `-n`): the one a
    /// teammate with a namespace grant may read.
    #[arg(long, short = 'n', value_name = "NAMESPACE", value_parser = namespace_name)]
    pub(crate) namespace: Option<String>,
    /// The gateway's clusters (`serve --cluster`: NAME, or NAME=... as
    /// `serve` takes it, so a --config file's `clusters:` serves both):
    /// one context each, NAME-CLUSTER, at the server's /clusters/CLUSTER.
    #[arg(
        long = "cluster",
        alias = "clusters",
        env = "KUBEFAN_CLUSTERS",
        value_delimiter = ',',
        value_name = "CLUSTER",
        value_parser = cluster_name
    )]
    pub(crate) clusters: Vec<String>,
    /// The gateway's own settings (the same flags, variables and --config
    /// file as `serve`): --listen, the --tls-* files, --auth.
    #[command(flatten)]
    pub(crate) gateway: GatewayArgs,
}

/// `kubefan kubeconfig` (see `kubefan::kubeconfig`).
pub fn write_kubeconfig(args: KubeconfigArgs) -> anyhow::Result<()> {
    use kubefan::kubeconfig::{
        Kubeconfig, OidcLogin, User, check_server, read_certificates, read_secret, server_url,
    };
    let cfg = args.gateway.into_config();
    cfg.validate()?;
    let tls = cfg.tls.enabled();
    let server = match &args.server {
        Some(url) => check_server(url)?,
        None => server_url(cfg.listen, tls),
    };
    let ca_pem = match (&cfg.tls.ca_file, &cfg.tls.cert_file) {
        (Some(ca), _) => Some(read_certificates("--tls-ca-file", ca)?),
        (None, Some(cert)) => Some(read_certificates("--tls-cert-file", cert)?),
        (None, None) => None,
    };
    if ca_pem.is_some() && server.starts_with("http://") {
        anyhow::bail!("--server {server} is http:// but kubefan serves TLS: use https://");
    }
    let user = if args.oidc {
        let mut login = OidcLogin::from_config(&cfg.auth.oidc)?;
        if server.starts_with("http://") {
            // `DirectClientConfig.ClientConfig` in client-go's
            // `tools/clientcmd/client_config.go` reads the user's
            // credentials "only if we are secure".
            anyhow::bail!(
                "--oidc: the server is {server}, and kubectl sends credentials only to https:// servers; \
                 serve TLS (--tls-cert-file, --tls-key-file) or name the https:// URL clients reach (--server)"
            );
        }
        login.extra_scopes = args
            .oidc_extra_scope
            .iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if let Some(path) = &args.kubelogin_client_secret_file {
            login.client_secret = Some(read_secret("--kubelogin-client-secret-file", path)?);
            eprintln!(
                "kubefan kubeconfig: the kubeconfig holds the OIDC client secret in the clear (kubelogin takes it only as a flag)"
            );
        }
        if !cfg.auth.anonymous() && !cfg.auth.uses(AuthMethod::Oidc) {
            eprintln!(
                "kubefan kubeconfig: --oidc but --auth is {}: kubefan will refuse the id-tokens unless it runs with --auth oidc",
                cfg.auth.describe()
            );
        }
        User::OidcLogin(login)
    } else if let Some(path) = &args.token_file {
        if server.starts_with("http://") {
            eprintln!(
                "kubefan kubeconfig: the server is {server}: kubectl and client-go send no token to an http:// server (kube-rs does)"
            );
        }
        User::Token(read_secret("--token-file", path)?)
    } else if cfg.auth.anonymous() {
        User::Anonymous
    } else {
        let hint = if cfg.auth.uses(AuthMethod::Oidc) {
            " (--oidc: people sign in with kubelogin)"
        } else {
            ""
        };
        eprintln!(
            "kubefan kubeconfig: --auth is on but no --token-file was given; clients will need a token{hint}"
        );
        User::Unnamed
    };
    let yaml = Kubeconfig {
        name: args.name,
        server,
        ca_pem,
        user,
        clusters: args.clusters,
        namespace: args.namespace,
    }
    .to_yaml();
    match &args.output {
        None => print!("{yaml}"),
        Some(path) => {
            use std::io::Write as _;
            use std::os::unix::fs::OpenOptionsExt as _;
            // It may hold a token: readable by its owner only.
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(path)
                .with_context(|| format!("writing {}", path.display()))?;
            file.write_all(yaml.as_bytes())
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(())
}

/// A namespace name: a DNS label (RFC 1123), as kube-apiserver's
/// `ValidateNamespaceName` requires.
fn namespace_name(text: &str) -> Result<String, String> {
    kubefan::cluster::check_label(text)
        .map_err(|why| format!("namespace {text:?} is not a DNS label (RFC 1123): {why}"))?;
    Ok(text.to_string())
}

/// The name in a `--cluster` value (`NAME` or `NAME=KUBECONFIG...`).
fn cluster_name(text: &str) -> Result<String, String> {
    let name = text.trim().split_once('=').map_or(text.trim(), |(n, _)| n);
    kubefan::cluster::check_name(name)?;
    Ok(name.to_string())
}
