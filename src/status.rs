//! Request errors of every surface, mapped to HTTP in one place.
//!
//! Bodies are Kubernetes `Status` objects, so a Kubernetes client and a
//! browser read the same thing: `{"kind":"Status","code":404,"reason":
//! "NotFound","message":"unknown resource \"podz\""}`.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde_json::json;

use crate::hub::SubscriptionError;
use crate::upstream;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Unavailable(String),
    /// No valid credentials: 401 with `WWW-Authenticate: Bearer`.
    #[error("{0}")]
    Unauthorized(String),
    /// A limit was reached: 429 with `Retry-After` (seconds).
    #[error("{0}")]
    TooManyRequests(String, u64),
    /// Any other Kubernetes `Status`: code, reason, message.
    #[error("{2}")]
    Status(u16, &'static str, String),
}

impl ApiError {
    /// This error as a Kubernetes `Status` object (what the HTTP body holds).
    pub fn status(&self) -> serde_json::Value {
        status_json(
            self.status_code().as_u16(),
            self.reason(),
            &self.to_string(),
        )
    }

    fn reason(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::NotFound(_) => "NotFound",
            ApiError::Forbidden(_) => "Forbidden",
            ApiError::Unavailable(_) => "ServiceUnavailable",
            ApiError::Unauthorized(_) => "Unauthorized",
            ApiError::TooManyRequests(..) => "TooManyRequests",
            ApiError::Status(_, reason, _) => reason,
        }
    }
}

/// A Kubernetes `Status` object.
pub fn status_json(code: u16, reason: &str, message: &str) -> serde_json::Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::TooManyRequests(..) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Status(code, ..) => {
                StatusCode::from_u16(*code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }
        }
    }

    fn error_response(&self) -> HttpResponse {
        let code = self.status_code();
        let mut resp = HttpResponse::build(code);
        match self {
            ApiError::Unavailable(_) => {
                resp.insert_header(("Retry-After", "1"));
            }
            ApiError::TooManyRequests(_, secs) => {
                resp.insert_header(("Retry-After", secs.to_string()));
            }
            ApiError::Unauthorized(_) => {
                resp.insert_header(("WWW-Authenticate", r#"Bearer realm="kubefan""#));
            }
            _ => {}
        }
        resp.json(self.status())
    }
}

impl From<upstream::Error> for ApiError {
    fn from(err: upstream::Error) -> ApiError {
        match err {
            upstream::Error::UnknownResource(_) => ApiError::NotFound(err.to_string()),
            upstream::Error::Forbidden(..) => ApiError::Forbidden(err.to_string()),
            upstream::Error::Discovery(_) => ApiError::Unavailable(err.to_string()),
            upstream::Error::Unreadable(_) => ApiError::Forbidden(err.to_string()),
        }
    }
}

impl From<SubscriptionError> for ApiError {
    fn from(err: SubscriptionError) -> ApiError {
        match err {
            SubscriptionError::NotSynced(_) => ApiError::Unavailable(err.to_string()),
            // Closed between lookup and join (stopped while idle, or removed
            // upstream): the client may simply retry.
            SubscriptionError::Closed(..) => ApiError::Unavailable(err.to_string()),
            SubscriptionError::Denied(denial) => match denial.code {
                401 => ApiError::Unauthorized(denial.message),
                _ => ApiError::Forbidden(denial.message),
            },
        }
    }
}
