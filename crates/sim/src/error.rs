//! Why a simulator operation failed, and each failure as the Kubernetes
//! `Status` kube-apiserver would answer with.

use serde_json::{Value, json};

/// Why a simulator operation failed; each maps to a Kubernetes `Status`.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("unknown resource {0}")]
    UnknownResource(String),
    #[error("{resource} \"{name}\" not found")]
    NotFound { resource: String, name: String },
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists { resource: String, name: String },
    #[error(
        "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
    )]
    Conflict { resource: String, name: String },
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Expired(String),
    /// What kube-apiserver answers a read at a resourceVersion it has not
    /// reached (504, reason Timeout).
    #[error("{0}")]
    Timeout(String),
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// A request whose bearer token names no valid user.
    #[error("Unauthorized")]
    Unauthorized,
    /// A request RBAC does not allow; `message` as kube-apiserver words it.
    #[error("{message}")]
    Forbidden {
        message: String,
        group: String,
        resource: String,
        name: String,
    },
    #[error("the body of the request was in an unknown format: {0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    Internal(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

impl SimError {
    /// HTTP status code of the error's `Status`.
    pub fn code(&self) -> u16 {
        match self {
            SimError::UnknownResource(_) | SimError::NotFound { .. } => 404,
            SimError::AlreadyExists { .. } | SimError::Conflict { .. } => 409,
            SimError::BadRequest(_) => 400,
            SimError::Invalid(_) => 422,
            SimError::Expired(_) => 410,
            SimError::Timeout(_) => 504,
            SimError::MethodNotAllowed => 405,
            SimError::Unauthorized => 401,
            SimError::Forbidden { .. } => 403,
            SimError::UnsupportedMediaType(_) => 415,
            SimError::Internal(_) | SimError::Io(_) => 500,
        }
    }

    /// The `reason` of the error's `Status`.
    pub fn reason(&self) -> &'static str {
        match self {
            SimError::UnknownResource(_) | SimError::NotFound { .. } => "NotFound",
            SimError::AlreadyExists { .. } => "AlreadyExists",
            SimError::Conflict { .. } => "Conflict",
            SimError::BadRequest(_) => "BadRequest",
            SimError::Invalid(_) => "Invalid",
            SimError::Expired(_) => "Expired",
            SimError::Timeout(_) => "Timeout",
            SimError::MethodNotAllowed => "MethodNotAllowed",
            SimError::Unauthorized => "Unauthorized",
            SimError::Forbidden { .. } => "Forbidden",
            SimError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            SimError::Internal(_) | SimError::Io(_) => "InternalError",
        }
    }

    /// The error as a Kubernetes `Status` object.
    pub fn status(&self) -> Value {
        let message = match self {
            SimError::UnknownResource(_) => {
                "the server could not find the requested resource".to_owned()
            }
            e => e.to_string(),
        };
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": self.reason(),
            "code": self.code(),
        });
        match self {
            SimError::NotFound { resource, name }
            | SimError::AlreadyExists { resource, name }
            | SimError::Conflict { resource, name } => {
                let (kind, group) = resource.split_once('.').unwrap_or((resource, ""));
                status["details"] = json!({"name": name, "group": group, "kind": kind});
            }
            SimError::Forbidden {
                group,
                resource,
                name,
                ..
            } => {
                let mut details = json!({"group": group, "kind": resource});
                if !name.is_empty() {
                    details["name"] = json!(name);
                }
                status["details"] = details;
            }
            _ => {}
        }
        status
    }
}
