//! The commands besides `serve`, `demo` and `sim`, each with its flags.

pub mod kubeconfig;
pub mod session_cookies;
