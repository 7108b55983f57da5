//! The user an id-token's claims name, by kube-apiserver's rules
//! (`k8s.io/apiserver/plugin/pkg/authenticator/token/oidc`, the
//! `--oidc-*` flags): the username claim (a string, not empty), which as
//! `email` needs `email_verified` true where present; the groups claim (a
//! string or a list of strings); the required claims, each present with
//! its exact value; the prefixes; and `system:authenticated`, which
//! kube-apiserver adds to every authenticated user. Distributed claims
//! (`_claim_names`) are not resolved.

use serde_json::{Map, Value};

use super::super::{ALL_AUTHENTICATED, Error, User};
use crate::config::OidcConfig;

/// The user `claims` name, or why the token is refused.
pub fn user(cfg: &OidcConfig, prefix: &str, claims: &Map<String, Value>) -> Result<User, Error> {
    let invalid = |why: String| Err(Error::Invalid(why));
    let claim = &cfg.username_claim;
    let name = match claims.get(claim) {
        None => {
            return invalid(format!(
                "the token has no {claim:?} claim (--oidc-username-claim)"
            ));
        }
        Some(Value::String(name)) if !name.is_empty() => name,
        Some(_) => return invalid(format!("the token's {claim:?} claim is not a name")),
    };
    if claim == "email" {
        match claims.get("email_verified") {
            None | Some(Value::Bool(true)) => {}
            Some(Value::Bool(false)) => return invalid("the token's email is not verified".into()),
            Some(_) => {
                return invalid("the token's \"email_verified\" claim is not a boolean".into());
            }
        }
    }
    for (key, want) in &cfg.required_claims {
        match claims.get(key) {
            None => {
                return invalid(format!(
                    "the token lacks the claim {key:?} (--oidc-required-claim)"
                ));
            }
            Some(Value::String(have)) if have == want => {}
            Some(_) => {
                return invalid(format!(
                    "the token's {key:?} claim does not have the value --oidc-required-claim asks for"
                ));
            }
        }
    }
    let mut groups = Vec::new();
    if let Some(claim) = &cfg.groups_claim {
        match claims.get(claim) {
            None => {}
            Some(Value::String(group)) => groups.push(format!("{}{group}", cfg.groups_prefix)),
            Some(Value::Array(items)) => {
                for item in items {
                    let Value::String(group) = item else {
                        return invalid(format!(
                            "the token's {claim:?} claim is not a list of strings"
                        ));
                    };
                    groups.push(format!("{}{group}", cfg.groups_prefix));
                }
            }
            Some(_) => {
                return invalid(format!(
                    "the token's {claim:?} claim is neither a string nor a list of strings"
                ));
            }
        }
    }
    groups.push(ALL_AUTHENTICATED.to_string());
    Ok(User {
        username: format!("{prefix}{name}"),
        uid: None,
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg() -> OidcConfig {
        OidcConfig {
            issuer_url: "https://idp.example".into(),
            client_id: "kubefan".into(),
            groups_claim: Some("groups".into()),
            groups_prefix: "oidc:".into(),
            ..OidcConfig::default()
        }
    }

    fn claims(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    fn refusal(cfg: &OidcConfig, value: Value) -> String {
        user(cfg, &cfg.username_prefix(), &claims(value))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn names_groups_and_prefixes_follow_kube_apiserver() {
        let cfg = cfg();
        let u = user(
            &cfg,
            &cfg.username_prefix(),
            &claims(json!({"sub": "u1", "groups": ["a", "b"]})),
        )
        .unwrap();
        assert_eq!(u.username, "https://idp.example#u1");
        assert_eq!(u.groups, ["oidc:a", "oidc:b", "system:authenticated"]);
        let u = user(&cfg, "", &claims(json!({"sub": "u1", "groups": "a"}))).unwrap();
        assert_eq!(u.groups, ["oidc:a", "system:authenticated"]);
        let u = user(&cfg, "", &claims(json!({"sub": "u1"}))).unwrap();
        assert_eq!(u.groups, ["system:authenticated"]);
    }

    #[test]
    fn email_as_the_name_needs_it_verified_where_the_token_says() {
        let mut cfg = cfg();
        cfg.username_claim = "email".into();
        let ok = user(&cfg, "", &claims(json!({"email": "a@x"}))).unwrap();
        assert_eq!(ok.username, "a@x");
        user(
            &cfg,
            "",
            &claims(json!({"email": "a@x", "email_verified": true})),
        )
        .unwrap();
        let no = refusal(&cfg, json!({"email": "a@x", "email_verified": false}));
        assert!(no.contains("not verified"), "{no}");
        let no = refusal(&cfg, json!({"email": "a@x", "email_verified": "true"}));
        assert!(no.contains("not a boolean"), "{no}");
    }

    #[test]
    fn bad_claims_are_refused_with_the_reason() {
        let mut cfg = cfg();
        cfg.required_claims = vec![("hd".into(), "example.com".into())];
        let cases = [
            (json!({"hd": "example.com"}), "has no \"sub\" claim"),
            (json!({"sub": 7, "hd": "example.com"}), "is not a name"),
            (json!({"sub": "", "hd": "example.com"}), "is not a name"),
            (json!({"sub": "u"}), "lacks the claim \"hd\""),
            (
                json!({"sub": "u", "hd": "evil.com"}),
                "does not have the value",
            ),
            (
                json!({"sub": "u", "hd": ["example.com"]}),
                "does not have the value",
            ),
            (
                json!({"sub": "u", "hd": "example.com", "groups": [1]}),
                "not a list of strings",
            ),
            (
                json!({"sub": "u", "hd": "example.com", "groups": {"a": 1}}),
                "neither a string",
            ),
        ];
        for (value, want) in cases {
            let got = refusal(&cfg, value.clone());
            assert!(got.contains(want), "{value}: {got}");
        }
    }
}
