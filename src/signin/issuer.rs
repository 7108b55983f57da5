//! kubefan as the issuer's OAuth 2.0 client (the `oauth2` crate): the
//! client for the discovered endpoints, and the session a token answer
//! makes once its id-token is verified (`auth::oidc`).

use oauth2::basic::{
    BasicErrorResponse, BasicRevocationErrorResponse, BasicTokenIntrospectionResponse,
    BasicTokenType,
};
use oauth2::{
    AuthType, AuthUrl, Client, ClientId, ClientSecret, EndpointNotSet, EndpointSet,
    ExtraTokenFields, RedirectUrl, RequestTokenError, StandardRevocableToken,
    StandardTokenResponse, TokenResponse, TokenUrl,
};
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};

use crate::auth::oidc::Issuer;
use crate::auth::session::{SessionData, random_id, unix_now};
use crate::status::ApiError;

/// The token endpoint's answer: the standard fields and the id-token.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IdTokenField {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id_token: Option<String>,
}
impl ExtraTokenFields for IdTokenField {}
pub(super) type Tokens = StandardTokenResponse<IdTokenField, BasicTokenType>;
pub(super) type OAuth = Client<
    BasicErrorResponse,
    Tokens,
    BasicTokenIntrospectionResponse,
    StandardRevocableToken,
    BasicRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointSet,
>;

/// kubefan as the issuer's client, sending the browser back to
/// `redirect_uri`.
pub(super) fn client(issuer: &Issuer, redirect_uri: &str) -> Result<OAuth, ApiError> {
    let keys = issuer.keys();
    let provider = keys.provider().ok_or_else(|| {
        let why = keys
            .blocker()
            .map_or_else(String::new, |p| p.of_issuer(keys.issuer()));
        ApiError::Unavailable(format!("sign-in is not available: {why}"))
    })?;
    let endpoint = |what: &str, url: &Option<String>| {
        url.clone().ok_or_else(|| {
            ApiError::Unavailable(format!(
                "the OIDC issuer's discovery document names no {what}"
            ))
        })
    };
    let bad = |e: oauth2::url::ParseError| ApiError::Unavailable(format!("issuer endpoint: {e}"));
    let mut client = Client::new(ClientId::new(issuer.config().client_id.clone()))
        .set_auth_uri(
            AuthUrl::new(endpoint(
                "authorization_endpoint",
                &provider.authorization_endpoint,
            )?)
            .map_err(bad)?,
        )
        .set_token_uri(
            TokenUrl::new(endpoint("token_endpoint", &provider.token_endpoint)?).map_err(bad)?,
        )
        .set_redirect_uri(
            RedirectUrl::new(redirect_uri.to_string())
                .map_err(|e| ApiError::BadRequest(format!("redirect URL: {e}")))?,
        );
    client = match issuer.client_secret() {
        Some(secret) => {
            client.set_client_secret(ClientSecret::new(secret.expose_secret().to_string()))
        }
        // A public client names itself in the request body.
        None => client.set_auth_type(AuthType::RequestBody),
    };
    Ok(client)
}

/// A session from the token endpoint's answer: its id-token verified (and
/// its nonce, at sign-in); on a refresh, the same subject as `before`,
/// whose refresh token stays if the issuer sent no new one.
pub(super) async fn session_of(
    issuer: &Issuer,
    tokens: &Tokens,
    before: Option<&SessionData>,
    nonce: Option<&str>,
) -> Result<SessionData, ApiError> {
    let id_token = tokens.extra_fields().id_token.as_deref().ok_or_else(|| {
        ApiError::Status(
            502,
            "BadGateway",
            "the issuer's answer has no id_token (is openid among --oidc-scopes?)".into(),
        )
    })?;
    let verified = issuer.verify_claims(id_token).await.map_err(|e| {
        ApiError::Unauthorized(format!("the issuer's id-token is not accepted: {e}"))
    })?;
    if let Some(nonce) = nonce
        && verified.claim("nonce") != Some(nonce)
    {
        return Err(ApiError::BadRequest(
            "the id-token's nonce is not this sign-in's".into(),
        ));
    }
    let sub = verified.claim("sub").unwrap_or_default().to_string();
    if let Some(before) = before
        && before.sub != sub
    {
        return Err(ApiError::Unauthorized(
            "the refreshed id-token names another subject".into(),
        ));
    }
    let exp = verified.seconds("exp").unwrap_or(0);
    let iat = verified.seconds("iat").unwrap_or_else(unix_now).min(exp);
    Ok(SessionData {
        sid: before.map_or_else(random_id, |b| b.sid.clone()),
        sub,
        user: verified.user.username,
        groups: verified.user.groups,
        iat,
        exp,
        signed_in: before.map_or_else(unix_now, |b| b.signed_in),
        refresh: tokens
            .refresh_token()
            .map(|t| t.secret().clone())
            .or_else(|| before.and_then(|b| b.refresh.clone())),
    })
}

pub(super) fn token_error<RE: std::error::Error + 'static>(
    what: &str,
    err: RequestTokenError<RE, BasicErrorResponse>,
) -> ApiError {
    match err {
        RequestTokenError::ServerResponse(resp) => ApiError::BadRequest(format!(
            "{what}: {}{}",
            resp.error(),
            resp.error_description()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        )),
        other => ApiError::Unavailable(format!("{what}: {other}")),
    }
}
