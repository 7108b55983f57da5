//! kubectl signs in through the kubelogin user `kubefan kubeconfig --oidc`
//! writes. The kubeconfig is made by the kubefan binary from the flags a
//! `--auth oidc` deployment over TLS has (client-go sends no credentials
//! of any kind to an http:// server); its exec command, `kubectl`, is then
//! swapped for a stand-in for kubelogin (`tests/fixtures/kubelogin/`),
//! the arguments kept, so kubectl runs the stand-in with exactly the
//! arguments kubelogin would get. The stand-in prints an ExecCredential
//! holding an id-token minted by the test issuer (`issuer.rs`); kubefan
//! verifies it and authorizes the user by the simulated cluster's RBAC.
//! Nothing here signs in at a browser: that is kubelogin's part.

use std::path::Path;
use std::process::Output;

use base64::Engine;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};
use tokio::process::Command;

use super::process::{CLIENT_WAIT, program};
use crate::issuer::{Issuer, SigningKey};
use crate::oidc::{CLIENT, claims, now, oidc_config, oidc_env, team_sim};

const STANDIN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/kubelogin/kubectl-standin"
);

/// Runs `program args` with `envs` to its end, bounded by [`CLIENT_WAIT`].
async fn output(program: &Path, args: &[&str], envs: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(program);
    command.args(args).kill_on_drop(true);
    for (k, v) in envs {
        command.env(k, v);
    }
    tokio::time::timeout(CLIENT_WAIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("{} did not finish in time", program.display()))
        .unwrap_or_else(|e| panic!("{} runs: {e}", program.display()))
}

/// What kubelogin prints for `token`, valid until `exp` (Unix seconds).
fn exec_credential(token: &str, exp: u64) -> String {
    let exp = time::OffsetDateTime::from_unix_timestamp(exp as i64)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    json!({
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": token, "expirationTimestamp": exp},
    })
    .to_string()
}

fn certificates(pem: &[u8]) -> Vec<Vec<u8>> {
    CertificateDer::pem_slice_iter(pem)
        .map(|c| c.unwrap().as_ref().to_vec())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kubectl: run through conformance/run"]
async fn real_client_kubectl_signs_in_with_the_kubelogin_user_kubefan_kubeconfig_writes() {
    let kubectl = program("KUBEFAN_KUBECTL");
    let key = SigningKey::rsa("rsa-private.pem", "k1");
    let issuer = Issuer::start(&[&key]).await;
    let super::process::TlsFiles {
        dir,
        cert_file,
        key_file,
        ca_file,
    } = super::process::TlsFiles::new("kubelogin");
    let mut cfg = oidc_config(&issuer);
    cfg.tls.cert_file = Some(cert_file.clone());
    cfg.tls.key_file = Some(key_file.clone());
    let env = oidc_env(team_sim(), cfg).await;
    let kubeconfig = dir.join("kubeconfig");
    let listen = env.app.local_addr().to_string();

    // The kubeconfig, from the flags the gateway runs with (`oidc_config`).
    let made = output(
        Path::new(env!("CARGO_BIN_EXE_kubefan")),
        &[
            "kubeconfig",
            "--oidc",
            "--oidc-extra-scope=email,groups",
            "--listen",
            &listen,
            "--tls-cert-file",
            cert_file.to_str().unwrap(),
            "--tls-key-file",
            key_file.to_str().unwrap(),
            "--tls-ca-file",
            ca_file.to_str().unwrap(),
            "--auth",
            "oidc",
            "--oidc-issuer-url",
            &issuer.url,
            "--oidc-client-id",
            CLIENT,
            "--oidc-ca-file",
            issuer.ca_file.to_str().unwrap(),
            "--oidc-username-claim",
            "email",
            "--oidc-groups-claim",
            "groups",
            "--oidc-groups-prefix",
            "oidc:",
            "--oidc-required-claim",
            "hd=example.com",
            "-o",
            kubeconfig.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert!(
        made.status.success(),
        "kubefan kubeconfig: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let mut doc: Value =
        serde_norway::from_str(&std::fs::read_to_string(&kubeconfig).unwrap()).unwrap();
    assert_eq!(
        doc["clusters"][0]["cluster"]["server"],
        format!("https://{listen}")
    );
    let exec = &mut doc["users"][0]["user"]["exec"];
    assert_eq!(exec["apiVersion"], "client.authentication.k8s.io/v1");
    assert_eq!(exec["command"], "kubectl");
    let args: Vec<String> = serde_json::from_value(exec["args"].clone()).unwrap();
    let (ca_arg, plugin_args) = args.split_last().unwrap();
    assert_eq!(
        plugin_args,
        [
            "oidc-login".to_string(),
            "get-token".into(),
            format!("--oidc-issuer-url={}", issuer.url),
            format!("--oidc-client-id={CLIENT}"),
            "--oidc-extra-scope=email".into(),
            "--oidc-extra-scope=groups".into(),
        ]
    );
    // The issuer's CA, for kubelogin to reach the issuer with.
    let ca = base64::engine::general_purpose::STANDARD
        .decode(
            ca_arg
                .strip_prefix("--certificate-authority-data=")
                .unwrap(),
        )
        .unwrap();
    assert_eq!(
        certificates(&ca),
        certificates(&std::fs::read(&issuer.ca_file).unwrap())
    );
    exec["command"] = STANDIN.into();
    std::fs::write(&kubeconfig, serde_norway::to_string(&doc).unwrap()).unwrap();

    // alice, of the group oidc:team-web, which may read web's pods.
    let exp = now() + 300;
    let token = key.sign(&claims(&issuer, "alice@example.com", &["team-web"], 300));
    let credential = dir.join("credential.json");
    std::fs::write(&credential, exec_credential(&token, exp)).unwrap();
    let recorded = dir.join("args");
    let envs = [
        ("KUBEFAN_STANDIN_CREDENTIAL", credential.as_path()),
        ("KUBEFAN_STANDIN_ARGS", recorded.as_path()),
    ];
    let cache = dir.join("kubectl-cache");
    let get = |ns: &'static str| {
        [
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--cache-dir",
            cache.to_str().unwrap(),
            "get",
            "pods",
            "-n",
            ns,
            "-o",
            "json",
        ]
        .map(str::to_string)
    };
    let run = |args: [String; 10]| {
        let (kubectl, envs) = (kubectl.clone(), envs);
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            output(&kubectl, &args, &envs).await
        }
    };

    let listed = run(get("web")).await;
    assert!(
        listed.status.success(),
        "kubectl get pods -n web: {}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let list: Value = serde_json::from_slice(&listed.stdout).expect("kubectl prints a list");
    let mut names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    let (upstream, _) = env.sim.list("pods");
    let mut want: Vec<&str> = upstream
        .iter()
        .filter(|p| p["metadata"]["namespace"] == "web")
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    want.sort_unstable();
    assert!(!want.is_empty(), "the simulated cluster has pods in web");
    assert_eq!(names, want);
    // kubectl ran the plugin with the arguments kubelogin would get, and
    // without a terminal on stdin did not call it interactive.
    let passed = std::fs::read_to_string(&recorded).unwrap();
    assert_eq!(passed.lines().collect::<Vec<_>>(), args, "{passed}");
    let exec_info: Value = serde_json::from_str(
        &std::fs::read_to_string(recorded.with_extension("exec-info")).unwrap(),
    )
    .expect("kubectl sets KUBERNETES_EXEC_INFO");
    assert_eq!(exec_info["apiVersion"], "client.authentication.k8s.io/v1");
    assert_eq!(exec_info["spec"]["interactive"], false, "{exec_info}");

    // batch: no RoleBinding for alice's groups there.
    let refused = run(get("batch")).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "kubectl get pods -n batch listed"
    );
    assert!(
        stderr.contains("Error from server (Forbidden)")
            && stderr.contains("alice@example.com may not list pods in namespace \"batch\""),
        "{stderr}"
    );

    // The id-token has expired (kubelogin would have refreshed it first).
    let mut stale = claims(&issuer, "alice@example.com", &["team-web"], 0);
    stale["exp"] = json!(now() - 60);
    let expired = key.sign(&stale);
    std::fs::write(&credential, exec_credential(&expired, now() + 300)).unwrap();
    let refused = run(get("web")).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "an expired token listed");
    assert!(
        stderr.contains("You must be logged in to the server (token expired)"),
        "{stderr}"
    );

    let _ = std::fs::remove_dir_all(&dir);
    env.stop().await;
}
