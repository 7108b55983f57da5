//! The commands besides `serve` and `sim`, each with its flags, and
//! `serve`'s clusters.

pub mod clusters;
pub mod demo;
pub mod kubeconfig;
pub mod session_cookies;
