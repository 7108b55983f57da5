//! `kubefan session-cookies` (hidden): session cookies sealed with
//! `--session-secret-file` as signing in seals them, for the load
//! generator's signed-in subscribers (`loadtest --cookie-file`). Whoever
//! holds the secret can make sessions anyway.

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct SessionCookiesArgs {
    /// The key the gateway seals sessions with.
    #[arg(long, value_name = "FILE")]
    session_secret_file: PathBuf,
    /// How many sessions (users `loadtest-N@example.com`).
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// The group every session's user is in.
    #[arg(long, default_value = "loadtest")]
    group: String,
    /// How long each session's id-token lasts.
    #[arg(long, default_value_t = 3600)]
    ttl_secs: u64,
}

/// One `Cookie` header value per line, for `loadtest --cookie-file`.
pub fn session_cookies(args: SessionCookiesArgs) -> anyhow::Result<()> {
    use kubefan::auth::session::{SESSION_COOKIE, SessionData, Sessions, random_id, unix_now};
    use std::io::Write;
    let sessions = Sessions::new(&kubefan::config::SignInConfig {
        session_secret_file: Some(args.session_secret_file),
        ..Default::default()
    })?;
    let now = unix_now();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for i in 0..args.count {
        let user = format!("loadtest-{i}@example.com");
        let session = SessionData {
            sid: random_id(),
            sub: user.clone(),
            user,
            groups: vec![args.group.clone(), kubefan::auth::ALL_AUTHENTICATED.into()],
            iat: now,
            exp: now + args.ttl_secs,
            signed_in: now,
            refresh: None,
        };
        writeln!(
            out,
            "{SESSION_COOKIE}={}",
            sessions.seal(SESSION_COOKIE, &session)
        )?;
    }
    Ok(())
}
