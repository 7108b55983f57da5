//! `loadtest mint-jwt`: bearer tokens for kubefan's `--auth jwt`, one per
//! line, for `loadtest run --bearer-file` (`run-points.sh`, MODE `jwt`).
//! Whoever holds the signing key can mint tokens anyway; these grant what
//! `--namespaces` and `--resources` say, in kubefan's default claims.

use std::io::Write;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use jsonwebtoken::{Algorithm, AlgorithmFamily, EncodingKey, Header, encode};

#[derive(clap::Args)]
pub struct MintJwtArgs {
    /// The signing key: the secret for HS* (as kubefan reads
    /// `--jwt-secret-file`, surrounding whitespace trimmed), a PKCS#8 PEM
    /// private key for ES* and EdDSA, a PEM RSA key for RS* and PS*.
    #[arg(long, value_name = "FILE")]
    key_file: PathBuf,
    /// The signing algorithm (`HS256`, `ES256`, `RS256`, `EdDSA`, ...).
    #[arg(long, default_value = "HS256")]
    alg: String,
    /// How many tokens (subjects `loadtest-0`, `loadtest-1`, ...).
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// How long each token lasts (`exp`), from now.
    #[arg(long, default_value_t = 7200)]
    ttl_secs: u64,
    /// Granted namespaces (`kubefan/namespaces`), comma-separated; `*`: all.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    namespaces: Vec<String>,
    /// Granted resources (`kubefan/resources`), comma-separated; `*`: all.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    resources: Vec<String>,
}

pub fn mint_jwt(args: MintJwtArgs) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for token in mint(&args)? {
        writeln!(out, "{token}")?;
    }
    out.flush()?;
    Ok(())
}

/// The tokens `args` asks for.
fn mint(args: &MintJwtArgs) -> anyhow::Result<Vec<String>> {
    let alg: Algorithm = args
        .alg
        .parse()
        .with_context(|| format!("--alg {}: not a JWT algorithm", args.alg))?;
    let bytes = std::fs::read(&args.key_file)
        .with_context(|| format!("reading --key-file {}", args.key_file.display()))?;
    let key = match alg.family() {
        AlgorithmFamily::Hmac => {
            let secret = bytes.trim_ascii();
            anyhow::ensure!(!secret.is_empty(), "--key-file: an empty secret");
            EncodingKey::from_secret(secret)
        }
        AlgorithmFamily::Rsa => EncodingKey::from_rsa_pem(&bytes)?,
        AlgorithmFamily::Ec => EncodingKey::from_ec_pem(&bytes)?,
        AlgorithmFamily::Ed => EncodingKey::from_ed_pem(&bytes)?,
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let header = Header::new(alg);
    (0..args.count)
        .map(|i| {
            let claims = serde_json::json!({
                "sub": format!("loadtest-{i}"), "iat": now, "exp": now + args.ttl_secs,
                "kubefan/namespaces": args.namespaces, "kubefan/resources": args.resources,
            });
            Ok(encode(&header, &claims, &key)?)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode};

    #[test]
    fn tokens_carry_kubefans_claims_signed_with_the_secret_as_kubefan_reads_it() {
        let dir = std::env::temp_dir().join(format!("loadtest-mint-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key_file = dir.join("secret");
        // kubefan trims the secret file; so does minting.
        std::fs::write(&key_file, "s3cret\n").unwrap();
        let args = super::MintJwtArgs {
            key_file,
            alg: "HS256".into(),
            count: 2,
            ttl_secs: 7200,
            namespaces: vec!["loadtest".into()],
            resources: vec!["pods".into()],
        };
        let tokens = super::mint(&args).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(tokens.len(), 2);
        let claims = |token: &str| {
            decode::<serde_json::Value>(
                token,
                &DecodingKey::from_secret(b"s3cret"),
                &Validation::new(Algorithm::HS256),
            )
            .unwrap()
            .claims
        };
        let (first, second) = (claims(&tokens[0]), claims(&tokens[1]));
        assert_eq!(first["sub"], "loadtest-0");
        assert_eq!(second["sub"], "loadtest-1");
        assert_eq!(first["kubefan/namespaces"], serde_json::json!(["loadtest"]));
        assert_eq!(first["kubefan/resources"], serde_json::json!(["pods"]));
        let lifetime = first["exp"].as_u64().unwrap() - first["iat"].as_u64().unwrap();
        assert_eq!(lifetime, 7200);
    }
}
