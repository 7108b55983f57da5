//! `kubefan sim` without the gateway, for measuring the simulator alone
//! at scale (start time, RSS, LIST and churn cost; README "Simulator at
//! Kubernetes' limits"): `cargo run --release -p kubefan-sim --example
//! scale -- --pods 150000 --nodes 5000`. Takes `kubefan sim`'s options.

use clap::Parser;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    sim: kubefan_sim::SimArgs,
}

fn main() -> Result<(), kubefan_sim::SimError> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            stop.cancel();
        });
        kubefan_sim::run(args.sim, shutdown).await
    })
}
